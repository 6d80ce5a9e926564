"""Why no configuration of a plan passes: the reason `plan --json` gives (k3plan.advice.plan_output.PlanOutput,
the typed plan with the advice on its pick) and the table prints first."""

from __future__ import annotations

from k3plan.plan.search import PlanResult
from k3plan.step.verdict import REASONS, ReasonCode


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
