"""The terminal rendering of `k3plan curve`: one row a prefill chunk, then notes and warnings."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from k3plan.units import GiB

COLUMNS = (
    "prefill chunk",
    "prefill temp GiB",
    "decode temp GiB",
    "longest context",
    "sequences at {context:,}",
    "status",
)


def _gib(b) -> str:
    return "—" if b is None else f"{b / GiB:,.2f}"


def render_curve(
    points, console: Console, *, title: str, context: int, model_max: int | None, warnings: list[str]
) -> None:
    table = Table(title=title, title_justify="left")
    for col in COLUMNS:
        table.add_column(col.format(context=context), justify="right" if col != "status" else "left")
    for p in points:
        table.add_row(
            f"{p.chunk_tokens:,}",
            _gib(p.prefill_temp_bytes),
            _gib(p.decode_temp_bytes),
            f"{p.max_context_tokens:,}",
            f"{p.max_sequences:,}",
            p.status,
        )
    console.print(table)
    if model_max and any(p.max_context_tokens > model_max for p in points):
        console.print(f"[dim]note: longest context is what memory allows; the model's max position is {model_max:,}[/]")
    for p in points:
        if p.detail:
            console.print(f"[yellow]{p.status} at chunk {p.chunk_tokens:,}:[/] {p.detail}")
    for msg in warnings:
        console.print(f"[yellow]warning:[/] {escape(msg)}")
