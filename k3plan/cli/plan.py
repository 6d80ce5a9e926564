"""`k3plan plan`: search hardware x topologies x (tp, ep, dp) x stacks for a workload; rank."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from k3plan.cli.common import (
    DEFAULT_CONTEXT_TOKENS,
    TOKENS,
    AllowCpuProbesOpt,
    ContextOpt,
    EngramOpt,
    JsonOpt,
    ModelOpt,
    PrefixHitOpt,
    PrefixTierOpt,
    ProbesOpt,
    console,
    print_json,
)
from k3plan.cli.frames import check_csv, csv_option, to_stdout, write_csv
from k3plan.cli.lists import items, whole_numbers
from k3plan.cli.sessions import (
    AnswerTokensOpt,
    DropReasoningOpt,
    ReasoningTokensOpt,
    SystemTokensOpt,
    ToolTokensOpt,
    TurnsOpt,
    UserTokensOpt,
)
from k3plan.errors import K3PlanError

HardwareListOpt = Annotated[
    Optional[str],
    typer.Option(
        "--hardware",
        "-H",
        help="Comma-separated hardware to search (bundled names or spec YAML paths). Default: all bundled.",
    ),
]
StacksOpt = Annotated[
    Optional[str],
    typer.Option(
        "--stacks",
        help="Comma-separated stacks. Default: every bundled stack whose platform is the hardware's kind or 'any'.",
    ),
]
MaxChipsOpt = Annotated[int, typer.Option("--max-chips", help="Largest topology to consider, in chips.")]
MaxPpOpt = Annotated[
    int, typer.Option("--max-pp", help="Largest pipeline (--pp) to search; stages are whole scale-up domains. 1: none.")
]
ConcurrencyOpt = Annotated[int, typer.Option("--concurrency", help="Sequences served at once (the decode batch).")]
TargetOpt = Annotated[
    Optional[float],
    typer.Option(
        "--tpot-ms",
        "--target-tpot-ms",
        help="Time per output token target (ms). Without --isl/--osl: rejects slower decode steps; with them: "
        "checked on the scheduler's TPOT (best-effort unless --strict).",
    ),
]
TtftOpt = Annotated[
    Optional[float], typer.Option("--ttft-ms", help="Time to first token target (ms); needs --isl/--osl.")
]
LatencyOpt = Annotated[Optional[float], typer.Option("--request-latency-ms", help="Whole-request latency target (ms).")]
IslOpt = Annotated[
    Optional[int],
    typer.Option(
        "--isl",
        parser=TOKENS,
        metavar="TOKENS",
        help="Prompt tokens a request (with --osl: the SLA search; --context defaults to ISL + OSL); 4k = 4,096.",
    ),
]
OslOpt = Annotated[
    Optional[int], typer.Option("--osl", parser=TOKENS, metavar="TOKENS", help="Output tokens a request; 1k = 1,024.")
]
RateOpt = Annotated[
    Optional[float], typer.Option("--request-rate", help="Requests a second (open loop) instead of --concurrency.")
]
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Reject rows that miss a target (default: rank them last, with the miss).")
]
PlotOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--plot",
        help="Write the Pareto front (tokens/s per user vs per chip) as a PNG (or SVG: a .svg name); needs "
        "matplotlib: pip install 'k3plan[plot]'.",
    ),
]
EmitOpt = Annotated[
    Optional[tuple[str, Path]],
    typer.Option(
        "--emit",
        help="'launch PATH': write the pick's launch script (vllm serve / sglang / MaxText's JetStream server) to PATH.",
    ),
]
PriceOpt = Annotated[
    Optional[list[str]], typer.Option("--price", help="HW=USD a chip-hour; overrides the spec's price (repeatable).")
]
LoadOpt = Annotated[
    Optional[float],
    typer.Option("--load-gbps", help="Storage bandwidth a host (Gbit/s): cold start and host RAM of the pick."),
]
MinimizeOpt = Annotated[
    Optional[str], typer.Option("--minimize", help="chips (default) or cost (priced hardware only).")
]
MaximizeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--maximize",
        help="tokens-per-chip (at batch = --concurrency) or throughput (largest batch that fits memory and "
        "--tpot-ms; needs --isl/--osl).",
    ),
]
KvDtypesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--kv-dtypes",
        help="Comma-separated KV dtypes to search (bf16, fp8, fp8_ds_mla, fp32), 'all', or 'stack' (default: each stack's own).",
    ),
]
ChunksOpt = Annotated[
    Optional[str],
    typer.Option("--chunks", help="Comma-separated prefill chunk sizes to search (default 8192, as fit)."),
]
CsvOpt = Annotated[Optional[Path], csv_option("the ranked rows", "--csv plan.csv, then pandas.read_csv('plan.csv')")]
TopOpt = Annotated[int, typer.Option("--top", help="How many ranked configurations to show.")]
RankByOpt = Annotated[
    str,
    typer.Option(
        "--rank-by",
        help="best (default: each row's best estimate of its TPOT -- measured or transferred from a serving "
        "benchmark, else the model, else the ceiling -- each figure marked m/t/e/c), ceiling (the decode roofline's "
        "TPOT) or expected (TPOT from the efficiency records k3plan ships plus --probes, the ceiling where none "
        "matches the device kind).",
    ),
]

IncludeUnlaunchableOpt = Annotated[
    bool,
    typer.Option(
        "--include-unlaunchable",
        help="Rank configurations their stack cannot launch as priced too (after every one that can, marked); "
        "by default they are left out (reason launch).",
    ),
]


def _csv(flag: str, text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    return items(flag, text)


def _ints(flag: str, text: Optional[str]) -> Optional[list[int]]:
    return None if text is None else whole_numbers(flag, text)


def objective_from(minimize: Optional[str], maximize: Optional[str]) -> str:
    if minimize is not None and maximize is not None:
        raise K3PlanError("give either --minimize or --maximize, not both")
    if maximize is not None:
        if maximize not in ("tokens-per-chip", "throughput"):
            raise K3PlanError(f"--maximize {maximize!r}: expected tokens-per-chip or throughput")
        return maximize
    if (minimize if minimize is not None else "chips") not in ("chips", "cost"):  # `--minimize=` is not "chips"
        raise K3PlanError(f"--minimize {minimize!r}: expected chips or cost")
    return minimize or "chips"


def command(
    model: ModelOpt = "kimi-k3",
    hardware: HardwareListOpt = None,
    stacks: StacksOpt = None,
    max_chips: MaxChipsOpt = 1024,
    max_pp: MaxPpOpt = 8,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    concurrency: ConcurrencyOpt = 1,
    target_tpot_ms: TargetOpt = None,
    minimize: MinimizeOpt = None,
    maximize: MaximizeOpt = None,
    kv_dtypes: KvDtypesOpt = None,
    chunks: ChunksOpt = None,
    top: TopOpt = 10,
    ttft_ms: TtftOpt = None,
    request_latency_ms: LatencyOpt = None,
    isl: IslOpt = None,
    osl: OslOpt = None,
    request_rate: RateOpt = None,
    strict: StrictOpt = False,
    plot: PlotOpt = None,
    emit: EmitOpt = None,
    price: PriceOpt = None,
    load_gbps: LoadOpt = None,
    turns: TurnsOpt = None,
    user_tokens: UserTokensOpt = 0,
    answer_tokens: AnswerTokensOpt = 0,
    reasoning_tokens: ReasoningTokensOpt = 0,
    tool_tokens: ToolTokensOpt = 0,
    system_tokens: SystemTokensOpt = 0,
    drop_reasoning: DropReasoningOpt = False,
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    prefix_hit: PrefixHitOpt = None,
    prefix_tier: PrefixTierOpt = "hbm",
    rank_by: RankByOpt = "best",
    csv: CsvOpt = None,
    include_unlaunchable: IncludeUnlaunchableOpt = False,
    engram: EngramOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Which machine, split and stack? Search every bundled (or listed) hardware, its standard
    topologies up to --max-chips, every (tp, ep, dp) and stack; rank what fits. Exit 0 with a
    recommendation, 1 if nothing passes, 2 on bad input.

    \b
    Examples:
      k3plan plan --context 131072                          K3 at 131,072 tokens, fewest chips
      k3plan plan --concurrency 64 --target-tpot-ms 50      64 sequences, 50 ms a token at most
      k3plan plan -H tpu-v7x,nvidia-b200 --maximize tokens-per-chip
      k3plan plan --minimize cost --json
      k3plan plan -H tpu-v7x --rank-by expected --probes k3plan-probes   your records added to the shipped ones
      k3plan plan --ttft-ms 2000 --tpot-ms 50 --isl 4000 --osl 500 --request-rate 2 --plot pareto.png
      k3plan plan --isl 4000 --osl 500 --concurrency 32 --strict --price nvidia-gb300-nvl72=6 --emit launch run.sh
      k3plan plan --turns 20 --user-tokens 800 --answer-tokens 1200 --reasoning-tokens 6000
                                                            size for sessions at their last turn
      k3plan plan --isl 32000 --osl 500 --concurrency 8 --prefix-hit 0.8   the pick's TTFT with 80% of prompts cached
      k3plan plan -H tpu-v7x,nvidia-b200 --isl 4000 --osl 500 --csv plan.csv   the ranked rows for pandas

    With --turns (and the token counts a turn), the context planned for is the session's peak
    context at its last turn: K3 carries earlier reasoning back, so it grows faster than the
    visible conversation (--drop-reasoning to compare).
    """
    check_csv(csv, json_out=json_out)
    if emit is not None and emit[0] != "launch":
        raise K3PlanError(f"--emit {emit[0]!r}: expected 'launch PATH'")
    if emit is not None:  # before the search: a folder or a missing folder is bad input now, not after it
        from k3plan.io_safe import check_target

        check_target(Path(emit[1]), label="--emit launch")
    if plot is not None and (isl is None or osl is None):
        raise K3PlanError("--plot: the Pareto front needs --isl and --osl (tokens/s per user comes from the scheduler)")
    if plot is not None:
        from k3plan.deploy.chart import chart_format
        from k3plan.extras import require_matplotlib
        from k3plan.io_safe import check_target

        chart_format(plot)  # .png or .svg, checked before the search
        check_target(Path(plot), label="--plot")  # a folder, a FIFO, a device or a link, too
        require_matplotlib("--plot")
    from k3plan.app.plan import PlanQuestion, answer

    a = answer(
        PlanQuestion(
            model=model,
            hardware=_csv("--hardware", hardware),
            stacks=_csv("--stacks", stacks),
            max_chips=max_chips,
            max_pp=max_pp,
            context=context,
            context_given=context != DEFAULT_CONTEXT_TOKENS,
            concurrency=concurrency,
            target_tpot_ms=target_tpot_ms,
            objective=objective_from(minimize, maximize),
            kv_dtypes=_csv("--kv-dtypes", kv_dtypes),
            chunks=_ints("--chunks", chunks),
            top=top,
            ttft_ms=ttft_ms,
            request_latency_ms=request_latency_ms,
            isl=isl,
            osl=osl,
            request_rate=request_rate,
            strict=strict,
            price=list(price or []),
            load_gbps=load_gbps,
            turns=turns,
            user_tokens=user_tokens,
            answer_tokens=answer_tokens,
            reasoning_tokens=reasoning_tokens,
            tool_tokens=tool_tokens,
            system_tokens=system_tokens,
            drop_reasoning=drop_reasoning,
            probes=probes,
            allow_cpu_probes=allow_cpu_probes,
            prefix_hit=prefix_hit,
            prefix_tier=prefix_tier,
            rank_by=rank_by,
            include_unlaunchable=include_unlaunchable,
            engram=engram,
        )
    )
    result, advice, ph = a.result, a.advice, a.prefix_hit
    written, skipped = [], []
    if plot is not None:
        if result.pareto:
            from k3plan.deploy.pareto import plot_pareto

            written.append(str(plot_pareto(plot, result.pareto, front=result.pareto)))
        else:
            skipped.append(f"--plot {plot}: not written, no configuration passes")
    if emit is not None:
        if result.launch is not None and result.launch.config is not None:
            from k3plan.engines.launch import write_launch

            written.append(str(write_launch(emit[1], result.launch.config)))
        elif result.launch is not None:
            raise K3PlanError(f"--emit launch: {result.launch.error}")
        else:
            skipped.append(f"--emit launch {emit[1]}: not written, no configuration passes")
    if csv is not None:
        from k3plan.api import plan_table

        wrote_csv = write_csv(plan_table(a), csv)
        if wrote_csv is not None:
            written.append(wrote_csv)
    if to_stdout(csv):  # the CSV is stdout: what else was written goes to stderr
        from k3plan.cli.common import err_console

        for w in written:
            err_console.print(f"wrote {w}")
        for w in skipped:
            err_console.print(f"[yellow]{w}[/]")
    elif json_out:
        from k3plan.advice.plan_output import PlanOutput

        print_json(PlanOutput.of(result, advice=advice, prefix_hit=ph))
    else:
        from k3plan.advice.plan import render_plan_advice
        from k3plan.plan.render import render_plan

        render_plan(result, console)
        if advice is not None:
            render_plan_advice(advice, console)
        from k3plan.report.prefix_table import render_prefix_hit

        render_prefix_hit(ph, prefix_hit, console)
        for w in written:
            console.print(f"wrote {w}")
        for w in skipped:
            console.print(f"[yellow]{w}[/]")
    if a.exit_code:
        raise typer.Exit(a.exit_code)
