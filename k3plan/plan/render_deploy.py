"""PlanResult's issue-13 parts as rich output: the SLA ranking, the Pareto front, cost, the
disaggregated alternative, the launch command and the cold start of the pick."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from k3plan.deploy.pareto import render_pareto_table
from k3plan.plan.search import OBJECTIVES, PlanResult
from k3plan.tables import MISSING, Column, Row, build_table, cell, figure
from k3plan.units import GiB

if TYPE_CHECKING:
    from rich.table import Table


def short_miss(text: str) -> str:
    """'TTFT 87.1 ms > 50 ms target (+37.1 ms, +74.1%)' -> 'TTFT +74.1%' (the JSON keeps the whole text)."""
    m = re.match(r"^(.*?) [\d,.]+ ms > .*, (\+[\d,.]+%)\)$", text)
    return f"{m.group(1)} {m.group(2)}" if m else text.split(":")[0]


def sla_table(result: PlanResult) -> Table:
    s = result.sla
    assert s is not None
    load = f"{s.request_rate_per_s:g} requests/s" if s.request_rate_per_s else f"{s.concurrency} in flight"
    title = (
        f"{result.model}: {OBJECTIVES[result.objective]}; ISL {s.isl_tokens:,} OSL {s.osl_tokens:,}, {load} "
        f"({'strict' if s.strict else 'best-effort'}; each row's best estimate: m / t / e / c = measured / "
        "transferred / model / ceiling)"
    )
    headers = (
        "#",
        "hardware",
        "topo",
        "chips",
        "tp/ep/dp",
        "stack",
        "TTFT ms",
        "TPOT ms",
        "latency s",
        "tok/s/chip",
        "$/hour",
        "$/M out",
        "$/M in",
        "SLA",
    )
    columns = [
        Column(
            c,
            "left" if c in ("hardware", "topo", "stack", "tp/ep/dp", "SLA") else "right",
            no_wrap=c != "SLA",
            min_width=12 if c == "SLA" else None,
        )
        for c in headers
    ]
    tput = result.objective == "throughput"
    if tput:
        columns += [figure("max batch"), figure("max tok/s/chip")]
    rows = []
    for r in result.ranked:
        q, cost = r.sla_row(), r.cost_row()
        cells = (
            str(r.rank),
            r.hardware,
            r.topology,
            str(r.chips),
            f"{r.tp}/{r.ep}/{r.dp}",
            r.stack,
            cell(q.ttft_ms, ",.0f") + _mark(q.ttft_source),
            cell(q.tpot_ms, ".2f") + _mark(q.tpot_source),
            MISSING if q.request_latency_ms is None else f"{q.request_latency_ms / 1e3:,.1f}",
            cell(q.output_tokens_per_s_per_chip),
            cell(cost.usd_per_hour, ",.2f", "n/a"),
            cell(cost.usd_per_million_output_tokens, ",.2f", "n/a" if cost.usd_per_hour is None else MISSING),
            cell(cost.usd_per_million_input_tokens, ",.2f", "n/a" if cost.usd_per_hour is None else MISSING),
            "meets" if q.meets else escape(", ".join(short_miss(x) for x in q.misses)),
            *([cell(q.throughput_batch, ","), cell(q.throughput_tokens_per_s_per_chip)] if tput else []),
        )
        rows.append(Row(cells, style="bold green" if r.rank == 1 and q.meets else None))
    return build_table(columns, rows, title=title)


def _mark(source: str) -> str:
    """issue 38, 46: each figure marked by its kind, m (measured), t (transferred), e (the model) or c (the
    ceiling): plan.expected.ESTIMATE_MARK."""
    from k3plan.plan.expected import ESTIMATE_MARK

    return f" {ESTIMATE_MARK[source]}" if source in ESTIMATE_MARK else ""


def _unpriced(result: PlanResult) -> list[str]:
    shown = {r.hardware for r in result.ranked}
    return [f"{p.hardware}: {p.source}" for p in result.prices if p.usd_per_chip_hour is None and p.hardware in shown]


def render_deploy(result: PlanResult, console: Console) -> None:
    """What only an SLA search prints (call after the family tables); no-op parts are skipped."""
    unpriced = _unpriced(result)
    if unpriced:
        console.print(
            "[dim]cost n/a (no price in the spec; --price HW=USD fills it): " + escape("; ".join(unpriced)) + "[/]"
        )
    if result.pareto:
        console.print(
            render_pareto_table(
                result.pareto, title="Pareto front: tokens/s per user vs tokens/s per chip (each row's best estimate)"
            )
        )
    d = result.disaggregated
    if d is not None:
        p = d.pools
        columns = [Column(""), *(figure(c) for c in ("chips", "TTFT ms", "TPOT ms", "$/hour", "$/M out"))]
        disagg = (
            f"disaggregated: {p.prefill_instances} prefill + {p.decode_instances} decode instance(s), "
            f"ratio {p.ratio_prefill_to_decode:.2f}, decode batch {d.decode_batch}",
            str(d.chips),
            cell(d.ttft_ms),
            cell(d.tpot_ms, ".2f"),
            cell(d.usd_per_hour, ",.2f", "n/a"),
            cell(d.usd_per_million_output_tokens, ",.2f", "n/a"),
        )
        agg = (
            "aggregated (the pick)",
            str(d.aggregated_chips),
            cell(d.aggregated_ttft_ms),
            cell(d.aggregated_tpot_ms, ".2f"),
            cell(d.aggregated_usd_per_hour, ",.2f", "n/a"),
            "",
        )
        title = f"Disaggregated alternative ({d.instance} instances) vs the aggregated pick"
        console.print(build_table(columns, (disagg, agg), title=title))
        x = d.transfer
        console.print(
            f"KV + KDA state a request: {x.bytes_per_request / GiB:.3f} GiB over {x.link} in "
            f"{x.transfer_s * 1e3:.2f} ms"
            + ("" if x.share_of_ttft is None else f" ({x.share_of_ttft:.2%} of the TTFT target)")
        )
        for n in d.notes:
            console.print(f"[dim]disaggregated: {escape(n)}[/]")
    if result.launch is not None:
        if result.launch.text:
            console.print("[bold]Launch (the pick):[/]")
            console.print(escape(result.launch.text.rstrip()), soft_wrap=True)
        else:
            console.print(f"[yellow]launch: {escape(result.launch.error or '')}[/]")
    cs = result.cold_start
    if cs is not None:
        console.print(
            f"Cold start at {cs.load_gbps:g} Gbit/s a host: {cs.sharded_read_bytes_per_host / GiB:,.1f} GiB a "
            f"host sharded ({cs.sharded_load_s:,.0f} s)"
            + (
                ""
                if cs.whole_tensor_load_s is None or cs.whole_tensor_read_bytes_per_host is None
                else f", whole tensors {cs.whole_tensor_read_bytes_per_host / GiB:,.1f} GiB ({cs.whole_tensor_load_s:,.0f} s)"
            )
            + f"; host RAM {cs.host_ram_bytes_per_host / GiB:,.1f} GiB a host ({cs.hosts} host(s), "
            f"{cs.devices_per_host} devices each)"
        )
