"""Issue 36 point 2: every not-fit or refused answer carries ``reason`` (the text line) and a stable
``reason_code`` (k3plan.step.verdict.ReasonCode) in JSON; each code is produced by some input."""

from __future__ import annotations

import json

import pytest

from k3plan.step.verdict import ReasonCode

# code -> a command whose --json answer carries it (curve's NO_CONTEXT: see the unit test below)
PRODUCED_BY = {
    ReasonCode.FEASIBLE: ("fit", "-t", "2x2x4", "--tp", "32", "--context", "8192"),
    ReasonCode.FALLBACK: ("fit", "-t", "4x4x4", "--tp", "64"),
    ReasonCode.WEIGHTS: ("fit", "-t", "2x2x2", "--tp", "16"),
    ReasonCode.BUDGET: ("fit", "-t", "2x2x4", "--context", "1048576"),
    ReasonCode.CONCURRENCY: ("fit", "-t", "2x2x4", "--batch", "64"),
    ReasonCode.CALIBRATION: (
        "fit",
        "-t",
        "2x2x4",
        "--tp",
        "32",
        "--stack",
        "jax-native",
        "--context",
        "1",
        "--chunk",
        "57344",
    ),
    ReasonCode.TPOT: ("plan", "-H", "tpu-v7x", "--max-chips", "64", "--tpot-ms", "0.5"),
    ReasonCode.UNPRICED: ("plan", "--minimize", "cost", "-H", "tpu-v6e,amd-mi355x", "--max-chips", "16"),
    ReasonCode.SLA: (
        "plan",
        "-H",
        "tpu-v7x",
        "--max-chips",
        "64",
        "--isl",
        "4000",
        "--osl",
        "500",
        "--strict",
        "--tpot-ms",
        "1",
    ),
    ReasonCode.NO_CONFIGURATION: ("plan", "-H", "nvidia-h200", "--stacks", "vllm-tpu"),
    ReasonCode.NO_CHUNK: ("curve", "-t", "2x2x2", "--tp", "16"),
    # issue 50: vLLM on v7x has no calibration and no temp model there: the analytic lower bound, exit 3
    ReasonCode.UNVERIFIED_TEMP: ("fit", "-t", "2x4x4", "--tp", "32", "--stack", "vllm"),
    # issue 48: the closest configuration fits but MaxText cannot launch its split (dp 4); at 131,072 tokens, since
    # jax-native's prefill counts its graph's f32 scores over the chunk x context (issue 50: 48 GiB at 524,288)
    ReasonCode.LAUNCH: ("plan", "-H", "tpu-v7x", "--stacks", "jax-native", "--context", "131072", "--concurrency", "4"),
}


def test_every_code_has_an_input():
    assert set(PRODUCED_BY) | {ReasonCode.NO_CONTEXT} == set(ReasonCode)


@pytest.mark.parametrize("code", list(PRODUCED_BY), ids=lambda c: c.value)
def test_each_code_is_produced(cli, code):
    r = cli(*PRODUCED_BY[code], "--json")
    want = {ReasonCode.FEASIBLE: 0, ReasonCode.UNVERIFIED_TEMP: 3}.get(code, 1)
    assert r.exit_code == want, r.stdout[-500:]
    d = json.loads(r.stdout)
    assert d["reason_code"] == code.value
    assert isinstance(d["reason"], str) and d["reason"]


def test_curve_turns_code():
    from k3plan.app.curve import _reason_code

    line = "DOES NOT FIT: --turns: no context fits at batch 4 on this setup; see k3plan fit"
    assert _reason_code(line, turns=True) == ReasonCode.NO_CONTEXT.value
    assert _reason_code("", turns=True) is None


def test_fit_json_has_the_reason_after_fits(cli):
    """Was: `fit -t 2x2x2 --tp 16 --json` had no reason string, so a CI job had to work out why."""
    d = json.loads(cli("fit", "-t", "2x2x2", "--tp", "16", "--json").stdout)
    keys = list(d)
    assert keys[keys.index("fits") + 1 : keys.index("fits") + 3] == ["reason", "reason_code"]
    assert d["reason"] == "weights alone exceed usable HBM"


def test_roofline_refusal_has_the_code(cli):
    r = cli("roofline", "-t", "2x2x2", "--tp", "16", "--json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert (d["reason"], d["reason_code"]) == ("weights alone exceed usable HBM", "weights")


def test_a_plan_with_a_pick_and_a_fitting_curve_carry_no_reason(cli):
    d = json.loads(cli("plan", "-H", "tpu-v7x", "--max-chips", "32", "--json").stdout)
    assert d["recommended"] is not None and "reason" not in d and "reason_code" not in d
    c = json.loads(cli("curve", "-t", "2x2x4", "--tp", "32", "--context", "8192", "--json").stdout)
    assert "reason" not in c and "reason_code" not in c


def test_plan_text_says_why_nothing_passes_first(cli):
    r = cli("plan", "-H", "tpu-v7x", "--max-chips", "8")
    first = r.stdout.splitlines()[0]
    assert r.exit_code == 1 and first.startswith("No configuration passes: the closest (tpu-v7x 2x2x2 ")


def test_counts_of_one_are_singular(cli):
    """Issue 48: fit said "(4 chips, 8 devices, 1 hosts)"; hardware show "1 slice(s) of 1 chips / 1 devices"."""
    from k3plan.units import counted

    assert (counted(1, "host"), counted(8, "chip"), counted(0, "device")) == ("1 host", "8 chips", "0 devices")
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--tp", "8")
    assert "(4 chips, 8 devices, 1 host)" in r.stdout and "1 hosts" not in r.stdout
    r = cli("hardware", "show", "tpu-v5e", "-t", "1x1")
    assert "1 chip, 1 device, 1 host, 1 slice of 1 chip / 1 device;" in r.stdout


@pytest.mark.parametrize(
    "args, near",
    [
        (("fit", "-H", "h200"), "did you mean nvidia-h200?"),
        (("fit", "-H", "v7x"), "did you mean tpu-v7x?"),
        (("fit", "-H", "nvidai-b200"), "did you mean nvidia-b200"),
        (("plan", "--price", "h200=3"), "did you mean nvidia-h200?"),
    ],
)
def test_an_unknown_hardware_name_says_what_it_is_short_for(cli, args, near):
    """Issue 48: `-H h200` listed every spec; the one it is short for comes first."""
    from k3_testing import one_error_line

    line = one_error_line(cli(*args))
    assert near in line and "known:" in line
