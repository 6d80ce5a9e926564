"""What `k3plan plan` answers, typed: a PlanQuestion (the options cli/plan.py parsed) to a PlanAnswer: the
ranked search over hardware x topologies x (tp, ep, dp) x stacks (plan's PlanResult, with the assumptions a
session or a context past the model's maximum adds), its advice and the pick's prefix-cache TTFT.
cli/plan.py only parses, asks, renders and writes the files asked for (issue 33: one typed question and one
typed answer a command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from k3plan.app.sessions import SessionOptions
from k3plan.structs import Frozen


class PlanQuestion(SessionOptions):
    """plan's options as parsed (lists split, the objective resolved); ``context_given``: whether --context was
    given (a session or --isl/--osl sets the context only where it was not)."""

    __coerce__ = False  # the options as given

    model: str
    hardware: Optional[list[str]]
    stacks: Optional[list[str]]
    max_chips: int
    max_pp: int
    context: int
    context_given: bool
    concurrency: int
    target_tpot_ms: Optional[float]
    objective: str
    kv_dtypes: Optional[list[str]]
    chunks: Optional[list[int]]
    top: int
    ttft_ms: Optional[float]
    request_latency_ms: Optional[float]
    isl: Optional[int]
    osl: Optional[int]
    request_rate: Optional[float]
    strict: bool
    price: list[str]
    load_gbps: Optional[float]
    probes: Optional[Path]
    allow_cpu_probes: bool
    prefix_hit: Optional[float]
    prefix_tier: str
    rank_by: str
    include_unlaunchable: bool = False  # rank what its stack cannot launch too, after the rest (plan/launchable.py)
    engram: Optional[str] = None  # where DeepSeek-V4.1's Engram tables live (hbm / host); None: each engine's default


class PlanAnswer(Frozen):
    """The search's result (k3plan.plan.PlanResult), its advice and the pick's prefix-cache TTFT."""

    __coerce__ = False

    result: Any  # k3plan.plan.PlanResult
    advice: Any = None  # k3plan.advice.plan's PlanAdvice
    prefix_hit: Any = None  # k3plan.tiers.prefix.PrefixHit

    @property
    def exit_code(self) -> int:
        """0 with a recommendation, 1 when nothing passes."""
        return 0 if self.result.recommended is not None else 1


def answer(q: PlanQuestion) -> PlanAnswer:
    """plan's search for the question's workload: the context a session peaks at (--turns) or a request's whole
    length (--isl + --osl) where --context was not given; the ranking, its advice and the pick's prefix hit."""
    from k3plan.deploy.prices import parse_price_overrides
    from k3plan.errors import K3PlanError
    from k3plan.hardware import list_hardware
    from k3plan.plan import plan
    from k3plan.structs import replace
    from k3plan.tiers.prefix import check_prefix_options

    check_prefix_options(q.prefix_hit, q.prefix_tier)
    context = q.context
    session_note = None
    session = q.session()
    if session is not None:
        from k3plan.workload.sessions import session_growth

        if q.context_given or q.isl is not None:
            raise K3PlanError(
                "--turns sets the context (the session's peak at its last turn): give it or --context / --isl, not both"
            )
        g = session_growth(session)
        context = g.peak_context_tokens[-1]
        session_note = (
            f"context {context:,} tokens = a session's peak at turn {q.turns} ({g.session.carried_tokens_per_turn:,} "
            f"tokens carried a turn, reasoning {'carried back' if not q.drop_reasoning else 'dropped'}; "
            f"{g.growth_over_visible:.2f}x the visible conversation)"
        )
    if q.isl is not None and q.osl is not None and not q.context_given:
        context = q.isl + q.osl  # a request's whole length; --context given explicitly wins
    overrides = parse_price_overrides(q.price, known=list(list_hardware()) + list(q.hardware or []))
    from k3plan.evidence.value import Evidence

    evidence = Evidence.build(q.probes)  # the shipped records plus --probes, read once (issue 46)
    result = plan(
        model=q.model,
        hardware=q.hardware,
        stacks=q.stacks,
        max_chips=q.max_chips,
        max_pp=q.max_pp,
        context=context,
        concurrency=q.concurrency,
        target_tpot_ms=q.target_tpot_ms,
        objective=q.objective,
        kv_dtypes=q.kv_dtypes,
        chunks=q.chunks,
        top=q.top,
        evidence=evidence,
        allow_cpu_probes=q.allow_cpu_probes,
        ttft_ms=q.ttft_ms,
        request_latency_ms=q.request_latency_ms,
        isl=q.isl,
        osl=q.osl,
        request_rate=q.request_rate,
        strict=q.strict,
        prices=overrides,
        load_gbps=q.load_gbps,
        rank_by=q.rank_by,
        include_unlaunchable=q.include_unlaunchable,
        engram=q.engram,
    )
    if session_note is not None:
        result = replace(result, assumptions=[session_note] + result.assumptions)
    from k3plan.models import load_model

    beyond = load_model(q.model).spec.context_warning(context)
    if beyond:  # plan ranks the memory and speed at that context; the model serves no position past its max
        result = replace(result, assumptions=[f"warning: {beyond}"] + result.assumptions)
    gap = _pick_engine_gap(result, model=q.model, context=context, probes=q.probes)
    if gap:  # the pick's sequences are the budget's; where its engine's own accounting holds far fewer, say so
        result = replace(result, assumptions=[f"warning: the recommended row's {gap}"] + result.assumptions)
    from k3plan.advice.plan import plan_advice

    advice = plan_advice(result, evidence=evidence, allow_cpu_probes=q.allow_cpu_probes)
    ph = None
    if q.prefix_hit is not None:
        from k3plan.advice.plan import pick_prefix_hit

        ph = pick_prefix_hit(
            result, hit_rate=q.prefix_hit, tier=q.prefix_tier, prompt_tokens=q.isl or context, evidence=evidence
        )
    return PlanAnswer(result=result, advice=advice, prefix_hit=ph)


def _pick_engine_gap(result, *, model: str, context: int, probes) -> str | None:
    """The recommended row priced by fit (plan's row 0 is fit's configuration) with its engine's own sizing: the
    engine's sequence count and why it differs where it holds well under the budget's (app.fit.engine_gap_warning);
    None where the engine agrees, or plan has no pick."""
    pick = result.recommended
    if pick is None:
        return None
    from k3plan.app.fit import FitQuestion, answer, engine_gap_warning

    a = answer(
        FitQuestion(
            setup_options=pick.setup_options(model),
            context=context,
            batch=max(1, min(pick.max_sequences, result.workload.concurrency)),
            chunk=pick.chunk_tokens,
            probes=probes,
        )
    )
    return engine_gap_warning(a.result, a.engine)
