"""Efficiency of one op kind at one shape, from the curves: interpolated inside the measured range
(linear in efficiency, log in size), clamped to the nearest measured point outside it (an envelope,
never an extrapolated slope), and the ceiling (efficiency 1) where no record covers the op.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from k3plan.errors import K3PlanError
from k3plan.speed.curves import EfficiencyCurve, EfficiencyCurves
from k3plan.structs import Frozen

if TYPE_CHECKING:
    import numpy as np


class Efficiency(Frozen):
    value: float  # ceiling time / expected time; 1.0 = the ceiling
    measured: bool
    record_path: str | None = None  # the record of the nearest point used
    point_used: str | None = None
    label: str
    source_hardware: str | None = None  # the hardware spec of the TPU a transferred point was measured on

    __exclude__ = ("source_hardware",)


def ceiling_label(op: str, device_kind: str) -> str:
    return f"ceiling: no measured efficiency for {op} on {device_kind}"


def interpolate(curve: EfficiencyCurve, x) -> np.ndarray:
    """Efficiency at x (scalar or array): np.interp over log x clamps to the end points."""
    import numpy as np  # here: fit computes the model for a serving benchmark's transfer, and stays numpy-free
    # where no curve applies (tests/budget/test_fit_numpy_free.py)

    xs = np.log([p.x for p in curve.points])
    ys = np.array([p.efficiency for p in curve.points])
    return np.interp(np.log(np.asarray(x, dtype=float)), xs, ys)


def _interp_log(curve: EfficiencyCurve, x: float) -> float:
    """``interpolate`` at one size in plain Python (fit takes transferred curves now and stays numpy-free):
    linear in log size between the points, clamped to the end points."""
    pts = curve.points
    lx = math.log(x)
    if lx <= math.log(pts[0].x):
        return pts[0].efficiency
    if lx >= math.log(pts[-1].x):
        return pts[-1].efficiency
    for lo, hi in zip(pts, pts[1:]):
        a, b = math.log(lo.x), math.log(hi.x)
        if a <= lx <= b:
            return lo.efficiency + (hi.efficiency - lo.efficiency) * (lx - a) / (b - a)
    return pts[-1].efficiency  # unreachable: the points are sorted by x


def efficiency(curves: EfficiencyCurves, *, key: str, x: float, device_kind: str, op: str) -> Efficiency:
    """Efficiency for curve `key` at size `x` on `device_kind` (must be the curves' own kind)."""
    if device_kind.lower() != curves.device_kind.lower():
        raise K3PlanError(f"efficiency curves are for {curves.device_kind}, not {device_kind}")
    if not (x > 0 and math.isfinite(x)):
        raise K3PlanError(f"{op}: size {x!r} must be a positive number")
    curve = curves.curves.get(key)
    if curve is None or not curve.points:
        return Efficiency(value=1.0, measured=False, label=ceiling_label(op, device_kind))
    pts = curve.points
    value = min(_interp_log(curve, x), 1.0)  # never above the ceiling, whatever the curve holds
    nearest = min(pts, key=lambda p: abs(math.log(p.x / x)))
    where = f"{curve.axis} = {x:.4g}"
    if x < pts[0].x or x > pts[-1].x:
        used = (
            f"{where} outside the measured {pts[0].x:.4g}..{pts[-1].x:.4g}: clamped to the nearest "
            f"measured point ({nearest.detail})"
        )
    elif any(p.x == x for p in pts):
        used = f"{where}: measured point ({nearest.detail})"
    else:
        lo = [p for p in pts if p.x < x][-1]
        hi = next(p for p in pts if p.x > x)
        used = (
            f"{where}: interpolated (log size) between {lo.x:.4g} (eff {lo.efficiency:.3g}) "
            f"and {hi.x:.4g} (eff {hi.efficiency:.3g})"
        )
    if nearest.transferred_from:  # issue 38: another TPU's measurement, said so
        used = f"transferred from {nearest.transferred_from}: {used}"
        label = (
            f"{value:.1%} of ceiling, {op} probed on {nearest.transferred_from}, transferred to {device_kind}: "
            f"{nearest.record_path}"
        )
    else:
        label = f"{value:.1%} of ceiling, {op} probed on {device_kind}: {nearest.record_path}"
    if nearest.record_label:
        label += f" [{nearest.record_label}]"
    return Efficiency(
        value=value,
        measured=True,
        record_path=nearest.record_path,
        point_used=used,
        label=label,
        source_hardware=nearest.source_hardware,
    )
