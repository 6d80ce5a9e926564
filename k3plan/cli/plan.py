"""`k3plan plan`: search hardware x topologies x (tp, ep, dp) x stacks for a workload; rank."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from k3plan.cli.common import DEFAULT_CONTEXT_TOKENS, AllowCpuProbesOpt, ContextOpt, JsonOpt, ModelOpt, ProbesOpt, console, print_json
from k3plan.errors import K3PlanError

HardwareListOpt = Annotated[Optional[str], typer.Option(
    "--hardware", "-H", help="Comma-separated hardware to search (bundled names or spec YAML paths). Default: all bundled.")]
StacksOpt = Annotated[Optional[str], typer.Option(
    "--stacks", help="Comma-separated stacks. Default: every bundled stack whose platform is the hardware's kind or 'any'.")]
MaxChipsOpt = Annotated[int, typer.Option("--max-chips", help="Largest topology to consider, in chips.")]
ConcurrencyOpt = Annotated[int, typer.Option("--concurrency", help="Sequences served at once (the decode batch).")]
TargetOpt = Annotated[Optional[float], typer.Option("--target-tpot-ms", help="Reject configurations slower than this time per output token.")]
MinimizeOpt = Annotated[Optional[str], typer.Option("--minimize", help="chips (default) or cost (priced hardware only).")]
MaximizeOpt = Annotated[Optional[str], typer.Option("--maximize", help="tokens-per-chip.")]
KvDtypesOpt = Annotated[Optional[str], typer.Option(
    "--kv-dtypes", help="Comma-separated KV dtypes to search (bf16, fp8, fp8_ds_mla, fp32), 'all', or 'stack' (default: each stack's own).")]
ChunksOpt = Annotated[Optional[str], typer.Option("--chunks", help="Comma-separated prefill chunk sizes to search (default 8192, as fit).")]
TopOpt = Annotated[int, typer.Option("--top", help="How many ranked configurations to show.")]


def _csv(flag: str, text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise K3PlanError(f"{flag} {text!r}: expected a comma-separated list")
    return items


def _ints(flag: str, text: Optional[str]) -> Optional[list[int]]:
    items = _csv(flag, text)
    if items is None:
        return None
    try:
        return [int(x) for x in items]
    except ValueError:
        raise K3PlanError(f"{flag} {text!r}: expected comma-separated whole numbers") from None


def objective_from(minimize: Optional[str], maximize: Optional[str]) -> str:
    if minimize is not None and maximize is not None:
        raise K3PlanError("give either --minimize or --maximize, not both")
    if maximize is not None:
        if maximize != "tokens-per-chip":
            raise K3PlanError(f"--maximize {maximize!r}: expected tokens-per-chip")
        return "tokens-per-chip"
    if (minimize if minimize is not None else "chips") not in ("chips", "cost"):  # `--minimize=` is not "chips"
        raise K3PlanError(f"--minimize {minimize!r}: expected chips or cost")
    return minimize or "chips"


def command(
    model: ModelOpt = "kimi-k3",
    hardware: HardwareListOpt = None,
    stacks: StacksOpt = None,
    max_chips: MaxChipsOpt = 1024,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    concurrency: ConcurrencyOpt = 1,
    target_tpot_ms: TargetOpt = None,
    minimize: MinimizeOpt = None,
    maximize: MaximizeOpt = None,
    kv_dtypes: KvDtypesOpt = None,
    chunks: ChunksOpt = None,
    top: TopOpt = 10,
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Which machine, split and stack? Search every bundled (or listed) hardware, its standard
    topologies up to --max-chips, every (tp, ep, dp) and stack; rank what fits. Exit 0 with a
    recommendation, 1 if nothing passes, 2 on bad input.

    \b
    Examples:
      k3plan plan --context 131072                          K3 at 128K, fewest chips
      k3plan plan --concurrency 64 --target-tpot-ms 50      64 sequences, 50 ms a token at most
      k3plan plan -H tpu-v7x,nvidia-b200 --maximize tokens-per-chip
      k3plan plan --minimize cost --json
    """
    from k3plan.plan import plan

    result = plan(model=model, hardware=_csv("--hardware", hardware), stacks=_csv("--stacks", stacks),
                  max_chips=max_chips, context=context, concurrency=concurrency, target_tpot_ms=target_tpot_ms,
                  objective=objective_from(minimize, maximize), kv_dtypes=_csv("--kv-dtypes", kv_dtypes),
                  chunks=_ints("--chunks", chunks), top=top, probes=probes, allow_cpu_probes=allow_cpu_probes)
    if json_out:
        print_json(result)
    else:
        from k3plan.plan.render import render_plan

        render_plan(result, console)
    if result.recommended is None:
        raise typer.Exit(1)
