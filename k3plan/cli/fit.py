"""`k3plan fit`: per-device memory, term by term, and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from k3plan.cli.common import (
    DEFAULT_CONTEXT_TOKENS,
    AcceptanceOpt,
    AllowCpuProbesOpt,
    BatchOpt,
    CalibrationOpt,
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
    fitting_setup,
    print_json,
    spec_decode_from,
    with_setup_options,
)

if TYPE_CHECKING:
    from k3plan.advice.wiring import Draft
    from k3plan.budget.fit import FitResult
    from k3plan.setup import Setup


@with_setup_options
def command(
    setup_options: dict,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    batch: BatchOpt = 1,
    chunk: ChunkOpt = None,
    calibration: CalibrationOpt = None,
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    offload: Annotated[
        str | None,
        typer.Option(
            "--offload",
            help="Park suspended sessions in a memory tier: host, ssd or remote (the hardware spec's memory_tiers); prints sessions held and the TTFT to bring one back.",
        ),
    ] = None,
    spec_tokens: SpecTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_bytes: DraftBytesOpt = None,
    draft_kv_bytes_per_token: DraftKvOpt = None,
    prefix_hit: PrefixHitOpt = None,
    prefix_tier: PrefixTierOpt = "hbm",
    json_out: JsonOpt = False,
) -> None:
    """Does the model fit, per device, with what headroom, for how long a context and how many
    sequences? Exit 0 if it fits, 1 if not, 2 on bad input.

    \b
    Examples:
      k3plan fit --topology 2x2x4 --tp 32
      k3plan fit -t 2x2x2 --tp 16 --context 1048576   the weights alone exceed a device (exit 1)
      k3plan fit -H nvidia-b200 -t 2x8 --stack sglang --kv-dtype fp8
      k3plan fit -t 2x2x4 --stack jax-native --chunk 32768 --calibration CAL.yaml
      k3plan fit -t 2x4x4 --tp 32 --offload host              sessions parked in host DRAM
      k3plan fit -t 2x4x4 --tp 32 --batch 8 --spec-tokens 3 --acceptance 0.8,0.6,0.4 --draft-bytes 30GB
      k3plan fit -t 2x4x4 --tp 32 --prefix-hit 0.6 --prefix-tier host   TTFT with 60% of the prompt cached

    After the verdict, advice: the rules of docs/beyond-fit.md applied to these numbers (the next
    standard topology up, fp8_ds_mla KV, larger batches), each with its computed effect.

    """
    import dataclasses

    from k3plan.advice.wiring import (
        draft_kv_of,
        fit_advice,
        fit_with_draft,
        offload_report,
        spec_decode_report,
    )
    from k3plan.budget.fit import check_workload
    from k3plan.evidence.calibration import load_calibration
    from k3plan.roofline.bounds import Efficiency
    from k3plan.roofline.latency import measured_hardware

    workload = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk)
    spec = spec_decode_from(spec_tokens, acceptance, draft_bytes, draft_kv_bytes_per_token)
    if spec is not None:  # the engine's state pool with speculative decoding (Stack.for_spec_decode)
        setup_options = {**setup_options, "spec_verify_tokens": spec.forward_tokens_per_step}
    from k3plan.tiers.prefix import check_prefix_options

    check_prefix_options(prefix_hit, prefix_tier)
    cal = load_calibration(str(calibration)) if calibration else None  # a bad file fails before the setup
    eff = Efficiency()

    def run_fit(setup: Setup) -> tuple[FitResult, Draft | None]:
        return fit_with_draft(
            setup,
            workload,
            spec_decoding=spec is not None,
            draft_bytes=draft_bytes,
            draft_kv_bytes_per_token=draft_kv_bytes_per_token,
            calibration=cal,
        )

    setup_options, setup, (result, d) = fitting_setup(setup_options, run_fit, lambda x: x[0].fits)
    hw, notes = measured_hardware(setup.hardware, probes=probes, allow_cpu=allow_cpu_probes)
    speed_setup = dataclasses.replace(setup, hardware=hw)
    if result.fits:  # a speed figure only for a workload that fits
        result = result.model_copy(update={"speed": _speed(speed_setup, workload, notes, probes, allow_cpu_probes)})
    sd = off = None
    if spec is not None and d is not None and result.fits:  # d is set only with a spec
        sd = spec_decode_report(
            speed_setup,
            spec=spec,
            batch=batch,
            context_tokens=context,
            draft_bytes=d.bytes,
            draft_what=d.what,
            draft_kv=d.kv,
            eff=eff,
            probes=probes,
            allow_cpu_probes=allow_cpu_probes,
        )
    if offload is not None:
        from k3plan.tiers.model import offload_tier

        offload_tier(setup.hardware, offload)  # a bad tier is bad input whether or not the workload fits
    if offload is not None and result.fits:  # an offload cost (TTFT, prefill time) only for a workload that fits
        off = offload_report(speed_setup, workload, offload, eff=eff, probes=probes)
    advice = fit_advice(
        setup_options,
        setup,
        workload,
        result,
        calibration=cal,
        speed_setup=speed_setup,
        eff=eff,
        probes=probes,
        allow_cpu_probes=allow_cpu_probes,
        spec_decode=sd,
        offload=off,
        draft_bytes=d.bytes if d else 0,
        draft_kv_of=draft_kv_of(d) if d else None,
        splits=True,  # issue 36: other splits of the same chips first (k3plan.advice.splits)
    )
    ph = None
    if prefix_hit is not None and result.fits:  # a TTFT only for a workload that fits
        from k3plan.roofline.bounds import prefill_bound
        from k3plan.tiers.prefix import prefix_hit as prefix_hit_ttft

        pre = prefill_bound(
            speed_setup, prompt_tokens=context, chunk_tokens=workload.prefill_chunk_tokens, eff=eff, probes=probes
        )
        ph = prefix_hit_ttft(
            speed_setup, prompt_tokens=context, hit_rate=prefix_hit, tier=prefix_tier, prefill_ttft_s=pre.ttft_s
        )
    if json_out:
        from k3plan.advice.fit_output import FitOutput

        print_json(FitOutput.of(result, advice=advice, prefix_hit=ph))
    else:
        from k3plan.advice.render import render_fit_advice
        from k3plan.report.fit_table import render_fit

        render_fit(result, console)
        if spec is not None and not result.fits:
            console.print("no speculative-decoding speed for a workload that does not fit")
        render_fit_advice(advice, console)
        if offload is not None and not result.fits:
            console.print(f"offload to {offload}: not computed, the workload does not fit")
        from k3plan.report.prefix_table import render_prefix_hit

        render_prefix_hit(ph, prefix_hit, console)
    if not result.fits:
        raise typer.Exit(1)


def _speed(setup, workload, notes, probes, allow_cpu_probes):
    """The decode bound at this workload (k3plan roofline's defaults), with probe records applied
    (``setup`` already carries the measured hardware, ``notes`` name the records)."""
    from k3plan.budget.result import Speed
    from k3plan.roofline.bounds import Efficiency, decode_bound

    d = decode_bound(
        setup,
        batch=workload.batch,
        context_tokens=workload.context_tokens,
        eff=Efficiency(),
        probes=probes,
        allow_cpu_probes=allow_cpu_probes,
    )
    return Speed(
        tpot_s=d.step_s,
        tokens_per_s=d.tokens_per_s,
        binding=d.binding,
        collective_latency_source=d.comm.latency_source,
        probes=notes,
        source="k3plan roofline at 30% MFU, 100% HBM bandwidth",
    )
