"""`k3plan fit`: per-device memory, term by term, and the verdict."""

from __future__ import annotations

from typing import Annotated

import typer

from k3plan.cli.common import (
    DEFAULT_CONTEXT_TOKENS,
    AcceptanceOpt,
    AllowCpuProbesOpt,
    BatchOpt,
    CalibrationOpt,
    ChunkOpt,
    ContextOpt,
    DraftBytesOpt,
    DraftKvOpt,
    JsonOpt,
    PrefixHitOpt,
    PrefixTierOpt,
    ProbesOpt,
    SpecTokensOpt,
    print_json,
    with_setup_options,
)


@with_setup_options
def command(
    setup_options: dict,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    batch: BatchOpt = 1,
    chunk: ChunkOpt = None,
    calibration: CalibrationOpt = None,
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    offload: Annotated[
        str | None,
        typer.Option(
            "--offload",
            help="Park suspended sessions in a memory tier: host, ssd or remote (the hardware spec's memory_tiers); prints sessions held and the TTFT to bring one back.",
        ),
    ] = None,
    spec_tokens: SpecTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_bytes: DraftBytesOpt = None,
    draft_kv_bytes_per_token: DraftKvOpt = None,
    prefix_hit: PrefixHitOpt = None,
    prefix_tier: PrefixTierOpt = "hbm",
    serve: Annotated[
        str | None,
        typer.Option(
            "--serve",
            help="A serve command to price as the engine would run it: 'vllm serve MODEL --tensor-parallel-size 32 "
            "--enable-expert-parallel ...' or 'python3 -m sglang.launch_server --model-path MODEL ...', or a vLLM "
            "LLM-class run ('lm_eval --model vllm --model_args pretrained=MODEL,...'; on a TPU tpu-inference's "
            "examples/offline_inference.py), read with that class's defaults. Its flags "
            "set the model, split, stack (vllm serve: torchtpu-vllm on a TPU, vllm on a GPU), context, chunk and "
            "engine options; exit 0 when the engine would start, 1 when it would refuse or run out of memory.",
        ),
    ] = None,
    engine_version: Annotated[
        str | None,
        typer.Option(
            "--engine-version",
            help="The engine release the --serve command runs (0.11.1, v0.5.15; a nightly: the release it precedes; "
            "tpu-inference also takes a main commit, 8ead48e6 or tpu-inference@8ead48e6, placed by k3plan's table of "
            "its main history). "
            "The rules that changed between releases follow it (the output's caveat names them); without it a vLLM "
            "or SGLang GPU command is read as the newest release of its engine k3plan prices (the caveat names it), "
            "other engines' rules as the code each cites.",
        ),
    ] = None,
    compile_point: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="Compile the step deviceless for the TPU topology at this point (k3plan validate's graph; needs "
            "the 'jax' extra and libtpu) and count its memory_analysis() temp a stage: settles a FITS IF.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Does the model fit, per device, with what headroom, for how long a context and how many
    sequences? Exit 0 if it fits, 1 if not, 2 on bad input, 3 if it fits only on a temp that is no evidence at
    this point -- the analytic lower bound, or a calibration's stage outside its measured range (FITS IF
    temporaries <= X GiB, unverified: the warning names the fit --compile that settles it).

    \b
    Examples:
      k3plan fit --topology 2x2x4 --tp 32      at 131,072 tokens 0.33 GiB short on the compiled temps (exit 1)
      k3plan fit --topology 2x2x4 --tp 32 --context 8192
      k3plan fit -t 2x2x2 --tp 16 --context 1048576   the weights alone exceed a device (exit 1)
      k3plan fit -H nvidia-b200 -t 2x8 --stack sglang --kv-dtype fp8   fits on the analytic temp only (exit 3)
      k3plan fit -t 2x2x4 --stack jax-native --chunk 32768 --calibration CAL.yaml
      k3plan fit -t 2x4x4 --tp 32 --offload host              sessions parked in host DRAM
      k3plan fit -t 2x4x4 --tp 32 --batch 8 --spec-tokens 3 --acceptance 0.8,0.6,0.4 --draft-bytes 30GB
      k3plan fit -t 2x4x4 --tp 32 --prefix-hit 0.6 --prefix-tier host   TTFT with 60% of the prompt cached
      k3plan fit -t 2x2x4 --serve 'vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --enable-expert-parallel --max-model-len 9216 --max-num-batched-tokens 512 --max-num-seqs 1 --gpu-memory-utilization 0.7'
      k3plan fit -H nvidia-h200 -t 8 --serve 'vllm serve moonshotai/Kimi-K2-Thinking -tp 8' --engine-version 0.11.1

    After the verdict, advice: the rules of docs/beyond-fit.md applied to these numbers (the next
    standard topology up, fp8_ds_mla KV, larger batches), each with its computed effect.

    """
    from k3plan.app.fit import FitQuestion, answer

    q = FitQuestion(
        setup_options=setup_options,
        context=context,
        batch=batch,
        chunk=chunk,
        calibration=calibration,
        probes=probes,
        allow_cpu_probes=allow_cpu_probes,
        offload=offload,
        spec_tokens=spec_tokens,
        acceptance=acceptance,
        draft_bytes=draft_bytes,
        draft_kv_bytes_per_token=draft_kv_bytes_per_token,
        prefix_hit=prefix_hit,
        prefix_tier=prefix_tier,
        serve=serve,
        engine_version=engine_version,
        compile=compile_point,
    )
    if compile_point:  # the compile's phases on stderr, as validate shows them
        from k3plan.cli.validate import phase_display

        with phase_display(total=2) as (on_job, on_phase):
            a = answer(q, on_job=on_job, on_phase=on_phase)
    else:
        a = answer(q)
    result, advice, ph, served = a.result, a.advice, a.prefix_hit, a.served
    if json_out:
        from k3plan.advice.fit_output import FitOutput

        print_json(FitOutput.of(result, advice=advice, prefix_hit=ph, engine=a.engine))
    else:
        from k3plan.advice.render import render_fit_advice
        from k3plan.cli.common import console
        from k3plan.report.fit_table import render_fit

        render_fit(result, console, verdict=a.verdict_line(), split=_split_label(result, served))
        if a.spec_asked and not result.fits:
            console.print("no speculative-decoding speed for a workload that does not fit")
        render_fit_advice(advice, console)
        if offload is not None and not result.fits:
            console.print(f"offload to {offload}: not computed, the workload does not fit")
        from k3plan.report.prefix_table import render_prefix_hit

        render_prefix_hit(ph, prefix_hit, console)
        gap = a.engine_gap()
        if gap:
            console.print(f"warning: {gap}")
    if served is not None and not json_out:
        from k3plan.cli.common import console

        _render_serve(served, a.engine, console, a.sequences_note())
    if a.exit_code:
        raise typer.Exit(a.exit_code)


def _split_label(result, served) -> str | None:
    """The split as a serve command set it: without expert parallelism vLLM TP-splits every expert, so the header
    names no ep (the budget prices the same bytes a device as EP over the TP group: engines.serve)."""
    if served is None or served.expert_parallel:
        return None
    par = result.parallel
    return f"tp={par.tp} ep=none (experts TP-split: no --enable-expert-parallel) dp={par.dp}" + (
        f" pp={par.pp}" if par.pp > 1 else ""
    )


def _render_serve(served, eng: dict | None, console, note: str | None = None) -> None:
    from k3plan.engines.registry import engine_rules

    seqs = engine_rules(served.engine).max_seqs_flag
    console.print(
        f"serve: {served.engine} -> stack {served.stack_ref}; {seqs} "
        + (f"{served.batch:,}" if served.batch else "default")
        + ("" if served.batch_source == "the command's flag" else f" ({served.batch_source})")
        + ("" if served.chunk_source == "the command's flag" else f"; chunk: {served.chunk_source}")
    )
    if served.ignored:
        console.print(f"serve flags ignored (nothing k3plan prices changes): {' '.join(served.ignored)}")
    for caveat in served.caveats:
        console.print(f"note: {caveat}")
    if eng is not None:
        console.print(f"engine ({eng['engine']}): {eng['message']}")
        if eng.get("band_note"):
            console.print(f"note: {eng['band_note']}")
    if note:
        console.print(note, markup=False, highlight=False)
