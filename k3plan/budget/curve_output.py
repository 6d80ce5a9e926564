"""`curve --json`: the chunk-vs-context points of one setup, with what they were computed from and
(given --turns) the session's context growth (k3plan.cli.curve dumps it)."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict

from k3plan.budget.curve import CurvePoint
from k3plan.workload.sessions import SessionGrowth


class CurveOutput(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str  # model, hardware, topology, split, stack, batch and the temp evidence
    context_tokens: int
    batch: int
    calibration: Optional[str]  # the --calibration file, None: fit's default evidence
    warnings: list[str]
    notes: list[str]  # what every point shares that a reader must know (an uneven expert placement: fit's note)
    points: list[CurvePoint]
    sessions: Optional[SessionGrowth]
