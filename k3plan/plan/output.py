"""`plan --json`: the typed plan, then the advice on its pick (or closest miss) and the prefix-cache
TTFT of the pick (k3plan.cli.plan dumps it)."""

from __future__ import annotations

from typing import Optional

from k3plan.advice.plan import PlanAdvice
from k3plan.plan.search import PlanResult
from k3plan.tiers.prefix import PrefixHit


class PlanOutput(PlanResult):
    """PlanResult's fields (same order, same JSON), then ``advice`` (None: no pick and no closest
    miss) and ``prefix_hit`` (None without --prefix-hit or without a pick)."""

    advice: Optional[PlanAdvice]
    prefix_hit: Optional[PrefixHit] = None

    @classmethod
    def of(cls, result: PlanResult, *, advice: Optional[PlanAdvice], prefix_hit: Optional[PrefixHit]) -> PlanOutput:
        return cls(**{k: getattr(result, k) for k in PlanResult.model_fields}, advice=advice, prefix_hit=prefix_hit)
