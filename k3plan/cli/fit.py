"""`k3plan fit`: per-device memory, term by term, and the verdict."""

from __future__ import annotations

from k3plan.cli.common import (
    BatchOpt, CalibrationOpt, ChunkOpt, ContextOpt, JsonOpt, console, print_json, setup_from, with_setup_options,
)


@with_setup_options
def command(
    setup_options: dict,
    context: ContextOpt = 131072,
    batch: BatchOpt = 1,
    chunk: ChunkOpt = None,
    calibration: CalibrationOpt = None,
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
    setup = setup_from(**setup_options)
    cal = load_calibration(str(calibration)) if calibration else None
    result = fit(setup, workload, calibration=cal)
    if json_out:
        print_json(result)
    else:
        from k3plan.report.fit_table import render_fit

        render_fit(result, console)
    if not result.fits:
        raise typer.Exit(1)
