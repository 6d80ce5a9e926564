"""The terms floor, engine-floor and hardware-floor: the TTFT floor F fitted on the published TTFTs -- one for all,
one an engine, or one an engine x hardware -- and every held-out ratio refitted without its own case."""

from __future__ import annotations

import pytest

from k3plan.app.score import Row, _with_floor, fit_floor


def _row(case: str, engine: str, model_ms: float, measured_ms: float, hardware: str = "H200") -> Row:
    return Row(
        case=case,
        family=f"{engine} x {hardware}",
        model="m",
        split="TP 8",
        workload="1/1 @ 1",
        statistic="mean",
        tpot_model_ms=1.0,
        tpot_measured_ms=1.0,
        tpot_ratio=1.0,
        ttft_model_ms=model_ms,
        ttft_measured_ms=measured_ms,
        ttft_ratio=model_ms / measured_ms,
        priced_as="",
        held_out_tpot_ratio=1.0,
        held_out_ttft_ratio=model_ms / measured_ms,
    )


ROWS = [
    _row("a1", "sglang", 100.0, 300.0),
    _row("a2", "sglang", 50.0, 250.0),
    _row("a3", "sglang", 200.0, 400.0),
    _row("b1", "vllm", 100.0, 150.0),
    _row("b2", "vllm", 300.0, 350.0),
    _row("c1", "torchtpu-vllm", 10.0, 500.0),
]


def test_one_floor_for_all_is_fitted_on_every_other_case():
    out = {r.case: r for r in _with_floor(ROWS)}
    pairs = {r.case: (r.ttft_model_ms, r.ttft_measured_ms) for r in ROWS}
    for c, r in out.items():
        assert r.ttft_floor_ms == fit_floor(list(pairs.values()))
        assert r.held_out_ttft_floor_ms == fit_floor([v for k, v in pairs.items() if k != c])


def test_an_engine_s_floor_is_fitted_on_its_own_cases_only():
    out = {r.case: r for r in _with_floor(ROWS, per="engine")}
    assert out["a1"].ttft_floor_ms == 200.0 and out["b1"].ttft_floor_ms == 50.0  # each engine's exact fit
    assert out["a1"].held_out_ttft_floor_ms == fit_floor([(50.0, 250.0), (200.0, 400.0)])  # without itself
    assert out["b1"].held_out_ttft_ratio == pytest.approx((100.0 + 50.0) / 150.0)  # b2 alone: F 50
    # an engine with no other published TTFT takes the pooled fit of the others
    pooled = fit_floor([(r.ttft_model_ms, r.ttft_measured_ms) for r in ROWS if r.case != "c1"])
    assert out["c1"].held_out_ttft_floor_ms == pooled


def test_a_family_s_floor_is_fitted_on_its_own_cases_else_its_engine_s():
    rows = [
        *ROWS,
        _row("d1", "sglang", 20.0, 100.0, hardware="B300"),
        _row("d2", "sglang", 40.0, 120.0, hardware="B300"),
        _row("e1", "sglang", 60.0, 400.0, hardware="nvidia-b200"),
    ]
    out = {r.case: r for r in _with_floor(rows, per="hardware")}
    assert out["d1"].ttft_floor_ms == 80.0 and out["a1"].ttft_floor_ms == 200.0  # each family's exact fit
    assert out["d1"].held_out_ttft_floor_ms == 80.0  # d2 alone, never d1 itself
    assert out["a1"].held_out_ttft_floor_ms == fit_floor([(50.0, 250.0), (200.0, 400.0)])
    # a family with no other published TTFT takes its engine's other cases' fit, an engine with none the pooled
    sglang_others = [
        (r.ttft_model_ms, r.ttft_measured_ms) for r in rows if r.family.startswith("sglang") and r.case != "e1"
    ]
    assert out["e1"].held_out_ttft_floor_ms == fit_floor(sglang_others)
    pooled = fit_floor([(r.ttft_model_ms, r.ttft_measured_ms) for r in rows if r.case != "c1"])
    assert out["c1"].held_out_ttft_floor_ms == pooled


def test_the_floor_level_follows_the_terms():
    from k3plan.app.score import floor_level

    assert floor_level(frozenset({"floor"})) == ""
    assert floor_level(frozenset({"floor", "engine-floor"})) == "engine"
    assert floor_level(frozenset({"floor", "engine-floor", "hardware-floor"})) == "hardware"
    assert floor_level(frozenset({"floor", "hardware-floor"})) == ""  # it refines engine-floor
