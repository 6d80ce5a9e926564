"""The temp model's fit / held-out machinery (k3plan.validate.temp_fit) on synthetic points: jax-free, ms.

The full grid (benchmarks/bench_temp_grid.py) compiles 24 points and is not run here."""

from __future__ import annotations

import pytest

from k3plan.validate.temp_fit import GridPoint, evaluate, fit_coefficients, predict, split_half

MIB = 2**20


def _pt(i: int, group: tuple, peak: float, rest: float, resident: float, compiled: float) -> GridPoint:
    return GridPoint(label=f"p{i}", group=group, compiled_bytes=int(compiled), peak=peak, rest=rest, resident=resident)


def _grid(law) -> list[GridPoint]:
    pts = []
    for g, group in enumerate((("a", 16, "prefill"), ("a", 32, "decode"), ("b", 16, "prefill"))):
        for j in range(4):
            peak, rest, res = (10 + 7 * j + g) * MIB, (3 + 5 * j * j + 2 * g) * MIB, (1 + g * g + g * j) * MIB / 4
            pts.append(_pt(len(pts), group, peak, rest, res, law(peak, rest, res)))
    return pts


def test_split_alternates_within_each_group():
    pts = _grid(lambda p, r, s: p)
    fit, held = split_half(pts)
    assert [p.label for p in fit] == ["p0", "p2", "p4", "p6", "p8", "p10"]
    assert [p.label for p in held] == ["p1", "p3", "p5", "p7", "p9", "p11"]
    assert {p.group for p in fit} == {p.group for p in held}  # each half spans every group


def test_exact_law_is_recovered_and_held_out_error_is_zero():
    # compiled = 1.5 peak + 0.25 rest + 2 resident + 3 MiB: written by hand, not by the code under test
    pts = _grid(lambda p, r, s: 1.5 * p + 0.25 * r + 2 * s + 3 * MIB)
    fit, held = split_half(pts)
    ev = evaluate(train=fit, held_out=held)
    assert ev.coef["c_peak"] == pytest.approx(1.5, rel=1e-6)
    assert ev.coef["c_rest"] == pytest.approx(0.25, rel=1e-6)
    assert ev.coef["c_fixed"] == pytest.approx(3 * MIB, rel=1e-6)
    assert ev.held_worst < 1e-6 and ev.held_median < 1e-6
    assert sum(r.train for r in ev.rows) == 6 and sum(not r.train for r in ev.rows) == 6


def test_held_out_points_never_move_the_coefficients():
    pts = _grid(lambda p, r, s: 2 * p + MIB)
    fit, held = split_half(pts)
    wild = [GridPoint(**{**h.__dict__, "compiled_bytes": h.compiled_bytes * 5}) for h in held]
    a, b = evaluate(train=fit, held_out=held), evaluate(train=fit, held_out=wild)
    assert a.coef == b.coef
    assert a.held_worst < 1e-6
    assert b.held_median == pytest.approx(0.8)  # predicted / (5 x compiled) - 1 = -0.8 on every point


def test_coefficients_are_non_negative():
    # compiled falls with rest: unconstrained least squares would give c_rest < 0; the fit drops it
    pts = _grid(lambda p, r, s: max(3 * p - 0.5 * r, p))
    coef = fit_coefficients(pts)
    assert all(v >= 0 for v in coef.values())
    assert predict(coef, pts[0]) > 0


def test_needs_points():
    with pytest.raises(ValueError):
        fit_coefficients([])
    with pytest.raises(ValueError):
        evaluate(train=_grid(lambda p, r, s: p), held_out=[])


def test_per_stack_fits_each_stack_on_its_own_points():
    # stack a: compiled = 2 peak; stack b: compiled = 0.5 peak + 1 MiB (by hand)
    def as_stack(name, law):
        return [GridPoint(**{**p.__dict__, "group": (name, *p.group[1:])}) for p in _grid(law)]

    pts = as_stack("a", lambda p, r, s: 2 * p) + as_stack("b", lambda p, r, s: 0.5 * p + MIB)
    fit, held = split_half(pts)
    ev = evaluate(train=fit, held_out=held, per_stack=True)
    assert ev.coef["a.c_peak"] == pytest.approx(2.0) and ev.coef["b.c_peak"] == pytest.approx(0.5)
    assert ev.coef["b.c_fixed"] == pytest.approx(MIB) and ev.coef["a.c_fixed"] == pytest.approx(0.0, abs=1)
    assert ev.held_worst < 1e-6
    shared = evaluate(train=fit, held_out=held)  # one set for both stacks cannot fit both laws
    assert shared.held_worst > 0.1


def test_total_form_has_one_coefficient_for_the_live_bytes_and_a_fixed_part():
    # compiled = 1.25 (peak + resident) + 2 MiB, by hand: the total form recovers both; rest plays no part
    pts = _grid(lambda p, r, s: 1.25 * (p + s) + 2 * MIB)
    fit, held = split_half(pts)
    ev = evaluate(train=fit, held_out=held, form="total")
    assert set(ev.coef) == {"c_live", "c_fixed"}
    assert ev.coef["c_live"] == pytest.approx(1.25) and ev.coef["c_fixed"] == pytest.approx(2 * MIB)
    assert ev.held_worst < 1e-6


def test_a_grid_position_decides_the_half_not_the_order_points_come_in():
    pts = _grid(lambda p, r, s: p)[:4]  # one group; positions 3, 0, 1 given out of order, position 2 missing
    placed = [GridPoint(**{**p.__dict__, "position": i}) for p, i in zip(pts, (3, 0, 1))]
    fit, held = split_half(placed)
    assert [p.position for p in fit] == [0] and sorted(p.position for p in held) == [1, 3]


def test_leave_one_out_predicts_each_point_from_the_others_only():
    from k3plan.validate.temp_fit import leave_one_out

    exact = _grid(lambda p, r, s: 1.25 * (p + s) + 2 * MIB)
    assert max(leave_one_out(exact, per_stack=False, form="total")) < 1e-6
    # one point off the law by +50%: predicted from the others, its own error is -1/3 (1 / 1.5 - 1), by hand
    off = [GridPoint(**{**p.__dict__, "compiled_bytes": int(p.compiled_bytes * (1.5 if i == 5 else 1))})
           for i, p in enumerate(exact)]  # fmt: skip
    assert leave_one_out(off, per_stack=False, form="total")[5] == pytest.approx(1 / 3, rel=1e-3)
