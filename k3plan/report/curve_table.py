"""The terminal rendering of `k3plan curve`: one row a prefill chunk, then notes and warnings; with
--turns, one row a turn of the session."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from k3plan.tables import MISSING, Column, build_table, figure
from k3plan.units import GiB

if TYPE_CHECKING:
    from k3plan.workload.sessions import SessionGrowth

COLUMNS = (
    "prefill chunk",
    "prefill temp GiB",
    "decode temp GiB",
    "longest context",
    "sequences at {context:,}",
    "status",
)


def _gib(b) -> str:
    return MISSING if b is None else f"{b / GiB:,.2f}"


def render_curve(
    points,
    console: Console,
    *,
    title: str,
    context: int,
    model_max: int | None,
    warnings: list[str],
    notes: tuple[str, ...] | list[str] = (),
) -> None:
    columns = [Column(c) if c == "status" else figure(c.format(context=context)) for c in COLUMNS]
    rows = [
        (
            f"{p.chunk_tokens:,}",
            _gib(p.prefill_temp_bytes),
            _gib(p.decode_temp_bytes),
            f"{p.max_context_tokens:,}",
            f"{p.max_sequences:,}",
            p.status,
        )
        for p in points
    ]
    console.print(build_table(columns, rows, title=title))
    if model_max and any(p.max_context_tokens > model_max for p in points):
        console.print(f"[dim]note: longest context is what memory allows; the model's max position is {model_max:,}[/]")
    for p in points:
        if p.detail:
            console.print(f"[yellow]{p.status} at chunk {p.chunk_tokens:,}:[/] {p.detail}")
    for msg in notes:
        console.print(f"[dim]note: {escape(msg)}[/]")
    for msg in warnings:
        console.print(f"[yellow]warning:[/] {escape(msg)}")


def render_sessions(g: SessionGrowth, console: Console, *, batch: int) -> None:
    """A multi-turn session's context a turn against the longest context the fit leaves a sequence."""
    s, cap = g.session, g.max_context_tokens
    assert cap is not None  # app.sessions.session_growth_at gives it fit's memory-allowed context
    carried = "carried back" if s.carry_reasoning else "dropped (--drop-reasoning)"
    title = (
        f"sessions: {s.turns} turns, system {s.system_prompt_tokens:,}, a turn: user "
        f"{s.user_tokens_per_turn:,} + answer {s.answer_tokens_per_turn:,} + tools "
        f"{s.tool_tokens_per_turn:,} + reasoning {s.reasoning_tokens_per_turn:,} ({carried})"
    )
    columns = [figure(c) for c in ("turn", "prompt (prefill)", "peak context", "visible conversation", "fits")]
    rows = [
        (str(i), f"{p:,}", f"{k:,}", f"{v:,}", "yes" if k <= cap else "no")
        for i, (p, k, v) in enumerate(zip(g.prompt_tokens, g.peak_context_tokens, g.visible_context_tokens), start=1)
    ]
    console.print(build_table(columns, rows, title=title))
    where = (
        f"turn {g.first_turn_not_fitting} no longer fits" if g.first_turn_not_fitting else f"all {s.turns} turns fit"
    )
    console.print(
        escape(
            f"context grows {s.carried_tokens_per_turn:,} tokens a turn; max context a sequence at batch "
            f"{batch}: {cap:,} tokens (fit's memory-allowed context): {where}; peak "
            f"context by the last turn is {g.growth_over_visible:.2f}x the visible conversation"
        )
    )
