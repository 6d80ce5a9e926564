"""A measurement above the physical peak is refused, never applied (issue 35).

A rate (FLOP/s, bytes/s) a device cannot reach says the timing was wrong (a single call of a small op
timed the host; an overlapped or elided loop), not that the chip is faster than its spec. The point keeps
its samples and says why; its ``value`` is dropped, so no curve, calibration or check can read it, and
the record is not ok (the CLI exits 1 and names the point in one line).
"""

from __future__ import annotations

from typing import Optional

from k3plan.evidence.probe_record import ProbePoint

TOLERANCE = 1.0  # a rate may equal the peak, never exceed it


def refuse_above_peak(points: list[ProbePoint], *, what: str) -> Optional[str]:
    """Drop the value of every point whose rate exceeds its ``expected`` (the spec's peak); return the
    first refusal as one line (None when every point is within the peak or has no peak)."""
    first = None
    for pt in points:
        if pt.value is None or pt.expected is None or pt.expected <= 0:
            continue
        if pt.value > pt.expected * TOLERANCE:
            reason = (
                f"refused: {what} {_where(pt)} measured {pt.value:.4g} {pt.unit or ''}, above the spec's peak "
                f"{pt.expected:.4g} ({pt.value / pt.expected:.0%}): the timing, not the chip, is wrong"
            ).replace("  ", " ")
            pt.notes.append(reason)
            pt.params = {**pt.params, "refused_value": pt.value}
            pt.value = None
            first = first or reason
    return first


def _where(pt: ProbePoint) -> str:
    keys = ("dtype", "size", "m", "n", "k", "bytes", "tokens")
    return " ".join(f"{k}={pt.params[k]}" for k in keys if k in pt.params) or "point"


def refuse_below_bound(points: list[ProbePoint], *, what: str) -> list[str]:
    """For points whose ``value`` is seconds and ``expected`` the spec's lower bound (bytes / HBM peak): drop
    the value of each point faster than the bound (the same refusal, in time); return the refusals' lines."""
    out = []
    for pt in points:
        if pt.value is None or pt.expected is None or pt.expected <= 0 or pt.unit != "s":
            continue
        if pt.value * TOLERANCE < pt.expected:
            reason = (
                f"refused: {what} {pt.params.get('path', 'point')} measured {pt.value:.4g} s, below the spec's bound "
                f"{pt.expected:.4g} s (HBM peak): data stayed on chip between iterations, or the timing is wrong"
            )
            pt.notes.append(reason)
            pt.params = {**pt.params, "refused_value": pt.value}
            pt.value = None
            out.append(reason)
    return out
