"""`plan --json`: the typed plan, then the advice on its pick (or closest miss) and the prefix-cache
TTFT of the pick (k3plan.cli.plan dumps it)."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.advice.plan import PlanAdvice
from k3plan.plan.output import plan_reason
from k3plan.plan.search import PlanResult
from k3plan.structs import fields
from k3plan.tiers.prefix import PrefixHit


class PlanOutput(PlanResult):
    """PlanResult's fields (same order, same JSON), then ``advice`` (None: no pick and no closest
    miss) and ``prefix_hit`` (None without --prefix-hit or without a pick); with no pick, ``reason``
    and ``reason_code`` last (issue 36: why nothing passes, as fit --json says why it does not fit)."""

    advice: Optional[PlanAdvice]
    prefix_hit: Optional[PrefixHit] = None

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.recommended is None:
            code, text = plan_reason(self)
            out["reason"] = text
            out["reason_code"] = code.value
        return out

    @classmethod
    def of(cls, result: PlanResult, *, advice: Optional[PlanAdvice], prefix_hit: Optional[PrefixHit]) -> PlanOutput:
        return cls(**{k: getattr(result, k) for k in fields(PlanResult)}, advice=advice, prefix_hit=prefix_hit)
