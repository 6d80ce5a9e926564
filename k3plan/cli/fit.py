"""`k3plan fit`: per-device memory, term by term, and the verdict."""

from __future__ import annotations

from k3plan.cli.common import (
    DEFAULT_CONTEXT_TOKENS,
    AllowCpuProbesOpt, BatchOpt, CalibrationOpt, ChunkOpt, ContextOpt, JsonOpt, ProbesOpt, console, print_json,
    setup_from, with_setup_options,
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
    """
    import typer

    from k3plan.budget.calibration import load_calibration
    from k3plan.budget.fit import check_workload, fit

    workload = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk)
    cal = load_calibration(str(calibration)) if calibration else None  # a bad file fails before the setup
    setup = setup_from(**setup_options)
    result = fit(setup, workload, calibration=cal)
    if result.fits:  # a speed figure only for a workload that fits
        result = result.model_copy(update={"speed": _speed(setup, workload, probes, allow_cpu_probes)})
    if json_out:
        print_json(result)
    else:
        from k3plan.report.fit_table import render_fit

        render_fit(result, console)
    if not result.fits:
        raise typer.Exit(1)


def _speed(setup, workload, probes, allow_cpu_probes):
    """The decode bound at this workload (k3plan roofline's defaults), with probe records applied."""
    import dataclasses

    from k3plan.budget.result import Speed
    from k3plan.roofline.bounds import Efficiency, decode_bound
    from k3plan.roofline.latency import measured_hardware

    hw, notes = measured_hardware(setup.hardware, probes=probes, allow_cpu=allow_cpu_probes)
    setup = dataclasses.replace(setup, hardware=hw)
    d = decode_bound(setup, batch=workload.batch, context_tokens=workload.context_tokens, eff=Efficiency(),
                     probes=probes, allow_cpu_probes=allow_cpu_probes)
    return Speed(tpot_s=d.step_s, tokens_per_s=d.tokens_per_s, binding=d.binding,
                 collective_latency_source=d.comm.latency_source, probes=notes,
                 source="k3plan roofline at 30% MFU, 100% HBM bandwidth")
