"""PlanResult as rich tables: the ranking (recommendation first) and every rejected family."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from k3plan.plan.rows import PlanRow
from k3plan.plan.search import OBJECTIVES, PlanResult
from k3plan.tables import MISSING, Column, Row, build_table, cell, print_whole

if TYPE_CHECKING:
    from rich.table import Table

# the temp evidence a row's memory rests on (PlanRow.temp_evidence), short for the table; TEMP_LEGEND explains it
TEMP_SHORT = {"measured": "meas.", "compiled": "comp.", "temp model": "model", "analytic": "lower"}


def _outside(r) -> bool:
    """A calibrated row whose point is outside the calibration's measured range (unverified, issue 50)."""
    return r.temp_unverified and r.temp_evidence != "analytic"


TEMP_LEGEND = (
    "temp: meas. / comp. = a shipped measured / compiled calibration, model = the shipped temp model's upper end, "
    "lower = the analytic lower bound (no evidence for that graph); a ? = a calibration's point outside its measured "
    "range (k3plan/budget/measured_range.py); both unverified: fit says FITS IF temporaries <= X GiB and exits 3"
)


def _ranking(result: PlanResult) -> Table:
    chunks = len(result.search.chunks) > 1
    kvs = len(result.search.kv_dtypes) > 1 or result.search.kv_dtypes != ["stack"]
    expected = any(r.expected_tpot_ms is not None for r in result.ranked)
    unlaunchable = any(r.launch_error for r in result.ranked)
    # issue 48: each row's best estimate, marked (m / t / e / c), with the ceiling beside it
    estimated = any(r.estimate_source for r in result.ranked)
    title = (
        f"{result.model}: {OBJECTIVES[result.objective]}"
        + (" (ranked on expected TPOT)" if result.workload.rank_by == "expected" else "")
        + f", context {result.workload.context_tokens:,}, "
        f"{result.workload.concurrency} sequence(s) at once"
    )
    cols = (
        ["#", "hardware", "topology", "chips", "tp/ep/dp", "stack"]
        + (["kv"] if kvs else [])
        + (["chunk"] if chunks else [])
        + ["free GiB/dev", "temp", "max seqs", "TPOT ms"]
        + (["ceiling ms"] if estimated else ["exp. TPOT ms"] if expected else [])
        + ["tok/s/chip", "bound", "$/hour"]
        + (["launch"] if unlaunchable else [])
    )
    rows = []
    for r in result.ranked:
        cells = (
            [
                str(r.rank),
                r.hardware,
                r.topology,
                str(r.chips),
                f"{r.tp}/{r.ep}/{r.dp}" + (f" pp{r.pp}" if r.pp > 1 else ""),
                r.stack,
            ]
            + ([r.kv_dtype] if kvs else [])
            + ([f"{r.chunk_tokens:,}"] if chunks else [])
            + [
                f"{r.free_gib_per_device:.2f}",
                TEMP_SHORT.get(r.temp_evidence, r.temp_evidence) + ("?" if _outside(r) else ""),
                f"{r.max_sequences:,}",
                _tpot(r),
            ]
            + ([_ceiling(r)] if estimated else [_expected(r)] if expected else [])
            + [
                f"{r.tokens_per_s_per_chip:.1f}" + _estimate_mark(r),
                r.binding,
                cell(r.cost_usd_per_hour, ",.2f"),
            ]
            + (["no" if r.launch_error else "yes"] if unlaunchable else [])
        )
        rows.append(Row(cells, style="bold green" if r.rank == 1 else None))
    # the names are never cut ("nvidia-gb20..." named two machines): at their longest cell, unwrapped; on a
    # narrow console the figures' headers wrap at their spaces instead
    columns = [
        Column(c, "left", no_wrap=True, min_width=max(len(c), *(len(str(row.cells[i])) for row in rows)))
        if c in NAMES
        else Column(c, "left" if c == "bound" else "right")
        for i, c in enumerate(cols)
    ]
    return build_table(columns, rows, title=title)


NAMES = ("hardware", "topology", "stack", "kv", "tp/ep/dp")  # the ranking's columns that name a configuration


def _estimate_mark(r: PlanRow) -> str:
    from k3plan.plan.expected import ESTIMATE_MARK

    return f" {ESTIMATE_MARK[r.estimate_source]}" if r.estimate_source else ""


def _tpot(r: PlanRow) -> str:
    """The TPOT the row is ranked on: its best estimate with its mark (issue 48), else the figure of before."""
    if r.estimate_source and r.estimate_tpot_ms is not None:
        return f"{r.estimate_tpot_ms:.2f}" + _estimate_mark(r)
    return f"{r.tpot_ms:.2f}" + _tpot_mark(r)


def _ceiling(r: PlanRow) -> str:
    """The decode bound: the row's tpot_ms unless a serving benchmark replaced it (then the figure is not a bound)."""
    return MISSING if r.tpot_source else cell(r.tpot_ms, ".2f")


ESTIMATE_LEGEND = (
    "TPOT and tok/s/chip: each row's best estimate, m = measured (a serving benchmark's median), t = transferred "
    "from one by the model's ratio, e = the model (the decode ops against efficiency records), c = the ceiling (the "
    "decode bound); ceiling ms: the bound"
)


def _tpot_mark(r: PlanRow) -> str:
    """issue 38: a TPOT a serving benchmark gave (plan/serving.py) is marked m (measured) or t (transferred)."""
    if not r.tpot_source:
        return ""
    return " m" if r.tpot_source.startswith("measured") else " t"


def tpot_source_lines(result: PlanResult) -> list[str]:
    """One line a row whose TPOT a serving benchmark gave; every other TPOT is the ceiling (the decode bound)."""
    marked = [r for r in result.ranked if r.tpot_source]
    if not marked:
        return []
    if any(r.estimate_source for r in result.ranked):  # the legend says what the marks are
        return [f"TPOT #{r.rank}: {r.tpot_source}" for r in marked]
    return [f"TPOT #{r.rank}: {r.tpot_source}" for r in marked] + [
        "TPOT of the other rows: the ceiling (the decode bound); m = measured, t = transferred from a serving benchmark"
    ]


def launch_lines(result: PlanResult) -> list[str]:
    """Issue 48: the ranked rows their stack cannot launch (--include-unlaunchable: ranked after every row that can),
    each with why; else how many such configurations were left out of the ranking (reason launch)."""
    shown = [r for r in result.ranked if r.launch_error]
    if shown:
        return [f"#{r.rank} cannot launch: {r.launch_error}" for r in shown] + [
            "launch no: its stack's engine cannot launch the split as priced; ranked after every row that can"
        ]
    left = sum(f.reasons.launch or 0 for f in result.families)
    if not left:
        return []
    return [
        f"left out: {left:,} configuration(s) that fit but that their stack cannot launch as priced (reason launch; "
        "the families say why); --include-unlaunchable ranks them after every row that can"
    ]


def _expected(r: PlanRow) -> str:
    return cell(r.expected_tpot_ms, ".2f")


def _rejected(result: PlanResult) -> Table:
    columns = [
        Column(c, "right" if c == "configs" else "left")
        for c in ("hardware", "stack", "configs", "reasons (count)", "closest")
    ]
    rows = [
        (
            f.hardware,
            f.stack,
            str(f.configurations),
            "; ".join(f"{k} x{n}" for k, n in f.reasons.items()) or MISSING,
            "; ".join(f.detail) or MISSING,
        )
        for f in result.rejected_families
    ]
    return build_table(columns, rows, title="Rejected families (hardware x stack): no configuration passes")


def _recommended_tpot(r: PlanRow) -> str:
    if r.estimate_source and r.estimate_tpot_ms is not None:
        return f"{r.estimate_tpot_ms:.2f} ms ({r.estimate_source})"
    if r.sla is not None:  # --isl/--osl: the figure the row stands behind under the load, as its table row says
        q = r.sla_row()
        if q.tpot_ms is not None:
            return f"{q.tpot_ms:.2f} ms ({q.tpot_source}, under the load)"
        return f"{r.tpot_ms:.2f} ms (ceiling: one decode step at the context, no load; the load is not sustained)"
    return f"{r.tpot_ms:.2f} ms"


def render_plan(result: PlanResult, console: Console) -> None:
    if result.ranked:
        if result.sla is not None:
            from k3plan.plan.render_deploy import sla_table

            print_whole(console, sla_table(result))
            from k3plan.plan.expected import evidence_line
            from k3plan.plan.serving import sla_measured_lines  # issue 38: a serving benchmark's medians, labelled

            mixed = evidence_line(result.ranked, sla=True)
            for line in ([mixed] if mixed else []) + sla_measured_lines(result) + launch_lines(result):
                console.print(escape(line), soft_wrap=True)
        else:
            print_whole(console, _ranking(result))
            console.print(f"[dim]{TEMP_LEGEND}[/]")
            lower = [x for x in result.ranked if x.temp_unverified]
            if lower:  # issue 50: never ranked as fitting without a mark
                console.print(
                    f"[yellow]unverified:[/] {len(lower)} of {len(result.ranked)} ranked configuration(s) fit only on "
                    "a temp without evidence at their point (temp: lower, or a calibration outside its measured "
                    "range: ?); fit says FITS IF and exits 3",
                    soft_wrap=True,
                )
            from k3plan.plan.expected import evidence_line

            mixed = evidence_line(result.ranked)
            estimates = [ESTIMATE_LEGEND] if any(x.estimate_source for x in result.ranked) else []
            for line in estimates + ([mixed] if mixed else []) + tpot_source_lines(result) + launch_lines(result):
                console.print(escape(line), soft_wrap=True)
        r = result.recommended
        assert r is not None  # the first ranked row whenever any is ranked
        console.print(
            f"[bold]Recommended:[/] {r.hardware} {r.topology} ({r.chips} chips), {r.split_words}, "
            f"stack {r.stack}, KV {r.kv_dtype}: "
            f"{r.free_gib_per_device:.2f} GiB free a device, up to {r.max_sequences:,} sequences, "
            f"TPOT {_recommended_tpot(r)}"
            + (
                (
                    " [yellow](unverified: its temp is the analytic lower bound)[/]"
                    if r.temp_evidence == "analytic"
                    else " [yellow](unverified: its point is outside the calibration's measured range)[/]"
                )
                if r.temp_unverified
                else ""
            )
            + ". Check it: "
            + r.fit_command(context=result.workload.context_tokens, batch=result.workload.concurrency)
        )
        noted = [x for x in result.ranked if x.layout_notes]
        for x in noted:
            for note in x.layout_notes:
                console.print(f"  #{x.rank} {x.topology} {x.stack}: {note}")
        if result.sla is not None:
            q = r.sla_row()
            console.print(
                "Under the load ("
                + (
                    "ceilings-based"
                    if (q.ttft_source, q.tpot_source) == ("ceiling", "ceiling")
                    else f"TTFT {q.ttft_source}, TPOT {q.tpot_source}"
                )
                + "): "
                + (
                    f"TTFT {q.ttft_ms:,.0f} ms, TPOT {q.tpot_ms:.2f} ms, request {q.request_latency_ms / 1e3:,.1f} s, "
                    f"{q.in_flight_sequences:,.1f} sequences in flight"
                    if q.ttft_ms is not None and q.request_latency_ms is not None
                    else "not sustained"
                )
                + ("" if q.meets else " -- misses: " + "; ".join(q.misses))
            )
    else:
        from k3plan.plan.output import plan_reason

        why = plan_reason(result)[1]  # issue 36: the reason plan --json gives, first
        why = why.removeprefix("no configuration passes; ").removeprefix("no configuration passes: ")
        console.print(f"[bold red]No configuration passes[/]: {escape(why)}. Every family's reasons are below.")
    if result.rejected_families:
        console.print(_rejected(result))
    console.print("Reasons: " + "; ".join(f"{k}: {v}" for k, v in result.reasons.items() if k != "feasible"))
    ok = [f"{f.hardware}/{f.stack} ({f.feasible})" for f in result.families if f.feasible]
    if ok:
        console.print(f"Families with feasible configurations: {', '.join(ok)}")
    console.print(
        f"Evaluated {result.configurations:,} configurations ({result.configuration}) in "
        f"{result.evaluate_s * 1e3:.0f} ms; {result.feasible:,} feasible."
    )
    for a in result.assumptions:
        if a.startswith("warning: "):  # not an assumption of the search: the workload itself is suspect
            console.print(f"[bold yellow]warning:[/] {escape(a.removeprefix('warning: '))}")
        else:
            console.print(f"[dim]assumption: {a}[/]")
    from k3plan.plan.render_deploy import render_deploy

    render_deploy(result, console)
