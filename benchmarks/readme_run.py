"""Run the README top to bottom as a new user would, three ways, and compare what each answers (issue 48 item 6).

A fresh clone of this checkout's HEAD (committed work only), then every k3plan command the README shows -- its
fenced shell blocks, backslash continuations joined, and the one-line `k3plan ...` spans of its prose that run
as written -- run

- from the clone (``python3 -m k3plan``, the clone on PYTHONPATH, its top folder the working folder),
- from an empty folder outside it (the same k3plan), and
- from a wheel built from the clone and installed with --no-deps into a fresh virtual environment (its
  dependencies from this interpreter's site-packages, listed in a .pth file: nothing is downloaded), run as
  the ``k3plan`` script from another empty folder.

Each command is compared across the three: its exit code, its stdout and stderr (the working folder's path, the
clone's, timings and today's date written as placeholders), the files it writes (by SHA-256), and, for every
command that has ``--json``, its JSON output byte for byte (the command run again with ``--json`` where it lacks
it). Where the README's comment states the exit code (``(exit 1)``), that is checked too. A command that names a
path inside the checkout runs from the checkout only (it is said so). The transcript, every command with its
checkout output and the verdict of the comparison, is written as Markdown:

    python3 benchmarks/readme_run.py [--out docs/readme-transcript.md] [--only SUBSTRING]

Exit 0 when the three agree on every command and every stated exit code holds; 1 otherwise (each difference
listed). Slow (~60 fresh processes a place, validate's JAX compile among them): tests/docs/test_readme_run.py runs
it under the ``slow`` marker.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIPPED = {  # a README command not run, and why
    "--install-completion": "edits the user's shell start-up file",
}
NOT_RUNNABLE = re.compile(r"<|\\\||\b[A-Z]{3,}\b")  # a placeholder (<a local copy>, PATH, TERM) or a choice a|b
FIGURE = re.compile(r"\b\d[\d,]*\.\d+ GiB|\b\d{1,3}(?:,\d{3})+ tokens")  # a README comment's figure, as printed
MEASURES = ("probe",)  # a measurement on this machine's JAX backend: its figures differ run to run by nature
TIMING = [
    (re.compile(r"\b(in|took|compiled in|lowered in|build|lower|compile|devices)\s+[\d.,]+\s*(ms|s)\b"), r"\1 T"),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b"), "DATETIME"),
    (re.compile(r"\b\d{8}T\d{6}Z-[0-9a-f]{6}\b"), "STAMP"),
    (re.compile(r"\b\d{4}-\d\d-\d\d\b"), "DATE"),
    (re.compile(r'"(wall|compile|lower|build|elapsed|devices|evaluate|search)_s": [\d.e+-]+'), r'"\1_s": T'),
    (re.compile(r"\(\d+\.\d+ s\)"), "(T)"),  # report's progress: "[1/1] tpu-v7x ...: 2x2x4 (0.44 s)"
]


@dataclass
class Command:
    argv: list[str]  # after "k3plan"
    line: int  # README line
    comment: str
    exit_stated: int | None = None
    checkout_only: bool = False
    skip: str = ""

    @property
    def text(self) -> str:
        return "k3plan " + shlex.join(self.argv)


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    files: dict[str, str] = field(default_factory=dict)  # written file -> sha256
    json_out: str | None = None  # the --json output, where the command has --json


def _segments(line: str) -> Iterator[list[str]]:
    """The commands of one shell line (``a && b; c``), comments dropped."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    part: list[str] = []
    for tok in lex:
        if tok in ("&&", ";", "||", "|"):
            yield part
            part = []
        else:
            part.append(tok)
    yield part


def _k3plan_argv(tokens: list[str]) -> list[str] | None:
    if tokens[:1] == ["k3plan"]:
        return tokens[1:]
    if tokens[:3] in (["python3", "-m", "k3plan"], ["python", "-m", "k3plan"]):
        return tokens[3:]
    return None


def readme_commands(text: str) -> list[Command]:
    """Every k3plan command of the README's fenced shell blocks, then of its one-line code spans, in order."""
    out: list[Command] = []
    seen: set[str] = set()
    lines = text.splitlines()
    in_shell = False
    joined, start, above = "", 0, ""  # above: a comment line, said of the command under it
    for n, raw in enumerate(lines, 1):
        if raw.startswith("```"):
            in_shell = not in_shell and raw.strip() in ("```bash", "```sh", "```shell", "```console")
            continue
        if not in_shell:
            continue
        if raw.lstrip().startswith("#"):
            above = raw.lstrip("# ").strip()
            continue
        if not joined:
            start = n
        if raw.rstrip().endswith("\\"):
            joined += raw.rstrip()[:-1] + " "
            continue
        joined += raw
        comment = joined.split(" #", 1)[1].strip() if " #" in joined else above
        above = ""
        for tokens in _segments(joined):
            argv = _k3plan_argv(tokens)
            if argv is not None:
                out.append(_command(argv, start, comment))
                seen.add(shlex.join(argv))
        joined = ""
    for n, raw in enumerate(lines, 1):
        for span in re.findall(r"`(k3plan [^`]+)`", raw):
            if NOT_RUNNABLE.search(span) or span.startswith("k3plan probe "):  # probes in the prose: on a TPU
                continue
            argv = shlex.split(span)[1:]
            if len(argv) < 2 or shlex.join(argv) in seen:  # a bare command name (`k3plan fit`) names, not runs
                continue
            seen.add(shlex.join(argv))
            out.append(_command(argv, n, "(in the prose)"))
    return out


def _command(argv: list[str], line: int, comment: str) -> Command:
    stated = re.findall(r"\bexit (\d+)\b", comment)
    c = Command(argv, line, comment, int(stated[0]) if stated else None)  # "exit 0; exit 1 when not": the first
    c.skip = next((why for flag, why in SKIPPED.items() if flag in argv), "")
    c.checkout_only = any("/" in a and not a.startswith("-") and (REPO / a).exists() for a in argv)
    return c


def _has_json(argv: list[str]) -> bool:
    return bool(argv) and argv[0] not in ("--version", "--help", "-h", "explain") and "--help" not in argv


def _normalize(text: str, where: dict[str, str]) -> str:
    for path, name in where.items():
        text = text.replace(path, name)
    for pattern, repl in TIMING:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.split("\n"))  # a table padded around a timing's width


def _snapshot(folder: Path) -> dict[Path, tuple[int, int]]:
    return {
        p: (st.st_mtime_ns, st.st_size)
        for p in folder.rglob("*")
        if ".git" not in p.parts and "__pycache__" not in p.parts and p.is_file() and (st := p.stat())
    }


def _written(folder: Path, before: dict[Path, tuple[int, int]]) -> dict[str, str]:
    """The files a command wrote or rewrote in its working folder -> their SHA-256 (16 hex digits)."""
    now = _snapshot(folder)
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(now)
        if before.get(p) != now[p]
    }


class Place:
    def __init__(self, name: str, k3plan: list[str], cwd: Path, env: dict[str, str], where: dict[str, str]):
        self.name, self.k3plan, self.cwd, self.env, self.where = name, k3plan, cwd, env, where

    def run(self, c: Command) -> Ran:
        """One command in this place's working folder, which the commands before it share (a user going down the
        README: `probe` writes ./k3plan-probes, the next command reads it)."""
        cwd = self.cwd
        before = _snapshot(cwd)
        where = {str(cwd): "<cwd>", **self.where}
        p = self._proc(c.argv, cwd)
        ran = Ran(p.returncode, _normalize(p.stdout, where), _normalize(p.stderr, where), _written(cwd, before))
        if _has_json(c.argv):
            argv = c.argv if "--json" in c.argv else [*c.argv, "--json"]
            q = self._proc(argv, cwd) if argv is not c.argv else p
            ran.json_out = _normalize(q.stdout, where) if q.stdout.lstrip().startswith(("{", "[")) else None
        return ran

    def _proc(self, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.k3plan, *argv], cwd=cwd, env=self.env, capture_output=True, text=True, check=False, timeout=900
        )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "XLA_FLAGS")}
    return {**env, "COLUMNS": "120", "TERM": "dumb", "NO_COLOR": "1", **extra}


def places(tmp: Path) -> list[Place]:
    clone = tmp / "clone"
    try:  # committed work only
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):  # a checkout that is not a git repository (an unpacked sdist)
        shutil.rmtree(clone, ignore_errors=True)
        junk = ("__pycache__", "*.egg-info", "build", "dist", ".*")
        shutil.copytree(REPO, clone, ignore=shutil.ignore_patterns(*junk))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            str(clone),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("k3plan-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=_env(),
    ).stdout.strip()
    (Path(purelib) / "k3plan-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        env=_env(),
        capture_output=True,
    )
    for d in ("folder", "wheel"):
        (tmp / d).mkdir()
    where = {str(clone): "<checkout>", str(venv): "<venv>", str(tmp): "<tmp>"}
    from_clone = [sys.executable, "-m", "k3plan"]
    return [
        Place("checkout", from_clone, clone, _env(PYTHONPATH=str(clone)), where),
        Place("another folder", from_clone, tmp / "folder", _env(PYTHONPATH=str(clone)), where),
        Place("wheel", [str(venv / "bin" / "k3plan")], tmp / "wheel", _env(), where),
    ]


def _differences(c: Command, runs: dict[str, Ran]) -> list[str]:
    out = []
    if c.exit_stated is not None and runs["checkout"].code != c.exit_stated:
        out.append(f"exits {runs['checkout'].code}, the README says exit {c.exit_stated}")
    flat = " ".join(runs["checkout"].stdout.split())
    for figure in FIGURE.findall(c.comment):  # "6.44 GiB free a device", "27,024 tokens": said as printed
        if figure not in flat:
            out.append(f"the README's figure {figure!r} is not in what it prints")
    base = runs["checkout"]
    for name, r in runs.items():
        if name == "checkout":
            continue
        if c.argv[0] in MEASURES:  # what was measured differs run to run: the exit and the records' names compared
            names = [_normalize(" ".join(sorted(x.files)), {}) for x in (base, r)]
            if (base.code, names[0]) != (r.code, names[1]):
                out.append(f"exit code or records written differ {name}: {base.code} {names[0]} vs {r.code} {names[1]}")
            continue
        for what, a, b in (
            ("exit code", base.code, r.code),
            ("stdout", base.stdout, r.stdout),
            ("stderr", base.stderr, r.stderr),
            ("files written", base.files, r.files),
            ("--json output", base.json_out, r.json_out),
        ):
            if a != b:
                out.append(f"{what} differs {name}: {_first_difference(a, b)}")
    return out


def _first_difference(a, b) -> str:
    if not (isinstance(a, str) and isinstance(b, str)):
        return f"{a!r} vs {b!r}"
    for x, y in zip(a.splitlines(), b.splitlines()):
        if x != y:
            return f"{x.strip()[:100]!r} vs {y.strip()[:100]!r}"
    return f"{len(a.splitlines())} vs {len(b.splitlines())} lines"


def transcript(commands: list[Command], results: dict[int, dict[str, Ran]], head: str) -> str:
    out = [
        "# The README, run top to bottom",
        "",
        f"Written by `python3 benchmarks/readme_run.py` ({head}): every k3plan command the README shows, run from a "
        "fresh clone, from an empty folder outside it and from a wheel installed in a fresh virtual environment. "
        "Each command's output below is the clone's (the first 25 lines of stdout, then stderr); the line under it "
        "says whether the other two answered the same (exit code, stdout, stderr, files written, and the `--json` "
        "output byte for byte). Timings, dates and the folders' paths are written as placeholders.",
        "",
    ]
    for i, c in enumerate(commands):
        out += [f"## `{c.text}`", "", f"README line {c.line}" + (f": {c.comment}" if c.comment else ""), ""]
        if c.skip:
            out += [f"Not run: {c.skip}.", ""]
            continue
        runs = results[i]
        r = runs["checkout"]
        lines = r.stdout.rstrip().splitlines()
        shown = lines[:25] + ([f"... ({len(lines) - 25} more lines)"] if len(lines) > 25 else [])
        err = r.stderr.rstrip().splitlines()
        out += ["```", f"$ {c.text}", *shown, *(["[stderr]", *err[-8:]] if err else []), f"[exit {r.code}]", "```", ""]
        if r.files:
            out += ["Files written: " + ", ".join(f"`{f}` ({h})" for f, h in r.files.items()), ""]
        diffs = _differences(c, runs)
        if diffs:
            verdict = "**Differs:** " + "; ".join(diffs)
        elif c.checkout_only:
            verdict = "Names a path inside the checkout: run from the checkout only"
        else:
            verdict = "Same from the checkout, another folder and the wheel" + (
                " (the `--json` output byte for byte)" if r.json_out is not None else ""
            )
            if c.argv[0] in MEASURES:
                verdict += "; the measured figures themselves differ run to run, as a measurement's do"
        out += [verdict + ".", ""]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="the transcript (Markdown); default: print a summary only")
    ap.add_argument("--only", help="run the commands whose text holds this")
    ap.add_argument("--dump", type=Path, help="every run's output, as JSON (to read a difference whole)")
    args = ap.parse_args()
    commands = readme_commands((REPO / "README.md").read_text())
    if args.only:
        commands = [c for c in commands if args.only in c.text]
    head = subprocess.run(
        ["git", "log", "-1", "--format=%h %s"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()[:80]
    with tempfile.TemporaryDirectory(prefix="k3plan-readme-") as t:
        ps = places(Path(t))
        results: dict[int, dict[str, Ran]] = {i: {} for i in range(len(commands))}

        def run_all(p: Place) -> None:
            for i, c in enumerate(commands):
                if not c.skip and not (c.checkout_only and p.name != "checkout"):
                    results[i][p.name] = p.run(c)
                    print(f"{p.name:15s} exit {results[i][p.name].code}  {c.text[:90]}", flush=True)

        with ThreadPoolExecutor(len(ps)) as pool:
            list(pool.map(run_all, ps))
    if args.dump:
        args.dump.write_text(
            json.dumps({c.text: {k: vars(r) for k, r in results[i].items()} for i, c in enumerate(commands)}, indent=1)
        )
    bad = [(c, d) for i, c in enumerate(commands) if not c.skip for d in _differences(c, results[i])]
    if args.out:
        args.out.write_text(transcript(commands, results, head.split()[0] if head else "?") + "\n")
    ran = sum(1 for c in commands if not c.skip)
    print(f"\n{ran} commands run, {len(commands) - ran} skipped; {len(bad)} difference(s)")
    for c, d in bad:
        print(f"  {c.text}: {d}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
