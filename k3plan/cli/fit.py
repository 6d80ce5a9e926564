"""`k3plan fit`: per-device memory, term by term, and the verdict."""

from __future__ import annotations

from typing import Annotated

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
    JsonOpt,
    ProbesOpt,
    SpecTokensOpt,
    console,
    print_json,
    setup_from,
    spec_decode_from,
    with_setup_options,
)


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
    json_out: JsonOpt = False,
) -> None:
    """Does the model fit, per device, with what headroom, for how long a context and how many
    sequences? Exit 0 if it fits, 1 if not, 2 on bad input.

    \b
    Examples:
      k3plan fit --topology 2x2x4 --tp 32
      k3plan fit -t 2x2x2 --tp 16 --context 1048576
      k3plan fit -H nvidia-b200 -t 2x8 --stack sglang --kv-dtype fp8_ds_mla
      k3plan fit -t 2x2x4 --stack jax-native --chunk 32768 --calibration CAL.yaml
      k3plan fit -t 2x4x4 --tp 32 --offload host              sessions parked in host DRAM
      k3plan fit -t 2x4x4 --tp 32 --batch 8 --spec-tokens 3 --acceptance 0.8,0.6,0.4 --draft-bytes 30GB

    After the verdict, advice: the rules of docs/beyond-fit.md applied to these numbers (the next
    standard topology up, fp8_ds_mla KV, larger batches), each with its computed effect.
    """
    import dataclasses

    from k3plan.advice.wiring import (
        draft_bytes_for,
        draft_bytes_per_device,
        fit_advice,
        offload_report,
        spec_decode_report,
    )
    from k3plan.budget.calibration import load_calibration
    from k3plan.budget.fit import check_workload, fit
    from k3plan.roofline.bounds import Efficiency
    from k3plan.roofline.latency import measured_hardware
    from k3plan.units import parse_bytes

    workload = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk)
    spec = spec_decode_from(spec_tokens, acceptance, draft_bytes)
    cal = load_calibration(str(calibration)) if calibration else None  # a bad file fails before the setup
    setup = setup_from(**setup_options)
    eff = Efficiency()
    draft, draft_what, draft_dev = 0, "", 0
    if spec is not None:
        draft, draft_what = draft_bytes_for(
            setup, None if draft_bytes is None else parse_bytes(draft_bytes, what="--draft-bytes")
        )
        draft_dev = draft_bytes_per_device(setup, draft)
    result = fit(setup, workload, calibration=cal, draft_bytes_per_device=draft_dev)
    hw, notes = measured_hardware(setup.hardware, probes=probes, allow_cpu=allow_cpu_probes)
    speed_setup = dataclasses.replace(setup, hardware=hw)
    if result.fits:  # a speed figure only for a workload that fits
        result = result.model_copy(update={"speed": _speed(speed_setup, workload, notes, probes, allow_cpu_probes)})
    sd = off = None
    if spec is not None and result.fits:
        sd = spec_decode_report(
            speed_setup,
            spec=spec,
            batch=batch,
            context_tokens=context,
            draft_bytes=draft,
            draft_what=draft_what,
            eff=eff,
            probes=probes,
            allow_cpu_probes=allow_cpu_probes,
        )
    if offload is not None:
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
        draft_bytes=draft,
    )
    if json_out:
        print_json({**result.model_dump(mode="json"), "advice": advice})
    else:
        from k3plan.report.advice_table import render_fit_advice
        from k3plan.report.fit_table import render_fit

        render_fit(result, console)
        if spec is not None and not result.fits:
            console.print("no speculative-decoding speed for a workload that does not fit")
        render_fit_advice(advice, console)
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
