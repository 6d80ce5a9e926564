"""What `k3plan roofline` answers, typed: a RooflineQuestion (the options cli/roofline.py parsed) to a
RooflineAnswer: the decode and prefill bounds of one setup, the expected time beside them, the long-context
crossover, advice and the prefix-cache TTFT (RooflineResult, in k3plan.advice.roofline_output beside fit's and
plan's outputs, so report/ renders it without importing app/), or why it gives no speed figure (RooflineRefusal).
cli/roofline.py only parses, asks and renders (issue 33: one typed question and one typed answer a command).
Field order is the `roofline --json` key order."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from k3plan.advice.roofline_output import RooflineResult
from k3plan.app.setup import PointQuestion
from k3plan.sharding.mesh import Parallel
from k3plan.structs import Frozen


class RooflineRefusal(Frozen):
    """A workload that does not fit gets no speed figure: what was asked and why it does not fit."""

    model: str
    hardware: str
    topology: str
    parallel: Parallel
    stack: str
    fits: bool = False
    reason: str
    reason_code: str  # k3plan.step.verdict.ReasonCode (issue 36)
    free_bytes: int


class RooflineQuestion(PointQuestion):
    """roofline's options as parsed: PointQuestion's (setup options, workload, probes, speculative decoding,
    prefix cache) and roofline's own: the ceiling's efficiencies and dtype, --ignore-fit, a router histogram."""

    mfu: float = 0.3
    bw_efficiency: float = 1.0
    dtype: str = "bf16"
    ignore_fit: bool = False
    router_histogram: Optional[Path] = None


class RooflineAnswer(Frozen):
    """The bounds (``result``), or, for a workload that does not fit and no --ignore-fit, why not
    (``refusal``); with the workload asked."""

    __coerce__ = False

    workload: Any  # k3plan.budget.fit.Workload
    result: Optional[RooflineResult] = None
    refusal: Optional[RooflineRefusal] = None

    @property
    def exit_code(self) -> int:
        """1 for a refusal (no speed figure for a workload that does not fit), else 0."""
        return 1 if self.refusal is not None else 0


def answer(q: RooflineQuestion) -> RooflineAnswer:
    """The decode and prefill bounds of the question's configuration, at the topology fit would choose where
    none is given (k3plan.app.setup.fitting_setup), with the expected and measured figures it stands behind."""
    from k3plan.app.setup import fitting_setup, setup_from, spec_decode_from

    setup_options = q.setup_options
    context, batch, chunk, allow_cpu_probes = q.context, q.batch, q.chunk, q.allow_cpu_probes
    from k3plan.evidence.value import Evidence

    evidence = Evidence.build(q.probes)  # the shipped records plus --probes, read once (issue 46)
    spec_tokens, acceptance, draft_bytes, draft_kv_bytes_per_token = (
        q.spec_tokens,
        q.acceptance,
        q.draft_bytes,
        q.draft_kv_bytes_per_token,
    )
    prefix_hit, prefix_tier = q.prefix_hit, q.prefix_tier
    from k3plan.budget.fit import check_workload
    from k3plan.roofline.bounds import (
        check_efficiency,
        crossover,
        decode_bound,
        prefill_bound,
    )
    from k3plan.step.work import load_histogram

    w = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk)
    spec = spec_decode_from(spec_tokens, acceptance, draft_bytes, draft_kv_bytes_per_token)
    if spec is not None:  # the engine's state pool with speculative decoding (Stack.for_spec_decode)
        setup_options = {**setup_options, "spec_verify_tokens": spec.forward_tokens_per_step}
    eff = check_efficiency(mfu=q.mfu, bw_efficiency=q.bw_efficiency, compute_dtype=q.dtype)
    from k3plan.tiers.prefix import check_prefix_options

    check_prefix_options(prefix_hit, prefix_tier)
    import dataclasses
    import functools

    from k3plan.advice.wiring import fit_with_draft
    from k3plan.roofline.latency import measured_hardware

    verdict_of = functools.partial(
        fit_with_draft,
        workload=w,
        spec_decoding=spec is not None,
        draft_bytes=draft_bytes,
        draft_kv_bytes_per_token=draft_kv_bytes_per_token,
    )
    if setup_options["topology"] is None:  # the topology fit would choose (app.setup.fitting_setup)
        setup_options, setup, _ = fitting_setup(setup_options, verdict_of, lambda r: r[0].fits)
    else:
        setup = setup_from(**setup_options)
    spec_hardware = setup.hardware  # the expected time's peaks: the spec's, never a probe-substituted one
    hw, probe_notes = measured_hardware(setup.hardware, evidence=evidence, allow_cpu=allow_cpu_probes)
    setup = dataclasses.replace(setup, hardware=hw)
    setup.hardware.flops_per_s_per_device(q.dtype)  # unknown dtype: one-line error now
    hist = None
    if q.router_histogram:
        moe = setup.model.spec.moe
        hist = load_histogram(q.router_histogram, num_experts=moe.num_experts, top_k=moe.top_k)
    from k3plan.step.verdict import fit_reason

    verdict, d = verdict_of(setup)  # on the probe-measured hardware, as the speed figures below
    why = ""
    code, text = fit_reason(
        fits=verdict.fits, code=verdict.reason, unverified_max_temp_bytes=verdict.unverified_max_temp_bytes
    )
    if not verdict.fits:
        why = text
    if not verdict.fits and not q.ignore_fit:  # a speed figure only for a workload that fits
        refusal = RooflineRefusal(
            model=setup.model.name,
            hardware=setup.hardware.name,
            topology=setup.topology.text,
            parallel=setup.parallel,
            stack=setup.stack.label,
            reason=why,
            reason_code=code.value,
            free_bytes=verdict.per_device.free_bytes,
        )
        return RooflineAnswer(refusal=refusal, workload=w)
    dec = decode_bound(
        setup,
        batch=w.batch,
        context_tokens=w.context_tokens,
        eff=eff,
        evidence=evidence,
        histogram=hist,
        allow_cpu_probes=allow_cpu_probes,
    )
    pre = prefill_bound(
        setup,
        prompt_tokens=w.context_tokens,
        chunk_tokens=w.prefill_chunk_tokens,
        eff=eff,
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
    )
    cross = crossover(setup, [32768, 262144, 1048576])
    from k3plan.speed.stage import expected_time_of

    expected = expected_time_of(setup, spec_hardware, w, evidence=evidence, histogram=hist)
    from k3plan.speed.serving import (  # issue 38: the figures stood behind, labelled
        asked_of,
        compare,
        engine_floor_s,
        stack_floor_s,
        stands_behind,
    )
    from k3plan.structs import replace

    tpot_fig, ttft_fig, cands, model_at = stands_behind(
        setup,
        spec_hardware,
        batch=w.batch,
        context=w.context_tokens,
        chunk=w.prefill_chunk_tokens,
        expected=expected,
        ceiling_tpot_s=dec.tpot_s,
        ceiling_ttft_s=pre.ttft_s,
        evidence=evidence,
    )
    assert ttft_fig is not None
    dec = replace(
        dec,
        tpot_s=tpot_fig.value_s,
        tpot_source=tpot_fig.source,
        tpot_label=tpot_fig.label,
        tokens_per_s=dec.batch / tpot_fig.value_s,
        tokens_per_s_per_chip=dec.batch / tpot_fig.value_s / setup.topology.chips,
    )
    pre = replace(
        pre,
        ceiling_ttft_s=pre.ttft_s,
        ttft_s=ttft_fig.value_s,
        ttft_source=ttft_fig.source,
        ttft_label=ttft_fig.label,
    )
    serving = compare(
        tpot=tpot_fig,
        ttft=ttft_fig,
        expected=expected,
        cands=cands,
        model=model_at,
        asked=asked_of(setup, batch=w.batch, context=w.context_tokens, chunk=w.prefill_chunk_tokens),
        floor=engine_floor_s(model_at) if model_at is not None else stack_floor_s(setup),
    )
    from k3plan.advice.inputs import AdviceInputs
    from k3plan.advice.rules import COMPUTE_BOUND, advise
    from k3plan.advice.wiring import decode_time_by_part, spec_decode_report

    sd = None
    if spec is not None and d is not None:
        sd = spec_decode_report(
            setup,
            spec=spec,
            batch=w.batch,
            context_tokens=w.context_tokens,
            draft_bytes=d.bytes,
            draft_what=d.what,
            draft_kv=d.kv,
            eff=eff,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
        )
    # rules 3 and 4 on the roofline's own numbers: memory-bound -> speculative decoding's effect;
    # compute-bound -> which part of the step's FLOPs dominates
    from k3plan.advice.wiring import inputs_from_fit_result

    x: AdviceInputs = inputs_from_fit_result(
        verdict,
        binding=dec.binding,
        tpot_s=dec.step_s,  # the bound's: the advice's alternatives are priced on it (like for like)
        time_by_part_s=decode_time_by_part(dec, setup, eff) if dec.binding in COMPUTE_BOUND else (),
        spec_decode=sd,
    )
    advice = advise(x)
    ph = None
    if prefix_hit is not None:
        from k3plan.tiers.prefix import prefix_hit as prefix_hit_ttft

        ph = prefix_hit_ttft(
            setup,
            prompt_tokens=w.context_tokens,
            hit_rate=prefix_hit,
            tier=prefix_tier,
            # the prefill bound, as plan prices it (issue 38 left the prefix-hit on the bound)
            prefill_ttft_s=pre.ttft_s if pre.ceiling_ttft_s is None else pre.ceiling_ttft_s,
        )
    from k3plan.budget.engram import link_note, tier_for
    from k3plan.evidence.probe_records import records_named

    engram = tier_for(setup)
    engram_note = (
        None
        if engram is None
        else link_note(
            setup,
            engram,
            decode_tokens_per_s=dec.tokens_per_s,
            prefill_tokens_per_s=w.context_tokens / pre.ttft_s if pre.ttft_s else 0.0,
        )
    )

    result = RooflineResult(
        model=setup.model.name,
        hardware=setup.hardware.name,
        topology=setup.topology.text,
        chips=setup.topology.chips,
        parallel=setup.parallel,
        stack=setup.stack.label,
        efficiency=eff,
        decode=dec,
        prefill=pre,
        expected=expected,
        long_context=cross,
        notes=[f"warning: {beyond}" for beyond in [setup.model.spec.context_warning(w.context_tokens)] if beyond]
        + list(setup.notes)
        + ([engram_note] if engram_note else []),
        probes=probe_notes,
        records_used=list(
            dict.fromkeys(
                [
                    *expected.records_used,
                    *(model_at.used if model_at is not None else ()),
                    *records_named(
                        *(text for _, text in setup.hardware.measured_sources),
                        dec.comm.latency_source,
                        pre.comm.latency_source,
                    ),
                ]
            )
        ),
        fits=verdict.fits,
        fit_reason=why,
        spec_decode=sd,
        advice=advice,
        prefix_hit=ph,
        serving=serving,
    )
    return RooflineAnswer(result=result, workload=w)
