"""`k3plan validate`: compile the planned model (abstract arrays, AOT) and compare with the budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from k3plan.app.setup import setup_from
from k3plan.cli.common import (
    BatchOpt,
    ContextOpt,
    JsonOpt,
    console,
    err_console,
    print_json,
    with_setup_options,
)
from k3plan.cli.lists import whole_numbers
from k3plan.errors import K3PlanError
from k3plan.structs import replace
from k3plan.units import DEFAULT_CONTEXT_TOKENS, DEFAULT_PREFILL_CHUNK_TOKENS

DEFAULT_HARDWARE = "tpu-v7x"  # the shared --hardware default (cli.common)

TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        help="cpu (fake CPU devices), a TPU topology for a deviceless compile (tpu7x:2x2x4, v6e:4x4, v5p:2x2x2), "
        "or local: the attached accelerator (compiled, run once with real arrays when it fits, OOM boundary searched).",
    ),
]
StageOpt = Annotated[str, typer.Option("--stage", help="prefill, decode or both.")]
TokensOpt = Annotated[
    str, typer.Option("--tokens", help="Prefill chunk tokens; a comma list sweeps (4096,16384,32768).")
]
LayersOpt = Annotated[Optional[int], typer.Option("--layers", help="Keep only the first N layers (a scaled run).")]
UnrollOpt = Annotated[
    bool, typer.Option("--unroll", help="Unroll every layer instead of a scan over the repeating block.")
]
SaveCalOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--save-calibration",
        help="Write the measured temps as a calibration YAML for fit --calibration.",
        dir_okay=False,
    ),
]


def _hardware_topology(target, hardware: str, topology: Optional[str]) -> tuple[str, Optional[str]]:
    """A TPU target fixes the hardware and the grid; --hardware/--topology may only agree with it."""
    if target.platform != "tpu":
        return hardware, topology
    if hardware not in (target.hardware, DEFAULT_HARDWARE):
        raise K3PlanError(f"--target {target.name} is a {target.hardware} slice but --hardware is {hardware}")
    if topology and topology.lower() != target.topology:
        raise K3PlanError(f"--target {target.name} is the {target.topology} grid but --topology is {topology}")
    return target.hardware, target.topology


PHASES = {
    "devices": "starting jax and the target's devices",
    "build": "building the abstract model",
    "lower": "lowering to HLO",
    "compile": "compiling",
}


@contextmanager
def phase_display(*, total: int):
    """-> (on_job, on_phase) for validate(): on a terminal, a bar over jobs whose line names the
    running phase with its elapsed time, and one line per finished phase (build, lower, compile
    with seconds). Off a terminal (a log, CI, a pipe), plain lines on stderr: one as each phase
    starts and one with its seconds as it ends, so a log of a minutes-long compile shows where it
    is; stdout (the table or the JSON) is untouched."""
    if not err_console.is_terminal:
        on_job, on_phase, _ = _phase_callbacks(
            started=lambda what: err_console.print(f"{what} ...", highlight=False, soft_wrap=True),
            ended=lambda line: err_console.print(line, highlight=False, soft_wrap=True),
        )
        yield on_job, on_phase
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=total)
        on_job, on_phase, finish = _phase_callbacks(
            started=lambda what: bar.update(task, description=what),
            ended=lambda line: bar.console.print(f"  {line}", highlight=False),
            job_done=lambda: bar.advance(task),
        )
        yield on_job, on_phase
        finish()


def _phase_callbacks(
    *, started: Callable[[str], None], ended: Callable[[str], None], job_done: Callable[[], None] = lambda: None
) -> tuple[Callable[[Any, Any], None], Callable[[Any, str], None], Callable[[], None]]:
    """(on_job, on_phase, finish) over one clock of the running phase: ``started`` gets what a phase
    does as it starts ('<job>: compiling'), ``ended`` its line with seconds ('<job>: compile 12.3 s') at
    the next phase's start, the job's end or ``finish``."""
    running: list[tuple[str, float]] = []  # the phase under way: (its name, where it started)

    def finish() -> None:
        if running:
            name, t0 = running.pop()
            ended(f"{name} {time.perf_counter() - t0:.1f} s")

    def on_phase(job, phase: str) -> None:
        finish()
        where = "" if phase == "devices" else f"{job.label}: "
        running.append((f"{where}{phase}", time.perf_counter()))
        started(f"{where}{PHASES.get(phase, phase)}")

    def on_job(job, result) -> None:
        if result is not None:
            finish()
            job_done()

    return on_job, on_phase, finish


@with_setup_options
def command(
    setup_options: dict,
    target: TargetOpt = "cpu",
    stage: StageOpt = "both",
    tokens: TokensOpt = str(DEFAULT_PREFILL_CHUNK_TOKENS),
    batch: BatchOpt = 1,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    layers: LayersOpt = None,
    unroll: UnrollOpt = False,
    save_calibration: SaveCalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Compile the planned model for the target and compare every memory term with the budget.
    Nothing is allocated: parameters, cache and inputs are abstract arrays with the plan's
    shardings. The workload defaults (prefill chunk, context) are fit's.
    Each phase (build, lower, compile per stage) shows on stderr with its elapsed time: a live bar
    on a terminal, plain lines in a log. Off a TPU VM libtpu's environment warnings are silenced
    (not errors for a deviceless compile). Exit 0 if it fits, 1 if the compiled configuration
    exceeds HBM, 2 on bad input.

    \b
    Examples:
      k3plan validate -t 2x2x4 --tp 32 --layers 8               K3 scaled to 8 layers, 32 CPU devices
      k3plan validate --target tpu7x:2x2x4 --tp 32 --stage decode --batch 32 --context 8192
      k3plan validate --target tpu7x:2x2x4 --tp 32 --stage prefill --tokens 4096,16384,32768 \\
          --save-calibration k3-v7x.yaml
    """
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    if save_calibration:  # a FIFO, a device or a link fails now, not after the compile
        from k3plan.io_safe import check_target

        check_target(save_calibration, label="--save-calibration")
    tgt = parse_target(target)
    opts = dict(setup_options)
    if tgt.local:  # the attached accelerator: its backend and hardware spec read from jax
        from k3plan.validate.targets import local_target

        tgt = local_target(opts["topology"])
    opts["hardware"], opts["topology"] = _hardware_topology(tgt, opts["hardware"], opts["topology"])
    setup = setup_from(**opts)
    if layers is not None:
        from k3plan.validate.structure import check_layers

        check_layers(setup, layers)  # bad input: one line, before the phases start printing
    jobs = plan_jobs(setup=setup, stage=stage, tokens=whole_numbers("--tokens", tokens), batch=batch, context=context)
    prepare_target(tgt, setup)  # before jax is imported
    from k3plan.validate.render import render_validation

    with phase_display(total=len(jobs)) as (on_job, on_phase):
        result = validate(
            setup=setup, target=tgt, jobs=jobs, layers=layers, unroll=unroll, on_job=on_job, on_phase=on_phase
        )
    if save_calibration:
        from k3plan.validate.calibration_out import calibration_dict, write_calibration

        write_calibration(
            save_calibration, calibration_dict(result, usable_bytes=setup.hardware.usable_bytes_per_device)
        )
        result = replace(result, calibration_file=str(save_calibration))
    if json_out:
        print_json(result)
    else:
        render_validation(result, console)
    if not result.fits:
        raise typer.Exit(1)
