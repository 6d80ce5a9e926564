"""`k3plan roofline`: decode and prefill time bounds, the binding roof, the communication share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from k3plan.cli.common import (
    AllowCpuProbesOpt, ChunkOpt, JsonOpt, ProbesOpt, console, print_json, setup_from, with_setup_options,
)


@with_setup_options
def command(
    setup_options: dict,
    batch: Annotated[int, typer.Option("--batch", "-b", help="Decode batch (sequences a step).")] = 1,
    context: Annotated[int, typer.Option("--context", "-c", help="Context tokens a sequence during decode; also the prompt length for time to first token.")] = 4096,
    chunk: ChunkOpt = None,
    mfu: Annotated[float, typer.Option("--mfu", help="Fraction of peak FLOP/s achieved, in (0, 1].")] = 0.3,
    bw_efficiency: Annotated[float, typer.Option("--bw-efficiency", help="Fraction of HBM bandwidth achieved, in (0, 1].")] = 1.0,
    dtype: Annotated[str, typer.Option("--dtype", help="Matmul dtype for the compute roof: bf16 or fp8.")] = "bf16",
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    router_histogram: Annotated[Optional[Path], typer.Option("--router-histogram", help="JSON list of per-expert selection counts; default uniform routing.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Decode and prefill bounds: bytes, FLOPs and collectives per step, which roof binds.

    \b
    Examples:
      k3plan roofline -t 2x2x4 --tp 32                        batch 1 decode, 4K context
      k3plan roofline -t 2x2x4 --batch 256 --context 32768
      k3plan roofline -t 2x4x4 --stack dp-attention --probes reports/probes
      k3plan roofline -t 2x2x4 --mfu 0.45 --dtype fp8 --json
    """
    from k3plan.budget.fit import check_workload
    from k3plan.roofline.bounds import check_efficiency, crossover, decode_bound, prefill_bound
    from k3plan.roofline.work import load_histogram

    w = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk)
    eff = check_efficiency(mfu=mfu, bw_efficiency=bw_efficiency, compute_dtype=dtype)
    import dataclasses

    from k3plan.roofline.latency import measured_hardware

    setup = setup_from(**setup_options)
    op = "a2a" if setup.stack.collectives.experts == "all_to_all" else "allreduce"
    hw, probe_notes = measured_hardware(setup.hardware, probes=probes, allow_cpu=allow_cpu_probes, op=op)
    setup = dataclasses.replace(setup, hardware=hw)
    setup.hardware.flops_per_s_per_device(dtype)  # unknown dtype: one-line error now
    hist = None
    if router_histogram:
        moe = setup.model.spec.moe
        hist = load_histogram(router_histogram, num_experts=moe.num_experts, top_k=moe.top_k)
    dec = decode_bound(setup, batch=w.batch, context_tokens=w.context_tokens, eff=eff, probes=probes, histogram=hist,
                       allow_cpu_probes=allow_cpu_probes)
    pre = prefill_bound(setup, prompt_tokens=w.context_tokens, chunk_tokens=w.prefill_chunk_tokens, eff=eff, probes=probes,
                        allow_cpu_probes=allow_cpu_probes)
    cross = crossover(setup, [32768, 262144, 1048576])
    result = {
        "model": setup.model.name, "hardware": setup.hardware.name, "topology": setup.topology.text,
        "chips": setup.topology.chips, "parallel": setup.parallel.model_dump(), "stack": setup.stack.name,
        "efficiency": eff.model_dump(), "decode": dec.model_dump(), "prefill": pre.model_dump(),
        "long_context": cross, "notes": list(setup.notes), "probes": probe_notes,
    }
    if json_out:
        print_json(result)
        return
    from k3plan.report.roofline_table import render_roofline

    render_roofline(result, console)
