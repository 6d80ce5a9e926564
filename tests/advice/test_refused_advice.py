"""A graph the shipped calibration refuses (a compile at or above that size ran out of memory) fails
the fit whatever HBM is free; the advice says so instead of 'ok' (the CI failure of 2026-12-01)."""

from __future__ import annotations

import json

from k3plan.advice.inputs import AdviceInputs
from k3plan.advice.rules import advise

GiB = 2**30


def _inputs(**kw) -> AdviceInputs:
    base = dict(
        usable_bytes=100 * GiB,
        weights_bytes=50 * GiB,
        kv_bytes=0,
        state_bytes=0,
        temp_bytes=30 * GiB,
        reserve_bytes=0,
        free_bytes=20 * GiB,
        topology="2x2x4",
        devices=32,
        batch=1,
        sequences=1,
        context_tokens=1,
        kv_dtype="bf16",
        kv_bytes_per_token=1,
    )
    return AdviceInputs(**{**base, **kw})


def test_free_hbm_with_no_refusal_is_ok():
    a = advise(_inputs())  # 20 of 100 GiB free: above the 10% bar
    assert a.verdict == "ok" and not a.warnings


def test_a_refused_stage_fails_even_with_free_hbm():
    a = advise(_inputs(refused="prefill chunk 53,249: the measured compile at 57,344 ran out of memory"))
    assert a.verdict == "fails"
    assert any(w.startswith("refused by calibration evidence: prefill chunk 53,249") for w in a.warnings)


def test_thin_headroom_with_a_refusal_is_a_failure_not_a_thin_pass():
    a = advise(_inputs(free_bytes=5 * GiB, refused="decode batch 64: the measured compile at 64 ran out of memory"))
    assert a.verdict == "fails"


def test_fit_cli_carries_the_refusal_into_its_advice(cli):
    r = cli("fit", "-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--context", "1", "--chunk", "57344", "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 1 and not d["fits"] and d["per_device"]["free_bytes"] > 0
    assert d["temp"]["prefill_refused"]
    rules = d["advice"]["rules"]
    assert rules["verdict"] == "fails"
    assert any(d["temp"]["prefill_refused"] in w for w in rules["warnings"])
