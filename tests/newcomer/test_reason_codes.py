"""Issue 36 point 2: every not-fit or refused answer carries ``reason`` (the text line) and a stable
``reason_code`` (k3plan.step.verdict.ReasonCode) in JSON; each code is produced by some input."""

from __future__ import annotations

import json

import pytest

from k3plan.step.verdict import ReasonCode

# code -> a command whose --json answer carries it (curve's NO_CONTEXT: see the unit test below)
PRODUCED_BY = {
    ReasonCode.FEASIBLE: ("fit", "-t", "2x2x4", "--tp", "32"),
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
        "53249",
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
    c = json.loads(cli("curve", "-t", "2x2x4", "--tp", "32", "--json").stdout)
    assert "reason" not in c and "reason_code" not in c


def test_plan_text_says_why_nothing_passes_first(cli):
    r = cli("plan", "-H", "tpu-v7x", "--max-chips", "8")
    first = r.stdout.splitlines()[0]
    assert r.exit_code == 1 and first.startswith("No configuration passes: the closest (tpu-v7x 2x2x2 ")
