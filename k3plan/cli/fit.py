"""`k3plan fit`: per-device memory, term by term, and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

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
    fitting_setup,
    print_json,
    spec_decode_from,
    with_setup_options,
)

if TYPE_CHECKING:
    from k3plan.advice.wiring import Draft
    from k3plan.budget.fit import FitResult
    from k3plan.setup import Setup


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
            "--enable-expert-parallel ...' or 'python3 -m sglang.launch_server --model-path MODEL ...'. Its flags "
            "set the model, split, stack (vllm serve: torchtpu-vllm on a TPU, vllm on a GPU), context, chunk and "
            "engine options; exit 0 when the engine would start, 1 when it would refuse or run out of memory.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Does the model fit, per device, with what headroom, for how long a context and how many
    sequences? Exit 0 if it fits, 1 if not, 2 on bad input.

    \b
    Examples:
      k3plan fit --topology 2x2x4 --tp 32
      k3plan fit -t 2x2x2 --tp 16 --context 1048576   the weights alone exceed a device (exit 1)
      k3plan fit -H nvidia-b200 -t 2x8 --stack sglang --kv-dtype fp8
      k3plan fit -t 2x2x4 --stack jax-native --chunk 32768 --calibration CAL.yaml
      k3plan fit -t 2x4x4 --tp 32 --offload host              sessions parked in host DRAM
      k3plan fit -t 2x4x4 --tp 32 --batch 8 --spec-tokens 3 --acceptance 0.8,0.6,0.4 --draft-bytes 30GB
      k3plan fit -t 2x4x4 --tp 32 --prefix-hit 0.6 --prefix-tier host   TTFT with 60% of the prompt cached
      k3plan fit -t 2x2x4 --serve 'vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --enable-expert-parallel --max-model-len 9216 --max-num-batched-tokens 512 --gpu-memory-utilization 0.7'

    After the verdict, advice: the rules of docs/beyond-fit.md applied to these numbers (the next
    standard topology up, fp8_ds_mla KV, larger batches), each with its computed effect.

    """
    import dataclasses

    from k3plan.advice.wiring import (
        draft_kv_of,
        fit_advice,
        fit_with_draft,
        offload_report,
        spec_decode_report,
    )
    from k3plan.budget.fit import check_workload
    from k3plan.evidence.calibration import load_calibration
    from k3plan.roofline.bounds import Efficiency
    from k3plan.roofline.latency import measured_hardware

    served = None
    if serve is not None:
        setup_options, context, batch, chunk, served = _from_serve(serve, setup_options, context, chunk)
    workload = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk)
    spec = spec_decode_from(spec_tokens, acceptance, draft_bytes, draft_kv_bytes_per_token)
    if spec is not None:  # the engine's state pool with speculative decoding (Stack.for_spec_decode)
        setup_options = {**setup_options, "spec_verify_tokens": spec.forward_tokens_per_step}
    from k3plan.tiers.prefix import check_prefix_options

    check_prefix_options(prefix_hit, prefix_tier)
    cal = load_calibration(str(calibration)) if calibration else None  # a bad file fails before the setup
    eff = Efficiency()

    def run_fit(setup: Setup) -> tuple[FitResult, Draft | None]:
        return fit_with_draft(
            setup,
            workload,
            spec_decoding=spec is not None,
            draft_bytes=draft_bytes,
            draft_kv_bytes_per_token=draft_kv_bytes_per_token,
            calibration=cal,
        )

    setup_options, setup, (result, d) = fitting_setup(setup_options, run_fit, lambda x: x[0].fits)
    hw, notes = measured_hardware(setup.hardware, probes=probes, allow_cpu=allow_cpu_probes)
    speed_setup = dataclasses.replace(setup, hardware=hw)
    if result.fits:  # a speed figure only for a workload that fits
        from k3plan.structs import replace

        result = replace(
            result, speed=_speed(speed_setup, workload, notes, probes, allow_cpu_probes, spec_hardware=setup.hardware)
        )
    sd = off = None
    if spec is not None and d is not None and result.fits:  # d is set only with a spec
        sd = spec_decode_report(
            speed_setup,
            spec=spec,
            batch=batch,
            context_tokens=context,
            draft_bytes=d.bytes,
            draft_what=d.what,
            draft_kv=d.kv,
            eff=eff,
            probes=probes,
            allow_cpu_probes=allow_cpu_probes,
        )
    if offload is not None:
        from k3plan.tiers.model import offload_tier

        offload_tier(setup.hardware, offload)  # a bad tier is bad input whether or not the workload fits
    if offload is not None and result.fits:  # an offload cost (TTFT, prefill time) only for a workload that fits
        off = offload_report(speed_setup, workload, offload, eff=eff, probes=probes)
    advice = fit_advice(
        setup_options,
        setup,
        workload,
        result,
        calibration=cal,
        speed_setup=speed_setup,
        eff=eff,
        probes=probes,
        allow_cpu_probes=allow_cpu_probes,
        spec_decode=sd,
        offload=off,
        draft_bytes=d.bytes if d else 0,
        draft_kv_of=draft_kv_of(d) if d else None,
        splits=True,  # issue 36: other splits of the same chips first (k3plan.advice.splits)
    )
    ph = None
    if prefix_hit is not None and result.fits:  # a TTFT only for a workload that fits
        from k3plan.roofline.bounds import prefill_bound
        from k3plan.tiers.prefix import prefix_hit as prefix_hit_ttft

        pre = prefill_bound(
            speed_setup, prompt_tokens=context, chunk_tokens=workload.prefill_chunk_tokens, eff=eff, probes=probes
        )
        ph = prefix_hit_ttft(
            speed_setup, prompt_tokens=context, hit_rate=prefix_hit, tier=prefix_tier, prefill_ttft_s=pre.ttft_s
        )
    if json_out:
        from k3plan.advice.fit_output import FitOutput

        print_json(FitOutput.of(result, advice=advice, prefix_hit=ph, engine=_engine_json(setup, result, served)))
    else:
        from k3plan.advice.render import render_fit_advice
        from k3plan.cli.common import console
        from k3plan.report.fit_table import render_fit

        render_fit(result, console)
        if spec is not None and not result.fits:
            console.print("no speculative-decoding speed for a workload that does not fit")
        render_fit_advice(advice, console)
        if offload is not None and not result.fits:
            console.print(f"offload to {offload}: not computed, the workload does not fit")
        from k3plan.report.prefix_table import render_prefix_hit

        render_prefix_hit(ph, prefix_hit, console)
    if served is not None:
        eng = _engine_json(setup, result, served)
        if not json_out:
            from k3plan.cli.common import console

            _render_serve(served, eng, console)
        if not _serve_fits(result) or (eng is not None and not eng["starts"]):
            raise typer.Exit(1)
        return
    if not result.fits:
        raise typer.Exit(1)


def _from_serve(serve: str, setup_options: dict, context: int, chunk: int | None):
    """fit's setup options and workload from a serve command (k3plan.engines.serve): the command's flags win;
    a split or stack given beside it is bad input. The verdict is the engine's start check: one sequence of
    max_model_len (the engine does not hold max_num_seqs at full length to start)."""
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError
    from k3plan.hardware import load_hardware

    clash = [f"--{k.replace('_', '-')}" for k in ("tp", "ep", "dp", "pp", "stack", "kv_dtype") if setup_options.get(k)]
    if clash:
        raise K3PlanError(f"--serve sets the split, stack and KV dtype itself; drop {', '.join(clash)}")
    kind = load_hardware(setup_options["hardware"]).kind
    q = parse_serve(serve, platform=kind)
    if setup_options.get("model") not in (None, "kimi-k3", q.model):
        raise K3PlanError(f"--serve serves {q.model}; drop --model {setup_options['model']}")
    opts = {
        **setup_options,
        "model": q.model,
        "tp": q.tp,
        "ep": q.ep,
        "dp": q.dp,
        "pp": q.pp,
        "stack": q.stack_ref,
        "kv_dtype": q.kv_dtype,
    }
    return opts, q.context or context, 1, q.chunk or chunk, q


def _serve_fits(result: FitResult) -> bool:
    """With --serve the verdict is the engine's start check, and k3plan's own budget only where it is certain:
    a configuration whose temporaries come from the temp model fails here only if the band's lower end fails too
    (issue 34: the band's upper end alone must not refuse what the engine runs)."""
    low = result.capacity.band_low_max_sequences
    return result.fits or (low is not None and low >= 1)


def _render_serve(served, eng: dict | None, console) -> None:
    console.print(f"serve: {served.engine} -> stack {served.stack_ref}, max_num_seqs {served.batch}")
    if served.ignored:
        console.print(f"serve flags ignored (nothing k3plan prices changes): {' '.join(served.ignored)}")
    if eng is not None:
        console.print(f"engine ({eng['engine']}): {eng['message']}")
        if eng.get("band_note"):
            console.print(f"note: {eng['band_note']}")


def _engine_json(setup: Setup, result: FitResult, served=None) -> dict | None:
    """fit --json's ``engine``: the stack's engine sizing its own KV pool (k3plan.engines.vllm_memory)."""
    from k3plan.engines.vllm_memory import engine_sizing

    lay, st, hw, spec = result.cache_layout, setup.stack, setup.hardware, setup.model.spec
    if lay is None:
        return None
    got = engine_sizing(
        stack_name=st.name,
        kv_pool_method=st.kv_pool.method if st.kv_pool else None,
        reserve_fraction=st.reserve.fraction_of_usable_hbm,
        hardware=hw.name,
        visible_bytes=hw.usable_bytes_per_device,
        visible_source=str(hw.sources().get("usable_hbm_per_device", hw.path)),
        weights_bytes=result.per_device.weights_bytes,
        expert_bytes=next((r.bytes for r in result.weights_by_role if r.role == "expert"), 0),
        # vLLM's per-shard padding is its Kimi-K3 model's (engines.vllm_memory.moe_shard_padding)
        moe_intermediate=spec.moe.expert_intermediate if spec.architecture == "kimi_k3" and spec.moe else 0,
        tp=setup.parallel.tp,
        expert_parallel=True if served is None else served.expert_parallel,
        # a serve command without --language-model-only loads a multimodal model's vision tower (vLLM)
        vision_bytes=0
        if served is None or served.language_model_only or served.engine != "vllm"
        else sum(t.nbytes for t in setup.model.inventory.of_kind("vision")),
        temp_bytes=result.per_device.temp_bytes,
        temp_source=f"prefill: {result.provenance.temp_prefill}; decode: {result.provenance.temp_decode}",
        page_bytes=lay.page_bytes,
        kv_bytes_per_token_layer=lay.kv_bytes_per_token_layer,
        block_tokens=lay.block_tokens,
        paging_source=st.paging.source,
        n_mla=lay.n_mla,
        n_kda=lay.n_kda,
        max_model_len=result.workload.context_tokens,
    )
    if got is None:
        return None
    out = got.as_json()
    if served is not None and not result.fits and _serve_fits(result):
        out["band_note"] = (
            "k3plan's budget at the temp model's upper end does not fit, at the band's lower end it does "
            f"({result.capacity.band_low_max_sequences} sequences): the engine's start check decides"
        )
    if served is not None:
        out["serve"] = {
            "engine": served.engine,
            "stack": served.stack_ref,
            "max_num_seqs": served.batch,
            "ignored": list(served.ignored),
        }
    return out


def _speed(setup, workload, notes, probes, allow_cpu_probes, *, spec_hardware):
    """The decode bound at this workload (k3plan roofline's defaults), with probe records applied
    (``setup`` already carries the measured hardware, ``notes`` name the records)."""
    from k3plan.budget.result import Speed
    from k3plan.roofline.bounds import Efficiency, decode_bound

    d = decode_bound(
        setup,
        batch=workload.batch,
        context_tokens=workload.context_tokens,
        eff=Efficiency(),
        probes=probes,
        allow_cpu_probes=allow_cpu_probes,
    )
    from k3plan.speed.serving import stands_behind  # issue 38: roofline's TPOT, measured where a benchmark is

    tpot, _, _, _ = stands_behind(
        setup,
        spec_hardware,
        batch=workload.batch,
        context=workload.context_tokens,
        chunk=workload.prefill_chunk_tokens,
        expected=None,
        ceiling_tpot_s=d.step_s,
        ceiling_ttft_s=None,
        probes=probes,
    )
    return Speed(
        tpot_s=tpot.value_s,
        tpot_source=tpot.source,
        tpot_label=tpot.label,
        ceiling_tpot_s=d.step_s,
        tokens_per_s=workload.batch / tpot.value_s,
        binding=d.binding,
        collective_latency_source=d.comm.latency_source,
        probes=notes,
        source="k3plan roofline at 30% MFU, 100% HBM bandwidth",
    )
