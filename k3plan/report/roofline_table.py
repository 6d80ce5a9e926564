"""Terminal rendering of a roofline result."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from k3plan.report.roofline_summary import bound_label, print_prose
from k3plan.tables import Column, build_table, figure
from k3plan.units import GiB, fmt_gib, fmt_gib_sig, fmt_tokens

if TYPE_CHECKING:
    from k3plan.advice.roofline_output import RooflineResult


COLUMNS = (Column("quantity"), figure("value"), Column("note", overflow="fold", max_width=60))


def _ms(s: float) -> str:
    return f"{s * 1e3:,.3f}"


def render_roofline(r: RooflineResult, console: Console) -> None:
    d, p, par = r.decode, r.prefill, r.parallel
    console.print(
        f"[bold]{r.model}[/] on [bold]{r.hardware} {r.topology}[/] ({r.chips} chips), "
        f"{par.label}, stack {r.stack}, "
        f"MFU {r.efficiency.mfu:.0%}, HBM efficiency {r.efficiency.bw_efficiency:.0%}"
    )
    b, c = d.bytes_per_device, d.comm
    rows = [
        ("bytes a device a step", fmt_gib(b.total(), 3), ", ".join(f"{k} {v / GiB:,.3f}" for k, v in b.items())),
        (
            "experts touched a layer",
            f"{d.experts_touched_per_layer:,.1f}",
            "E (1 - (1 - k/E)^B), uniform routing unless a histogram is given",
        ),
        ("memory time", _ms(d.memory_s) + " ms", "bytes / HBM bandwidth a device"),
        ("compute time", _ms(d.compute_s) + " ms", f"FLOPs {d.flops_per_device.total() / 1e12:,.3f} T a device"),
        (
            "collectives",
            _ms(c.latency_time_s + c.bandwidth_time_s) + " ms",
            f"{c.calls_per_step} calls ({c.expert_calls_per_step} {_expert_calls(c)}) x {c.latency_s_per_call * 1e6:.2f} us "
            f"({escape(c.latency_source)}) + {fmt_gib_sig(c.bytes_per_chip_per_step)} a chip over {c.link_name}"
            if len(c.links) < 2
            else f"{c.calls_per_step} calls ({c.expert_calls_per_step} {_expert_calls(c)}), by link: "
            + "; ".join(
                f"{x.link_name}: {x.calls_per_step} x {x.latency_s_per_call * 1e6:.2f} us ({escape(x.latency_source)}) + "
                f"{fmt_gib_sig(x.bytes_per_chip_per_step)} a chip ({', '.join(x.collectives)})"
                for x in c.links
            ),
        ),
    ]
    if c.pipeline_calls_per_step:
        rows.append(
            (
                "stage-to-stage sends",
                _ms(c.pipeline_time_s) + " ms",
                f"{c.pipeline_calls_per_step} send(s) of {fmt_gib_sig(c.pipeline_bytes_per_chip_per_step)} a chip "
                f"in all over {c.pipeline_link} (pp={par.pp}: the batch as {par.pp} microbatches, the step "
                "summed over the stages)",
            )
        )
    rows += [
        (
            # issue 48: max(memory, compute at --mfu) + collectives, overlapped: an estimate at the assumed
            # efficiencies, not the ceiling (the op-serial one, in the expected table below)
            "roofline bound",
            f"{_ms(d.step_s)} ms",
            f"binding: {d.binding}; communication {d.comm_share:.1%} of the step; {bound_label(r.efficiency)}",
        ),
        # issue 38: the one TPOT stood behind, labelled (the roofline bound above where no serving benchmark speaks)
        (
            "[bold]TPOT[/]",
            f"[bold]{_ms(d.tpot_s)} ms[/]",
            escape(_stood(d.tpot_label, r.efficiency) or "the roofline bound"),
        ),
        ("throughput", f"{d.tokens_per_s:,.0f} tok/s", f"{d.tokens_per_s_per_chip:,.1f} tok/s a chip"),
        (
            "study view (ideal)",
            _ms(d.ideal_step_s) + " ms",
            f"one copy of {fmt_gib(d.ideal_bytes_per_step.total())} over all chips' bandwidth, no collectives",
        ),
    ]
    title = f"decode: batch {d.batch:,} at context {d.context_tokens:,} (per device, slowest device)"
    console.print(build_table(COLUMNS, rows, title=title))
    rows = [
        (
            "FLOPs a token",
            f"{(p.linear_flops_per_token + p.attention_flops_per_token) / 1e9:,.1f} G",
            f"linear {p.linear_flops_per_token / 1e9:,.1f} G + attention {p.attention_flops_per_token / 1e9:,.1f} G",
        ),
        ("throughput", f"{p.tokens_per_s:,.0f} tok/s", f"linear only: {p.tokens_per_s_linear_only:,.0f} tok/s"),
        (
            # issue 48: the study's estimate at --mfu, not a ceiling: the expected table's op-serial ceiling is one
            "roofline bound",
            f"{_ms(p.ttft_s if p.ceiling_ttft_s is None else p.ceiling_ttft_s)} ms",
            "max(compute, link time) + collective latency"
            + (" and stage-to-stage sends" if p.comm.pipeline_calls_per_step else "")
            + f" of every chunk; {bound_label(r.efficiency)}",
        ),
        # issue 38 / 33: the one TTFT printed, labelled measured, transferred, model or the roofline bound
        (
            "[bold]time to first token[/]",
            f"[bold]{_ms(p.ttft_s)} ms[/]",
            escape(_stood(p.ttft_label, r.efficiency) or "the roofline bound"),
        ),
        (
            "collective traffic a chip",
            f"{p.comm_bytes_per_s_per_chip / 1e9:,.2f} GB/s",
            f"{p.link_share:.1%} of {p.comm.link_name} one-way"
            + ("" if p.feasible else " — INFEASIBLE: " + p.note)
            + (" — link-bound" if p.feasible and p.link_share > 1 else ""),
        ),
    ]
    # the study's method (docs/k3-facts.md §5): the model's FLOPs split evenly at the MFU, over the devices that
    # run one prompt (its DP group; the routed experts over the EP group); the expected table below counts each
    # op a device runs, so a stack's replicated work shows there only
    where = (
        f"all {p.devices:,} devices"
        if p.devices == p.expert_devices == r.parallel.total_devices
        else f"its DP group's {p.devices:,} devices, the routed experts over {p.expert_devices:,}"
    )
    title = (
        f"prefill: prompt {p.prompt_tokens:,} in {p.chunks} chunk(s) of {p.chunk_tokens:,} (the model's FLOPs "
        f"split evenly over {where} at MFU {r.efficiency.mfu:.0%}; work a stack replicates on every device is in "
        "the expected table below)"
    )
    console.print(build_table(COLUMNS, rows, title=title))
    lc = r.long_context
    ratios = ", ".join(f"{fmt_tokens(e.context_tokens)} tokens {e.ratio:.2f}x" for e in lc.ratio_by_context)
    at = (
        f"overtake the linear part at {lc.crossover_tokens:,.0f} tokens"
        if lc.crossover_tokens is not None
        else "never overtake the linear part (no MLA layer)"
    )
    print_prose(console, f"long context: absorbed-MLA attention FLOPs {at} ({ratios})")
    for note in r.probes:
        print_prose(console, f"[cyan]probe:[/] {note}", markup=True)
    for note in r.notes + ([p.note] if p.note else []):
        if note.startswith("warning: "):  # a note the workload should not pass unread (as fit's warnings)
            print_prose(console, f"[bold yellow]warning:[/] {escape(note.removeprefix('warning: '))}")
        else:
            print_prose(console, f"[dim]note: {escape(note)}[/]")
    x = r.expected
    for stage, bound, model in (
        ("decode", d.step_s, x.decode.expected_s),
        ("prefill", p.ceiling_ttft_s, x.prefill.expected_s),
    ):
        if bound is not None and model < bound:  # issue 48: the bound assumes its MFU; the model prices the ops
            print_prose(
                console,
                f"[dim]note: the {stage} model ({_ms(model)} ms) is below the roofline bound ({_ms(bound)} ms): the "
                f"bound runs the FLOPs at the assumed MFU {r.efficiency.mfu:.0%}, the model at the spec's peak or a "
                "probe record's efficiency; the ceiling is the op-serial one (expected table)[/]",
            )


def _expert_calls(c) -> str:
    """What the MoE layers' calls are: the pattern's one collective, or vLLM's all-gather +
    reduce-scatter (DP group) and the TP all-reduce after them."""
    if c.pattern == "allgather_reducescatter":
        return "MoE: all-gather + reduce-scatter over DP, all-reduce over TP"
    return c.op.value


def _stood(label: str, eff) -> str:
    """A figure stood behind, labelled: speed.serving's "ceiling" fallback is the roofline bound (issue 48)."""
    if label.startswith("ceiling: "):
        return (
            "roofline bound: "
            + re.sub(r"^roofline's \w+ bound ", "", label.removeprefix("ceiling: "))
            + (f" ({bound_label(eff)})")
        )
    return label
