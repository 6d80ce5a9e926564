"""Terminal rendering of the expected time beside the ceiling (speed.stage.ExpectedSpeed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from k3plan.report.roofline_summary import print_prose
from k3plan.tables import Column, build_table, figure

if TYPE_CHECKING:
    from k3plan.speed.expected import OpTime, StageTime
    from k3plan.speed.stage import ExpectedSpeed

KIND_TITLES = {
    "attention": "attention",
    "kda": "KDA",
    "experts": "experts",
    "dense": "dense",
    "collectives": "collectives",
    "overhead": "overhead",
}


def _ms(s: float) -> str:
    return f"{s * 1e3:,.3f}"


def source_lines(stage: StageTime) -> list[str]:
    """One line for each record that set an op's efficiency (its largest op, the point used), then
    each ceiling label once."""
    best: dict[str | None, OpTime] = {}  # record path -> its largest op
    for op in stage.ops:
        e = op.efficiency
        if e.measured and (e.record_path not in best or op.expected_s > best[e.record_path].expected_s):
            best[e.record_path] = op
    lines = [
        f"expected (efficiency: {path}, {op.efficiency.point_used}) -- {op.name} "
        f"at {op.efficiency.value:.1%} of its ceiling"
        for path, op in best.items()
    ]
    return lines + [label for label in stage.labels if label.startswith("ceiling:")]


def render_expected(x: ExpectedSpeed, console: Console) -> None:
    columns = [Column("stage"), Column(""), figure("total ms"), *(figure(t) for t in KIND_TITLES.values())]
    rows = []
    for name, s in (("decode step (model)", x.decode), ("prefill (model)", x.prefill)):
        kinds = [getattr(s.by_kind, k) for k in KIND_TITLES]
        rows.append((name, "ceiling", _ms(s.ceiling_s), *(_ms(k.ceiling_s) for k in kinds)))
        rows.append(("", "expected", f"[bold]{_ms(s.expected_s)}[/]", *(_ms(k.expected_s) for k in kinds)))
    title = (
        f"expected vs ceiling (a device; ops one after another): decode batch {x.batch:,} at "
        f"{x.context_tokens:,}, prefill of the prompt in {x.prefill_chunks} chunk(s)"
    )
    console.print(build_table(columns, rows, title=title))
    print_prose(console, escape(f"records: {x.records}"))
    for key, stage in (("decode", x.decode), ("prefill", x.prefill)):
        for line in source_lines(stage):
            print_prose(console, escape(f"  {key}: {line}"))
    # every term of each stage's model, largest first (the summary's "N more terms: --verbose lists them")
    for key, stage in (("decode", x.decode), ("prefill", x.prefill)):
        for op in sorted((o for o in stage.ops if o.category == "overhead"), key=lambda o: -abs(o.expected_s)):
            print_prose(console, escape(f"  {key} term {_ms(op.expected_s)} ms: {op.label}"))
    print_prose(console, escape("assumptions: " + "; ".join(x.decode.assumptions)))
