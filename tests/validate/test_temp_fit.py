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
