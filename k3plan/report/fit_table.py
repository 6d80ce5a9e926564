"""The terminal rendering of a FitResult."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from k3plan.tables import Column, Row, build_table, figure
from k3plan.units import GiB, counted, fmt_gib_sig

if TYPE_CHECKING:
    from k3plan.budget.fit import FitResult


def _gib(n: float) -> str:
    return f"{n / GiB:,.2f}"


def _extra_rows(r: FitResult) -> list[tuple[str, int, str]]:
    """The weights' terms a serve command's engine holds beside the model's tensors (Stack.extra_weights), each a row
    with its source as the weights' provenance gives it ("; + role N B a device (source)", budget/fit_text.py)."""
    rows = []
    for part in r.provenance.weights.split("; + ")[1:]:
        role, _, rest = part.partition(" ")
        n = next((x.bytes for x in r.weights_by_role if x.role == role), None)
        if n is not None and rest.startswith(f"{n:,} B a device ("):
            rows.append((f"  of which {role}", n, rest[len(f"{n:,} B a device (") :].removesuffix(")")))
    return rows


def render_fit(r: FitResult, console: Console, *, verdict: str | None = None, split: str | None = None) -> None:
    """``verdict``: a verdict that comes first instead of the budget's (fit --serve: the engine's start check; the
    budget's line follows it, labelled); ``split``: the split as the command set it, where it differs from the
    budget's label (a serve command without expert parallelism has no ep)."""
    hw, par, w, dev = r.hardware, r.parallel, r.workload, r.per_device
    usable = hw.usable_bytes_per_device
    if verdict is not None:
        console.print(verdict, markup=False, highlight=False)
        console.print(budget_line(r))
    else:
        console.print(verdict_line(r))  # issue 36: the verdict first, then the table, then warnings
    console.print(
        f"[bold]{r.model.name}[/] on [bold]{hw.name} {hw.topology}[/] ({counted(hw.chips, 'chip')}, "
        f"{counted(hw.devices, 'device')}, {counted(hw.hosts, 'host')}), {split or par.label}, "
        f"stack {r.stack}; context {w.context_tokens:,} x batch {w.batch}, prefill chunk {w.prefill_chunk_tokens:,}"
    )
    p = r.provenance
    rows = [
        ("weights", dev.weights_bytes, p.weights),
        ("  of which replicated", dev.replicated_weights_bytes, "tensors every device holds whole"),
        *(
            [("  of which absorbed MLA", copies, "W_UK / W_UV split from kv_b_proj at load (note)")]
            if (copies := next((x.bytes for x in r.weights_by_role if x.role == "mla_absorbed"), 0))
            else []
        ),
        *_extra_rows(r),
        ("KV cache", dev.kv_bytes, p.kv),
        ("KDA state", dev.state_bytes, p.state),
        (
            f"temporaries ({r.temp.binding})",
            dev.temp_bytes,
            p.temp_prefill if r.temp.binding == "prefill" else p.temp_decode,
        ),
        ("engine reserve", dev.reserve_bytes, p.reserve),
    ]
    color = "green" if r.fits else "red"
    cells = [  # the terms, a rule, then what they are a share of and what is left
        Row((name, _gib(value), f"{100 * value / usable:.1f}", source), end_section=i == len(rows) - 1)
        for i, (name, value, source) in enumerate(rows)
    ] + [
        ("usable HBM", _gib(usable), "100.0", p.hbm),
        (f"[{color}]free[/]", f"[{color}]{_gib(dev.free_bytes)}[/]", f"{100 * dev.free_bytes / usable:.1f}", ""),
    ]
    columns = (Column("term"), figure("GiB"), figure("% usable"), Column("source", overflow="fold", max_width=70))
    console.print(build_table(columns, cells, title="per device (GiB = 2^30 B)"))
    cap = r.capacity
    cross = cap.kv_state_crossover_tokens
    console.print(
        f"capacity: longest context at batch {w.batch}: [bold]{cap.max_context_tokens:,}[/] tokens"
        + (
            f" (the model's max; memory allows {cap.memory_context_tokens:,})"
            if cap.memory_context_tokens > cap.max_context_tokens
            else ""
        )
        + "; "
        f"most sequences at {w.context_tokens:,}: [bold]{cap.max_sequences:,}[/]"
        + (f"; KV overtakes KDA state at {cross:,.0f} tokens" if cross else "")
    )
    if cap.band_low_max_context_tokens is not None:
        console.print(
            f"capacity at the temp model's lower end (temp {_gib(r.temp.band_low() or 0)} GiB instead of {_gib(dev.temp_bytes)}): longest "
            f"context {cap.band_low_max_context_tokens:,} tokens; most sequences at {w.context_tokens:,}: "
            f"{cap.band_low_max_sequences:,}; the verdict uses the upper end"
        )
    console.print(
        f"model state (one copy): KV {r.model_state.kv_bytes_per_token:,} B a token ({r.model_state.kv_dtype}), "
        f"state {r.model_state.state_bytes_per_sequence:,} B a sequence"
    )
    if r.speed:
        sp = r.speed
        console.print(
            ("decode" if sp.tpot_source != "ceiling" else "decode bound")
            + f" at this workload: TPOT {sp.tpot_s * 1e3:,.2f} ms, {sp.tokens_per_s:,.0f} tok/s, "
            f"{sp.binding}-bound (collective latency: {sp.collective_latency_source}); see k3plan roofline"
        )
        if sp.tpot_source != "ceiling" and sp.ceiling_tpot_s is not None:  # issue 38: a serving benchmark's TPOT
            band = "" if sp.tpot_band_s is None else f"; band {_ms_range(sp.tpot_band_s)}"
            console.print(
                f"  TPOT {sp.tpot_s * 1e3:,.2f} ms is {sp.tpot_label}; the bound: {sp.ceiling_tpot_s * 1e3:,.2f} ms"
                + band
            )
        for note in sp.probes:
            console.print(f"[cyan]probe:[/] {note}")
    else:
        console.print("decode bound: not computed, the workload does not fit")
    for f in r.replicated[:12]:
        console.print(
            f"[yellow]fallback:[/] {f.tensor}: {f.axis}={f.size} not divisible by "
            f"{f.mesh_axis}={f.mesh_size}, dim {f.dim} replicated (+{fmt_gib_sig(f.bytes_replicated)} a device)"
        )
    if len(r.replicated) > 12:
        console.print(f"[yellow]fallback:[/] ... and {len(r.replicated) - 12} more (see --json)")
    for msg in r.warnings:
        console.print(f"[yellow]warning:[/] {msg}")
    for msg in r.notes:
        console.print(f"[dim]note: {msg}[/]")


def budget_line(r: FitResult) -> str:
    """fit --serve's second line: k3plan's own budget as a margin, not a second verdict (issue 48: one verdict an
    output; the engine's start check above is it). The budget is the table below (k3plan's temporaries, not the
    engine's profile run), so it can be short where the engine starts or roomy where it does not."""
    w, dev = r.workload, r.per_device
    usable = r.hardware.usable_bytes_per_device
    margin = (
        f"{_gib(dev.free_bytes)} GiB a device free ({100 * dev.free_bytes / usable:.1f}% of usable HBM)"
        if dev.free_bytes >= 0
        else f"{_gib(-dev.free_bytes)} GiB a device short of usable HBM"
    )
    bound = " if temporaries are at most the table's (unverified)" if r.unverified is not None else ""
    return (
        f"k3plan's own budget (the table below, not the engine's rule): {margin}{bound} at batch {w.batch:,} x "
        f"context {w.context_tokens:,}; the start check above is the verdict"
    )


def verdict_line(r: FitResult) -> str:
    """One line: FITS or DOES NOT FIT, and why (the ``reason`` of fit --json), with the free HBM it rests on."""
    from k3plan.step.verdict import fit_reason

    w, dev, cap = r.workload, r.per_device, r.capacity
    usable = r.hardware.usable_bytes_per_device
    free = (
        f"free {_gib(dev.free_bytes)} GiB a device = {100 * dev.free_bytes / usable:.1f}% of usable HBM"
        if dev.free_bytes >= 0
        else f"{_gib(-dev.free_bytes)} GiB a device over usable HBM"
    )
    if r.fits and r.unverified is not None:  # issue 50: never FITS on a lower bound
        return (  # why and the command that settles it: the warning below (fit's warnings)
            f"[bold yellow]FITS IF[/] temporaries <= {_gib(r.unverified.max_temp_bytes)} GiB "
            f"[bold yellow](unverified)[/]: batch {w.batch:,} x context {w.context_tokens:,} tokens, {free}"
        )
    if r.fits:
        return (
            f"[bold green]FITS[/]: batch {w.batch:,} x context {w.context_tokens:,} tokens, {free}; "
            f"room for {cap.max_sequences:,} sequence(s) at this context"
        )
    _, why = fit_reason(fits=False, code=r.reason)
    return f"[bold red]DOES NOT FIT[/]: {why} ({free} at batch {w.batch:,} x context {w.context_tokens:,})"


def _ms_range(band: tuple[float, float]) -> str:
    lo, hi = band
    return f"{lo * 1e3:,.2f}-{hi * 1e3:,.2f} ms"
