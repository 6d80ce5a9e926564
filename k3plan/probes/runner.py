"""Run one probe end to end: prepare jax, build the context, run, write (process 0 only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from k3plan.errors import K3PlanError
from k3plan.evidence.probe_record import ProbeRecord
from k3plan.probes.env import DistributedOptions, ensure_cpu_devices, init_distributed, stdout_to_stderr
from k3plan.probes.store import DEFAULT_DIR, write_record


@dataclass(frozen=True)
class RunSettings:
    timeout_s: Optional[float] = None
    hardware: Optional[str] = None
    warmup: int = 1
    repeats: int = 5
    out_dir: Path = DEFAULT_DIR
    write: bool = True
    cpu_devices: Optional[int] = None
    distributed: Optional[DistributedOptions] = None


@dataclass
class RunResult:
    records: list[ProbeRecord]
    paths: list[Path] = field(default_factory=list)
    process_index: int = 0


def run_probe(
    *,
    settings: RunSettings,
    run: Callable[..., list[ProbeRecord]],
    progress: Callable[[str], None] = lambda text: None,
    plan: Callable[[int], None] = lambda total: None,
) -> RunResult:
    """`run(ctx=...)` is the probe's own run with its parameters bound; ``progress(text)`` as each
    sweep point starts, ``plan(total)`` once the probe knows how many points it will run."""
    with stdout_to_stderr():
        return _run(settings=settings, run=run, progress=progress, plan=plan)


def _run(
    *,
    settings: RunSettings,
    run: Callable[..., list[ProbeRecord]],
    progress: Callable[[str], None],
    plan: Callable[[int], None],
) -> RunResult:
    notes = ensure_cpu_devices(count=settings.cpu_devices)
    if settings.distributed is not None:
        init_distributed(settings.distributed)
    from k3plan.probes.context import build_context

    ctx = build_context(
        timeout_s=settings.timeout_s,
        hardware_name=settings.hardware,
        warmup=settings.warmup,
        repeats=settings.repeats,
        progress=progress,
        plan=plan,
        notes=notes,
    )
    written: dict[int, Path] = {}
    if settings.write and ctx.process_index == 0:

        def emit(record: ProbeRecord) -> None:
            if id(record) not in written:
                written[id(record)] = write_record(record=record, out_dir=settings.out_dir)

        ctx.emit = emit
    if settings.distributed is not None:
        ctx.notes.append(f"distributed: {ctx.process_count} processes, coordinator {settings.distributed.coordinator}")
    try:
        records = run(ctx=ctx)
    except MemoryError as err:  # numpy's _ArrayMemoryError is one: a host array too large
        raise K3PlanError(f"probe: out of memory: {_first_line(err)}; expected smaller sizes") from None
    except Exception as err:
        if not out_of_device_memory(err):
            raise
        raise K3PlanError(f"probe: out of device memory: {_first_line(err)}; expected smaller sizes") from None
    result = RunResult(records=records, process_index=ctx.process_index)
    if settings.write and ctx.process_index == 0:
        result.paths = [written.get(id(r)) or write_record(record=r, out_dir=settings.out_dir) for r in records]
    return result


def out_of_device_memory(err: BaseException) -> bool:
    """jax's allocation failure on a device: a runtime error whose status is RESOURCE_EXHAUSTED."""
    return type(err).__name__ in ("XlaRuntimeError", "JaxRuntimeError") and "RESOURCE_EXHAUSTED" in str(err)


def _first_line(err: BaseException, limit: int = 200) -> str:
    line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."
