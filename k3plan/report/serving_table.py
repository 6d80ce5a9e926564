"""Terminal rendering of the three-way comparison ceiling / model / measured (speed.serving, issue 38):
one row a stage, then the model's terms and every term of the gap, each with its source."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from k3plan.report.roofline_summary import print_prose
from k3plan.tables import Column, build_table, figure

if TYPE_CHECKING:
    from k3plan.speed.serving import ServingComparison


def _ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:,.2f}"


def render_serving(c: ServingComparison | None, console: Console) -> None:
    if c is None:
        return
    columns = [
        Column("stage"),
        figure("ceiling ms"),
        figure("model ms"),
        figure("measured ms"),
        figure("model / measured"),
    ]
    rows = []
    for name, s in (("decode step (TPOT)", c.decode), ("prefill (TTFT)", c.prefill)):
        ratio = "—" if s.model_over_measured is None else f"{s.model_over_measured:.2f}x"
        rows.append((name, _ms(s.ceiling_s), _ms(s.model_s), _ms(s.measured_s), ratio))
    bench = c.decode.benchmark or c.prefill.benchmark
    title = "ceiling / model / measured" + (
        f" (measured: {bench})" if bench else " (no serving benchmark at this workload)"
    )
    console.print(build_table(columns, rows, title=title))
    print_prose(console, escape(f"TPOT stood behind: {c.tpot.value_s * 1e3:,.2f} ms, {c.tpot.label}"))
    print_prose(console, escape(f"TTFT stood behind: {c.ttft.value_s * 1e3:,.2f} ms, {c.ttft.label}"))
    for s in (c.decode, c.prefill):
        if s.measured_s is None:
            continue
        print_prose(console, escape(f"{s.stage}: the model's terms (ms)"))
        for t in s.model_terms:
            print_prose(console, escape(f"  {t.seconds * 1e3:10,.3f}  {t.name}: {t.source}"))
        print_prose(
            console, escape(f"{s.stage}: the gap, measured - model = {(s.measured_s - s.model_s) * 1e3:,.3f} ms")
        )
        for t in s.gap_terms:
            print_prose(console, escape(f"  {t.seconds * 1e3:10,.3f}  {t.name}: {t.source}"))
    if c.benchmarks:
        print_prose(console, escape("serving benchmarks of this configuration: " + "; ".join(c.benchmarks)))
