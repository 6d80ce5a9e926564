"""Advice for ``plan``: the rules of k3plan.advice.rules applied to the plan's pick or, when nothing
passes, to its closest miss (PlanResult.closest_miss), with the alternatives k3plan.advice.wiring
computes for ``fit`` (next standard topology up, fp8_ds_mla KV, larger batches).

The numbers the rules read are the fit of the row's configuration, which is the row at one point
(tests/step/test_plan_row_is_fit.py holds that they agree term by term), and the row's TPOT and binding
roof; the fit also supplies what a plan row does not carry (cache layout, the alternatives' fits).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal, Optional

from k3plan.advice.inputs import PartTime
from k3plan.advice.wiring import FitAdvice
from k3plan.evidence.value import Evidence
from k3plan.structs import Frozen

if TYPE_CHECKING:
    from k3plan.plan.rows import PlanRow


class PlanAdvice(Frozen):
    subject: Literal["pick", "closest_miss"]
    configuration: str
    fit_command: str  # the same configuration in `k3plan fit`
    advice: FitAdvice
    notes: tuple[str, ...] = ()


def _describe(row: PlanRow) -> str:
    return (
        f"{row.hardware} {row.topology} {row.split_words}, {row.stack}, KV {row.kv_dtype}, chunk {row.chunk_tokens:,}"
    )


def plan_advice(
    result,
    *,
    eff=None,
    evidence: Optional[Evidence] = None,
    allow_cpu_probes: bool = False,
) -> Optional[PlanAdvice]:
    """The rules on ``result.recommended``, else on ``result.closest_miss``; None when neither exists."""
    from k3plan.advice.wiring import decode_time_by_part, fit_advice
    from k3plan.budget.fit import check_workload, fit
    from k3plan.plan.defaults import make_default_setup as make_setup
    from k3plan.roofline.bounds import Efficiency, decode_bound
    from k3plan.roofline.latency import measured_hardware

    row = result.recommended or result.closest_miss
    if row is None:
        return None
    eff = eff or Efficiency()
    context, batch = int(result.workload.context_tokens), int(result.workload.concurrency)
    options = row.setup_options(result.model)
    setup = make_setup(**options)
    workload = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=row.chunk_tokens)
    fitted = fit(setup, workload)  # the row's configuration at one point: plan's numbers (a test holds it)
    notes: tuple[str, ...] = ()
    target = result.workload.target_tpot_ms
    if result.recommended is None and target is not None and row.tpot_ms is not None and row.tpot_ms > target:
        notes += (
            f"misses --target-tpot-ms {target:g} at TPOT {row.tpot_ms:.2f} ms with every memory check passed; "
            "the rules below cover memory and throughput, not this target",
        )
    hw, _ = measured_hardware(setup.hardware, evidence=evidence, allow_cpu=allow_cpu_probes)
    speed_setup = dataclasses.replace(setup, hardware=hw)
    binding = row.binding  # None with tpot_ms on a closest miss that does not fit: no speed, as fit
    tpot_s = None
    parts: tuple[PartTime, ...] = ()
    if row.tpot_ms is not None:
        # the options are priced on the decode bound (advice.wiring._bound_tpot): now is the bound too, whatever the
        # row's column stands behind (a benchmark's figure replaces it where one speaks)
        dec = decode_bound(
            speed_setup,
            batch=batch,
            context_tokens=context,
            eff=eff,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
        )
        tpot_s = dec.tpot_s
        if binding == "compute":
            parts = decode_time_by_part(dec, speed_setup, eff)
    advice = fit_advice(
        options,
        setup,
        workload,
        fitted,
        speed_setup=speed_setup,
        eff=eff,
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
        binding=binding,
        tpot_s=tpot_s,
        time_by_part_s=parts,
    )
    return PlanAdvice(
        subject="pick" if result.recommended else "closest_miss",
        configuration=_describe(row),
        fit_command=row.fit_command(context=context, batch=batch),
        advice=advice,
        notes=notes,
    )


def render_plan_advice(pa: PlanAdvice, console) -> None:
    from rich.markup import escape

    from k3plan.advice.render import render_fit_advice

    what = "the pick" if pa.subject == "pick" else "the closest miss (nothing passes)"
    console.print(f"[bold]advice for {what}[/]: {escape(pa.configuration)}")
    for n in pa.notes:
        console.print(f"  [yellow]note:[/] {escape(n)}")
    render_fit_advice(pa.advice, console)


def pick_prefix_hit(result, *, hit_rate: float, tier: str, prompt_tokens: int, eff=None, evidence=None):
    """--prefix-hit on plan: the pick's TTFT for a ``prompt_tokens`` prompt (--isl, else --context)
    with and without the hit (k3plan.tiers.prefix), from the pick's prefill roofline; None without a pick."""
    from k3plan.roofline.bounds import Efficiency, prefill_bound
    from k3plan.roofline.latency import measured_hardware
    from k3plan.setup import make_setup
    from k3plan.tiers.prefix import prefix_hit

    row = result.recommended
    if row is None:
        return None
    setup = make_setup(**row.setup_options(result.model))
    hw, _ = measured_hardware(setup.hardware, evidence=evidence, allow_cpu=False)
    setup = dataclasses.replace(setup, hardware=hw)
    pre = prefill_bound(
        setup,
        prompt_tokens=prompt_tokens,
        chunk_tokens=min(row.chunk_tokens, prompt_tokens),
        eff=eff or Efficiency(),
        evidence=evidence,
    )
    return prefix_hit(setup, prompt_tokens=prompt_tokens, hit_rate=hit_rate, tier=tier, prefill_ttft_s=pre.ttft_s)
