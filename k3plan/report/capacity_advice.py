"""A capacity report's advice section (issue 14): per platform and context, the rules of
k3plan.advice applied to the smallest viable setup's fit (k3plan.advice.wiring, as `fit` does),
and a memory-tier table (k3plan.tiers) for platforms whose hardware spec has ``memory_tiers``.
Numbers here; ``advice_blocks`` renders them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from k3plan.evidence.value import Evidence
from k3plan.report.capacity_model import ContextAdvice, DecodeAt, PlatformReport
from k3plan.report.doc import Block
from k3plan.units import GiB

if TYPE_CHECKING:
    from k3plan.report.viable import Choice
    from k3plan.roofline.bounds import Efficiency
    from k3plan.setup import Setup
    from k3plan.tiers.sessions import TierSessions


def platform_advice(
    ch: Choice,
    *,
    model: str,
    hardware: str,
    stack: str,
    decode: DecodeAt,
    eff: Efficiency,
    evidence: Optional[Evidence] = None,
    allow_cpu_probes: bool = False,
) -> ContextAdvice:
    """One viable context: the rules' verdict, warnings and suggestions (texts carry the effects)."""
    from k3plan.advice.wiring import fit_advice

    s, r = ch.setup, ch.result
    assert s is not None and r is not None  # called for viable contexts only
    options: dict[str, Any] = {
        "model": model,
        "hardware": hardware,
        "topology": s.topology.text,
        "tp": s.parallel.tp,
        "ep": None,
        "dp": s.parallel.dp,
        "stack": stack,
        "kv_dtype": None,
        "shardspecs": None,
    }
    fa = fit_advice(
        options,
        s,
        r.workload,
        r,
        speed_setup=s,
        eff=eff,
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
        binding=decode.binding,
        # the options are priced on the decode bound (advice.wiring._bound_tpot): now is the bound too, not the
        # figure the row stands behind (the model's 26.08 ms against bound options read as a x28 gain)
        tpot_s=decode.ceiling_tpot_s if decode.ceiling_tpot_s is not None else decode.tpot_s,
    )
    a = fa.rules
    return ContextAdvice(
        context_tokens=ch.context_tokens,
        verdict=a.verdict,
        headroom_fraction=a.headroom_fraction,
        warnings=list(a.warnings),
        suggestions=[f"[{x.rule}] {x.text}" for x in a.suggestions],
        alternatives=list(fa.alternatives),
    )


def tier_rows(setup: Setup, *, context_tokens: int, prefill_ttft_s: float) -> list[TierSessions]:
    """Per tier of the spec: suspended sessions at this context, the time to bring one back, and
    the prefill it saves (the roofline's TTFT for the whole context)."""
    from k3plan.tiers.sessions import session_tiers

    return list(
        session_tiers(setup, context_tokens=context_tokens, prefill_s_per_token=prefill_ttft_s / context_tokens)
    )


def advice_blocks(r: PlatformReport) -> list[Block]:
    out: list[Block] = []
    if r.advice:
        out.append(("h3", "Advice"))
        for a in r.advice:
            items = [f"warning: {w}" for w in a.warnings] + a.suggestions
            head = f"{a.context_tokens:,} context: {a.verdict}, headroom {a.headroom_fraction:.1%} of usable HBM" + (
                f" (computed from: {'; '.join(a.alternatives)})" if a.alternatives else ""
            )
            out.append(("p", head + ("" if items else "; nothing to suggest (at least 10% headroom, no rule applies)")))
            if items:
                out.append(("ul", items))
    if r.tiers:
        out.append(("h3", f"Memory tiers: suspended sessions ({r.tiers_setup})"))
        rows = [
            [
                t.tier,
                "—" if t.capacity_bytes is None else f"{t.capacity_bytes / GiB:,.0f} GiB",
                "no limit known" if t.sessions_held is None else f"{t.sessions_held:,}",
                f"{t.restore_s * 1e3:,.1f} ms",
                "—" if t.recompute_s is None else f"{t.recompute_s:,.2f} s",
                t.source,
            ]
            for t in r.tiers
        ]
        out.append(("table", ["tier", "capacity", "sessions held", "restore one", "prefill it again", "source"], rows))
    return out
