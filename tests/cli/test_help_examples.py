"""issue 10 item 6: every example in `k3plan --help` and `k3plan roofline --help` runs and shows what the
command does: exit 0 (a roofline example prints a speed), or, for an example whose comment says "(exit 1)",
exit 1 with the reason. The audit found `roofline -t 2x2x4 --batch 64` ("how fast?"), `--batch 64 --context
32768`, `-t 2x4x4 --stack dp-attention --probes ...` and the --spec-tokens example all DOES NOT FIT (exit 1),
and `--prefix-tier ssd` bad input (exit 2) on tpu-v7x. The examples are parsed from the help text itself."""

from __future__ import annotations

import re
import shlex

import pytest
import typer.main

from k3plan.cli.app import app
from k3plan.evidence.calibration import bundled_calibrations


def help_examples(command: str | None) -> list[tuple[str, int]]:
    """(command line, expected exit) for each "k3plan ..." line after "Examples:" in the help of
    ``command`` (None: the top level); a comment says "(exit N)" where the example shows a failure.
    Continuation lines ("\\" at the end) join the next line; a comment follows two or more spaces."""
    group = typer.main.get_command(app)
    cmd = group if command is None else group.commands[command]  # type: ignore[attr-defined]
    text = (cmd.help or "").split("Examples:", 1)[1].replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("k3plan "):
            continue
        call, comment = (re.split(r" {2,}", line, maxsplit=1) + [""])[:2]
        m = re.search(r"\(exit (\d)\)", comment)
        out.append((call.strip(), int(m.group(1)) if m else 0))
    return out


EXAMPLES = [pytest.param(c, code, id=c) for which in (None, "roofline") for c, code in help_examples(which)]


def test_the_help_examples_are_found():
    assert len(help_examples(None)) == 5 and len(help_examples("roofline")) >= 6  # 5: explain (issue 36)
    assert any(code == 1 for _, code in help_examples("roofline"))  # one shows the refusal


@pytest.mark.parametrize(("line", "code"), EXAMPLES)
def test_each_help_example_exits_as_documented(cli, tmp_path, line, code):
    args = shlex.split(line)[1:]
    if "--out" in args:  # report writes files: into a temporary folder, not the repository
        i = args.index("--out") + 1
        args[i] = str(tmp_path / args[i].rsplit("/", 1)[-1])
    if "--probes" in args and args[args.index("--probes") + 1] == "k3plan-probes":  # the user's probe folder
        args[args.index("--probes") + 1] = str(tmp_path)  # (k3plan probe's default --out): here an empty one
    r = cli(*args)
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    if args[0] == "roofline":
        if code == 0:
            assert "tok/s" in r.stdout or '"tokens_per_s' in r.stdout  # a speed figure
        else:
            assert "DOES NOT FIT" in r.stdout and "no speed figure" in " ".join(r.stdout.split())


def _every_help_example() -> list[str]:
    """Every "k3plan ..." example line of every command's and group's --help (continuations joined)."""
    out: list[str] = []

    def walk(cmd) -> None:
        text = cmd.help or ""
        if "Examples:" in text:
            for line in text.split("Examples:", 1)[1].replace("\\\n", " ").splitlines():
                if line.strip().startswith("k3plan "):
                    out.append(re.split(r" {2,}", line.strip(), maxsplit=1)[0])
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return out


def test_no_example_points_outside_the_checkout():
    # a clone has no ../shared: an example (--help or README) must name files the repository ships
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = [ln for ln in (root / "README.md").read_text().replace("\\\n", " ").splitlines() if "k3plan " in ln]
    lines = _every_help_example() + readme
    assert len(_every_help_example()) > 40
    for line in lines:
        args = line.split()
        for i, arg in enumerate(args):
            if arg.startswith("../"):
                raise AssertionError(f"example names a file outside the checkout: {arg} in {line!r}")
            if arg.startswith("k3plan/evidence/"):
                assert (root / arg).is_file(), arg
            # a shipped calibration by its name, which works from any folder and installed (was the checkout's
            # path k3plan/evidence/calibrations/..., exit 2 elsewhere)
            if arg == "--calibration" and args[i + 1] not in PLACEHOLDERS:
                assert "/" not in args[i + 1] and args[i + 1] in bundled_calibrations(), line


# the examples of the other planning and catalogue commands (validate and probe need jax, census a
# checkpoint; plan's and report's are run by tests/plan and the top-level list above); an example that
# names a file the reader writes themself (CAL.yaml, my_specs.yaml, ./my-gpu.yaml) is not run
MORE = ("fit", "curve", "check", "models", "hardware")
PLACEHOLDERS = ("CAL.yaml", "my_specs.yaml", "./my-gpu.yaml", "./my-model/")


def every_example(command: str) -> list[tuple[str, int]]:
    """(command line, expected exit) for each "k3plan ..." example in the help of ``command`` and of its
    subcommands: a continuation ("\\" then an indented line) joins the next line, and a comment follows
    two or more spaces on the joined line."""
    out: list[tuple[str, int]] = []

    def walk(cmd) -> None:
        text = cmd.help or ""
        if "Examples:" in text:
            for line in re.sub(r"\s*\\\n\s*", " ", text.split("Examples:", 1)[1]).splitlines():
                line = line.strip()
                if line.startswith("k3plan "):
                    call, comment = (re.split(r" {2,}", line, maxsplit=1) + [""])[:2]
                    m = re.search(r"\(exit (\d)\)", comment)
                    out.append((call.strip(), int(m.group(1)) if m else 0))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app).commands[command])  # type: ignore[attr-defined]
    return [e for e in out if not any(p in e[0] for p in PLACEHOLDERS)]


@pytest.mark.parametrize(("line", "code"), [pytest.param(c, code, id=c) for m in MORE for c, code in every_example(m)])
def test_every_example_of_the_other_commands_exits_as_documented(cli, tmp_path, monkeypatch, line, code):
    """fit's `-t 2x2x2 --tp 16 --context 1048576` exits 1 (the weights alone exceed a device) and said nothing;
    curve's sessions example ran at 2x2x4, where 32 sequences of 32,768 tokens do not fit: exit 1 and "turn 1 no
    longer fits" (the README's runs at 2x4x4: turn 5). The continuation lines were read as comments."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    args = shlex.split(line)[1:]
    if "--update" in args:  # check --update rewrites the baseline: a copy of it
        (tmp_path / "reports" / "baseline").mkdir(parents=True)
        shutil.copy(root / "reports/baseline/k3.json", tmp_path / "reports/baseline/k3.json")
        shutil.copytree(root / "k3plan/evidence", tmp_path / "k3plan/evidence")
    else:  # reports/ (probe records, the baseline) is the checkout's; a calibration is named, not a path
        (tmp_path / "reports").symlink_to(root / "reports")
    monkeypatch.chdir(tmp_path)  # --plot curve.png lands here
    r = cli(*args)
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    if args[0] in ("fit", "curve") and code == 1:
        assert "DOES NOT FIT" in r.stdout


def test_the_other_commands_examples_are_found():
    found = {m: every_example(m) for m in MORE}
    assert all(found.values()) and any(code == 1 for _, code in found["fit"])
    curve = [c for c, _ in found["curve"]]
    assert any("--calibration k3-tpu7x-" in c and "--plot curve.png" in c for c in curve)  # joined, not a comment
    assert any("--reasoning-tokens 6000" in c for c in curve)
