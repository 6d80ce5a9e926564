"""The smallest viable topology and split of one platform, per context length: ``k3plan plan``
restricted to one (hardware, stack), under its ``--minimize chips`` objective, first row.

Viable at context C = plan's verdict (the one fit gives too, k3plan.step.verdict) for
``concurrency`` sequences of C tokens. The pick is plan's first row by construction: the fewest
chips, then the lowest TPOT, then the most free HBM; the report never runs a search of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from k3plan.budget.fit import FitResult, check_workload, fit
from k3plan.evidence.value import Evidence
from k3plan.hardware import load_hardware
from k3plan.roofline.latency import measured_hardware
from k3plan.setup import Setup, make_setup

OBJECTIVE = "chips"


@dataclass(frozen=True)
class Choice:
    context_tokens: int
    setup: Setup | None  # None: nothing fits
    result: FitResult | None  # the fit of plan's first row at this context
    reason: str = ""  # why nothing fits


def pick(
    *,
    model: str,
    hardware: str,
    stack: str,
    context: int,
    concurrency: int,
    max_chips: int,
    evidence: Evidence | None = None,
    allow_cpu_probes: bool = False,
    engram: str | None = None,
):
    """Plan's result for one (hardware, stack) at one context: its first row is the pick."""
    from k3plan.plan import plan

    return plan(
        model=model,
        hardware=[hardware],
        stacks=[stack],
        max_chips=max_chips,
        context=context,
        concurrency=concurrency,
        objective=OBJECTIVE,
        top=1,
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
        engram=engram,
    )


def smallest_viable(
    *,
    model: str,
    hardware: str,
    stack: str,
    contexts: Sequence[int],
    concurrency: int,
    max_chips: int,
    evidence: Evidence | None = None,
    allow_cpu_probes: bool = False,
    engram: str | None = None,
) -> tuple[dict[int, Choice], int]:
    """-> ({context: Choice}, configurations evaluated)."""
    hw = load_hardware(hardware)
    # the probed HBM bandwidth, as plan evaluated the picks with it and fit --probes applies it: the report's
    # speed figures for each pick are then fit's and plan's (memory does not depend on it); read once
    measured, _ = measured_hardware(hw, evidence=evidence, allow_cpu=allow_cpu_probes)
    chosen: dict[int, Choice] = {}
    tried = 0
    for c in contexts:
        w = check_workload(context_tokens=c, batch=concurrency, prefill_chunk_tokens=None)
        p = pick(
            model=model,
            hardware=hardware,
            stack=stack,
            context=c,
            concurrency=concurrency,
            max_chips=max_chips,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
            engram=engram,
        )
        tried = max(tried, p.configurations)
        top = p.recommended
        if top is None:
            limit = f"up to {max_chips:,} chips" if max_chips < hw.max_chips else "up to its largest standard size"
            detail = "; ".join(d for f in p.families for d in f.detail)
            chosen[c] = Choice(
                context_tokens=c,
                setup=None,
                result=None,
                reason=(
                    f"no standard {hw.name} topology {limit} holds {model} with {concurrency} sequence(s) of {c:,} tokens"
                    + (f": {detail}" if detail else "")
                ),
            )
            continue
        setup = make_setup(
            model=model,
            hardware=hardware,
            topology=top.topology,
            tp=top.tp,
            ep=top.ep,
            dp=top.dp,
            pp=top.pp,
            stack=stack,
            engram=top.engram,
        )
        setup = dataclasses.replace(setup, hardware=measured)
        chosen[c] = Choice(context_tokens=c, setup=setup, result=fit(setup, w))
    return chosen, tried
