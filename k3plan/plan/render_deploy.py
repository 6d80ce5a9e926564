"""PlanResult's issue-13 parts as rich output: the SLA ranking, the Pareto front, cost, the
disaggregated alternative, the launch command and the cold start of the pick."""

from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from k3plan.deploy.pareto import render_pareto_table
from k3plan.plan.search import OBJECTIVES, PlanResult
from k3plan.units import GiB


def _f(v, fmt: str = ",.1f", none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def short_miss(text: str) -> str:
    """'TTFT 87.1 ms > 50 ms target (+37.1 ms, +74.1%)' -> 'TTFT +74.1%' (the JSON keeps the whole text)."""
    m = re.match(r"^(.*?) [\d,.]+ ms > .*, (\+[\d,.]+%)\)$", text)
    return f"{m.group(1)} {m.group(2)}" if m else text.split(":")[0]


def sla_table(result: PlanResult) -> Table:
    s = result.sla
    assert s is not None
    load = f"{s.request_rate_per_s:g} requests/s" if s.request_rate_per_s else f"{s.concurrency} in flight"
    t = Table(
        title=f"{result.model}: {OBJECTIVES[result.objective]}; ISL {s.isl_tokens:,} OSL {s.osl_tokens:,}, {load} "
        f"({'strict' if s.strict else 'best-effort'}; ceilings-based, no efficiency records)",
        title_justify="left",
    )
    for c in (
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
    ):
        t.add_column(
            c,
            justify="left" if c in ("hardware", "topo", "stack", "tp/ep/dp", "SLA") else "right",
            no_wrap=c != "SLA",
            min_width=12 if c == "SLA" else None,
        )
    tput = result.objective == "throughput"
    if tput:
        t.add_column("max batch", justify="right")
        t.add_column("max tok/s/chip", justify="right")
    for r in result.ranked:
        q, cost = r.sla_row(), r.cost_row()
        t.add_row(
            str(r.rank),
            r.hardware,
            r.topology,
            str(r.chips),
            f"{r.tp}/{r.ep}/{r.dp}",
            r.stack,
            _f(q.ttft_ms, ",.0f"),
            _f(q.tpot_ms, ".2f"),
            "-" if q.request_latency_ms is None else f"{q.request_latency_ms / 1e3:,.1f}",
            _f(q.output_tokens_per_s_per_chip),
            _f(cost.usd_per_hour, ",.2f", "n/a"),
            _f(cost.usd_per_million_output_tokens, ",.2f", "n/a" if cost.usd_per_hour is None else "-"),
            _f(cost.usd_per_million_input_tokens, ",.2f", "n/a" if cost.usd_per_hour is None else "-"),
            "meets" if q.meets else escape(", ".join(short_miss(x) for x in q.misses)),
            *([_f(q.throughput_batch, ","), _f(q.throughput_tokens_per_s_per_chip)] if tput else []),
            style="bold green" if r.rank == 1 and q.meets else None,
        )
    return t


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
                result.pareto, title="Pareto front: tokens/s per user vs tokens/s per chip (ceilings-based)"
            )
        )
    d = result.disaggregated
    if d is not None:
        t = Table(
            title=f"Disaggregated alternative ({d.instance} instances) vs the aggregated pick", title_justify="left"
        )
        for c in ("", "chips", "TTFT ms", "TPOT ms", "$/hour", "$/M out"):
            t.add_column(c, justify="left" if not c else "right")
        p = d.pools
        t.add_row(
            f"disaggregated: {p.prefill_instances} prefill + {p.decode_instances} decode instance(s), "
            f"ratio {p.ratio_prefill_to_decode:.2f}, decode batch {d.decode_batch}",
            str(d.chips),
            _f(d.ttft_ms),
            _f(d.tpot_ms, ".2f"),
            _f(d.usd_per_hour, ",.2f", "n/a"),
            _f(d.usd_per_million_output_tokens, ",.2f", "n/a"),
        )
        t.add_row(
            "aggregated (the pick)",
            str(d.aggregated_chips),
            _f(d.aggregated_ttft_ms),
            _f(d.aggregated_tpot_ms, ".2f"),
            _f(d.aggregated_usd_per_hour, ",.2f", "n/a"),
            "",
        )
        console.print(t)
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
