"""`k3plan roofline`: decode and prefill time bounds, the binding roof, the communication share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from k3plan.app.setup import fitting_setup, setup_from, spec_decode_from
from k3plan.cli.common import (
    DEFAULT_CONTEXT_TOKENS,
    AcceptanceOpt,
    AllowCpuProbesOpt,
    BatchOpt,
    ChunkOpt,
    ContextOpt,
    DraftBytesOpt,
    DraftKvOpt,
    JsonOpt,
    PrefixHitOpt,
    PrefixTierOpt,
    ProbesOpt,
    SpecTokensOpt,
    console,
    print_json,
    with_setup_options,
)


@with_setup_options
def command(
    setup_options: dict,
    batch: BatchOpt = 1,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    chunk: ChunkOpt = None,
    mfu: Annotated[float, typer.Option("--mfu", help="Fraction of peak FLOP/s achieved, 0.001 to 1.")] = 0.3,
    bw_efficiency: Annotated[
        float, typer.Option("--bw-efficiency", help="Fraction of HBM bandwidth achieved, 0.001 to 1.")
    ] = 1.0,
    dtype: Annotated[str, typer.Option("--dtype", help="Matmul dtype for the compute roof: bf16 or fp8.")] = "bf16",
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    ignore_fit: Annotated[
        bool,
        typer.Option(
            "--ignore-fit",
            help="Print the bounds even for a workload that does not fit (comparisons with studies that assume it does); the output says it does not fit.",
        ),
    ] = False,
    router_histogram: Annotated[
        Path | None,
        typer.Option("--router-histogram", help="JSON list of per-expert selection counts; default uniform routing."),
    ] = None,
    spec_tokens: SpecTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_bytes: DraftBytesOpt = None,
    draft_kv_bytes_per_token: DraftKvOpt = None,
    prefix_hit: PrefixHitOpt = None,
    prefix_tier: PrefixTierOpt = "hbm",
    json_out: JsonOpt = False,
) -> None:
    """Decode and prefill bounds: bytes, FLOPs and collectives per step, which roof binds. Only for
    a workload that fits (k3plan fit's verdict); otherwise it says why and exits 1.

    \b
    Examples:
      k3plan roofline -t 2x2x4 --tp 32                        batch 1 decode, 131,072-token context
      k3plan roofline -t 2x2x4 --tp 32 --batch 8 --context 32768
      k3plan roofline -t 2x4x4 --stack dp-attention --tp 8 --probes reports/probes   in the checkout (not in the wheel)
      k3plan roofline -t 2x2x4 --mfu 0.45 --dtype fp8 --json
      k3plan roofline -t 2x4x4 --tp 32 --batch 8 --spec-tokens 3 --acceptance 0.8 --draft-bytes 0
      k3plan roofline -t 2x4x4 --tp 32 --prefix-hit 0.9 --prefix-tier host
      k3plan roofline -t 2x2x2 --tp 16   does not fit: says why (exit 1)
    """
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
    eff = check_efficiency(mfu=mfu, bw_efficiency=bw_efficiency, compute_dtype=dtype)
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
    hw, probe_notes = measured_hardware(setup.hardware, probes=probes, allow_cpu=allow_cpu_probes)
    setup = dataclasses.replace(setup, hardware=hw)
    setup.hardware.flops_per_s_per_device(dtype)  # unknown dtype: one-line error now
    hist = None
    if router_histogram:
        moe = setup.model.spec.moe
        hist = load_histogram(router_histogram, num_experts=moe.num_experts, top_k=moe.top_k)
    from k3plan.step.verdict import fit_reason
    from k3plan.units import fmt_gib

    verdict, d = verdict_of(setup)  # on the probe-measured hardware, as the speed figures below
    why = ""
    code, text = fit_reason(fits=verdict.fits, code=verdict.reason)
    if not verdict.fits:
        why = text
    if not verdict.fits and not ignore_fit:  # a speed figure only for a workload that fits
        if json_out:
            from k3plan.app.roofline import RooflineRefusal

            print_json(
                RooflineRefusal(
                    model=setup.model.name,
                    hardware=setup.hardware.name,
                    topology=setup.topology.text,
                    parallel=setup.parallel,
                    stack=setup.stack.label,
                    reason=why,
                    reason_code=code.value,
                    free_bytes=verdict.per_device.free_bytes,
                )
            )
        else:
            console.print(
                f"[bold red]DOES NOT FIT[/]: {why} (free {fmt_gib(verdict.per_device.free_bytes)} a "
                f"device at batch {w.batch} x context {w.context_tokens:,}); no speed figure for a workload "
                "that does not fit — see k3plan fit"
            )
        raise typer.Exit(1)
    dec = decode_bound(
        setup,
        batch=w.batch,
        context_tokens=w.context_tokens,
        eff=eff,
        probes=probes,
        histogram=hist,
        allow_cpu_probes=allow_cpu_probes,
    )
    pre = prefill_bound(
        setup,
        prompt_tokens=w.context_tokens,
        chunk_tokens=w.prefill_chunk_tokens,
        eff=eff,
        probes=probes,
        allow_cpu_probes=allow_cpu_probes,
    )
    cross = crossover(setup, [32768, 262144, 1048576])
    from k3plan.speed.stage import expected_time_of

    expected = expected_time_of(setup, spec_hardware, w, probes=probes, histogram=hist)
    from k3plan.speed.serving import compare, stands_behind  # issue 38: the figures stood behind, labelled
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
        probes=probes,
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
        batch=w.batch,
        context=w.context_tokens,
        chunk=w.prefill_chunk_tokens,
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
            probes=probes,
            allow_cpu_probes=allow_cpu_probes,
        )
    # rules 3 and 4 on the roofline's own numbers: memory-bound -> speculative decoding's effect;
    # compute-bound -> which part of the step's FLOPs dominates
    from k3plan.advice.wiring import inputs_from_fit_result

    x: AdviceInputs = inputs_from_fit_result(
        verdict,
        binding=dec.binding,
        tpot_s=dec.tpot_s,
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
    from k3plan.app.roofline import RooflineResult

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
        + list(setup.notes),
        probes=probe_notes,
        fits=verdict.fits,
        fit_reason=why,
        spec_decode=sd,
        advice=advice,
        prefix_hit=ph,
        serving=serving,
    )
    if json_out:
        print_json(result)
        return
    from k3plan.report.roofline_table import render_roofline

    render_roofline(result, console)
    from k3plan.report.expected_table import render_expected

    render_expected(result.expected, console)
    from k3plan.report.serving_table import render_serving

    render_serving(result.serving, console)
    from rich.markup import escape

    from k3plan.advice.render import (
        bytes_share_line,
        render_advice_rules,
        spec_decode_lines,
    )

    for line in spec_decode_lines(sd) if sd else []:
        console.print(escape(line))
    render_advice_rules(advice, console)
    from k3plan.report.prefix_table import render_prefix_hit

    render_prefix_hit(result.prefix_hit, prefix_hit, console)
    if dec.binding == "memory":
        console.print(escape("  " + bytes_share_line(dec)))
    if not verdict.fits:
        console.print(
            f"[bold red]warning:[/] the workload DOES NOT FIT ({why}); bounds printed because of --ignore-fit"
        )
