"""An adversarial new-user pass over the CLI (the qa brief): each finding a named regression test that
failed before its fix. Bad input gives exit 2 and one line naming the argument and what was expected."""

from __future__ import annotations

import pytest
from k3_testing import one_error_line


@pytest.mark.parametrize("command", ["fit", "roofline", "curve"])
def test_pp_zero_is_bad_input_not_pp_one(cli, command):
    """Was: `--pp 0` read as `--pp 1` (`pp or 1`): the command answered for an unpipelined split, exit 0."""
    line = one_error_line(cli(command, "-t", "2x2x4", "--tp", "32", "--pp", "0"))
    assert "--pp 0" in line and "expected a positive integer" in line


def test_fit_advice_on_a_replicated_split_does_not_say_ok(cli):
    """Was: DOES NOT FIT (vocab 163,840 does not divide 24 GPUs) then "advice (ok: ... nothing to
    suggest)": the verdict and the advice disagreed on one screen and in the JSON. (The 896 experts
    do not divide 24 either, but vLLM, this machine's default stack, places them unevenly: 8 GPUs
    hold 38, 16 hold 37 -- not a fallback.) tp 24 is given: the default split now divides the vocabulary
    too (tp 8 dp 3 on 24 GPUs, setup.tp_must_divide), so it no longer falls back by default."""
    import json

    r = cli("fit", "-H", "nvidia-h200", "-t", "3x8", "--tp", "24", "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["fits"] is False and d["replicated"]
    assert d["advice"]["rules"]["verdict"] == "fails"
    assert any("vocab=163840 by tp=24" in w for w in d["advice"]["rules"]["warnings"])
    assert not any("expert=896" in w for w in d["advice"]["rules"]["warnings"])
    assert any(n.startswith("experts 896 over ep 24: 8 devices hold 38, 16 hold 37") for n in d["notes"])


@pytest.mark.parametrize("value", ["0", "-1"])
def test_plan_max_pp_below_one_is_bad_input_not_a_traceback(cli, value):
    """Was: `plan --max-pp 0` crashed with "ValueError: not enough values to unpack" (exit 1, a traceback)."""
    line = one_error_line(cli("plan", "--max-pp", value))
    assert f"--max-pp {value}" in line and "expected a positive integer" in line


def test_roofline_refusal_reads_as_fits_does(cli):
    """Was: roofline printed "DOES NOT FIT: does not fit: weights alone exceed usable HBM" (the reason
    repeated its own prefix) while fit, for the same flags, printed "DOES NOT FIT: weights alone ..."."""
    import json

    args = ("-t", "2x2x2", "--tp", "16")
    fit_line = next(x for x in cli("fit", *args).stdout.splitlines() if x.startswith("DOES NOT FIT"))
    roof = " ".join(cli("roofline", *args).stdout.split())
    # issue 36: fit's verdict line (now first) goes on with the free HBM it rests on, in parentheses
    head = "DOES NOT FIT: weights alone exceed usable HBM"
    assert fit_line.startswith(head + " (") and "does not fit: does not fit" not in fit_line.lower()
    assert roof.startswith(head + " (free ") and "does not fit: does not fit" not in roof.lower()
    assert json.loads(cli("roofline", *args, "--json").stdout)["reason"] == "weights alone exceed usable HBM"


def test_curve_refuses_a_split_that_falls_back_to_replication_as_fit_does(cli):
    """Was: `curve -H nvidia-h200 -t 3x8` printed "ok" at every chunk and exited 0 while fit and roofline
    refuse that split (vocab 163,840 does not divide 24 GPUs; the 896 experts are placed unevenly by
    vLLM, not replicated): exit 1, each row says why. tp 24 is given: the default split now divides the
    vocabulary (tp 8 dp 3)."""
    import json

    args = ("-H", "nvidia-h200", "-t", "3x8", "--tp", "24")
    assert cli("fit", *args).exit_code == 1 and cli("roofline", *args).exit_code == 1
    r = cli("curve", *args, "--json")
    assert r.exit_code == 1, r.output
    pts = json.loads(r.stdout)["points"]
    assert pts and all(p["max_sequences"] > 0 for p in pts)  # memory alone would hold a sequence
    for p in pts:
        assert p["status"] == "replicated", p
        assert "vocab=163840 by tp=24" in p["detail"] and "expert=896" not in p["detail"]
    assert "DOES NOT FIT" in r.stderr and "8 replicated" in r.stderr


def test_every_command_warns_when_the_context_is_beyond_the_model(cli):
    """Was: only fit warned that --context exceeds max_position_embeddings (1,048,576 for K3); plan
    recommended a machine for 2,000,000 tokens, and roofline priced a step at 1,100,000, without a word."""
    import json

    want = "--context 1,100,000 exceeds the model's max_position_embeddings 1,048,576"
    # a configuration that holds 1.1M tokens: torchtpu-vllm on 4x4x4 (its temporaries run in the 1 - utilization share)
    args = ("-t", "4x4x4", "--tp", "32", "--context", "1100000")
    assert want in cli("fit", *args).stdout
    roof = cli("roofline", *args)
    assert roof.exit_code == 0 and f"warning: {want}" in " ".join(roof.stdout.split())
    assert f"warning: {want}" in json.loads(cli("roofline", *args, "--json").stdout)["notes"]
    assert want in json.loads(cli("curve", *args, "--json").stdout)["warnings"]
    p = cli("plan", "-H", "tpu-v7x", "--context", "1100000", "--json")
    assert f"warning: {want}" in json.loads(p.stdout)["assumptions"]
    text = " ".join(cli("plan", "-H", "tpu-v7x", "--context", "1100000").stdout.split())
    assert f"warning: {want}" in text and "assumption: warning" not in text
    # at the model's max: no warning anywhere
    at_max = cli("plan", "-H", "tpu-v7x", "--context", "1048576", "--json")
    assert not any("max_position_embeddings" in a for a in json.loads(at_max.stdout)["assumptions"])


@pytest.mark.parametrize("value", ["0", "-3", "99999999999"])
def test_report_names_its_own_concurrency_option(cli, tmp_path, value):
    """Was: `report --concurrency 0` answered "--batch 0: expected a positive integer": report has no --batch."""
    line = one_error_line(cli("report", "-H", "tpu-v7x", "--concurrency", value, "--out", tmp_path / "r.md"))
    assert line.startswith(f"error: --concurrency {value}:") and "--batch" not in line


def test_report_where_nothing_fits_draws_its_plots_without_matplotlib_warnings(tmp_path):
    """Was: `report -H tpu-v7x -c 2000000` printed two matplotlib "UserWarning: No artists with labels
    found to put in legend" tracebacks-in-miniature (file, line, source) on stderr and drew empty legends."""
    import subprocess
    import sys

    out = tmp_path / "r.md"
    code = "from k3plan.cli.app import main; main()"
    r = subprocess.run(
        [sys.executable, "-W", "default", "-c", code, "report", "-H", "tpu-v7x", "-c", "2000000", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "legend" not in r.stderr, r.stderr
    assert (tmp_path / "r-memory.png").stat().st_size > 0 and (tmp_path / "r-curve.png").stat().st_size > 0


def test_emit_launch_writes_a_readable_script_and_refuses_a_folder_before_searching(cli, tmp_path):
    """Was: `plan --emit launch run.sh` left run.sh with mode 0600 (mkstemp's; every other file k3plan
    writes gets open()'s), and `--emit launch FOLDER` failed only after the search, naming a hidden
    temp file ("[Errno 21] Is a directory: '.adir.r_q_sies.tmp' -> ...")."""
    import os
    import stat

    umask = os.umask(0o022)
    try:
        r = cli("plan", "-H", "tpu-v7x", "--emit", "launch", tmp_path / "run.sh")
        assert r.exit_code == 0, r.output
        assert stat.S_IMODE((tmp_path / "run.sh").stat().st_mode) == 0o644
    finally:
        os.umask(umask)
    assert [p.name for p in tmp_path.iterdir()] == ["run.sh"]  # no temp file left
    (tmp_path / "adir").mkdir()
    line = one_error_line(cli("plan", "-H", "tpu-v7x", "--emit", "launch", tmp_path / "adir"))
    assert "--emit launch" in line and "is a folder; expected a file name" in line and ".tmp" not in line
