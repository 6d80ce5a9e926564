"""`k3plan roofline`: decode and prefill time bounds, the binding roof, the communication share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from k3plan.cli.common import (
    DEFAULT_CONTEXT_TOKENS,
    AcceptanceOpt,
    AllowCpuProbesOpt,
    BatchOpt,
    ChunkOpt,
    ContextOpt,
    DraftBytesOpt,
    DraftKvOpt,
    JsonOpt,
    PrefixHitOpt,
    PrefixTierOpt,
    ProbesOpt,
    SpecTokensOpt,
    console,
    print_json,
    with_setup_options,
)


@with_setup_options
def command(
    setup_options: dict,
    batch: BatchOpt = 1,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    chunk: ChunkOpt = None,
    mfu: Annotated[float, typer.Option("--mfu", help="Fraction of peak FLOP/s achieved, 0.001 to 1.")] = 0.3,
    bw_efficiency: Annotated[
        float, typer.Option("--bw-efficiency", help="Fraction of HBM bandwidth achieved, 0.001 to 1.")
    ] = 1.0,
    dtype: Annotated[str, typer.Option("--dtype", help="Matmul dtype for the compute roof: bf16 or fp8.")] = "bf16",
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    ignore_fit: Annotated[
        bool,
        typer.Option(
            "--ignore-fit",
            help="Print the bounds even for a workload that does not fit (comparisons with studies that assume it does); the output says it does not fit.",
        ),
    ] = False,
    router_histogram: Annotated[
        Path | None,
        typer.Option("--router-histogram", help="JSON list of per-expert selection counts; default uniform routing."),
    ] = None,
    spec_tokens: SpecTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_bytes: DraftBytesOpt = None,
    draft_kv_bytes_per_token: DraftKvOpt = None,
    prefix_hit: PrefixHitOpt = None,
    prefix_tier: PrefixTierOpt = "hbm",
    json_out: JsonOpt = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Print every record and term (the bounds, the expected table, the model's terms and the gap, notes); "
            "the default is the answer first in about 25 lines.",
        ),
    ] = False,
) -> None:
    """Decode and prefill speed: the TPOT and TTFT k3plan stands behind (measured, transferred, the model or
    the roofline bound), each with its band, the model and the ceiling, then the model's largest terms;
    --verbose adds the bounds (bytes, FLOPs and collectives per step, which roof binds) and every record and
    term. Only for a workload that fits (k3plan fit's verdict); otherwise it says why and exits 1.

    \b
    Examples:
      k3plan roofline -t 2x4x4 --tp 32                        batch 1 decode, 131,072-token context
      k3plan roofline -t 2x2x4 --tp 32 --batch 1 --context 8192 --chunk 512 --verbose   every record and term
      k3plan roofline -t 2x4x4 --tp 32 --batch 8 --context 32768
      k3plan roofline -t 2x4x4 --stack dp-attention --tp 8 --probes k3plan-probes   your records added to the shipped ones
      k3plan roofline -t 2x4x4 --mfu 0.45 --dtype fp8 --json
      k3plan roofline -t 2x4x4 --tp 32 --batch 8 --spec-tokens 3 --acceptance 0.8 --draft-bytes 0
      k3plan roofline -t 2x4x4 --tp 32 --prefix-hit 0.9 --prefix-tier host
      k3plan roofline -t 2x2x2 --tp 16   does not fit: says why (exit 1)
    """
    from k3plan.app.roofline import RooflineQuestion, answer

    a = answer(
        RooflineQuestion(
            setup_options=setup_options,
            context=context,
            batch=batch,
            chunk=chunk,
            mfu=mfu,
            bw_efficiency=bw_efficiency,
            dtype=dtype,
            probes=probes,
            allow_cpu_probes=allow_cpu_probes,
            ignore_fit=ignore_fit,
            router_histogram=router_histogram,
            spec_tokens=spec_tokens,
            acceptance=acceptance,
            draft_bytes=draft_bytes,
            draft_kv_bytes_per_token=draft_kv_bytes_per_token,
            prefix_hit=prefix_hit,
            prefix_tier=prefix_tier,
        )
    )
    if a.refusal is not None:
        if json_out:
            print_json(a.refusal)
        else:
            from k3plan.units import fmt_gib

            console.print(
                f"[bold red]DOES NOT FIT[/]: {a.refusal.reason} (free {fmt_gib(a.refusal.free_bytes)} a "
                f"device at batch {a.workload.batch} x context {a.workload.context_tokens:,}); no speed figure for "
                "a workload that does not fit — see k3plan fit"
            )
        raise typer.Exit(a.exit_code)
    result = a.result
    assert result is not None
    sd, advice, dec, why = result.spec_decode, result.advice, result.decode, result.fit_reason
    if json_out:
        print_json(result)
        return
    if not verbose:
        _render_default(result, console, prefix_hit=prefix_hit)
        return
    from k3plan.report.roofline_table import render_roofline

    render_roofline(result, console)
    from k3plan.report.expected_table import render_expected

    render_expected(result.expected, console)
    from k3plan.report.serving_table import render_serving

    render_serving(result.serving, console)
    from rich.markup import escape

    from k3plan.advice.render import (
        bytes_share_line,
        render_advice_rules,
        spec_decode_lines,
    )

    for line in spec_decode_lines(sd) if sd else []:
        console.print(escape(line))
    render_advice_rules(advice, console)
    from k3plan.report.prefix_table import render_prefix_hit

    render_prefix_hit(result.prefix_hit, prefix_hit, console)
    if dec.binding == "memory":
        console.print(escape("  " + bytes_share_line(dec)))
    if not result.fits:
        console.print(
            f"[bold red]warning:[/] the workload DOES NOT FIT ({why}); bounds printed because of --ignore-fit"
        )


def _render_default(result, console, *, prefix_hit) -> None:
    """The answer first (report.roofline_summary), then what was asked beyond the plain point (speculative
    decoding, the prefix cache) and every warning; the rest under --verbose."""
    from rich.markup import escape

    from k3plan.report.roofline_summary import render_summary, width

    r, p = result, result.prefill
    warnings = [n.removeprefix("warning: ") for n in r.notes if n.startswith("warning: ")]
    if not p.feasible:
        warnings.append("prefill INFEASIBLE: " + p.note)
    if not r.fits:
        warnings.append(f"the workload DOES NOT FIT ({r.fit_reason}); bounds printed because of --ignore-fit")
    warnings += list(r.advice.warnings)
    assert r.serving is not None
    render_summary(
        console,
        head=(f"{r.model} on {r.hardware} {r.topology} ({r.chips} chips), {r.parallel.label}, stack {r.stack}"),
        decode=r.decode,
        prefill=p,
        expected=r.expected,
        serving=r.serving,
        eff=r.efficiency,
        warnings=warnings,
    )
    w = width(console)
    if r.spec_decode:
        from k3plan.advice.render import spec_decode_lines

        for line in spec_decode_lines(r.spec_decode):
            console.print(escape(line), width=w)
    if r.prefix_hit is not None:
        from k3plan.report.prefix_table import render_prefix_hit

        render_prefix_hit(r.prefix_hit, prefix_hit, console)
