"""What `k3plan fit` answers, typed: a FitQuestion (the options cli/fit.py parsed) to a FitAnswer (the budget,
its speed, advice, prefix-cache TTFT and the engine's own sizing). cli/fit.py only parses, asks and renders
(issue 33: one typed question and one typed answer a command)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from k3plan.app.setup import PointQuestion
from k3plan.engines.registry import engine_rules
from k3plan.structs import Frozen
from k3plan.units import GiB, fmt_gib

if TYPE_CHECKING:
    from k3plan.advice.wiring import Draft
    from k3plan.budget.fit import FitResult
    from k3plan.setup import Setup


class FitQuestion(PointQuestion):
    """fit's options as parsed: PointQuestion's (setup options, workload, probes, speculative decoding, prefix
    cache) and fit's own: a calibration, offload and a serve command."""

    calibration: Optional[Path] = None
    offload: Optional[str] = None
    serve: Optional[str] = None
    engine_version: Optional[str] = None  # fit --engine-version: the release the --serve command runs
    compile: bool = False  # fit --compile: the step compiled deviceless at this point (k3plan.validate.fit_compile)


class FitAnswer(Frozen):
    """What fit found: the budget (its speed set where it fits), the advice, the prefix-cache TTFT, the engine's
    own sizing (fit --json's ``engine``) and, with --serve, the command read and the engine's start verdict."""

    __coerce__ = False

    result: FitResult
    setup: Setup
    advice: Any  # k3plan.advice.wiring's FitAdvice
    prefix_hit: Any = None  # k3plan.tiers.prefix.PrefixHit
    engine: Optional[dict[str, Any]] = None
    served: Any = None  # k3plan.engines.serve's reading of --serve
    spec_asked: bool = False

    @property
    def starts(self) -> bool | None:
        """With --serve: the engine's own start check (None without --serve). The engine is the referee: where
        k3plan sizes the engine's pool (engine_sizing) its verdict is this; elsewhere k3plan's budget's."""
        if self.served is None:
            return None
        if self.engine is not None:
            return bool(self.engine["starts"])
        return _serve_fits(self.result)

    @property
    def exit_code(self) -> int:
        """0 when it fits (with --serve: when the engine would start), else 1; 3 when it fits only on the analytic
        lower bound of its temporaries (issue 50: unverified, neither a yes nor a no)."""
        if self.served is not None:
            return 0 if self.starts else 1
        if self.result.fits and self.result.unverified is not None:
            return 3
        return 0 if self.result.fits else 1

    def verdict_line(self) -> str | None:
        """With --serve, the one verdict, printed first: "STARTS: KV pool N tokens (M GiB), max concurrency X at L
        tokens" or "WON'T START: <the engine's own error> (raised in <file, symbol>)"."""
        if self.served is None:
            return None
        eng, ctx = self.engine, self.result.workload.context_tokens
        if eng is None:  # no engine sizing for this stack: the budget's verdict stands for it, said so
            return ("STARTS" if self.starts else "WON'T START") + (
                f": k3plan's budget (no engine sizing for stack {self.served.stack})"
            )
        if eng["starts"]:
            # a verdict never rests silently on a lower bound: what the check leaves out, and by how much it clears it
            bound = (
                f"; {fmt_gib(eng['check_margin_bytes'])} over the start check, which does not price {eng['unpriced']}"
                if eng.get("unpriced")
                else ""
            )
            return (
                f"STARTS: KV pool {eng['kv_pool_tokens']:,} tokens ({fmt_gib(eng['kv_pool_bytes'])}), max "
                f"concurrency {eng['max_concurrency']:,.2f} at {eng.get('max_model_len') or ctx:,} tokens{bound}"
            )
        return f"WON'T START: {eng['message']} (raised in {eng['raised_at']})"

    def engine_gap(self) -> str | None:
        """Without --serve: the engine's own sequence count where it is well under the budget's (engine_gap_warning)."""
        return engine_gap_warning(self.result, self.engine) if self.served is None else None

    def sequences_note(self) -> str | None:
        """With --serve, when the budget's sequence count and the engine's concurrency are both shown: why they
        differ (one count, explained)."""
        eng, r = self.engine, self.result
        if self.served is None or eng is None or not eng["starts"] or not r.fits:
            return None
        return sequences_note(r, eng)


# below this share of the budget's sequences the engine's own count is printed beside a fit without --serve
ENGINE_SHORT = 0.75


def engine_gap_warning(r: FitResult, eng: dict | None) -> str | None:
    """Without --serve: where the stack's engine, sizing its own pool (fit --json's ``engine``), holds well under
    the budget's sequences, the budget's count does not stand alone (a verdict never rests silently on k3plan's own
    arithmetic where the engine's differs); None otherwise."""
    if eng is None or not eng["starts"] or not r.fits or not r.capacity.max_sequences:
        return None
    if eng["max_concurrency"] >= ENGINE_SHORT * r.capacity.max_sequences:
        return None
    return (
        f"engine ({eng['engine']}): "
        + sequences_why(r, eng)
        + "; fit --serve with the engine's command gives its start check"
    )


def sequences_note(r: FitResult, eng: dict) -> str:
    """The line under --serve: the budget's sequences against the engine's concurrency, and why (sequences_why)."""
    return "sequences: " + sequences_why(r, eng)


def sequences_why(r: FitResult, eng: dict) -> str:
    """The budget's sequences at the context against the engine's concurrency, and why they differ."""
    gib = GiB
    w, dev, cap = r.workload, r.per_device, r.capacity
    budget_room = dev.free_bytes + dev.kv_bytes + dev.state_bytes  # what the budget has for sequences
    per_seq = (dev.kv_bytes + dev.state_bytes) / max(w.batch, 1)
    engine_pool = eng["kv_pool_bytes"]
    conc = eng["max_concurrency"]
    rules = engine_rules(eng["engine"])  # the engine's words for its concurrency, and how it sized its pool
    label = rules.concurrency_label
    why = []
    if abs(engine_pool - budget_room) >= 0.01 * gib:
        # a static-fraction engine's activation figure (SGLang's --enable-symm-mem pool) sits outside its pool
        profiled = eng["activation_bytes"] and rules.pool_rule != "static"
        took = "a fraction of HBM - weights" + (
            f" - its profiled activation {eng['activation_bytes'] / gib:.2f} GiB" if profiled else ""
        )
        if rules.pool_rule == "static":  # the pool is what the static fraction leaves after the state pool
            took += " - its state pool"
        why.append(
            f"its KV pool is {engine_pool / gib:.2f} GiB against the budget's {budget_room / gib:.2f} GiB for "
            f"sequences (the budget nets out its temporaries {dev.temp_bytes / gib:.2f} GiB and reserve "
            f"{dev.reserve_bytes / gib:.2f} GiB; the engine takes {took})"
        )
    if eng["block_tokens"] > 1:
        state = {
            "compact-slots": "its KDA state apart, in max_num_seqs + 1 slots a layer",
            "dsv4-groups": "its windows and compressed caches in DeepSeek-V4's page groups, in the engine's own records "
            "(engines/vllm/dsv4_pages.py)",
            "full-token": "its windows, compressed caches and compressor rings at its own bytes a full token "
            "(engines/sglang/dsv4_pool.py)",
            "layer-groups": "its KDA state in whole layer groups",
        }.get(eng.get("layout", ""))
        why.append(
            f"it holds a request in whole {eng['block_tokens']}-token blocks" + (f" and {state}" if state else "")
        )
    if int(conc) == cap.max_sequences:
        why.append("the budget counts whole sequences, the engine a fraction")
    if conc > 0:
        why.append(f"the engine's request takes {engine_pool / conc / gib:.3f} GiB")
    why.append(f"the budget's sequence takes {per_seq / gib:.3f} GiB at {w.context_tokens:,} tokens (KV + KDA state)")
    return (
        f"k3plan's budget holds {cap.max_sequences:,} at {w.context_tokens:,} tokens, the engine "
        f"{conc:,.2f} ({label}, the figure it runs with): " + "; ".join(why)
    )


def answer(q: FitQuestion, *, on_job=None, on_phase=None) -> FitAnswer:
    """The budget of the question's configuration, at the default topology where none is given
    (k3plan.app.setup.fitting_setup), with its speed, advice, extensions and the engine's sizing. With
    ``q.compile`` the chosen setup's step is compiled deviceless at this point and its temps replace the
    evidence (``on_job``, ``on_phase``: validate's progress callbacks)."""
    import dataclasses

    from k3plan.advice.wiring import (
        draft_kv_of,
        fit_advice,
        fit_with_draft,
        offload_report,
        spec_decode_report,
    )
    from k3plan.app.setup import fitting_setup, spec_decode_from
    from k3plan.budget.fit import check_workload
    from k3plan.evidence.calibration import load_calibration
    from k3plan.evidence.value import Evidence
    from k3plan.roofline.bounds import Efficiency
    from k3plan.roofline.latency import measured_hardware

    setup_options, context, batch, chunk = q.setup_options, q.context, q.batch, q.chunk
    allow_cpu_probes, offload = q.allow_cpu_probes, q.offload
    evidence = Evidence.build(q.probes)  # the shipped records plus --probes, read once (issue 46)
    draft_bytes, draft_kv_bytes_per_token = q.draft_bytes, q.draft_kv_bytes_per_token
    prefix_hit, prefix_tier = q.prefix_hit, q.prefix_tier
    served = None
    if q.engine_version is not None and q.serve is None:
        from k3plan.errors import K3PlanError

        raise K3PlanError("--engine-version names the release a --serve command runs; give the command with --serve")
    if q.serve is not None:
        setup_options, context, batch, chunk, served = _from_serve(
            q.serve, setup_options, context, chunk, engine_version=q.engine_version
        )
    workload = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk)
    spec = spec_decode_from(q.spec_tokens, q.acceptance, draft_bytes, draft_kv_bytes_per_token)
    if spec is not None:  # the engine's state pool with speculative decoding (Stack.for_spec_decode)
        setup_options = {**setup_options, "spec_verify_tokens": spec.forward_tokens_per_step}
    from k3plan.tiers.prefix import check_prefix_options

    check_prefix_options(prefix_hit, prefix_tier)
    cal = load_calibration(str(q.calibration)) if q.calibration else None  # a bad file fails before the setup
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

    if q.compile:
        _check_compile(q, setup_options)
    setup_options, setup, (result, d) = fitting_setup(setup_options, run_fit, lambda x: x[0].fits)
    if q.compile:
        result = _compiled_fit(setup, workload, d, on_job=on_job, on_phase=on_phase)
    from k3plan.structs import replace

    if served is not None:  # the budget's exit 3 is not the exit under --serve: the engine's start check is
        from k3plan.budget.fit import SERVE_UNVERIFIED, UNVERIFIED_EXIT

        result = replace(result, warnings=[w.replace(UNVERIFIED_EXIT, SERVE_UNVERIFIED) for w in result.warnings])
    else:  # a multimodal model priced as its language model alone where the engine would refuse its tower
        refused = _vision_refusal(setup)
        if refused is not None:
            result = replace(result, warnings=[*result.warnings, refused])
    hw, notes = measured_hardware(setup.hardware, evidence=evidence, allow_cpu=allow_cpu_probes)
    speed_setup = dataclasses.replace(setup, hardware=hw)
    if result.fits:  # a speed figure only for a workload that fits
        result = replace(
            result, speed=_speed(speed_setup, workload, notes, evidence, allow_cpu_probes, spec_hardware=setup.hardware)
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
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
        )
    if offload is not None:
        from k3plan.tiers.model import offload_tier

        offload_tier(setup.hardware, offload)  # a bad tier is bad input whether or not the workload fits
    if offload is not None and result.fits:  # an offload cost (TTFT, prefill time) only for a workload that fits
        off = offload_report(speed_setup, workload, offload, eff=eff, evidence=evidence)
    advice = fit_advice(
        setup_options,
        setup,
        workload,
        result,
        calibration=cal,
        speed_setup=speed_setup,
        eff=eff,
        evidence=evidence,
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
            speed_setup, prompt_tokens=context, chunk_tokens=workload.prefill_chunk_tokens, eff=eff, evidence=evidence
        )
        ph = prefix_hit_ttft(
            speed_setup, prompt_tokens=context, hit_rate=prefix_hit, tier=prefix_tier, prefill_ttft_s=pre.ttft_s
        )
    return FitAnswer(
        result=result,
        setup=setup,
        advice=advice,
        prefix_hit=ph,
        engine=_engine_json(setup, result, served),
        served=served,
        spec_asked=spec is not None,
    )


def _check_compile(q: FitQuestion, setup_options: dict) -> None:
    """--compile's bad input, before anything is priced: the jax extra (found, not imported: the compile sets
    XLA_FLAGS before jax starts), and no calibration beside it (the compile is the evidence)."""
    from k3plan.errors import K3PlanError
    from k3plan.extras import installed, missing_extra_line

    if q.calibration is not None:
        raise K3PlanError("--compile compiles this point's temporaries; drop --calibration")
    if not installed("jax"):
        raise K3PlanError(missing_extra_line(ModuleNotFoundError(name="jax"), "fit --compile") or "jax is missing")


def _compiled_fit(setup: Setup, workload, d, *, on_job=None, on_phase=None) -> FitResult:
    """The fit of ``setup`` with each stage's temp from its step compiled deviceless at this point (the draft's
    weights and KV, if any, as the first fit counted them)."""
    from k3plan.advice.wiring import draft_bytes_per_device
    from k3plan.budget.fit import fit
    from k3plan.validate.fit_compile import compile_point

    compiled = compile_point(setup, workload, on_job=on_job, on_phase=on_phase)
    return fit(
        setup,
        workload,
        compiled=compiled,
        draft_bytes_per_device=draft_bytes_per_device(setup, d.bytes) if d else 0,
        draft_kv=d.kv if d else None,
    )


def _engine_commit(text: str):
    """The EngineCommit fit --engine-version names (``<sha>`` or ``<engine>@<sha>``) for an engine that ships a table
    of its main history (Engine.commit_of, which refuses a commit it does not hold in one line); None where the text
    is not a commit (a release number, read by parse_release)."""
    from k3plan.engines.registry import engines, find_engine
    from k3plan.engines.release import split_commit
    from k3plan.errors import K3PlanError

    named = split_commit(text)
    if named is None:
        return None
    name, digits = named
    tables = [e for e in engines() if e.commit_of is not None]
    if name is not None:
        engine = find_engine(name)
        if engine is None or engine.commit_of is None:
            raise K3PlanError(
                f"--engine-version {text!r}: k3plan places commits of {', '.join(e.name for e in tables)} only "
                "(a table of its main history); name a release number such as 0.11.1"
            )
        tables = [engine]
    for engine in tables:
        assert engine.commit_of is not None
        found = engine.commit_of(digits)
        if found is not None:
            return found
    raise K3PlanError(
        f"--engine-version {text!r}: expected a release number such as 0.11.1 or v0.5.15, or "
        + "; or ".join(e.commit_expected() for e in tables if e.commit_expected is not None)
    )


def _from_serve(serve: str, setup_options: dict, context: int, chunk: int | None, *, engine_version: str | None = None):
    """fit's setup options and workload from a serve command (k3plan.engines.serve): the command's flags win;
    a split or stack given beside it is bad input. The verdict is the engine's start check: one sequence of
    max_model_len (the engine does not hold max_num_seqs at full length to start). ``engine_version``: the release
    the command runs (k3plan.engines.release); the rules that follow it say so in a caveat."""
    import dataclasses

    from k3plan.engines.serve import check_context, parse_serve
    from k3plan.errors import K3PlanError
    from k3plan.hardware import load_hardware

    clash = [f"--{k.replace('_', '-')}" for k in ("tp", "ep", "dp", "pp", "stack", "kv_dtype") if setup_options.get(k)]
    if clash:
        raise K3PlanError(f"--serve sets the split, stack and KV dtype itself; drop {', '.join(clash)}")
    from k3plan.models.loader import load_model
    from k3plan.units import GiB

    hw = load_hardware(setup_options["hardware"])
    from k3plan.engines.release import parse_post, parse_release, release_text

    commit = None if engine_version is None else _engine_commit(engine_version)
    release = None if engine_version is None else commit.follows if commit else parse_release(engine_version)
    q = parse_serve(
        serve,
        platform=hw.kind,
        device_gib=hw.usable_bytes_per_device / GiB,
        device_name=hw.name,
        release=release,
        release_post=0 if engine_version is None or commit else parse_post(engine_version),
        commit=commit,
    )
    if commit is not None and engine_rules(q.stack).name != commit.engine:
        raise K3PlanError(
            f"--engine-version {engine_version}: a commit of {commit.engine}, but the command runs "
            f"{engine_rules(q.stack).name}; name its release"
        )
    if q.release is not None:
        rules = engine_rules(q.stack)
        concerns = not rules.by_release_models or q.model.startswith(rules.by_release_models)
        texts = [rules.by_release] if concerns and rules.by_release else []
        texts += [t for models, t in rules.by_release_rules if not models or q.model.startswith(models)]
        follows = "; ".join(texts) or f"no rule k3plan prices for {q.model} differs by release"
        if rules.oldest_release_read is not None and q.release < rules.oldest_release_read:
            follows += (
                f"; k3plan read no {rules.name} release before {release_text(rules.oldest_release_read)}, so this "
                "one is priced by the code each rule cites, which may size memory otherwise"
            )
        latest = rules.latest_release_read or rules.newest_release_read
        if latest is not None and q.release > latest:
            follows += (
                f"; k3plan read no {rules.name} release after {release_text(latest)}, so this one is priced as "
                f"{release_text(latest)}, whose code may size memory otherwise"
            )
        newest = (
            f"the release k3plan reads a command as where it names none ({release_text(latest)}, read too, is priced "
            f"only under --engine-version {release_text(latest)} until a start log of it is checked)"
            if latest is not None and latest > q.release
            else "the newest release k3plan read"
        )
        said = (
            f"read as {q.engine} {release_text(q.release)}, {newest} (fit --engine-version X reads the command as "
            f"release X): {follows}"
            if q.release_default
            else f"--engine-version {release_text(q.release)}: {follows}"
            if commit is None
            else f"--engine-version {engine_version}: {commit.text()}, placed by k3plan's table of main's history "
            f"(through {commit.head}): a rule gated at the commit that changed it compares by ancestry on main, one "
            f"gated at a release only reads it as {release_text(q.release)}: {follows}"
        )
        q = dataclasses.replace(q, caveats=(*q.caveats, said))
    if setup_options.get("model") not in (None, "kimi-k3", q.model):
        raise K3PlanError(f"--serve serves {q.model}; drop --model {setup_options['model']}")
    # a command without --max-model-len / --context-length runs at the model's own maximum (vLLM's
    # ModelConfig max_model_len derived from max_position_embeddings; SGLang's context_len likewise), not at
    # k3plan's default context; --max-model-len auto starts from it too and the engine fits it to its pool
    model = load_model(q.model, q.hf_overrides)  # the fields the command sets over its config (--hf-overrides)
    model_max = model.spec.max_context
    check_context(q, model_max)
    if q.engram is not None and (model.spec.dsv4 is None or model.spec.dsv4.engram is None):
        if q.engram_flag:  # vLLM: EngramConfig.verify_model_config (engines/vllm/engram.py)
            raise K3PlanError(
                f"--serve: --engram-config: {q.model} has no Engram tables, and the engine refuses the config for it; "
                "leave it out"
            )
        q = dataclasses.replace(q, engram=None, engram_host_copies=None)  # VLLM_PLE_CPU_OFFLOAD alone: no tables
    if q.dcp > 1 and model.spec.dsv4 is not None:  # each family's serve.py prices DCP for MLA / KDA pages only
        raise K3PlanError(
            f"--serve: --decode-context-parallel-size {q.dcp} with {q.model}'s DeepSeek-V4 cache groups: how vLLM splits "
            "their sliding-window and compressed pages over a DCP group was not read (its SlidingWindowSpec asserts "
            "'DCP not support sliding window.', vllm/v1/kv_cache_interface.py); remove it"
            if engine_rules(q.engine).pool_rule != "static"
            else f"--serve: --dcp-size {q.dcp} with {q.model}'s DeepSeek-V4 sub-pools: how SGLang splits its "
            "sliding-window and compressed pools over a DCP group was not read; remove it"
        )
    if engine_rules(q.engine).pool_rule == "static" and hw.kind == "gpu":
        from k3plan.engines.sglang.releases import DSV4_KV_ARCHITECTURES, DSV4_KV_AT, dsv4_kv_taken

        # SGLang's DeepseekV4ForCausalLM takes fp8_e4m3 (auto's) or bfloat16 only, bfloat16 from 0.5.14, and not
        # 'bf16' (no hook rewrites it first: engines/sglang/releases.py DSV4_KV_AT, dsv4_kv_taken; k3plan's launch
        # line writes bfloat16, sglang_kv_flag); both size the pool at the same bytes a token (0.5.21 wheel,
        # pool_configurator.py DSV4PoolConfigurator.__init__: kv_bytes = qk_nope + 2 x qk_rope + 8, the FlashMLA slot)
        taken = dsv4_kv_taken(q.release)
        if model.spec.architecture in DSV4_KV_ARCHITECTURES and q.kv_raw not in taken:
            raise K3PlanError(
                f"--serve: --kv-cache-dtype {q.kv_raw}: SGLang refuses it for DeepseekV4ForCausalLM ('{q.kv_raw} is "
                f"not supported for DeepseekV4ForCausalLM': {DSV4_KV_AT}); expected {' or '.join(taken[1:])}"
            )
    if q.kv_raw == "nvfp4_ds_mla" and (
        model.spec.dsv4 is None or model.spec.dsv4.csa2 is None
    ):  # vllm/models/deepseek_v41/attention.py _resolve_dsv4_kv_cache_dtype (engines/vllm/dsv4_pages.py V41_SOURCES)
        raise K3PlanError(
            f"--serve: --kv-cache-dtype nvfp4_ds_mla: vLLM's DeepSeek-V4.1 packed record; {q.model} on {q.engine} has "
            "no such layout; expected fp8 (or auto)"
        )
    from k3plan.engines.sglang.spec import SglangSpec

    if isinstance(q.speculative, SglangSpec):  # SGLang's draft, priced from the checkpoint (engines/sglang/spec.py)
        from k3plan.engines.dp_attention import ENGINE as DP_ATTENTION
        from k3plan.engines.sglang.spec import draft_pricing as sglang_draft
        from k3plan.engines.stack import parse_stack
        from k3plan.models.formats import get_format

        dp_attention = q.stack == DP_ATTENTION.name
        full_tp = q.tp * (q.dp if dp_attention else 1)  # tp_size: attention TP x dp_size under DP attention
        # the draft's tensors in the forms the command's stack holds the target's (the draft's MoE runs the target's
        # runner: engines/sglang/spec.py DRAFT_RUNNER)
        held_stack = (
            parse_stack(q.stack)
            .with_options(**q.stack_options)
            .with_defaults()
            .bind(hw)
            .with_engine_release(q.release, env=q.env)
            .with_moe_runner(q.moe_runner)
            .on_hardware(hw.name)
            .with_expert_format(q.expert_format)
        )
        q = dataclasses.replace(
            q,
            draft=sglang_draft(
                q.speculative,
                model,
                tp=q.tp,
                ep=q.engine_ep or full_tp,
                # the NextN draft's head is the target's rule (deepseek_nextn.py / deepseek_v4_nextn.py ParallelLMHead
                # use_attn_tp_group=enable_dp_lm_head, sglang 0.5.15 / 0.5.23 wheels): the whole TP group, or the
                # attention-TP group with --enable-dp-lm-head (ServeQuestion.lm_head_whole_tp None)
                lm_head_tp=full_tp if q.lm_head_whole_tp is not None else q.tp,
                dp_attention=dp_attention,
                pp=q.pp,
                held=lambda t, role: get_format(held_stack.runtime_format(role, t.fmt)).nbytes(t.shape),
                # the NextN layer's shared experts as the target's: over the whole TP group under DP attention where
                # the reading says so (engines/sglang/serve.py mlp_whole_tp)
                shared_tp=full_tp if "shared_expert" in (q.mlp_whole_tp or ((), None))[0] else None,
            ),
        )
        from k3plan.engines.sglang.dsv4_pool import FIXED_C128_FORMS, form_for_release
        from k3plan.engines.sglang.spec import SPEC_FROM

        if q.release is not None and q.release < SPEC_FROM:
            raise K3PlanError(
                f"--serve: SGLang's speculative decoding under --engine-version {release_text(q.release)}: its draft "
                f"was read from {release_text(SPEC_FROM)} on (the draft loaded before the target's pool is sized); "
                "not priced for that release"
            )
        if model.spec.dsv4 is not None and form_for_release(q.release) not in FIXED_C128_FORMS:
            raise K3PlanError(
                f"--serve: speculative decoding on {q.model} under --engine-version "
                f"{release_text(q.release)}: SGLang's DeepSeek-V4 pool with a draft was read from 0.5.15 on; "
                "not priced for that release"
            )
    elif q.speculative is not None:  # vLLM's drafter, priced from the checkpoint (engines/vllm/spec.py)
        from k3plan.engines.vllm.spec import draft_pricing

        q = dataclasses.replace(
            q,
            draft=draft_pricing(
                q.speculative, model, tp=q.tp, ep=q.ep or q.tp, max_num_batched_tokens=q.chunk or chunk or 0
            ),
        )
    opts = {
        **setup_options,
        "topology": setup_options.get("topology") or _serve_topology(hw, q.tp * q.pp * q.dp),
        "model": q.model,
        "tp": q.tp,
        "ep": q.ep,
        "dp": q.dp,
        "pp": q.pp,
        "stack": q.stack_ref,
        "kv_dtype": q.kv_dtype,
        "engram": q.engram if q.engram is not None else setup_options.get("engram"),
        "engram_host_copies": q.engram_host_copies,
    }
    if q.hf_overrides:  # the model the engine builds: its config with the command's fields set over it
        opts["model_overrides"] = q.hf_overrides
    if q.draft is not None and getattr(q.draft, "dsv4_mtp_ratios", None) and q.draft.num_speculative_tokens:
        # the drafter's layers are in the engine's pool (DeepSeek-V4's MTP, V4.1's DSpark): the budget's stack holds
        # them too (Stack.for_spec_decode: step/dsv4_cache.engine_charge reads the count)
        opts["spec_verify_tokens"] = q.draft.num_speculative_tokens + 1
    from k3plan.engines.sglang.spec import SglangDraft

    if isinstance(q.draft, SglangDraft) and model.spec.dsv4 is not None:
        # SGLang's draft (EAGLE / NEXTN on V4's MTP layer, DSpark) in its DeepSeek-V4 pool: the budget's stack verifies
        # the draft tokens the start check's pool reads (speculative_num_draft_tokens: Stack.for_spec_decode), so
        # step/dsv4_cache.engine_charge charges a request the draft's share as the check does (engines/sglang/
        # dsv4_pool.py dsv4_request_charge: V4's draft layer and rings, V4.1's draft layer and cap terms)
        opts["spec_verify_tokens"] = q.draft.num_draft_tokens
    # the vision tower the engine builds, whole on every device: in the budget's weights (Stack.vision_whole)
    opts["vision_whole"] = _loads_vision(model, q)
    if engine_rules(q.engine).pool_rule == "static":
        from k3plan.engines.sglang.memory import sglang_loaded_extras

        # what SGLang holds with the weights beside the model's tensors (its draft, DeepSeek-V4's RoPE tables, V4.1's
        # bf16 wo_a), computed once: in the budget's weights as terms of their own (Stack.extra_weights), and the
        # start check reads those weights (_engine_json), so the two are one accounting
        opts["extra_weights"] = sglang_loaded_extras(
            model,
            draft=q.draft if isinstance(q.draft, SglangDraft) else None,
            release=q.release,
            hardware=hw.name,
            vendor=hw.vendor,
            attn_tp=q.tp,  # the attention TP group: tp_size / dp_size under DP attention (the setup's tp)
            kv_raw=q.kv_raw,
        )
    # the LM head over the engine's whole TP group under DP attention, where the command runs it so: a role override of
    # the budget's sharding (Stack.lm_head_whole_tp), so the budget, the engine's sizing and the step read one split
    opts["lm_head_whole_tp"] = q.lm_head_whole_tp
    # the shared experts whole on every device where the engine clones them into the routed MoE (SGLang 0.4.6:
    # Stack.with_shared_expert_whole), so the budget's weights and the engine's sizing read one figure
    if q.shared_expert_whole is not None:
        opts["shared_expert_whole"] = q.shared_expert_whole
    # the dense layers' MLP whole on every device where the command runs it so (SGLang's --moe-dense-tp-size 1:
    # Stack.with_dense_mlp_whole), so the budget's weights and the engine's sizing read one figure
    if q.dense_mlp_whole is not None:
        opts["dense_mlp_whole"] = q.dense_mlp_whole
    # the dense MLP and the shared experts over the engine's whole TP group under DP attention, where the command's
    # release holds them so (SGLang 0.4.3-0.5.23 read: Stack.with_mlp_whole_tp): the budget, the engine's sizing and the step
    if q.mlp_whole_tp is not None:
        opts["mlp_whole_tp"] = q.mlp_whole_tp
    if q.decode_graph_bs is not None or q.decode_graph_cap is not None or q.decode_graph_off:
        # SGLang's decode graphs as the command sets them: what its derived fraction reserves (Stack.with_decode_graph)
        opts["decode_graph"] = (q.decode_graph_bs, q.decode_graph_cap, q.decode_graph_off)
    if q.prefill_backend is not None or q.prefill_conditions:
        # SGLang's prefill graph as the command sets it: whether its derived fraction reserves for it
        # (Stack.with_prefill_graph, engines/sglang/prefill_graph.py)
        opts["prefill_graph"] = (q.prefill_backend, q.prefill_conditions)
    pad_rule = engine_rules(q.stack).expert_shard_pad
    if pad_rule is not None and hw.kind == "gpu" and model.spec.moe is not None:
        # without expert parallelism the engine TP-splits every expert over the flattened TP x DP ranks and pads a
        # shard by the model's rule (with it, whole experts, which a model's rule may still pad): the budget's weights
        # hold the padded shards (Stack.expert_pad), so the budget and the engine's sizing read one weights figure
        opts["expert_pad"] = pad_rule(
            architecture=model.spec.architecture,
            hardware=hw.name,
            vendor=hw.vendor,
            intermediate=model.spec.moe.expert_intermediate,
            shards=q.tp * q.dp,
            tp=q.tp,  # the attention TP size, on which a model's own floor is tested (Kimi's KimiMoE)
            expert_parallel=q.expert_parallel,
            release=q.release,  # the command's release: a model's rule may change with it (Engine.by_release)
            moe_backend=q.moe_backend,  # the kernel a model's rule may follow (DeepSeek-V4.1 on gfx942)
            env=q.env,  # the command's environment a rule may read (SGLang's AITER padding of Kimi-K3's shards)
            ep=q.engine_ep,  # SGLang's --ep-size (its MoE TP group = TP x DP / EP; vLLM's: expert_parallel)
        )
    copies_rule = engine_rules(q.stack).redundant_expert_pad
    if q.eplb is not None and copies_rule is not None and model.spec.moe is not None:
        # redundant expert copies (vLLM's EPLB, SGLang's --ep-num-redundant-experts): a rank holds (E + R) / EP
        # experts, in the budget's weights through the same Stack.expert_pad (vLLM's EPLB needs expert parallelism,
        # so no shard padding above applies with it; a whole expert's padding, ROCm's Kimi, multiplies it)
        copies = copies_rule(
            architecture=model.spec.architecture,
            vendor=hw.vendor,
            experts=model.spec.moe.num_experts,
            redundant=q.eplb[0],
            tp=q.tp,
            dp=q.dp,
            ep=q.engine_ep,  # the command's EP size where its engine reads one (SGLang's --ep-size); vLLM: TP x DP
            moe_backend=q.moe_backend,
        )
        if copies is not None:
            whole = opts.get("expert_pad")
            opts["expert_pad"] = (
                copies
                if whole is None
                else (copies[0] * whole[0], copies[1] * whole[1], f"{copies[2]}; and {whole[2]}")
            )
    if q.expert_copies is not None and _routed_formats(model) == ("fp8_block",):
        # the routed experts held more than once a rank (SGLang 0.4.8.post1-0.4.9.post4's EP MoE under aiter keeps the
        # loaded FP8 experts beside aiter's shuffled ones: engines/sglang/ep_moe_copy.py), a block-FP8 checkpoint's
        # only: in the budget's weights (Stack.expert_copies), held but not read by the step
        opts["expert_copies"] = q.expert_copies
        q = dataclasses.replace(q, caveats=(*q.caveats, q.expert_copies[1]))
    if q.expert_format is not None and "ds_fp4" in _routed_formats(model):
        # the FP4 routed experts in the form the command's release and GPU hold them (a repacking of their scales at
        # load the stack's options do not see: ServeQuestion.expert_format), in the budget's weights and the step's
        # reads (Stack.with_expert_format)
        opts["expert_format"] = q.expert_format
        q = dataclasses.replace(q, caveats=(*q.caveats, q.expert_format[1]))
    if engine_rules(q.stack).expert_format is not None and "ds_fp4" in _routed_formats(model):
        # what the engine's expert-format rule reads of the command beside the stack's options: its MoE runner as given
        # and its environment (Stack.expert_format_on), so the stack's own rule on this GPU -- what fit without --serve
        # and plan's weight columns read -- gives the reading's answer above
        opts["moe_runner"] = q.moe_runner
        opts["engine_env"] = q.env
    scale_rule = engine_rules(q.stack).fraction_scale
    if scale_rule is not None and hw.kind == "gpu":
        # a cut the engine applies to its static memory fraction (SGLang 0.4.7-0.5.4 under aiter): the budget's reserve
        # and the engine's pool read it through Stack.reserve_fraction
        spec = model.spec
        opts["fraction_scale"] = scale_rule(
            release=q.release,
            vendor=hw.vendor,
            backend=q.attention_backend,
            speculative=q.speculative is not None,
            context=q.context or spec.max_context or 0,  # 0: a model without a maximum, no cut
            kv_heads=spec.mla.heads if spec.mla is not None and spec.dsv4 is None else None,
            tp=q.tp,
            dp=q.dp,
        )
    if q.swa_full_tokens_ratio is not None and model.spec.dsv4 is not None:
        # SGLang's --swa-full-tokens-ratio: the budget's charge for a DeepSeek-V4 request reads it as the start check's
        # pool does (Stack.engine_swa_ratio through step/dsv4_cache.engine_charge), so the table row and the check agree
        opts["engine_swa_ratio"] = q.swa_full_tokens_ratio
    if model.spec.dsv4 is not None and engine_rules(q.stack).pool_rule == "static":
        # SGLang's DeepSeek-V4 compressor-state element (SGLANG_DSV4_COMPRESS_STATE_DTYPE, read by engines/sglang/
        # serve.py): the budget's charge for a request reads the figure the start check's pool reads (Stack.
        # engine_state_bytes through step/dsv4_cache.engine_charge), so the table row and the check agree
        opts["engine_state_bytes"] = q.dsv4_state_bytes
    if q.release is not None:
        # the budget follows the engine's release: an option default it changed (Engine.option_defaults: vLLM's
        # gpu_memory_utilization) and DeepSeek-V4's charge (Stack.engine_release)
        opts["engine_release"] = q.release
    if model.spec.dense_mla and engine_rules(q.stack).dense_mla_block is not None and hw.kind == "gpu":
        # a dense-MLA model's block: the command's --block-size, else as the release's default decode kernel forces or
        # prefers it under the command's environment: one value the budget's page and the engine's pool read
        # (Stack.dense_mla_block through step/cache.py cache_inputs)
        opts["engine_block"] = q.block_size
        opts["engine_env"] = q.env
    in_flight_rule = engine_rules(q.stack).windowed_in_flight
    if in_flight_rule is not None and hw.kind == "gpu" and model.spec.dsv4 is not None:
        opts["engine_block"] = q.block_size  # and its --block-size (Stack.engine_block; None: the engine's default)
        # the batches a DeepSeek-V4 windowed group holds pages for, as this release and scheduling run them: one value
        # the budget's charge and the engine's pool read (Stack.windowed_in_flight; Engine.windowed_in_flight)
        opts["in_flight"] = in_flight_rule(
            q.release,
            async_scheduling=q.async_scheduling,
            pp=q.pp,
            # the runner that runs the command (engines/vllm/releases.py model_runner_v2; DSpark: V2 only)
            v2_runner=_runner_v2(q, model, hw.vendor),
        )
    return opts, q.context or model_max or context, 1, q.chunk or chunk, q


def _paging_source(st, spec, hardware: str = "") -> str:
    """Where the stack's page was read: its paging source, and for a hybrid MLA model the release's alignment where
    the engine's release sets its own (Stack.hybrid_align); for a dense-MLA model the block the command or the engine's
    release sets (Stack.dense_mla_block)."""
    if spec.dense_mla:
        block, why = st.dense_mla_block(hardware)
        if why:
            return f"{block} tokens: {why}"
    align, why = st.hybrid_align(hardware) if spec.hybrid_mla else (0, "")
    return f"{st.paging.source}; aligned to {align} tokens: {why}" if why else st.paging.source


def _runner_v2(q, model, vendor: str) -> bool:
    """Whether vLLM's Model Runner V2 runs the command (engines/vllm/releases.py model_runner_v2)."""
    from k3plan.engines.vllm.releases import model_runner_v2

    d4 = model.spec.dsv4
    # V4.1's mtp.* are DSpark stages whatever the method says; V4's DSpark checkpoint (0731) runs --speculative-config
    # method mtp as V4's MTP drafter (models/families/deepseek_v4.py VLLM_V4_MTP)
    dspark = (
        d4 is not None
        and d4.dspark is not None
        and (d4.csa2 is not None or getattr(q.speculative, "method", None) == "dspark")
        and q.draft is not None
        and bool(getattr(q.draft, "num_speculative_tokens", 0))
    )
    method = "dspark" if dspark else getattr(q.speculative, "method", None)
    on, _ = model_runner_v2(
        release=q.release, env=q.env, spec_method=method, vendor=vendor, v4=d4 is not None and d4.csa2 is None
    )
    return on


def _serve_topology(hw, devices: int) -> str | None:
    """The smallest standard topology of ``hw`` with exactly the command's devices (TP x PP x DP): the machine the
    command runs on, whether or not its weights fit (the engine's verdict says); None where no standard shape has
    that many, and fit picks as without --serve."""
    from k3plan.hardware.topology import topologies_up_to

    for t in topologies_up_to(hw, hw.max_chips):
        if t.devices == devices:
            return t.text
    return None


def _serve_fits(result: FitResult) -> bool:
    """With --serve the verdict is the engine's start check, and k3plan's own budget only where it is certain:
    a configuration whose temporaries come from the temp model fails here only if the band's lower end fails too
    (issue 34: the band's upper end alone must not refuse what the engine runs)."""
    low = result.capacity.band_low_max_sequences
    return result.fits or (low is not None and low >= 1)


def _loads_vision(model, served) -> bool:
    """The serve command's engine builds the model's vision tower (Engine.loads_vision_tower, for its architectures;
    vLLM not with --language-model-only)."""
    rules = None if served is None else engine_rules(served.engine)
    if rules is None or served.language_model_only or not rules.loads_vision_tower:
        return False
    for arch, first, modalities, _ in rules.tower_off_by_limits:  # --limit-mm-per-prompt 0 for the tower's modalities
        late_enough = served.release is None or served.release >= first
        if arch == model.spec.architecture and late_enough and modalities <= served.mm_zero_limits:
            return False
    archs = rules.vision_tower_architectures
    return (archs is None or model.spec.architecture in archs) and any(True for _ in model.inventory.of_kind("vision"))


def _vision_refusal(setup: Setup) -> str | None:
    """Without --serve the budget prices a multimodal model's language model alone (k3plan's launch line runs it so):
    where the stack's engine, told nothing, builds the vision tower and refuses it at the stack's options on this GPU
    (Engine.vision_refusal: SGLang's DeepSeek-V4.1 under its DeepEP default), the warning that says so and that the
    fit is priced as --language-model-only -- as fit warns of what else the engine does not run as priced
    (budget/fit_text.py setup_warnings: Stack.refusals) rather than refusing the question."""
    rule = engine_rules(setup.stack.name).vision_refusal
    if rule is None or setup.hardware.kind != "gpu" or setup.stack.vision_whole:
        return None
    return rule(
        architecture=setup.model.spec.architecture,
        tower_bytes=sum(t.nbytes for t in setup.model.inventory.of_kind("vision")),
        options=setup.stack.chosen,
        pp=setup.parallel.pp,
        vendor=setup.hardware.vendor,
    )


def _vision_bytes(setup: Setup, served) -> int:
    """The vision tower the engine adds to the budget's weights: none where the budget holds it already
    (Stack.vision_whole, set from the same command)."""
    if setup.stack.vision_whole or not _loads_vision(setup.model, served):
        return 0
    return sum(t.nbytes for t in setup.model.inventory.of_kind("vision"))


def _engine_json(setup: Setup, result: FitResult, served=None) -> dict | None:
    """fit --json's ``engine``: the stack's engine sizing its own KV pool (k3plan.engines.vllm.memory)."""
    from k3plan.engines.vllm.memory import engine_sizing
    from k3plan.step.dsv4_cache import dsv4_block

    lay, st, hw, spec = result.cache_layout, setup.stack, setup.hardware, setup.model.spec
    if lay is None:
        return None
    weights_source = f"k3plan's weights a device, {result.provenance.weights}"  # the engine's sizing starts from them
    if served is not None and engine_rules(served.engine).pool_rule == "static":
        from k3plan.engines.sglang.dsv4_pool import (
            DSV4_RUNNING,
            dsv41_mega,
            form_for_release,
            sglang_dsv4_pool,
            sglang_dsv41_pool,
            v41_form_for_release,
        )
        from k3plan.engines.sglang.fp8_block import shared_expert_refusal
        from k3plan.engines.sglang.memory import sglang_kv_pool
        from k3plan.engines.sglang.spec import SPEC_RUNNING, SglangDraft

        sg_draft = served.draft if isinstance(served.draft, SglangDraft) else None
        d4 = spec.dsv4
        # 0.5.23's flashmla_mega: an SM100 GPU, attention TP 1, FP8 KV (engines/sglang/dsv4_pool.py V41_FORM_SOURCE)
        mega = d4 is not None and dsv41_mega(d4, hardware=hw.name, attn_tp=setup.parallel.tp, kv_raw=served.kv_raw)
        # the draft's weights, DeepSeek-V4's RoPE tables and V4.1's bf16 wo_a are in the budget's weights already
        # (Stack.extra_weights, set by _from_serve from engines/sglang/memory.py sglang_loaded_extras): the check
        # reads those weights, one figure
        # DeepSeek-V4's sub-pools at one full-token count; V4.1's with its sliding-window pool taken first in cap
        # mode (engines/sglang/dsv4_pool.py)
        pool4 = (
            None
            if d4 is None
            else sglang_dsv4_pool(
                d4,
                swa_ratio=served.swa_full_tokens_ratio,
                # a worker's: SGLang's requested_max_running_requests_per_worker (max_running // dp_size)
                max_running_requests=(served.max_running_requests or DSV4_RUNNING) // max(setup.parallel.dp, 1),
                form=form_for_release(served.release),
                speculative=sg_draft is not None,
                page=served.page_size,  # --page-size: 0.5.21's form prices a token's bytes in its pages
                state_bytes=served.dsv4_state_bytes,  # SGLANG_DSV4_COMPRESS_STATE_DTYPE (engines/sglang/serve.py)
            )
            if d4.csa2 is None
            else sglang_dsv41_pool(
                d4,
                chunk=result.workload.prefill_chunk_tokens,
                # a worker's, as compute_swa_request_cap and _resolve_swa_prefix_tails take them: max_running_requests
                # // attn_dp_size (sglang 0.5.21-0.5.23 wheels, pool_configurator.py)
                max_running_requests=(served.max_running_requests or DSV4_RUNNING)
                // (setup.parallel.dp if st.dp_attention else 1),
                radix_cache=st.chosen.get("disable_radix_cache", "false") != "true",
                swa_ratio=served.swa_full_tokens_ratio,
                page=served.page_size,
                form=v41_form_for_release(served.release),
                # 0.5.23's flashmla_mega: an SM100 GPU, attention TP 1, FP8 KV (engines/sglang/dsv4_pool.py
                # V41_FORM_SOURCE)
                v41_layout=mega,
                # DSpark's draft: one draft layer in the per-token figures, its verify width in the cap's terms
                # (engines/sglang/spec.py DSPARK_WORKER; dsv4_pool.py V41_SPEC_SOURCE)
                draft_layers=sg_draft.draft_layers if sg_draft is not None else 0,
                draft_tokens=sg_draft.num_draft_tokens if sg_draft is not None else 0,
                prefix_tails=served.swa_prefix_tails,  # --swa-prefix-tails (dsv4_pool.py PREFIX_TAILS_SOURCE)
            )
        )

        # the fraction SGLang runs with: the flag's, or the one it derives for this GPU, split and chunk where the
        # command gives none -- the budget's reserve by the same rule (Stack.reserve_fraction), so the start check
        # and the budget read one figure
        reserve = st.reserve_fraction(
            usable_bytes=hw.usable_bytes_per_device,
            tp=setup.parallel.tp,
            pp=setup.parallel.pp,
            chunk=result.workload.prefill_chunk_tokens,
            vendor=hw.vendor,
            dp=setup.parallel.dp,
        )
        sg = sglang_kv_pool(
            mem_fraction_static=round(1 - reserve, 12),
            visible_bytes=hw.usable_bytes_per_device,
            visible_source=str(hw.sources().get("usable_hbm_per_device", hw.path)),
            hardware=hw.name,  # SGLang's free memory before loading, where a log gives it
            weights_bytes=result.per_device.weights_bytes,
            state_pool_bytes=result.per_device.state_bytes,
            state_source=result.provenance.state,
            kv_bytes_per_token=lay.kv_bytes_per_token_layer * lay.n_mla,
            max_model_len=result.workload.context_tokens,
            # DeepSeek-V4's default where the command sets none (engines/sglang/dsv4_pool.py DSV4_RUNNING), set before
            # speculative decoding's (engines/sglang/spec.py SPEC_RUNNING)
            max_running_requests=served.max_running_requests
            or (DSV4_RUNNING if d4 is not None else SPEC_RUNNING if sg_draft is not None else None),
            max_total_tokens=served.max_total_tokens,
            page_size=served.page_size or 1,
            dsv4=pool4,
            vision_bytes=_vision_bytes(setup, served),
            dcp=served.dcp,
            # a hybrid linear-attention model's state pool by SGLang's own rule (engines/sglang/memory.py SGLANG_MAMBA)
            state_slot_bytes=lay.state_bytes_per_layer_unpadded * lay.n_kda if lay.n_mla and lay.n_kda else 0,
            state_slots_ratio=lay.state_slots_per_sequence,
            mamba_cache_size=served.mamba_cache_size,
            mamba_ratio=served.mamba_full_memory_ratio,
            disable_radix_cache=st.chosen.get("disable_radix_cache", "false") == "true",
            attn_dp=setup.parallel.dp if st.dp_attention else 1,  # ServerArgs divides the slots by attn_dp_size
            draft=sg_draft,
            draft_in_weights=True,
            target_layers=lay.n_mla,
            weights_source=weights_source,
            release=served.release,
            multimodal=_loads_vision(setup.model, served),  # SGLang's is_multimodal: the models it builds a tower for
            # --enable-symm-mem's pool, out of the 1 - fraction share (engines/sglang/serve.py symm_mem)
            symm_mem_bytes=served.symm_mem_bytes,
            symm_mem_source=served.symm_mem_source,
            # --moe-a2a-backend megamoe's buffer, after the pool out of the same share (engines/sglang/mega_moe.py)
            mega_moe=_sglang_mega_moe(served, setup),
            # --moe-a2a-backend deepep's buffer, at the first dispatch after the pool, out of the same share
            # (engines/sglang/deepep.py)
            deepep=_sglang_deepep(served, setup, vendor=hw.vendor),
            # DeepSeek-V4's shared expert split over the whole TP group into partial fp8 blocks: refused while the
            # model is built (engines/sglang/fp8_block.py); --tp-size is the attention TP x DP under DP attention,
            # where the command's reading says SGLang splits it so (engines/sglang/serve.py mlp_whole_tp: whole
            # under SGLANG_SHARED_EXPERT_TP1 or an all-to-all backend)
            build_refusal=shared_expert_refusal(
                setup.model.inventory,
                hidden_size=spec.hidden_size,
                tp_size=(
                    setup.parallel.tp
                    if not st.dp_attention
                    else setup.parallel.tp * setup.parallel.dp
                    if "shared_expert" in (served.mlp_whole_tp or ((), None))[0]
                    else 1
                ),
                a2a_backend=served.stack_options.get("moe_a2a_backend", "none"),
                release=served.release,
            ),
        )
        return _with_serve(sg.as_json(), result, served)
    release = _release(served, st.name, hw.kind)  # the release every vLLM rule below reads
    got = engine_sizing(
        stack_name=st.name,
        kv_pool_method=st.kv_pool.method if st.kv_pool else None,
        reserve_fraction=st.reserve.fraction_of_usable_hbm,
        hardware=hw.name,
        visible_bytes=hw.usable_bytes_per_device,
        visible_source=str(hw.sources().get("usable_hbm_per_device", hw.path)),
        weights_bytes=result.per_device.weights_bytes,
        # the TP-split expert shards' padding, in the budget's weights above (Stack.expert_pad): a drafter's too
        expert_pad=st.expert_pad,
        weights_source=weights_source,
        vision_bytes=_vision_bytes(setup, served),
        # the budget's temporaries with vLLM's own size for the MLA layer's profile allocation (engines/vllm/
        # mla_workspace.py)
        **_vllm_profile_temp(served, setup, result, lay, stack=st.name, kind=hw.kind),
        page_bytes=lay.page_bytes,
        kv_bytes_per_token_layer=lay.kv_bytes_per_token_layer,
        block_tokens=lay.block_tokens,
        paging_source=dsv4_block(spec, st.name)[1] or _paging_source(st, spec, hw.name),
        n_mla=lay.n_mla,
        n_kda=lay.n_kda,
        max_model_len=result.workload.context_tokens,
        auto_max_model_len=served is not None and served.context_auto,
        num_gpu_blocks_override=None if served is None else served.num_gpu_blocks_override,
        kv_cache_memory_bytes=None if served is None else served.kv_cache_memory_bytes,
        hybrid_kv_off=served is not None and served.hybrid_kv_off,
        # the command's --gpu-memory-utilization (vLLM's default by release where it sets none: engines/vllm/memory.py)
        utilization_given=served is not None and "gpu_memory_utilization" in served.stack_options,
        state_bytes_per_layer_unpadded=lay.state_bytes_per_layer_unpadded,
        compact_state=lay.paging == "separate",
        max_num_seqs=result.workload.batch if served is None else served.batch,
        block_override=None if served is None else served.block_size,
        dsv4=spec.dsv4,
        max_num_batched_tokens=result.workload.prefill_chunk_tokens,
        draft=None if served is None else served.draft,
        vendor=hw.vendor,
        vocab_size=spec.vocab_size,
        cudagraph=_cudagraph(
            served,
            result,
            dsv4=spec.dsv4 is not None,
            vendor=hw.vendor,
            release=release,
            v41=spec.dsv4 is not None and spec.dsv4.csa2 is not None,
            hardware=hw.name,
        ),
        # read off a TPU only (engines/vllm/serve.py: None there)
        captures_graphs=served is not None and served.compilation is not None and served.compilation.mode != "NONE",
        # what the capture takes after the pool at least, and where it fails (engines/vllm/cudagraph.py capture_need)
        capture=_capture(
            served,
            setup,
            result,
            vendor=hw.vendor,
            release=release,
            dsv4=spec.dsv4 is not None and spec.dsv4.csa2 is None,
            hardware=hw.name,
        ),
        backend_refusal=_backend_refusal(
            served,
            dsv4=spec.dsv4 is not None,
            hardware=hw.name,
            vendor=hw.vendor,
            setup=setup,
            kind=hw.kind,
            max_model_len=result.workload.context_tokens,
        ),
        # DeepSeek-V4.1's index keys in MXFP4 (engines/vllm/dsv4_pages.py dsv41_pages)
        fp4_indexer=served is not None and (served.attention or {}).get("indexer_kv_dtype") == "mxfp4",
        dcp=1 if served is None else served.dcp,
        nvfp4=served is not None and served.kv_raw == "nvfp4_ds_mla",
        release=release,
        in_flight=st.windowed_in_flight,
        hidden_size=spec.hidden_size,
        attention_heads=spec.mla.heads // setup.parallel.tp if spec.mla else 0,
        attention_backend=str((served.attention or {}).get("backend") or "") if served is not None else "",
        q_lora_rank=(spec.mla.q_lora_rank or 0) if spec.mla else 0,
        tp_attention=setup.parallel.tp,
        mega_moe=_mega_moe(served, setup, result, vendor=hw.vendor),
        all2all=_all2all(served, setup, result, vendor=hw.vendor, devices_per_host=hw.devices_per_host),
        eplb_state=_eplb_state(served, setup, result, vendor=hw.vendor),
        mla_workspace=_mla_workspace(served, setup, hardware=hw.name, kind=hw.kind),
        model_buffers=None if served is None else served.model_buffers,
        moe_workspace=_moe_workspace(served, setup, result, kind=hw.kind),
        moe_moment=_moe_moment(served, setup, result, kind=hw.kind),
        rocm_moe=_rocm_moe(served, setup, st.expert_pad, vendor=hw.vendor, hardware=hw.name),
        rocm_aiter_linear=_rocm_aiter_linear(served, vendor=hw.vendor),
        rocm_wo_a_fp8=_rocm_wo_a_fp8(served, hardware=hw.name, release=release),
        rocm_aiter_moe=_rocm_aiter_moe(served, hardware=hw.name),
        rocm_fp8_pad=_rocm_fp8_pad(served, setup, vendor=hw.vendor),
        # AITER's w2 scale shuffle on Kimi-K3's experts on gfx950 (engines/vllm/kimi_k3_memory.py)
        k3_scale_pad=_k3_scale_pad(served, setup, st.expert_pad, hardware=hw.name, kind=hw.kind),
        # the routed experts' checkpoint formats: the MoE method that raises a weights' OOM (engines/vllm/memory.py)
        expert_formats=_expert_formats(setup),
        # the model's MoE shape and the command's options, for a TPU engine's compiled-step temporaries
        # (engines/engine.py HbmWorker.step_temporaries)
        step_model=(
            spec.architecture,
            spec.n_moe,
            spec.moe.top_k,
            spec.moe.expert_in,
            setup.parallel.dp,
            served.expert_parallel,
        )  # fmt: skip
        if served is not None and spec.moe is not None
        else None,
        step_options=None if served is None else served.stack_options,
        graph_profile_oom=_graph_profile_oom(
            served, setup, result, lay, stack=st.name, kind=hw.kind, vendor=hw.vendor, hardware=hw.name
        ),
        # the devices one engine runs on: a TPU worker that sums their pools counts its blocks over them
        # (HbmWorker.sums_devices) in whole pages; where the stack splits the MLA cache over TP
        # (KVCache.replicate_across_tp false: tpu-inference's 2-D mesh) a device's page is already 1 / tp of one,
        # so the blocks are counted over the DP groups alone
        mesh_devices=setup.parallel.dp * (setup.parallel.tp if st.kv_cache.replicate_across_tp else 1),
        # the profile run's multimodal dummy batch beside the language model's (engines/vllm/mm_profile.py)
        mm_profile=_vllm_mm_profile(served, setup, result, kind=hw.kind),
    )
    if got is None:
        return None
    return _with_serve(got.as_json(), result, served)


def _vllm_mm_profile(served, setup: Setup, result: FitResult, *, kind: str) -> tuple[int, int, str] | None:
    """(live bytes, the encoder's peak, source) of vLLM's multimodal profile for a GPU serve command whose engine builds
    the vision tower (not --language-model-only, not every modality limited to 0) and profiles it (not
    --skip-mm-profiling): engines/vllm/mm_profile.py; None elsewhere."""
    from k3plan.engines.vllm.mm_profile import kimi_k25_mm_profile
    from k3plan.models.families.moonvit import vision_encoder_dims

    if served is None or kind != "gpu" or not _loads_vision(setup.model, served):
        return None
    if "--skip-mm-profiling" in served.ignored:
        return None
    dims = vision_encoder_dims(setup.model.inventory)
    if dims is None:
        return None
    got = kimi_k25_mm_profile(
        release=served.release,
        architecture=setup.model.spec.architecture,
        text_hidden=setup.model.spec.hidden_size,
        vision_width=dims[1],
        max_num_batched_tokens=result.workload.prefill_chunk_tokens,
        max_model_len=result.workload.context_tokens,
        max_num_seqs=served.batch,
    )
    return None if got is None else (got.live, got.encoder_peak, got.source)


MLA_KV_LABEL = "MLA up-projected K/V over the context"
EXPERT_IO_LABEL = "expert inputs, gate/up and outputs"  # step/temporaries.py _MOE_LABELS["expert_io_bytes"]
# the models whose vLLM attention is MLAAttention (model_executor/layers/mla.py MultiHeadLatentAttentionWrapper, whose
# profile-run allocation engines/vllm/mla_workspace.py sizes): deepseek_v2.py DeepseekV2MLAAttention (DeepSeek-V3 and
# the Kimi-K2 checkpoints), kimi_k25.py over it, kimi_linear.py KimiMLAAttention (vllm 0.20.0 wheel); Kimi-K3 on ROCm
# (vllm/models/kimi_k3/amd/linear.py KimiMLAAttention over the wrapper, 0.28.0 wheel). Kimi-K3 on CUDA runs its own
# MLA layer, which allocates nothing in the profile run (engines/vllm/mla_workspace.py k3_profile_mla); not
# DeepSeek-V4's attention
MLA_PROFILE_ARCHS = (
    "deepseek_v3",
    "kimi_k2",
    "kimi_k25",
    "kimi_linear",
    "kimi_k3",
)  # model_type (ModelSpec.architecture)


def _vllm_profile_temp(served, setup: Setup, result: FitResult, lay, *, stack: str, kind: str) -> dict[str, Any]:
    """temp_bytes and temp_source for vLLM's sizing: the budget's temporaries, where they are its analytic terms, with
    vLLM's own sizes in place of two of them on a GPU: the prefill's ``MLA up-projected K/V over the context`` by the
    tensor vLLM's profile run allocates in an MLA layer for it where the model has MLA layers (not DeepSeek-V4's
    attention; engines/vllm/mla_workspace.py profile_mla_allocation), and its ``expert inputs, gate/up and outputs``
    by what a Marlin MoE call holds where vLLM runs the experts through fused_marlin_moe (engines/vllm/marlin_moe.py
    marlin_forward_caches); as they are elsewhere."""
    temp, t = result.per_device.temp_bytes, result.temp
    source = f"prefill: {result.provenance.temp_prefill}; decode: {result.provenance.temp_decode}"
    plain = {"temp_bytes": temp, "temp_source": source}
    terms = {e.name: e.bytes for e in t.prefill_terms}
    if t.prefill_bytes is None or t.decode_bytes is None or temp != max(t.prefill_bytes, t.decode_bytes):
        return plain  # a calibrated or refused stage: not the analytic terms
    swaps: list[tuple[str, int, tuple[int, str]]] = []
    if MLA_KV_LABEL in terms:
        got = _mla_allocation(served, setup, result, lay, stack=stack, kind=kind)
        if got is not None:
            swaps.append((MLA_KV_LABEL, int(terms[MLA_KV_LABEL]), got))
    if EXPERT_IO_LABEL in terms:
        marlin = _marlin_caches(served, setup, result, stack=stack, kind=kind)
        if marlin is None:
            marlin = _triton_caches(served, setup, result, stack=stack, kind=kind)
        if marlin is not None:
            swaps.append((EXPERT_IO_LABEL, int(terms[EXPERT_IO_LABEL]), marlin))
    bank = _attn_res_bank(served, setup, result, kind=kind)
    if not swaps and bank is None:
        return plain
    prefill = t.prefill_bytes
    said = []
    for label, k3, (nbytes, how) in swaps:
        prefill = prefill - k3 + nbytes
        what = "the MLA layer allocates in vLLM's profile run" if label == MLA_KV_LABEL else "vLLM's fused MoE holds"
        said.append(f"its {label} ({k3:,} B) replaced by what {what}, {how}")
    if bank is not None:  # a tensor beside the layer's own (the residual stream's two copies are the prefix sum's)
        prefill += bank[0]
        said.append(f"+ {bank[1]}")
    return {
        "temp_bytes": max(prefill, t.decode_bytes),
        "temp_source": f"prefill: {result.provenance.temp_prefill}, {'; and '.join(said)} (prefill {prefill:,} B); "
        f"decode: {result.provenance.temp_decode}",
    }


def _attn_res_bank(served, setup: Setup, result: FitResult, *, kind: str) -> tuple[int, str] | None:
    """The Attention Residuals block bank vLLM's Kimi-K3 forward holds in the profile run's dummy forward at
    max_num_batched_tokens (engines/vllm/kimi_k3_memory.py attn_res_bank), on a GPU; None elsewhere."""
    from k3plan.engines.vllm.kimi_k3_memory import attn_res_bank, k3_sequence_parallel

    spec = setup.model.spec
    if kind != "gpu" or not spec.attn_res_block_size:
        return None
    par = setup.parallel
    sp = k3_sequence_parallel(
        vendor=setup.hardware.vendor,
        pp=par.pp,
        expert_parallel=served is not None and served.expert_parallel,
        tp=par.tp,
        dp=par.dp,
        moe_backend=(served.moe_backend or "") if served is not None else "",
    )
    return attn_res_bank(
        architecture=spec.architecture,
        block_size=spec.attn_res_block_size,
        num_layers=spec.num_layers,
        hidden=spec.hidden_size,
        tokens=result.workload.prefill_chunk_tokens,
        tp=par.tp,
        sequence_parallel=sp,
    )


def _moe_forward_args(served, setup: Setup, result: FitResult, *, stack: str, kind: str) -> dict[str, Any] | None:
    """The arguments vLLM's MoE profile-run rules read (engines/vllm/marlin_moe.py, triton_moe.py): the release, the
    GPU, the experts' formats and shapes, the split and the command's MoE backend and environment; None off a GPU or
    without a MoE."""
    spec = setup.model.spec
    if spec.moe is None or kind != "gpu":
        return None
    hw = setup.hardware
    return {
        "release": _release(served, stack, kind),
        "vendor": hw.vendor,
        "hardware": hw.name,
        "expert_formats": _expert_formats(setup),
        "expert_parallel": served is not None and served.expert_parallel,
        "tp": setup.parallel.tp,
        "top_k": spec.moe.top_k,
        "hidden": spec.hidden_size,
        "intermediate": spec.moe.expert_intermediate,
        "tokens": result.workload.prefill_chunk_tokens,
        "dp": setup.parallel.dp,
        "moe_backend": (served.moe_backend or "") if served is not None else "",
        "env": served.env if served is not None else {},
    }


def _marlin_caches(served, setup: Setup, result: FitResult, *, stack: str, kind: str) -> tuple[int, str] | None:
    """What a MoE layer's fused_marlin_moe call holds in vLLM's profile-run forward a GPU (engines/vllm/marlin_moe.py),
    over the command's DP ranks and expert parallelism; None where vLLM does not run that path or it was not read."""
    from k3plan.engines.vllm.marlin_moe import marlin_forward_caches

    args = _moe_forward_args(served, setup, result, stack=stack, kind=kind)
    if args is None:
        return None
    return marlin_forward_caches(
        **args,
        experts=setup.model.spec.moe.num_experts,
        all2all_backend=_all2all_backend(served),
    )


def _all2all_backend(served) -> str:
    """The command's --all2all-backend as the stack option reads it ('' without one or without --serve)."""
    return served.stack_options.get("all2all_backend", "") if served is not None else ""


def _triton_caches(served, setup: Setup, result: FitResult, *, stack: str, kind: str) -> tuple[int, str] | None:
    """What a MoE layer's Triton fused_experts_impl call holds in vLLM's profile-run forward a GPU for FP8-block
    experts before 0.14.0 (engines/vllm/triton_moe.py); None where vLLM does not run that path or it was not read."""
    from k3plan.engines.vllm.triton_moe import triton_forward_caches

    args = _moe_forward_args(served, setup, result, stack=stack, kind=kind)
    return None if args is None else triton_forward_caches(**args)


def _mla_allocation(served, setup: Setup, result: FitResult, lay, *, stack: str, kind: str) -> tuple[int, str] | None:
    """(bytes, source) of the tensor an MLA layer allocates in vLLM's profile run a GPU (engines/vllm/mla_workspace.py),
    for a model whose vLLM attention is MLAAttention; None elsewhere."""
    from k3plan.engines.vllm.mla_workspace import K3_MLA_ARCH, k3_profile_mla, profile_mla_allocation
    from k3plan.engines.vllm.releases import NEWEST_RELEASE

    spec = setup.model.spec
    if kind != "gpu" or spec.mla is None or spec.architecture not in MLA_PROFILE_ARCHS or not lay.n_mla:
        return None
    if spec.architecture == K3_MLA_ARCH and (k3 := k3_profile_mla(vendor=setup.hardware.vendor)) is not None:
        return k3
    return profile_mla_allocation(
        release=_release(served, stack, kind) or NEWEST_RELEASE,
        max_model_len=result.workload.context_tokens,
        max_num_seqs=result.workload.batch if served is None else served.batch,
        block_size=served.block_size if served is not None and served.block_size else lay.block_tokens,
        local_heads=spec.mla.heads // setup.parallel.tp,
        qk_nope_head_dim=spec.mla.qk_nope_head_dim,
        v_head_dim=spec.mla.v_head_dim,
        act_bytes=2,  # k_c_normed's dtype: the activations' bf16 (stack activation_dtype)
        dcp=1 if served is None else served.dcp,
    )


def _graph_profile_oom(
    served, setup: Setup, result: FitResult, lay, *, stack: str, kind: str, vendor: str, hardware: str
) -> tuple[int, str, str] | None:
    """What vLLM's CUDA-graph profiling holds at once beside the weights where a PIECEWISE warm-up asks the MLA layer's
    profile tensor again (engines/vllm/mla_workspace.py graph_profile_need), on CUDA under --serve; None elsewhere."""
    from k3plan.engines.vllm.cudagraph import cudagraph_plan, default_ceiling
    from k3plan.engines.vllm.mla_workspace import graph_profile_need

    if served is None or served.compilation is None or vendor != "nvidia" or served.release is None:
        return None
    got = _mla_allocation(served, setup, result, lay, stack=stack, kind=kind)
    if got is None:
        return None
    plan = cudagraph_plan(
        max_num_seqs=served.batch,
        max_num_batched_tokens=result.workload.prefill_chunk_tokens,
        num_speculative_tokens=served.draft.num_speculative_tokens if served.draft is not None else 0,
        read=served.compilation,
        ceiling=default_ceiling(hardware=hardware, release=served.release),
        release=served.release,
    )
    if not plan.sizes:
        return None
    page = lay.page_bytes or lay.block_tokens * lay.kv_bytes_per_token_layer
    # _init_minimal_kv_cache_for_profiling: num_gpu_blocks_override = max_cudagraph_capture_size, each KV tensor that
    # many pages
    return graph_profile_need(
        release=served.release,
        allocation=got[0],
        kv_tensor_bytes=max(plan.sizes) * page,
        piecewise_graphs=plan.piecewise,
    )


def _mega_moe(served, setup: Setup, result: FitResult, *, vendor: str) -> tuple[int, str] | None:
    """The MoE backend's symmetric buffer a GPU where the command names one k3plan sizes (engines/vllm/mega_moe.py),
    over the EP group the command's expert parallelism spans (TP x DP); None elsewhere."""
    from k3plan.engines.vllm.mega_moe import mega_moe_non_torch

    spec = setup.model.spec
    if served is None or not served.expert_parallel or spec.dsv4 is None:
        return None
    return mega_moe_non_torch(
        moe_backend=served.moe_backend,
        release=served.release,
        vendor=vendor,
        ep=setup.parallel.tp * setup.parallel.dp,
        experts=spec.moe.num_experts,
        top_k=spec.moe.top_k,
        hidden=spec.hidden_size,
        intermediate=spec.moe.expert_intermediate,
        max_num_batched_tokens=result.workload.prefill_chunk_tokens,
    )


def _sglang_mega_moe(served, setup: Setup) -> tuple[int, str] | None:
    """SGLang's MegaMoE buffer a GPU where the command's reading prices it (engines/sglang/serve.py mega_moe), over the
    EP group the TP group (x the DP-attention groups) spans; None elsewhere."""
    from k3plan.engines.sglang.mega_moe import sglang_mega_moe

    spec = setup.model.spec
    if served is None or not served.mega_moe_cap or spec.moe is None:
        return None
    return sglang_mega_moe(
        cap=served.mega_moe_cap,
        fp4_acts=served.mega_moe_fp4_acts,
        ranks=setup.parallel.tp * setup.parallel.dp,
        experts=spec.moe.num_experts,
        top_k=spec.moe.top_k,
        hidden=spec.hidden_size,
        intermediate=spec.moe.expert_intermediate,
    )


def _sglang_deepep(served, setup: Setup, *, vendor: str) -> tuple[int, str] | None:
    """SGLang's DeepEP buffer a GPU where the command builds one (engines/sglang/serve.py deepep_config), over the TP
    group (x the DP-attention groups: SGLang's --tp-size), the MoE layer's global experts (routed + redundant); None
    elsewhere, and on a GPU other than NVIDIA's (DeepEP's CUDA build: engines/sglang/deepep.py)."""
    from k3plan.engines.sglang.deepep import sglang_deepep_buffer

    spec = setup.model.spec
    if served is None or served.deepep is None or spec.moe is None or vendor != "nvidia":
        return None
    mode, configs, tokens = served.deepep
    redundant = served.eplb[0] if served.eplb else 0
    return sglang_deepep_buffer(
        mode=mode,
        ranks=setup.parallel.tp * (setup.parallel.dp if setup.stack.dp_attention else 1),
        hidden=spec.hidden_size,
        experts=spec.moe.num_experts + redundant,
        tokens=tokens,
        configs=configs,
    )


def _all2all(served, setup: Setup, result: FitResult, *, vendor: str, devices_per_host: int) -> tuple[int, str] | None:
    """The expert-parallel all2all backend's buffers a GPU (engines/vllm/all2all_buffers.py), for a MoE model under a
    vLLM command or the vllm stack's options (all2all_backend, enable_expert_parallel); None elsewhere."""
    from k3plan.engines.vllm.all2all_buffers import all2all_non_torch

    spec = setup.model.spec
    if spec.moe is None:
        return None
    chosen = (
        setup.stack.chosen
    )  # without --serve: the stack's options (vllm:all2all_backend=..., enable_expert_parallel)
    return all2all_non_torch(
        backend=(served.stack_options if served is not None else chosen).get("all2all_backend"),
        release=_release(served, setup.stack.name, "gpu"),
        vendor=vendor,
        expert_parallel=served.expert_parallel
        if served is not None
        else chosen.get("enable_expert_parallel") == "true",
        dp=setup.parallel.dp,
        ep=setup.parallel.tp * setup.parallel.dp,
        devices_per_host=devices_per_host,
        hidden=spec.hidden_size,
        # the global experts, EPLB's redundant copies included (FusedMoEConfig.num_experts = global_num_experts)
        experts=spec.moe.num_experts + (served.eplb[0] if served is not None and served.eplb else 0),
        max_num_batched_tokens=result.workload.prefill_chunk_tokens,
        env=served.env if served is not None else {},
    )


def _expert_formats(setup: Setup) -> tuple[str, ...]:
    """The routed experts' checkpoint formats, sorted (the MoE method vLLM picks reads them)."""
    return _routed_formats(setup.model)


def _routed_formats(model) -> tuple[str, ...]:
    """A model's routed experts' checkpoint formats, sorted."""
    return tuple(sorted({f for role, f in model.inventory.role_formats if role == "expert"}))


def _moe_workspace(served, setup: Setup, result: FitResult, *, kind: str) -> tuple[int, str] | None:
    """The MoE workspace vLLM's profile run leaves allocated under its sampler warm-up (engines/vllm/moe_workspace.py),
    for a MoE model on a GPU, over the command's DP ranks and expert parallelism; None elsewhere."""
    from k3plan.engines.vllm.moe_workspace import profile_moe_workspace

    args = _moe_forward_args(served, setup, result, stack=setup.stack.name, kind=kind)
    if args is None:
        return None
    # the experts' K: a latent MoE's FusedMoE is built at the latent width (Kimi-K3's moe_hidden_size,
    # engines/vllm/moe_workspace.py), every other model's at the hidden size (spec.moe.expert_in is then the hidden)
    args["hidden"] = setup.model.spec.moe.expert_in
    return profile_moe_workspace(**args, all2all_backend=_all2all_backend(served))


def _moe_moment(served, setup: Setup, result: FitResult, *, kind: str) -> tuple[int, str] | None:
    """What DeepSeek-V4's decoder layer holds at its MoE kernel in vLLM's CUDA profile run beyond the workspace buffer
    (engines/vllm/moe_workspace.py trtllm_mxfp4_moe_moment); None where that path is not priced."""
    from k3plan.engines.vllm.moe_workspace import trtllm_mxfp4_moe_moment

    spec = setup.model.spec
    args = _moe_forward_args(served, setup, result, stack=setup.stack.name, kind=kind)
    if args is None or spec.dsv4 is None or spec.moe is None:
        return None
    args.pop("env")
    return trtllm_mxfp4_moe_moment(
        **args, experts=spec.moe.num_experts, hc_mult=spec.dsv4.hc_mult, all2all_backend=_all2all_backend(served)
    )


def _rocm_moe(
    served, setup: Setup, expert_pad: tuple[int, int, str] | None, *, vendor: str, hardware: str
) -> tuple[int, str] | None:
    """What DeepSeek-V4's MoE holds a token in vLLM's ROCm dummy forward beyond the layer's tensors
    (engines/vllm/dsv4_workspace.py rocm_moe_rows), for V4 on an AMD GPU; None elsewhere. The shard's intermediate is
    the whole expert's under expert parallelism, else the TP x DP cut as the budget pads it (Stack.expert_pad)."""
    from k3plan.engines.vllm.dsv4_workspace import aiter_moe_on, rocm_moe_rows

    spec = setup.model.spec
    if vendor != "amd" or spec.moe is None or spec.dsv4 is None or spec.dsv4.csa2 is not None:
        return None
    ep = served is not None and served.expert_parallel
    tp, dp = setup.parallel.tp, setup.parallel.dp
    inter = spec.moe.expert_intermediate
    shard = inter if ep else -(-inter // (tp * dp))
    if not ep and expert_pad is not None:
        shard = inter * expert_pad[0] // expert_pad[1] // (tp * dp)
    return rocm_moe_rows(
        dp=dp,
        expert_parallel=ep,
        all2all_backend=(served.stack_options.get("all2all_backend", "") if served is not None else ""),
        hardware=hardware,
        moe_backend=(served.moe_backend or "") if served is not None else "",
        aiter_on=aiter_moe_on(served.env if served is not None else {}),
        experts=spec.moe.num_experts,
        top_k=spec.moe.top_k,
        hidden=spec.hidden_size,
        shard_intermediate=shard,
    )


def _rocm_aiter_linear(served, *, vendor: str) -> bool:
    """Whether the command runs vLLM's AITER linear on an AMD GPU (engines/vllm/dsv4_workspace.py aiter_linear_on)."""
    from k3plan.engines.vllm.dsv4_workspace import aiter_linear_on

    return vendor == "amd" and aiter_linear_on(served.env if served is not None else {})


def _rocm_wo_a_fp8(served, *, hardware: str, release) -> bool:
    """Whether vLLM's ROCm DeepSeek-V4 attention keeps wo_a FP8 for the command (engines/vllm/dsv4_workspace.py
    wo_a_fp8_on: gfx950 from 0.31.0 under VLLM_ROCM_USE_AITER)."""
    from k3plan.engines.vllm.dsv4_workspace import wo_a_fp8_on

    return wo_a_fp8_on(served.env if served is not None else {}, hardware=hardware, release=release)


def _rocm_aiter_moe(served, *, hardware: str) -> bool:
    """Whether DeepSeek-V4's experts run AITER's fused_moe for the command (engines/vllm/dsv4_workspace.py
    aiter_fused_moe_runs)."""
    from k3plan.engines.vllm.dsv4_workspace import aiter_fused_moe_runs, aiter_moe_on

    env = served.env if served is not None else {}
    backend = (served.moe_backend or "") if served is not None else ""
    return aiter_fused_moe_runs(hardware=hardware, moe_backend=backend, aiter_on=aiter_moe_on(env))


def _k3_scale_pad(
    served, setup: Setup, expert_pad: tuple[int, int, str] | None, *, hardware: str, kind: str
) -> tuple[int, str] | None:
    """The bytes AITER's w2 scale shuffle adds to Kimi-K3's routed experts a device on gfx950 under AITER's MoE
    (engines/vllm/kimi_k3_memory.py k3_w2_scale_pad), in the weights vLLM measures; None elsewhere. A rank's experts
    and the intermediate each holds: whole experts over TP x DP under expert parallelism, else every expert with the
    TP x DP cut, as the budget pads either (Stack.expert_pad)."""
    from k3plan.engines.vllm.dsv4_workspace import aiter_moe_on
    from k3plan.engines.vllm.kimi_k3_memory import k3_w2_scale_pad

    spec = setup.model.spec
    if served is None or kind != "gpu" or spec.moe is None:
        return None
    ep = served.expert_parallel
    shards = setup.parallel.tp * setup.parallel.dp
    inter = spec.moe.expert_intermediate
    shard = inter if ep else -(-inter // shards)
    if expert_pad is not None:
        shard = shard * expert_pad[0] // expert_pad[1]
    return k3_w2_scale_pad(
        architecture=spec.architecture,
        hardware=hardware,
        moe_backend=served.moe_backend or "",
        aiter_on=aiter_moe_on(served.env),
        n_moe=spec.n_moe,
        local_experts=-(-spec.moe.num_experts // shards) if ep else spec.moe.num_experts,
        expert_out=spec.moe.expert_in,
        shard_intermediate=shard,
    )


def _rocm_fp8_pad(served, setup: Setup, *, vendor: str) -> tuple[int, str] | None:
    """The 256 B a row vLLM's ROCm build adds to the block-fp8 linears a device holds (engines/vllm/rocm_fp8_pad.py),
    at the command's release; None elsewhere (a question without --serve: the newest release, which does not pad)."""
    from k3plan.engines.vllm.rocm_fp8_pad import rocm_fp8_padding

    if served is None or vendor != "amd":
        return None
    return rocm_fp8_padding(
        setup.model.inventory.text,
        setup.plan.per_device_shape,
        vendor=vendor,
        release=served.release,
        env=served.env,
    )


def _mla_workspace(served, setup: Setup, *, hardware: str, kind: str) -> tuple[int, str] | None:
    """The MLA decode workspaces vLLM allocates while it builds an MLA model, dense or hybrid (Kimi-K3's
    MultiHeadLatentAttention asks get_attn_backend as MLAAttention does) (engines/vllm/mla_block.py
    mla_decode_workspace), in its load; None for DeepSeek-V4 (its attention's selection not read), another model or
    machine, or where not read."""
    from k3plan.engines.vllm.mla_block import mla_decode_workspace

    spec = setup.model.spec
    release = _release(served, setup.stack.name, kind)
    if release is None or kind != "gpu" or not spec.n_mla or spec.dsv4 is not None:
        return None
    return mla_decode_workspace(release, hardware, env=served.env if served is not None else {})


def _eplb_state(served, setup: Setup, result: FitResult, *, vendor: str) -> tuple[int, str] | None:
    """The EPLB state vLLM adds at load where the command enables EPLB (engines/vllm/eplb.py), one MoE layer's experts
    as the budget holds them a device for its transfer buffer; None elsewhere."""
    from k3plan.engines.vllm.eplb import eplb_state
    from k3plan.step.terms import term_map

    spec = setup.model.spec
    if served is None or served.eplb is None or spec.moe is None:
        return None
    moe_layers = sum(1 for m in spec.mlps if m == "moe")
    experts = term_map(result.weights_by_role).get("expert", 0)
    draft = served.draft
    return eplb_state(
        architecture=spec.architecture,
        vendor=vendor,
        eplb=served.eplb,
        moe_layers=moe_layers,
        experts=spec.moe.num_experts,
        layer_expert_bytes=int(experts) // max(moe_layers, 1),
        drafter_moe_layers=spec.mtp_layers if draft is not None and draft.expert_bytes_per_device else 0,
        moe_backend=served.moe_backend,
    )


def _release(served, stack: str, kind: str):
    """The engine release the sizing follows: the command's (--engine-version, or its family's newest read), else for
    a question without --serve the newest release k3plan read of the stack's engine on a GPU (Engine.
    newest_release_read), so fit with and without --serve read one release."""
    if served is not None:
        return served.release
    return engine_rules(stack).newest_release_read if kind == "gpu" else None


def _backend_refusal(
    served,
    *,
    dsv4: bool,
    hardware: str,
    vendor: str,
    setup: Setup,
    kind: str = "gpu",
    max_model_len: int = 0,
) -> tuple[str, str] | None:
    """What vLLM refuses at start on this GPU before sizing anything: a block-quantized fp8 layer whose TP share is
    not whole blocks (engines/vllm/fp8_block.py, on either GPU vendor), a setting its CUDA indexer builder refuses
    (engines/vllm/attention_config.py: the TPU plugin and ROCm build their own attention), a dense-MLA block the
    decode kernel cannot split (engines/vllm/mla_block.py sm103_block_refusal, raised after the pool is sized); on a
    TPU, a DeepSeek-V4 kernel whose scalar prefetch overflows SMEM when the step is compiled after the pool
    (HbmWorker.dsv4_smem_refusal)."""
    if kind == "tpu" and dsv4 and served is not None:
        rules = engine_rules(setup.stack.name)  # the stack's engine (served.engine is the launcher's family)
        worker = rules.hbm_worker
        if worker is None or worker.dsv4_smem_refusal is None:
            return None
        return worker.dsv4_smem_refusal(
            release=served.release,
            commit=served.commit,
            max_model_len=max_model_len,
            max_num_seqs=served.batch,
            dp=served.dp,
            block=served.block_size or rules.dsv4.block,  # the engine's DeepSeek-V4 block without --block-size
            options=served.stack_options,
        )
    if vendor in ("nvidia", "amd"):
        from k3plan.engines.vllm.fp8_block import padded_roles, row_parallel_refusal

        padded = padded_roles(dsv4=dsv4, vendor=vendor, release=_release(served, setup.stack.name, "gpu"))
        blocks = row_parallel_refusal(setup.model.inventory, setup.plan.per_device_shape, padded=padded)
        if blocks is not None:
            return blocks
    if served is None or vendor != "nvidia":
        return None
    from k3plan.engines.vllm.attention_config import SM100_FAMILY, start_error

    if setup.model.spec.dense_mla:
        # a dense-MLA model on sm_103 at 0.11.1-0.12.x: the worker's CUTLASS MLA takes no 16-token block, raised when
        # the KV cache is initialized, after the pool is sized (engines/vllm/mla_block.py sm103_block_refusal)
        from k3plan.engines.vllm.mla_block import sm103_block_refusal

        release = _release(served, setup.stack.name, "gpu")
        if release is not None:
            refused = sm103_block_refusal(release, hardware, block=served.block_size, env=served.env)
            if refused is not None:
                return refused

    if served.kv_raw == "nvfp4_ds_mla" and hardware not in SM100_FAMILY:
        from k3plan.engines.vllm.dsv4_pages import NVFP4_AT, NVFP4_MESSAGE

        return NVFP4_MESSAGE, NVFP4_AT
    if served.attention is None:
        return None
    return start_error(served.attention, has_indexer=dsv4, hardware=hardware)


def _cudagraph(
    served, result: FitResult, *, dsv4: bool, vendor: str, release=None, v41: bool = False, hardware: str = ""
):
    """The CUDA-graph estimate a vLLM GPU command's worker subtracts (engines/vllm/cudagraph.py), where priced."""
    if served is None or served.compilation is None:
        return None
    from k3plan.engines.vllm.cudagraph import serve_estimate

    return serve_estimate(
        served.compilation,
        dsv4=dsv4,
        vendor=vendor,
        env=served.env,
        max_num_seqs=served.batch,
        max_num_batched_tokens=result.workload.prefill_chunk_tokens,
        num_speculative_tokens=served.draft.num_speculative_tokens if served.draft is not None else 0,
        release=release,  # the command's: ROCm profiles the graphs from 0.26.0 (engines/vllm/cudagraph.py)
        v41=v41,  # DeepSeek-V4.1: its breakable graphs follow their own releases (cudagraph.py breakable_graphs)
        # the drafter: DSpark runs on Model Runner V2, which subtracts no estimate before 0.29.0 (v2_unprofiled)
        spec_method=getattr(served.speculative, "method", None),
        hardware=hardware,  # vLLM's default capture ceiling: 1024 on sm_10x from 0.28.0 (cudagraph.py default_ceiling)
    )


def _capture(served, setup: Setup, result: FitResult, *, vendor: str, release, dsv4: bool, hardware: str):
    """(what a vLLM GPU command's CUDA-graph capture takes after the pool at least, where the engine raises its OOM):
    the graphs the command captures (engines/vllm/cudagraph.py cudagraph_plan) and k3plan's forward temporaries at
    the largest capture size (budget/fit.py forward_temp_at); None where it captures none."""
    if served is None or served.compilation is None or served.compilation.mode == "NONE":
        return None
    from k3plan.budget.fit import forward_temp_at
    from k3plan.engines.vllm.cudagraph import (
        CAPTURE_AT_V1,
        CAPTURE_AT_V2,
        capture_need,
        cudagraph_plan,
        default_ceiling,
    )
    from k3plan.engines.vllm.releases import model_runner_v2

    plan = cudagraph_plan(
        max_num_seqs=served.batch,
        max_num_batched_tokens=result.workload.prefill_chunk_tokens,
        num_speculative_tokens=served.draft.num_speculative_tokens if served.draft is not None else 0,
        read=served.compilation,
        ceiling=default_ceiling(hardware=hardware, release=release),
        release=release,
    )
    if not plan.sizes:
        return None
    forward, how = forward_temp_at(setup, result.workload, plan.sizes[-1])
    need = capture_need(plan, forward_bytes=forward, forward_source=how)
    if need is None:
        return None
    v2, _ = model_runner_v2(
        release=release, env=served.env, spec_method=getattr(served.speculative, "method", None), vendor=vendor, v4=dsv4
    )
    return need, CAPTURE_AT_V2 if v2 else CAPTURE_AT_V1


def _with_serve(out: dict, result: FitResult, served) -> dict:
    """The engine's sizing with, under --serve, the command as read and k3plan's own budget beside it."""
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
            "caveats": list(served.caveats),
        }
        from k3plan.step.verdict import fit_reason

        starts = bool(out["starts"])
        out["verdict"] = {  # fit --json's top-level fits / reason / reason_code under --serve (FitOutput)
            "starts": starts,
            "reason": "starts" if starts else f"{out['message']} (raised in {out['raised_at']})",
            "reason_code": "feasible"
            if starts
            else out.get("reason_code") or ("weights" if "loading the weights" in out["message"] else "budget"),
        }
        out["budget"] = {  # k3plan's own budget (the top-level ``fits`` is the engine's verdict under --serve)
            "fits": result.fits,
            "reason": fit_reason(fits=result.fits, code=result.reason)[1],
            "max_sequences": result.capacity.max_sequences,
        }
    return out


def _speed(setup, workload, notes, evidence, allow_cpu_probes, *, spec_hardware):
    """The decode bound at this workload (k3plan roofline's defaults), with probe records applied
    (``setup`` already carries the measured hardware, ``notes`` name the records)."""
    from k3plan.budget.result import Speed
    from k3plan.evidence.probe_records import records_named
    from k3plan.roofline.bounds import Efficiency, decode_bound

    d = decode_bound(
        setup,
        batch=workload.batch,
        context_tokens=workload.context_tokens,
        eff=Efficiency(),
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
    )
    from k3plan.speed.serving import stands_behind  # issue 38: roofline's TPOT, measured where a benchmark is

    tpot, _, _, model = stands_behind(
        setup,
        spec_hardware,
        batch=workload.batch,
        context=workload.context_tokens,
        chunk=workload.prefill_chunk_tokens,
        expected=None,
        ceiling_tpot_s=d.step_s,
        ceiling_ttft_s=None,
        evidence=evidence,
    )
    return Speed(
        tpot_s=tpot.value_s,
        tpot_source=tpot.source,
        tpot_label=tpot.label,
        ceiling_tpot_s=d.step_s,
        tpot_band_s=tpot.band_s,
        tokens_per_s=workload.batch / tpot.value_s,
        binding=d.binding,
        collective_latency_source=d.comm.latency_source,
        probes=notes,
        source="k3plan roofline at 30% MFU, 100% HBM bandwidth",
        records_used=list(
            dict.fromkeys(
                [
                    *(model.used if model is not None and tpot.source in ("model", "transferred") else ()),
                    *records_named(*(text for _, text in setup.hardware.measured_sources), d.comm.latency_source),
                ]
            )
        ),
    )
