"""The report's deployment section (issue 13): the Pareto front of tokens/s per user vs tokens/s
per chip over the report's platforms, as a plot and a table, and a cost table: each platform's pick as the
summary has it (issue 48: one pick and one $/M a platform in the whole document; the table used plan's own first
row at the request shape, another pick and a third $/M), USD an hour, per million decode and prefill tokens and
where the price comes from.

It runs ``k3plan plan`` with latency figures for one request shape, stated in the section:
REQUEST_ISL / REQUEST_OSL below are a chat-like request (4,000 prompt tokens, 500 output tokens,
the shape of the issue's done-when command), not a measured workload; best-effort, no targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from k3plan.report.doc import Block

if TYPE_CHECKING:
    from k3plan.plan.rows import PlanRow
    from k3plan.report.capacity_model import PlatformReport

REQUEST_ISL = 4000  # prompt tokens a request (stated in the section; not a measured workload)
REQUEST_OSL = 500  # output tokens a request


def _usd(v) -> str:
    return "n/a" if v is None else f"{v:,.2f}"


def deployment_blocks(
    *,
    model: str,
    hardware: Sequence[str],
    stacks: Sequence[str] | None,
    concurrency: int,
    max_chips: int,
    plot_path: Path,
    prices: dict[str, float] | None = None,
    reports: Sequence[PlatformReport] | None = None,
    engram: str | None = None,
) -> tuple[list[Block], list[Path]]:
    """(blocks, files written): the section and its Pareto plot (written here). ``reports``: the platforms'
    capacity reports, whose summary pick each the cost table prices (else plan's first row a platform)."""
    from k3plan.deploy.pareto import plot_pareto
    from k3plan.extras import have
    from k3plan.plan import plan

    res = plan(
        model=model,
        hardware=list(hardware),
        stacks=list(dict.fromkeys(stacks)) if stacks else None,
        max_chips=max_chips,
        context=REQUEST_ISL + REQUEST_OSL,
        concurrency=concurrency,
        isl=REQUEST_ISL,
        osl=REQUEST_OSL,
        top=10**6,
        prices=prices or {},
        engram=engram,
    )
    blocks: list[Block] = [
        ("h2", "Deployment: Pareto front and cost"),
        (
            "p",
            (
                f"Request shape: {REQUEST_ISL:,} prompt tokens, {REQUEST_OSL:,} output tokens, {concurrency} in flight "
                f"(closed loop), context {REQUEST_ISL + REQUEST_OSL:,}. Latency and throughput are each row's best "
                "estimate under the load (`k3plan plan --isl --osl`): a serving benchmark's, else the vLLM V1 "
                "scheduler on the model's step where a probe record sets its ops, else on the ceilings (the decode "
                "roofline and the prefill compute ceiling)."
            ),
        ),
    ]
    files: list[Path] = []
    if res.pareto and have("matplotlib"):  # without it the table below carries the front (the report says so)
        files.append(plot_pareto(plot_path, res.pareto, front=res.pareto))
        blocks.append(("img", plot_path, "Pareto front: tokens/s per user vs tokens/s per chip"))
    if res.pareto:
        blocks.append(
            (
                "table",
                ["hardware", "topology", "split", "stack", "chips", "tok/s/user", "tok/s/chip", "$/hour"],
                [
                    [
                        p.hardware,
                        p.topology,
                        p.split,
                        p.stack,
                        str(p.chips),
                        f"{p.tokens_per_s_per_user:,.1f}",
                        f"{p.tokens_per_s_per_chip:,.1f}",
                        _usd(p.usd_per_hour),
                    ]
                    for p in res.pareto
                ],
            )
        )
    else:
        blocks.append(("p", "No configuration fits: no Pareto front."))
    if reports is not None:
        return blocks + summary_cost_blocks(reports), files
    best: dict[str, PlanRow] = {}  # hardware -> its first ranked row
    for ranked in res.ranked:  # ranked fewest chips first: the first row of each platform is its pick
        best.setdefault(ranked.hardware, ranked)
    price = {p.hardware: p for p in res.prices}
    rows = []
    for hw in res.search.hardware:
        p = price[hw]
        r = best.get(hw)
        source = p.source if p.usd_per_chip_hour is not None else f"n/a: {p.source}"
        if r is None:
            rows.append([hw, _usd(p.usd_per_chip_hour), "no fit", "-", "-", "-", "-", source])
            continue
        c = r.cost_row()
        rows.append(
            [
                hw,
                _usd(p.usd_per_chip_hour),
                f"{r.topology} {r.split_text} {r.stack}",
                str(r.chips),
                _usd(c.usd_per_hour),
                _usd(c.usd_per_million_output_tokens),
                _usd(c.usd_per_million_input_tokens),
                source,
            ]
        )
    blocks += [
        ("h3", "Cost"),
        ("table", ["hardware", "$/chip-hour", "pick", "chips", "$/hour", "$/M out", "$/M in", "price source"], rows),
        (
            "p",
            (
                "Per million tokens: the whole hourly cost charged to the token kind (output or input) at the "
                "pick's steady-state rate. n/a: the spec has no public price; `k3plan plan --price HW=USD` "
                "fills it."
            ),
        ),
    ]
    return blocks, files


def summary_cost_blocks(reports: Sequence[PlatformReport]) -> list[Block]:
    """The cost table over the summary's picks: each platform's first context that fits, its smallest viable
    topology and split, and the very $/M figures the summary and the findings print (decode at the most sequences
    that fit, prefill of the context's prompt), each with the source of the time it divides by."""
    from k3plan.deploy.prices import price_for
    from k3plan.hardware import load_hardware
    from k3plan.report.capacity_findings import Viable

    rows = []
    for r in reports:
        # the spec's price and its dated source, or why there is none (as plan's cost columns say it)
        p = price_for(load_hardware(r.hardware), {})
        source = p.source if p.usd_per_chip_hour is not None else f"n/a: {p.source}"
        v = next((x for x in (Viable.of(row) for row in r.rows) if x is not None), None)
        if v is None:
            rows.append([r.hardware, _usd(r.price_usd_per_chip_hour), "no fit", "-", "-", "-", "-", "-", source])
            continue
        s, most, pre = v.setup, v.most, v.prefill
        hour = None if r.price_usd_per_chip_hour is None else r.price_usd_per_chip_hour * s.chips
        rows.append(
            [
                r.hardware,
                _usd(r.price_usd_per_chip_hour),
                f"{s.topology} {s.split} {r.stack} @ {v.row.context_tokens:,}",
                str(s.chips),
                _usd(hour),
                f"{_usd(most.usd_per_mtok)} (B={most.batch:,})",
                _usd(pre.usd_per_mtok),
                f"decode {most.tpot_source}, prefill {pre.ttft_source}",
                source,
            ]
        )
    return [
        ("h3", "Cost"),
        (
            "table",
            [
                "hardware",
                "$/chip-hour",
                "pick (the summary's, at its first context)",
                "chips",
                "$/hour",
                "$/M decode",
                "$/M prefill",
                "time source",
                "price source",
            ],
            rows,
        ),
        (
            "p",
            "Per million tokens: the whole hourly cost charged to the token kind at the pick's rate: decode at the most "
            "sequences that fit, prefill of the context's prompt -- the figures of the summary and the findings (one "
            "pick and one figure a platform in this report; the Pareto front above is priced by the hour only). "
            "Time source: ceiling = the roofline bound, model = the ops against efficiency records, measured / "
            "transferred = a serving benchmark's median (at, or carried to, this workload). n/a: "
            "the spec has no public price; `k3plan plan --price HW=USD` fills it.",
        ),
    ]
