"""The terms floor, engine-floor, hardware-floor, lowc-floor and family-min-floor: the TTFT floor F fitted on the
published TTFTs -- one for all, one an engine, or one an engine x hardware (on all its TTFTs, on its low-concurrency
ones, or where enough are left) -- and every held-out ratio refitted without its own case."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k3plan.app.score import FAMILY_MIN_OTHERS, LOW_CONCURRENCY, Row, _with_floor, fit_floor


def _row(case: str, engine: str, model_ms: float, measured_ms: float, hardware: str = "H200", conc: int = 1) -> Row:
    return Row(
        case=case,
        family=f"{engine} x {hardware}",
        model="m",
        split="TP 8",
        workload=f"1/1 @ {conc:,}",
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
    assert floor_level(frozenset({"floor", "engine-floor", "lowc-floor"})) == "lowc"
    assert floor_level(frozenset({"floor", "engine-floor", "family-min-floor"})) == "family-min"
    assert floor_level(frozenset({"floor", "lowc-floor", "family-min-floor"})) == ""  # each refines engine-floor
    # one level fits the floor: the first of FAMILY_LEVELS ON decides
    every = frozenset({"floor", "engine-floor", "hardware-floor", "lowc-floor", "family-min-floor"})
    assert floor_level(every) == "lowc" and floor_level(every - {"lowc-floor"}) == "family-min"


# B300's family: two low-concurrency cases (c1, c4) and two queue-bound ones; B200's: high concurrency only
LOWC = [
    _row("l1", "sglang", 20.0, 80.0, hardware="B300", conc=1),
    _row("l4", "sglang", 50.0, 120.0, hardware="B300", conc=LOW_CONCURRENCY),
    _row("h8", "sglang", 60.0, 400.0, hardware="B300", conc=LOW_CONCURRENCY * 2),
    _row("h64", "sglang", 300.0, 2000.0, hardware="B300", conc=64),
    _row("q1", "sglang", 100.0, 500.0, hardware="B200", conc=1024),
    _row("q2", "sglang", 200.0, 700.0, hardware="B200", conc=4096),
    _row("v1", "vllm", 100.0, 150.0, conc=4),
    _row("v2", "vllm", 300.0, 350.0, conc=8),
]


def _pairs(rows, keep) -> list[tuple[float, float]]:
    return [(r.ttft_model_ms, r.ttft_measured_ms) for r in rows if keep(r)]


def test_a_family_s_low_concurrency_floor_is_fitted_on_its_other_low_concurrency_cases():
    out = {r.case: r for r in _with_floor(LOWC, per="lowc")}
    # a low-concurrency case: the family's other low-concurrency case alone, never itself nor the queue-bound ones
    assert out["l1"].held_out_ttft_floor_ms == fit_floor(_pairs(LOWC, lambda r: r.case == "l4")) == 70.0
    assert out["l4"].held_out_ttft_floor_ms == fit_floor(_pairs(LOWC, lambda r: r.case == "l1")) == 60.0
    # a queue-bound case: every low-concurrency case of its family (it is none of them)
    both = fit_floor(_pairs(LOWC, lambda r: r.case in ("l1", "l4")))
    assert out["h8"].held_out_ttft_floor_ms == out["h64"].held_out_ttft_floor_ms == both
    assert out["h64"].ttft_floor_ms == both and out["h64"].ttft_floor_group == "sglang x B300"
    # a family without one (B200 here) takes its engine's fit on every other case of the engine, at any concurrency
    sglang = _pairs(LOWC, lambda r: r.family.startswith("sglang") and r.case != "q1")
    assert out["q1"].held_out_ttft_floor_ms == fit_floor(sglang)
    assert out["q1"].ttft_floor_group == "sglang"  # in sample too: no family floor of its own
    # vLLM's family has one low-concurrency case: v1 left out has none other, so it takes the engine's (v2)
    assert out["v1"].held_out_ttft_floor_ms == 50.0 and out["v2"].held_out_ttft_floor_ms == 50.0


def test_a_family_s_floor_needs_enough_others_once_the_case_is_left_out():
    big = [
        _row(f"b{i}", "sglang", 10.0 * (i + 1), 100.0 + 20.0 * i, hardware="B300") for i in range(FAMILY_MIN_OTHERS + 1)
    ]
    small = [
        _row(f"s{i}", "sglang", 1000.0 * (i + 1), 4000.0, hardware="H100", conc=1024) for i in range(FAMILY_MIN_OTHERS)
    ]
    rows = big + small
    out = {r.case: r for r in _with_floor(rows, per="family-min")}
    for r in big:  # FAMILY_MIN_OTHERS others left: the family's own fit
        assert out[r.case].held_out_ttft_floor_ms == fit_floor(_pairs(big, lambda q, c=r.case: q.case != c))
        assert out[r.case].ttft_floor_group == "sglang x B300"
    for r in small:  # one too few: the engine's other cases, both families'
        assert out[r.case].held_out_ttft_floor_ms == fit_floor(_pairs(rows, lambda q, c=r.case: q.case != c))
        assert out[r.case].ttft_floor_group == "sglang"
    # hardware-floor fits the small family on its own two others
    hw = {r.case: r for r in _with_floor(rows, per="hardware")}
    assert hw["s0"].held_out_ttft_floor_ms == fit_floor(_pairs(small, lambda q: q.case != "s0"))


def test_no_held_out_floor_reads_its_own_case():
    """Leave one out at every level: moving a case's own measured TTFT never moves its held-out floor."""
    rows = [*ROWS, *LOWC]
    for per in ("", "engine", "hardware", "lowc", "family-min"):
        before = {r.case: r.held_out_ttft_floor_ms for r in _with_floor(rows, per=per)}
        for i, r in enumerate(rows):
            moved = [*rows[:i], replace(r, ttft_measured_ms=r.ttft_measured_ms * 7.0), *rows[i + 1 :]]
            after = {q.case: q.held_out_ttft_floor_ms for q in _with_floor(moved, per=per)}
            assert after[r.case] == before[r.case], (per, r.case)


def test_the_loop_s_floor_is_the_engine_s_only_with_pass_engine_floor_over_a_family_floor():
    from k3plan.app.score import pass_level

    base = frozenset({"floor", "engine-floor", "prefill-pass"})
    assert pass_level(base | {"family-min-floor"}) == "family-min"
    assert pass_level(base | {"family-min-floor", "pass-engine-floor"}) == "engine"
    assert pass_level(base | {"lowc-floor", "pass-engine-floor"}) == "engine"
    assert pass_level(base | {"pass-engine-floor"}) == "engine"  # no family floor: the two floors are one
    assert pass_level(frozenset({"floor", "prefill-pass", "pass-engine-floor"})) == ""
