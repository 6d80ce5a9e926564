"""`plan --json`: the typed plan, then the advice on its pick (or closest miss) and the prefix-cache
TTFT of the pick (k3plan.cli.plan dumps it)."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.advice.plan import PlanAdvice
from k3plan.plan.search import PlanResult
from k3plan.step.verdict import REASONS, ReasonCode
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


def plan_reason(result: PlanResult) -> tuple[ReasonCode, str]:
    """Why no configuration passes: the check that stopped the closest miss, else (no miss to show)
    SLA under --strict, every configuration falling back, or nothing enumerated."""
    if any(f.reasons.sla for f in result.families):  # these passed every memory check: the closest
        return ReasonCode.SLA, f"no configuration passes: those that fit memory {result.reasons.sla}"
    if any(f.reasons.unpriced for f in result.families):  # these passed memory and TPOT: closer than a miss
        return ReasonCode.UNPRICED, f"no configuration passes: those that fit have {REASONS[6][1]}"
    miss = result.closest_miss
    if miss is not None and result.closest_miss_code > 0:
        key, text = REASONS[result.closest_miss_code]
        text += f": {miss.launch_error}" if miss.launch_error else ""
        where = (
            f"{miss.hardware} {miss.topology} tp {miss.tp} ep {miss.ep} dp {miss.dp} pp {miss.pp}, stack {miss.stack}"
        )
        return ReasonCode(key), f"no configuration passes; the closest ({where}) {text}"
    if result.configurations and all(f.reasons.fallback == f.configurations for f in result.families):
        return ReasonCode.FALLBACK, f"no configuration passes: {REASONS[1][1]} in every one"
    return (
        ReasonCode.NO_CONFIGURATION,
        "no configuration to try: no topology of these hardware and stacks up to --max-chips",
    )
