"""`curve --json`: the chunk-vs-context points of one setup, with what they were computed from and
(given --turns) the session's context growth (k3plan.cli.curve dumps it)."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.budget.curve import CurvePoint
from k3plan.structs import Frozen
from k3plan.workload.sessions import SessionGrowth


class CurveOutput(Frozen):
    title: str  # model, hardware, topology, split, stack, batch and the temp evidence
    context_tokens: int
    batch: int
    calibration: Optional[str]  # the --calibration file, None: fit's default evidence
    warnings: list[str]
    notes: list[str]  # what every point shares that a reader must know (an uneven expert placement: fit's note)
    points: list[CurvePoint]
    sessions: Optional[SessionGrowth]
    # issue 36: why the workload does not fit (the line curve prints, exit 1) and its
    # k3plan.step.verdict.ReasonCode; absent from the JSON when it fits
    reason: Optional[str] = None
    reason_code: Optional[str] = None

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.reason is None:
            out.pop("reason", None)
            out.pop("reason_code", None)
        return out
