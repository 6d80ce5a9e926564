"""A hostile-input pass over every reader and option (the qa-input brief): each finding a named test that
failed before its fix. Bad input: exit 2 and one line naming the file, key or flag and what was expected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from k3_testing import one_error_line, tiny_kimi_raw

from k3plan.hardware.loader import SPECS_DIR

FIT = ("fit", "-t", "2x2x4", "--tp", "32")


def _spec(tmp_path: Path, old: str, new: str) -> Path:
    text = (SPECS_DIR / "tpu-v7x.yaml").read_text()
    assert old in text
    path = tmp_path / "hw.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


# -- hardware spec figures that divide ---------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, needle",
    [
        # were: a pydantic ValidationError traceback (AdviceInputs.usable_bytes > 0), exit 1
        ('value: "94.75GiB"', 'value: "0GiB"', "usable_hbm_per_device: '0GiB' is 0 bytes"),
        (
            'value: "94.75GiB"',
            'value: "1e-300GiB"',
            "usable_hbm_per_device: '1e-300GiB' is above 0 but less than one byte",
        ),
        # were: ZeroDivisionError tracebacks, exit 1
        ('value: "1153.5TFLOP/s"', 'value: "0TFLOP/s"', "flops_per_device.bf16 must be > 0"),
        ('value: "600GB/s"', 'value: "0GB/s"', "scale_up.bw_per_chip must be > 0"),
        ('value: "100Gb/s"', 'value: "0Gb/s"', "scale_out.bw_per_chip must be > 0"),
        # was: accepted, a 309-digit byte count
        ('value: "96GiB"', 'value: "1e299GiB"', "hbm_per_device: '1e299GiB' is 2^63 bytes or more"),
        # were: accepted, a decode step of 280 chained calls priced at 1e302 s (the edges brief)
        ('value: "9.88us"', 'value: "1e300s"', "scale_up.latency: '1e300s' is above 1 s"),
        ('value: "50us"', 'value: "50s"', "scale_out.latency: '50s' is above 1 s"),
    ],
)
def test_hardware_figures_that_divide_must_be_positive(cli, tmp_path, old, new, needle):
    line = one_error_line(cli(*FIT, "-H", _spec(tmp_path, old, new)))
    assert needle in line and "hw.yaml" in line


@pytest.mark.parametrize("name", ['""', '"  "', '" tpu-v7x"'])
def test_hardware_name_blank_or_padded(cli, tmp_path, name):
    """Was: accepted; fit printed "kimi-k3 on  2x2x4" (no hardware name)."""
    line = one_error_line(cli("hardware", "show", _spec(tmp_path, "name: tpu-v7x", f"name: {name}")))
    assert "name:" in line and "expected a name" in line


# -- control characters in what a reader returns -------------------------------------------------------


def test_control_characters_in_a_spec_are_refused(cli, tmp_path):
    """Was: a hardware name "a\\e[31mred" was printed raw: the ESC sequence recoloured the user's terminal."""
    line = one_error_line(cli("hardware", "show", _spec(tmp_path, "name: tpu-v7x", 'name: "a\\e[31mred"')))
    assert "key 'name' holds the control character '\\x1b'" in line and "hw.yaml" in line


def test_control_characters_in_a_config_key_are_refused(cli, tmp_path):
    raw = tiny_kimi_raw()
    raw["text_config"]["\x9bbad"] = 1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    line = one_error_line(cli("models", "show", path))
    assert "holds the control character '\\x9b'" in line and "config.json" in line


# -- numbers that overflow the arithmetic --------------------------------------------------------------


@pytest.mark.parametrize("flag, value", [("--bw-efficiency", "1e-320"), ("--mfu", "1e-300"), ("--mfu", "0.0009")])
def test_roofline_efficiency_below_a_thousandth(cli, flag, value):
    """Was: --bw-efficiency 1e-320 printed TPOT "inf ms" and --json wrote `"step_s": Infinity` (not JSON)."""
    line = one_error_line(cli("roofline", "-t", "2x2x4", "--tp", "32", flag, value))
    assert line.startswith(f"error: {flag} ") and "expected a fraction from 0.001 to 1" in line


def test_json_output_has_no_infinity_or_nan(capsys):
    """JSON (RFC 8259) has no Infinity: a non-finite figure (e.g. a crossover that never comes) is null."""
    import math

    from k3plan.cli.common import print_json

    print_json({"a": math.inf, "b": [-math.inf, math.nan], "c": 1.5})
    assert json.loads(capsys.readouterr().out) == {"a": None, "b": [None, None], "c": 1.5}


def test_stack_fraction_option_that_rounds_to_no_memory(cli):
    """Was: gpu_memory_utilization=1e-300 rounded to a reserve of 1.0: a pydantic ValidationError traceback."""
    line = one_error_line(cli(*FIT, "--stack", "vllm-tpu:gpu_memory_utilization=1e-300"))
    assert "gpu_memory_utilization" in line and "expected a number in (0, 1]" in line


def test_stack_option_given_twice(cli):
    """Was: vllm-tpu:gpu_memory_utilization=0.5+gpu-memory-utilization=0.9 took the last, exit 0."""
    line = one_error_line(cli(*FIT, "--stack", "vllm-tpu:gpu_memory_utilization=0.5+gpu-memory-utilization=0.9"))
    assert "option 'gpu-memory-utilization' is given twice" in line


# -- Ctrl-C ----------------------------------------------------------------------------------------------


def _ctrl_c(*_a, **_k):
    raise KeyboardInterrupt


def test_ctrl_c_during_a_command_is_one_line_and_exit_130(cli, monkeypatch):
    """Was: exit 130 and nothing on stderr (typer's own handler), the user left to guess what happened."""
    import k3plan.plan

    monkeypatch.setattr(k3plan.plan, "plan", _ctrl_c)  # the search, imported by the command when it runs
    r = cli("plan", "-H", "tpu-v7x")
    assert r.exit_code == 130
    assert r.stderr.strip().splitlines() == ["interrupted (Ctrl-C); no file was left half-written"]


def test_ctrl_c_while_the_command_modules_import_is_one_line(monkeypatch, capsys):
    """Was: a KeyboardInterrupt traceback through importlib (Ctrl-C in the first ~0.3 s of a run)."""
    from k3plan.cli import app

    monkeypatch.setattr(app, "_register", _ctrl_c)
    with pytest.raises(SystemExit) as exit_:
        app.main(["fit"])
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C); no file was left half-written\n"


@pytest.mark.parametrize(
    "args, needle",
    [
        # were: exit 0 with numpy "RuntimeWarning: overflow encountered" (file, line, source) on stderr and inf
        # in the table ($/hour inf, cold start "inf s", cost a million tokens inf)
        (("--price", "tpu-v7x=1e308", "--minimize", "cost", "-H", "tpu-v7x"), "at most 1,000,000 US dollars"),
        (("--load-gbps", "1e-308", "-H", "tpu-v7x"), "expected 0.001 to 1,000,000 gigabits"),
        (("--isl", "100", "--osl", "100", "--request-rate", "1e-308", "-H", "nvidia-h200"), "(one a day)"),
    ],
)
def test_plan_figures_that_overflowed(cli, args, needle):
    assert needle in one_error_line(cli("plan", *args))


# -- empty values --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, flag",
    [
        ((*FIT, "--probes", ""), "--probes"),  # was: the current folder, every JSON under it read as a probe record
        ((*FIT, "--calibration", " "), "--calibration"),  # was: "--calibration .: a folder"
        (("check", "--baseline", ""), "--baseline"),  # was: "--baseline .: a folder"
        (("fit", "-m", ""), "--model"),  # was: "model '': folder has no config.json"
        (("report", "--out", ""), "--out"),
        (("plan", "--emit", "launch", ""), "--emit"),  # was: "--emit launch .: is a folder"
        (("curve", "--plot="), "--plot"),
    ],
)
def test_empty_option_values_in_one_place(cli, args, flag):
    assert one_error_line(cli(*args)) == f"error: {flag} is empty; leave it out for the default, or give a value"


@pytest.mark.parametrize("args, name", [(("census", ""), "PATH"), (("models", "show", " "), "MODEL")])
def test_empty_arguments(cli, args, name):
    """Was: census "" read the current folder; models show "" said "folder has no config.json"."""
    assert one_error_line(cli(*args)) == f"error: {name} is empty; expected a value"


# -- options that were read by nothing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, flag",
    [
        (("plan", "-H", "tpu-v7x", "--user-tokens", "5"), "--user-tokens"),
        (("curve", "-t", "2x2x4", "--tp", "32", "--reasoning-tokens", "6000"), "--reasoning-tokens"),
        (("curve", "-t", "2x2x4", "--tp", "32", "--drop-reasoning"), "--drop-reasoning"),
    ],
)
def test_session_options_without_turns(cli, args, flag):
    """Was: accepted and ignored (exit 0, the answer for no session at all)."""
    assert one_error_line(cli(*args)).startswith(f"error: {flag}: only with --turns N")


def test_plan_max_pp_beyond_the_layers_searches(cli):
    """Was: plan -H nvidia-h200 --max-pp 99999 aborted the whole search with "--pp 128: expected 1 to 93" (a flag the user
    never gave): a candidate pipeline deeper than the model's layers is not searched."""
    r = cli("plan", "-H", "nvidia-h200", "--max-pp", "99999", "--json")  # 1,024 GPUs: 128 boxes
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["recommended"]


def test_report_stack_kind_given_twice(cli, tmp_path):
    """Was: report --stack tpu=vllm-tpu,tpu=sglang took sglang for the TPUs (every context 'no fit'), exit 0."""
    line = one_error_line(cli("report", "--stack", "tpu=vllm-tpu,tpu=sglang", "--out", tmp_path / "r.md"))
    assert "tpu is given twice; expected each kind once" in line


# -- the reader of stdout leaves ----------------------------------------------------------------------------


@pytest.mark.parametrize("args", [("check", "--baseline", "reports/baseline/k3.json"), ("models", "list", "--json")])
def test_closed_pipe_exits_141_not_1(args):
    """Was: `k3plan check ... | head -1` exited 1 (click's, and rich's, broken-pipe exit) -- k3plan's "gate failed"
    / "does not fit" -- for a gate that passed. Now 141, as a process that SIGPIPE ends, and nothing on stderr."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    code = "from k3plan.cli.app import main; main()"
    env = {**os.environ, "PYTHONPATH": str(root)}
    try:
        r = subprocess.run(
            [sys.executable, "-c", code, *args],
            stdout=write,
            stderr=subprocess.PIPE,
            cwd=root,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (141, b"")


# -- files that are not regular files --------------------------------------------------------------------------


def _k3plan(*args, timeout=60):
    """The CLI in a subprocess with a timeout: a reader that blocks must fail the test, not hang the suite."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = "from k3plan.cli.app import main; main()"
    try:
        r = subprocess.run(
            [sys.executable, "-c", code, *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"k3plan {' '.join(map(str, args))} blocked for {timeout} s")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_probe_folder_with_a_fifo_or_a_device(tmp_path, kind):
    """Was: a FIFO named zz.json in a --probes folder blocked fit for ever (open() waits for a writer), and a
    link to /dev/zero (its size 0, under the 64 MiB bound) read until memory ran out."""
    import os

    bad = tmp_path / "zz.json"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to("/dev/zero")
    want = "a FIFO" if kind == "fifo" else "a device"
    assert f"zz.json: {want}; expected a regular file" in _k3plan(*FIT, "--probes", tmp_path)


def test_census_with_a_fifo_shard(tmp_path):
    """Was: census of a folder holding a FIFO named model.safetensors blocked for ever."""
    import os

    os.mkfifo(tmp_path / "model.safetensors")
    assert "model.safetensors: a FIFO; expected a regular file" in _k3plan("census", tmp_path)


# -- an option given twice ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (("fit", "-t", "2x2x4", "--tp", "32", "-t", "2x4x4"), "--topology is given twice ('2x2x4', then '2x4x4')"),
        (("fit", "--context=131072", "--context", "-5"), "--context is given twice ('131072', then '-5')"),
        (("hardware", "show", "tpu-v7x", "-t", "2x2x4", "--topology", "2x2x2"), "--topology is given twice"),
    ],
)
def test_an_option_given_twice(cli, args, needle):
    """Was: the last one silently won (fit answered for 2x4x4, exit 0)."""
    assert needle in one_error_line(cli(*args))


def test_options_meant_to_repeat_still_do(cli):
    r = cli("plan", "-H", "tpu-v7x", "--price", "tpu-v7x=4", "--price", "tpu-v6e=2", "--minimize", "cost", "--json")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    "args, needle",
    [
        ((*FIT, "--calibration", "/dev/null"), "--calibration /dev/null: a device; expected a calibration YAML file"),
        (("check", "--baseline", "/dev/null"), "--baseline /dev/null: a device; expected a baseline JSON file"),
        (("fit", "-m", "/dev/null"), "model '/dev/null': a device"),
        (("census", "/dev/null"), "census: /dev/null: a device"),
        (("hardware", "show", "/dev/null"), "hardware '/dev/null': a device; expected a hardware spec YAML file"),
        ((*FIT, "--shardspecs", "/dev/null"), "--shardspecs /dev/null: a device; expected FILE.yaml"),
    ],
)
def test_a_path_that_is_not_a_file_says_what_it_is(cli, args, needle):
    """Was: "no such file" (or "no such file or folder") of /dev/null, which exists."""
    assert needle in one_error_line(cli(*args))
