"""Terminal output of `k3plan validate`: predicted vs compiled, the census, the verdict (jax-free)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Optional

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from k3plan.tables import MISSING, Column, build_table
from k3plan.units import MiB, fmt_gib

if TYPE_CHECKING:
    from rich.table import Table

    from k3plan.validate.collective_check import CollectiveCheck
    from k3plan.validate.result import CensusReport, JobResult, ValidationResult


def _b(n: Optional[int]) -> str:
    if n is None:
        return MISSING
    if abs(n) >= MiB:
        return fmt_gib(n, 4)
    return f"{n:,} B"


def _pct(p: Optional[float]) -> str:
    return MISSING if p is None else f"{p:+.3f}%"


@contextmanager
def progress_callback(console: Console, *, total: int, enabled: bool) -> Iterator:
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("compiling", total=total)

        def on_job(job, result):
            if result is None:
                progress.update(task, description=f"compiling {job.label}")
            else:
                progress.advance(task)

        yield on_job


def _columns(*headers: str, text: tuple[str, ...] = ("op",)) -> list[Column]:
    return [Column(h, "left" if h in text else "right") for h in headers]


def _unexplained(u: Optional[int]) -> str:
    return MISSING if u is None else ("0" if u == 0 else f"[bold red]{_b(u)}[/]")


def _terms_table(r: JobResult) -> Table:
    rows = [
        (
            term.name,
            _b(term.predicted_bytes),
            _b(term.compiled_bytes),
            _b(term.delta_bytes),
            _pct(term.delta_pct),
            _unexplained(term.unexplained_bytes),
        )
        for term in r.terms
    ]
    return build_table(
        _columns("term", "predicted", "compiled", "delta", "delta %", "unexplained", text=("term",)),
        rows,
        title=f"{r.label}: compiled in {r.compile_s:.1f} s (lowered in {r.lower_s:.1f} s), per device",
    )


def _reasons(r: JobResult, console: Console) -> None:
    for term in r.terms:
        if term.name == "arguments":  # the sum of the terms above
            continue
        for x in term.reasons:
            console.print(f"  {term.name}: {x.bytes:+,} B  {x.why}")
        if term.note and not term.must_match:
            console.print(f"  [dim]{term.name}: {term.note}[/]")


def _census_table(c: CensusReport) -> Table:
    rows = [
        (s.op, str(s.count), _b(s.bytes), str(s.in_loop), str(s.executed), _b(s.executed_bytes))
        for s in sorted(c.ops, key=lambda o: o.op)
    ] or [("(none)", "0", MISSING, MISSING, MISSING, MISSING)]
    return build_table(
        _columns("op", "count", "bytes", "in a loop", "executed", "executed bytes"),
        rows,
        title=f"HLO collectives ({c.while_loops} while loop(s))",
    )


def _collectives_table(c: CollectiveCheck) -> Table:
    verdict = "[green]counts match[/]" if c.ok else "[bold red]counts differ[/]"
    rows = [
        (
            r.kind,
            str(r.op_list_calls),
            str(r.hlo_calls),
            ", ".join(f"{e.name} ({e.calls:+d})" for e in c.exceptions if e.kind == r.kind) or MISSING,
            "0" if r.unexplained_calls == 0 else f"[bold red]{r.unexplained_calls:+d}[/]",
            _b(r.op_list_bytes),
            _b(r.hlo_bytes),
        )
        for r in c.rows
    ]
    headers = ("op", "op list calls", "HLO calls", "named exceptions", "unexplained", "op list bytes", "HLO bytes")
    return build_table(
        _columns(*headers, text=("op", "named exceptions")),
        rows,
        title=f"collectives a step: op list vs compiled HLO ({verdict})",
    )


def _collective_notes(c: CollectiveCheck, console: Console) -> None:
    for e in c.exceptions:
        console.print(f"  {e.name} ({e.kind} {e.calls:+d}): {e.why} [dim]({e.source})[/]")
    for f in c.findings:
        console.print(f"  [bold red]unexplained: {f}[/]")


def _local(r: JobResult, console: Console) -> None:
    """--target local: the run on the chip, fit's agreement and the OOM boundary."""
    if r.local_run is not None:
        lr = r.local_run
        ran = f"measured {lr.measured_step_s * 1e3:.2f} ms a step" if lr.measured_step_s is not None else lr.note
        agree = "agrees" if lr.agrees else "[bold red]DISAGREES[/]"
        console.print(f"on the chip: {ran}; fit says {'fits' if lr.fit_fits else 'does not fit'} ({agree})")
    if r.oom_boundary is not None:
        b = r.oom_boundary
        console.print(f"OOM boundary ({b.axis}): fits at {b.fits_at}, refused at {b.refused_at}: {b.verdict}")


def render_validation(result: ValidationResult, console: Console) -> None:
    env = result.environment
    par = result.parallel
    console.print(
        f"[bold]{result.model}[/] on {result.hardware} {result.topology} "
        f"(tp {par.tp}, ep {par.ep}, dp {par.dp}), stack {result.stack}, {result.layers} layers: "
        f"{result.layer_plan}"
    )
    lib = f", libtpu {env.libtpu_version}" if env.libtpu_version else ""
    console.print(
        f"target {env.target} ({env.devices.count} x {env.devices.device_kind}), jax {env.jax_version}{lib}, {env.date}"
    )
    for r in result.results:
        console.print()
        if r.oom:
            o = r.oom
            console.print(f"[bold red]{r.label}: does not fit[/] — the compiler: {o.message}")
            console.print(
                f"  required {_b(o.required_bytes)}, available {_b(o.available_bytes)}; "
                f"budget weights {_b(r.budget.weights_bytes)}, temp model {_b(r.budget.temp_bytes)}"
            )
            continue
        console.print(_terms_table(r))
        _reasons(r, console)
        if r.census:
            console.print(_census_table(r.census))
        if r.collectives:
            console.print(_collectives_table(r.collectives))
            _collective_notes(r.collectives, console)
        mark = "[green]fits[/]" if r.fits else "[bold red]does not fit[/]"
        console.print(f"{mark}: {r.verdict}")
        if r.unexplained_bytes:
            console.print(f"[bold red]{r.unexplained_bytes:,} bytes of argument/cache difference unexplained[/]")
        _local(r, console)
    for n in result.notes:
        console.print(f"[dim]note: {n}[/]")
    if result.calibration_file:
        console.print(f"calibration written to {result.calibration_file}")
