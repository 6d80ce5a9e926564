"""A capacity report's text: summary, findings, per-platform sections, provenance (as doc blocks)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from k3plan.report.capacity_expected import cell as expected_cell
from k3plan.report.capacity_expected import note as expected_note
from k3plan.report.capacity_findings import Viable, findings
from k3plan.report.capacity_model import ContextRow, PlatformReport
from k3plan.report.doc import Block
from k3plan.units import GiB, counted, fmt_tokens

TERM_NAMES = {
    "weights_bytes": "weights",
    "kv_bytes": "KV cache",
    "state_bytes": "KDA state",
    "temp_bytes": "temporaries",
    "reserve_bytes": "engine reserve",
    "free_bytes": "free (headroom)",
}


def gib(n: float) -> str:
    return f"{n / GiB:,.1f}"


def usd(v: Optional[float]) -> str:
    return "—" if v is None else f"${v:,.2f}"


def longest(row: ContextRow) -> str:
    """Memory's longest context, capped (and said so) at the model's max_position_embeddings."""
    cap = row.model_max_context_tokens
    if cap and row.max_context_tokens > cap:
        return f"{cap:,} (model max; memory allows {row.max_context_tokens:,})"
    return f"{row.max_context_tokens:,}"


SOURCE_LEGEND = (
    "Source: the kind of evidence each time (and the tokens/s and $/M from it) rests on -- ceiling = the roofline's "
    "bound at the priced efficiencies, model = the ops priced against efficiency records, measured = a serving "
    "benchmark's median at this configuration, transferred = one carried to this workload by the model's ratio; a "
    "ceiling is a lower bound on the time, so rows of different sources are not like for like."
)


def sources(v: Viable) -> str:
    """The sources of a summary row's decode (one sequence / the most) and TTFT, once when they agree."""
    kinds = [v.decode.tpot_source, v.most.tpot_source, v.prefill.ttft_source]
    if len(set(kinds)) == 1:
        return kinds[0]
    return f"{kinds[0]} / {kinds[1]}, {kinds[2]}"


def summary_table(reports: Sequence[PlatformReport]) -> Block:
    headers = [
        "platform",
        "stack",
        "context",
        "smallest viable",
        "chips",
        "split (tp/ep/dp, pp)",
        "free GiB a device",
        "most sequences",
        "longest context",
        "decode tok/s (1 seq)",
        "decode tok/s (most seqs)",
        "TTFT (s)",
        "source (decode 1 / most, TTFT)",
        "$ / M decode tokens",
    ]
    rows = []
    for r in reports:
        for row in r.rows:
            v = Viable.of(row)
            if v is None:
                rows.append([r.hardware, r.stack, fmt_tokens(row.context_tokens), "does not fit"] + ["—"] * 10)
                continue
            s, full = v.setup, v.most
            rows.append(
                [
                    r.hardware,
                    r.stack,
                    fmt_tokens(row.context_tokens),
                    s.topology,
                    str(s.chips),
                    s.split,
                    gib(v.terms.free_bytes),
                    f"{row.max_sequences:,}",
                    longest(row),
                    f"{v.decode.tokens_per_s:,.0f}",
                    f"{full.tokens_per_s:,.0f} (B={full.batch})",
                    f"{v.prefill.ttft_s:,.1f}",
                    sources(v),
                    usd(full.usd_per_mtok),
                ]
            )
    return ("table", headers, rows)


def platform_blocks(r: PlatformReport, *, concurrency: int) -> list[Block]:
    out: list[Block] = [("h2", f"{r.hardware} ({r.kind.upper()}, stack {r.stack})")]
    price = (
        f"price: ${r.price_usd_per_chip_hour:,.2f} a chip-hour ({r.price_source})"
        if r.price_usd_per_chip_hour is not None
        else "price: none in the hardware spec, so no cost per token is given"
    )
    out.append(("p", f"{r.candidates_tried} (topology, split) candidates evaluated; {price}."))
    for row in r.rows:
        out.append(("h3", f"{fmt_tokens(row.context_tokens)}-token context, {concurrency} sequence(s)"))
        v = Viable.of(row)
        if v is None:
            out.append(("p", f"**K3 cannot be served here at this context**: {row.reason}."))
            continue
        s = v.setup
        out.append(
            (
                "p",
                f"Smallest viable: **{s.topology}** ({counted(s.chips, 'chip')}, {counted(s.devices, 'device')}, "
                f"{counted(s.hosts, 'host')}), tp={s.tp} ep={s.ep} dp={s.dp}"
                + (f" pp={s.pp}" if s.pp > 1 else "")
                + ". Longest context with "
                f"{concurrency} sequence(s): {longest(row)} tokens; most sequences of "
                f"{row.context_tokens:,} tokens: {row.max_sequences:,}.",
            )
        )
        usable = row.usable_bytes_per_device
        out.append(
            (
                "table",
                ["term", "GiB a device", "% of usable HBM"],
                [[TERM_NAMES[k], gib(n), f"{100 * n / usable:,.1f}%"] for k, n in v.terms.items()]
                + [["usable HBM", gib(usable), "100.0%"]],
            )
        )
        rows = []
        assert row.decode is not None  # Viable.of checked it
        for label, d in row.decode.points():
            rows.append(
                [
                    f"decode, batch {d.batch:,}" + (" (most that fit)" if label == "full" else ""),
                    f"{d.tokens_per_s:,.0f}",
                    f"{d.tpot_s * 1e3:,.2f} ms ({d.tpot_source})",
                    expected_cell(d.expected_tpot_s, d.expected_measured),
                    f"{d.binding}, collectives {d.comm_share:.0%} of the step",
                    usd(d.usd_per_mtok),
                ]
            )
        p = v.prefill
        rows.append(
            [
                f"prefill, {p.prompt_tokens:,}-token prompt in chunks of {p.chunk_tokens:,}",
                f"{p.tokens_per_s:,.0f}",
                f"TTFT {p.ttft_s:,.2f} s ({p.ttft_source})",
                expected_cell(p.expected_ttft_s, p.expected_measured, seconds=True),
                ("feasible" if p.feasible else "INFEASIBLE") + (f": {p.note}" if p.note else ""),
                usd(p.usd_per_mtok),
            ]
        )
        out.append(
            ("table", ["bound", "tokens/s", "time (source)", "expected", "binding / note", "$ / M tokens"], rows)
        )
        # issue 38: where a serving benchmark speaks for the configuration, the time is its figure (measured, or
        # transferred by the model's ratio), as fit, plan and roofline print it; each says which
        stood = [
            f"TPOT at batch {d.batch:,}: {d.tpot_label}" for _, d in row.decode.points() if d.tpot_source != "ceiling"
        ]
        stood += [f"TTFT: {p.ttft_label}"] if p.ttft_source != "ceiling" else []
        if stood:
            out.append(("ul", stood))
        if row.provenance is not None:
            out.append(("p", expected_note(row.provenance.expected)))
        if row.warnings or row.notes:
            out.append(("ul", [f"warning: {w}" for w in row.warnings] + [f"note: {n}" for n in row.notes]))
    if r.curve:
        out.append(("h3", f"Prefill chunk vs longest context ({r.curve_setup})"))
        out.append(
            (
                "table",
                ["prefill chunk", "prefill temp GiB", "longest context", "most sequences", "status"],
                [
                    [
                        f"{c.chunk_tokens:,}",
                        "—" if c.prefill_temp_bytes is None else gib(c.prefill_temp_bytes),
                        f"{c.max_context_tokens:,}",
                        f"{c.max_sequences:,}",
                        c.status,
                    ]
                    for c in r.curve
                ],
            )
        )
    from k3plan.report.capacity_advice import advice_blocks

    out += advice_blocks(r)
    first = next((row for row in r.rows if row.fits), None)
    if first is not None and first.provenance is not None:
        out.append(("h3", "Where these numbers come from"))
        out.append(("ul", first.provenance.lines() + [f"price: {r.price_source}"]))
    return out


def document(
    reports: Sequence[PlatformReport],
    *,
    title: str,
    intro: list[str],
    plots: list[tuple[Path, str]],
    concurrency: int,
    plots_note: str | None = None,
) -> list[Block]:
    """``plots_note``: said under "Plots" where they were not drawn (matplotlib missing)."""
    blocks: list[Block] = [("h1", title)] + [("p", t) for t in intro]
    blocks += [("h2", "Summary"), summary_table(reports), ("p", SOURCE_LEGEND)]
    blocks += [("h2", "Findings"), ("ul", findings(reports))]
    blocks += [("h2", "Plots")] + [("img", path, alt) for path, alt in plots]
    if plots_note:
        blocks.append(("p", plots_note))
    for r in reports:
        blocks += platform_blocks(r, concurrency=concurrency)
    return blocks
