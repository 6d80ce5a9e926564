"""Resolve the options every planning command shares into one Setup.

model + hardware + topology + (tp, ep, dp) + stack (+ kv dtype, user ShardSpecs) -> the loaded
model, the hardware spec, the topology, the mesh and the ShardingPlan. `fit`, `roofline`,
`curve`, `check`, `report` and `validate` all build their Setup here, so they agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Optional

from k3plan.engines.stack import Cite, Stack, default_stack_for, load_stack
from k3plan.errors import K3PlanError
from k3plan.hardware import HardwareSpec, Topology, load_hardware, parse_topology
from k3plan.models import Model, load_model
from k3plan.sharding import Mesh, Parallel, ShardingPlan, make_mesh, resolve


@dataclass(frozen=True)
class Setup:
    model: Model
    hardware: HardwareSpec
    topology: Topology
    mesh: Mesh
    parallel: Parallel
    stack: Stack
    plan: ShardingPlan
    notes: tuple[str, ...] = ()

    @cached_property
    def stages(self):
        """The pipeline stages (step/stages.py): one holding everything when pp = 1."""
        from k3plan.step.stages import stages

        remainder = self.stack.pipeline.remainder if self.stack.pipeline else "before_last"
        return stages(self.model.spec, self.parallel.pp, remainder)

    @cached_property
    def stage_weights(self):
        """The per-device weight budget of each stage's devices (its layers and end tensors)."""
        from k3plan.step.stages import stage_tensors
        from k3plan.step.weight_budget import weight_budget

        inv = self.model.inventory
        if self.parallel.pp == 1:
            return (weight_budget(inventory=inv, plan=self.plan, stack=self.stack),)
        return tuple(
            weight_budget(inventory=inv, plan=self.plan, stack=self.stack, tensors=stage_tensors(inv, s))
            for s in self.stages
        )

    @cached_property
    def weight_groups(self):
        """The step's weight groups with this setup's per-device shares (``k3plan.step.ops.weight_groups``):
        the decode, prefill and temp-model op lists of one setup read the same ones."""
        from k3plan.step.ops import weight_groups

        # the LM head over the whole TP group (Stack.lm_head_whole_tp) runs every DP group's rows
        head_rows = self.parallel.dp if self.stack.lm_head_whole_tp else 1
        return weight_groups(self.model.inventory, self.stack, self.plan.share, self.plan.per_device_shape, head_rows)

    @cached_property
    def weights(self):
        """The per-device weight budget (the heaviest stage's under pp): it depends only on the
        inventory, plan and stack, so a curve or report that fits one setup at many workloads
        computes it once."""
        return max(self.stage_weights, key=lambda w: w.weights_bytes)


def default_split(
    stack: Stack, devices: int, tp: Optional[int], dp: Optional[int], heads: tuple[int, ...] = ()
) -> tuple[Optional[int], Optional[int]]:
    """The stack's default (tp, dp) when neither is given. ``tp: all`` means all devices, capped at
    the largest TP that divides every size in ``heads`` (``tp_must_divide``: K3's 96 heads: 32 of 64
    devices, dp 2), so the default never silently replicates the attention or the vocabulary."""
    if tp is not None or dp is not None:
        return tp, dp
    d = stack.default_parallel
    if d.dp == "all":
        return (1 if d.tp == "all" else d.tp), None
    if d.tp != "all":
        return d.tp, d.dp
    per_group = devices // d.dp if devices % d.dp == 0 else devices
    tp = max(t for t in range(1, per_group + 1) if per_group % t == 0 and all(h % t == 0 for h in heads))
    return tp, devices // tp


def tp_must_divide(model: Model, stack: Stack) -> tuple[int, ...]:
    """What a default TP must divide so that the split replicates nothing: the attention heads, the
    vocabulary where the stack's rules split it over TP (K3's 163,840 = 2^15 x 5: tp 24 of 72 GPUs
    divides the 96 heads but not the vocabulary), and DeepSeek-V4's output groups where they split over TP
    (o_groups 8 of V4-Flash: tp 16 would leave a rank no group; vLLM's attention takes o_groups // tp_size)."""
    vocab = (model.spec.vocab_size,) if stack.sharding.rules.get("vocab") == "tp" else ()
    d4 = model.spec.dsv4
    groups = (d4.o_groups,) if d4 is not None and splits_output_groups(model, stack) else ()
    return attention_heads(model) + vocab + groups


def splits_output_groups(model: Model, stack: Stack) -> bool:
    """DeepSeek-V4's grouped output projection split over TP by ``stack``'s rules (``o_groups: tp``)."""
    return model.spec.dsv4 is not None and stack.sharding.rules.get("o_groups") == "tp"


def attention_heads(model: Model) -> tuple[int, ...]:
    """Head counts TP must divide for head-parallel attention (MLA, and KDA when present)."""
    spec = model.spec
    return (spec.mla.heads,) + ((spec.kda.heads,) if spec.kda is not None and spec.n_kda else ())


def make_setup(
    *,
    model: str = "kimi-k3",
    hardware: str = "tpu-v7x",
    topology: Optional[str] = None,
    tp: Optional[int] = None,
    ep: Optional[int] = None,
    dp: Optional[int] = None,
    stack: Optional[str] = None,
    kv_dtype: Optional[str] = None,
    shardspecs: Optional[str] = None,
    pp: Optional[int] = None,
    spec_verify_tokens: Optional[int] = None,
    in_flight: Optional[int] = None,
    engine_release: Optional[tuple[int, int, int]] = None,
    engine_block: Optional[int] = None,
    engine_env: Optional[dict[str, str]] = None,
    expert_pad: Optional[tuple[int, int, str]] = None,
    expert_copies: Optional[tuple[int, str]] = None,
    expert_format: Optional[tuple[str, str]] = None,
    moe_runner: Optional[str] = None,
    engine_swa_ratio: Optional[float] = None,
    engine_state_bytes: Optional[int] = None,
    fraction_scale: Optional[tuple[float, str]] = None,
    vision_whole: bool = False,
    extra_weights: tuple[tuple[str, int, str], ...] | None = None,
    lm_head_whole_tp: Optional[Cite] = None,
    shared_expert_whole: Optional[Cite] = None,
    dense_mlp_whole: Optional[Cite] = None,
    mlp_whole_tp: Optional[tuple[tuple[str, ...], Cite]] = None,
    decode_graph: Optional[tuple[Optional[int], Optional[int], bool]] = None,
    prefill_graph: Optional[tuple[Optional[str], tuple[str, ...]]] = None,
    engram: Optional[str] = None,
    engram_host_copies: Optional[str] = None,
    pick_topology: Optional[Callable[..., Topology]] = None,
    model_overrides: tuple[tuple[str, int], ...] = (),
) -> Setup:
    """``stack`` None: the hardware's default (``engines.stack.default_stack_for``), named in the notes.
    ``topology`` None: ``pick_topology(hw, model, stack, tp, ep, dp)`` picks it (the one default rule,
    ``k3plan.plan.defaults.default_topology``, passed by ``plan.defaults.make_default_setup``).
    ``spec_verify_tokens``: speculative decoding checks that many tokens a verify step (the stack's state
    pool as the engine sizes it then: ``Stack.for_spec_decode``); ``in_flight``: the batches of the prefill budget a
    windowed KV group holds pages for, as a serve command sets them (``Stack.with_in_flight``), and ``engine_release``
    the release it runs, ``engine_block`` its --block-size and ``engine_env`` its environment settings
    (``Stack.with_engine_release``); ``expert_pad``: the
    engine's padding of TP-split expert shards, as a serve command without expert parallelism runs them
    (``Stack.with_expert_pad``); ``expert_copies``: the routed experts the engine holds more than once a rank, as
    a serve command runs it (``Stack.with_expert_copies``); ``expert_format``: the runtime format the engine holds a
    DeepSeek-V4 checkpoint's FP4 routed experts in, and why, set over what the engine's rule gives on the hardware
    (``Stack.with_expert_format`` over ``Stack.on_hardware``, which reads the release, the all-to-all, ``moe_runner``
    -- a serve command's MoE runner as given -- and ``engine_env``: fit with and without --serve and plan's weight
    columns alike); ``engine_swa_ratio``: a serve command's --swa-full-tokens-ratio, which the budget's charge for a
    DeepSeek-V4 request reads as the engine's start check does (``Stack.with_swa_ratio``); ``engine_state_bytes``: a
    serve command's DeepSeek-V4 compressor-state element, likewise (``Stack.with_state_bytes``); ``fraction_scale``: a factor the engine applies to its static memory fraction
    (``Stack.with_fraction_scale``); ``vision_whole``: the engine builds the vision tower whole on every device
    (``Stack.with_vision_whole``); ``extra_weights``: what a serve command's engine holds with the weights beside the
    model's tensors, as its start check counts it (``Stack.with_extra_weights``; None, a question without one: what the
    stack's engine holds so at the setup's attention TP, ``Stack.engine_held``); ``lm_head_whole_tp``: the engine splits the LM head over its whole TP group, every
    device of a stage, where it holds it so (the cite; ``Stack.with_lm_head_whole_tp``); ``decode_graph``: SGLang's decode CUDA-graph batch as a serve command sets it and
    its release's cap on the default (``Stack.with_decode_graph``); ``shared_expert_whole``: the engine holds
    the shared experts whole on every device (the cite; ``Stack.with_shared_expert_whole``); ``dense_mlp_whole``: the
    engine holds the dense layers' MLP whole on every device (the cite; ``Stack.with_dense_mlp_whole``); ``mlp_whole_tp``: the
    roles (dense MLP, shared experts) the engine splits over its whole TP group under DP attention, and the cite
    (``Stack.with_mlp_whole_tp``); ``prefill_graph``: SGLang's prefill backend as a serve
    command locks it and what else it runs that the engine's prefill-graph rule reads (``Stack.with_prefill_graph``). ``engram``: where DeepSeek-V4.1's Engram tables
    live, "hbm" or "host", and ``engram_host_copies`` how many copies a host holds in host memory, "replica" or "node"
    (``Stack.with_engram``; None: the engine's default). ``model_overrides``: config fields set over the model's config
    before it is built, as a serve command's --hf-overrides sets them (``models.loader.load_model``)."""
    m = load_model(model, model_overrides)
    hw = load_hardware(hardware)
    notes = []
    if engram is not None and (m.spec.dsv4 is None or m.spec.dsv4.engram is None):
        raise K3PlanError(f"--engram {engram}: {m.name} has no Engram tables; leave it out")
    if stack is None:
        stack, why = default_stack_for(hw)
        notes.append(why)
    # bound to the machine first: its engine's state pool is what speculative decoding grows (Stack.bind)
    st = (
        load_stack(stack)
        .bind(hw)
        .for_model(m, engine_release)  # before the KV dtype asked for: the checkpoint's default, then the question's
        .with_kv_dtype(kv_dtype)
        .for_spec_decode(spec_verify_tokens)
        .with_in_flight(in_flight)
        .with_engine_release(engine_release, engine_block, engine_env)
        .with_expert_pad(expert_pad)
        .with_expert_copies(expert_copies)
        .with_moe_runner(moe_runner)
        .with_swa_ratio(engine_swa_ratio)
        .with_state_bytes(engine_state_bytes)
        .on_hardware(hw.name)  # the experts as the engine's release holds them on this GPU (Stack.expert_format_on)
        .with_expert_format(expert_format)
        .with_fraction_scale(fraction_scale)
        .with_vision_whole(vision_whole)
        .with_extra_weights(extra_weights or ())
        .with_lm_head_whole_tp(lm_head_whole_tp)
        .with_shared_expert_whole(shared_expert_whole)
        .with_dense_mlp_whole(dense_mlp_whole)
        .with_mlp_whole_tp(*(mlp_whole_tp or ((), None)))
        .with_decode_graph(*(decode_graph or (None, None, False)))
        .with_prefill_graph(*(prefill_graph or (None, ())))
        .with_engram(engram, engram_host_copies)
    )
    held = st.expert_format_on(hw.name) if any(t.fmt == "ds_fp4" for t in m.inventory.text) else None
    if held is not None and expert_format is None:
        notes.append(f"routed experts held as {held[0]}: {held[1]}")
    if kv_dtype is None and (why_kv := engine_kv_note(m, st)) is not None:
        notes.append(why_kv)
    from k3plan.engines.fp4_paths import model_fp4_refusal
    from k3plan.engines.registry import engine_rules

    fp4 = model_fp4_refusal(m, hardware=hw, engine=engine_rules(st.name))
    if fp4 is not None:
        raise K3PlanError(f"{m.name}: {fp4}")
    if topology is None:
        if pick_topology is None:
            raise K3PlanError(
                f"{hw.name}: no topology given; expected --topology (e.g. {hw.name}'s smallest standard one)"
            )
        topo = pick_topology(hw, m, st, tp, ep, dp)
        notes.append(
            f"topology {topo.text}: default, the smallest standard {hw.name} topology whose weights and "
            f"reserve leave room on a device"
        )
    else:
        topo = parse_topology(hw, topology)
    if not st.runs_on(hw):
        notes.append(f"stack {st.name} runs on {', '.join(st.platforms) or st.platform}, used here on {hw.name}")
    asked = (tp, dp)
    if pp is not None and pp < 1:  # before defaulting: `pp or 1` read --pp 0 as 1 and went on
        raise K3PlanError(f"--pp {pp}: expected a positive integer (1: no pipeline)")
    pp = 1 if pp is None else pp
    if pp > 1 and st.pipeline is None:
        raise K3PlanError(f"--pp {pp}: stack {st.name} has no pipeline parallelism; expected --pp 1")
    if topo.devices % pp:
        raise K3PlanError(f"--pp {pp} does not divide the {topo.devices} devices of {topo.text}")
    per_stage = topo.devices // pp
    tp, dp = default_split(st, per_stage, tp, dp, tp_must_divide(m, st))
    if (
        asked == (None, None)
        and st.default_parallel.tp == "all"
        and tp
        and tp * (st.default_parallel.dp if st.default_parallel.dp != "all" else 1) < per_stage
    ):
        notes.append(
            f"tp {tp}: the largest that divides the attention heads and the vocabulary"
            + (" and DeepSeek-V4's output groups" if splits_output_groups(m, st) else "")
            + "; the other devices form "
            f"dp {per_stage // tp} groups"
        )
    if dp is None:
        if tp and per_stage % tp:
            raise K3PlanError(f"--tp {tp} does not divide the {per_stage} devices of a stage of {topo.text}")
        dp = per_stage // (tp or 1)
    mesh, parallel = make_mesh(devices=topo.devices, tp=tp, ep=ep, dp=dp, pp=pp)
    width = m.spec.moe.expert_intermediate if m.spec.n_moe else 0
    refused = st.splits.refusal(tp=parallel.tp, dp=parallel.dp, expert_width=width) if st.splits else None
    if refused:
        raise K3PlanError(f"stack {st.name}: {refused}")
    engine_ep = st.dp_experts.ep(tp=parallel.tp, dp=parallel.dp)
    if engine_ep is not None and parallel.ep != engine_ep:
        if ep is not None:
            raise K3PlanError(
                f"--ep {ep}: at dp {parallel.dp} stack {st.name}: {st.dp_experts.summary_at(parallel.tp)}; expected --ep {engine_ep}"
            )
        mesh, parallel = make_mesh(devices=topo.devices, tp=parallel.tp, ep=engine_ep, dp=parallel.dp, pp=pp)
        src = st.dp_experts.sources[0]
        notes.append(
            f"ep {engine_ep}: at dp {parallel.dp} stack {st.name}: {st.dp_experts.summary_at(parallel.tp)} ({src.repo} {src.file} "
            f"{src.symbol.split(' (')[0]})"
        )
    at_dp = st.for_dp(parallel.dp)
    if at_dp is not st:
        notes.append(
            f"dp 1: stack {st.label}'s {st.collectives.experts} needs DP > 1; the engine runs "
            f"{at_dp.collectives.experts} instead ({st.collectives.source})"
        )
        st = at_dp
    at_mesh = st.for_mesh(family=m.spec.family, tp=parallel.tp, dp=parallel.dp, ep=parallel.ep)
    if at_mesh is not st:
        sp = st.sequence_parallel_moe
        assert sp is not None  # for_mesh returns the stack itself without the rule
        notes.append(
            f"sequence-parallel MoE: at tp {parallel.tp} x dp {parallel.dp} with expert parallelism, "
            f"{', '.join(sp.role_overrides)} whole on every device ({sp.sources[0].repo} "
            f"{'; '.join(s.symbol.split(' (')[0] for s in sp.sources[:2])})"
        )
        st = at_mesh
    if extra_weights is None:  # no serve command: what the engine holds with the weights, as its reading of one would
        st = st.with_extra_weights(st.engine_held(m, hw, attn_tp=parallel.tp))
    if pp > 1:
        assert st.pipeline is not None  # a stack without pipeline rules refused --pp above
        link = hw.scale_out.name if topo.spans_slices else hw.scale_up.name
        notes.append(
            f"pp {pp}: layers split as {st.pipeline.source.repo} {st.pipeline.source.symbol} splits them; a device "
            f"holds its stage's weights, KV and state (the stage with the least free bytes binds). Decode assumes "
            f"the batch runs as {pp} microbatches (every stage busy): TPOT = the sum over the stages at a "
            f"microbatch + {pp - 1} stage-to-stage send(s) of {', '.join(st.pipeline.sends)} over {link}; "
            f"with fewer sequences than stages the idle stages are the bubble"
        )
    user = None
    if shardspecs:
        from k3plan.sharding.user import load_user_specs

        user = load_user_specs(shardspecs, m.inventory)
    plan = resolve(
        m.inventory,
        mesh=mesh,
        rules=st.sharding.rules,
        role_overrides=st.sharding.role_overrides,
        uneven=st.sharding.uneven_axes,
        user_specs=user,
        source=f"shardspecs {shardspecs} + rules of stack {st.name}" if user else f"rules of stack {st.name}",
    )
    notes += uneven_notes(plan, st)
    if st.lm_head_whole_tp:
        head = st.sharding.cite.get("role:lm_head")
        read = (
            "; ".join(f"{src.file.rsplit('/', 1)[-1]} {src.symbol.split(' (')[0]}" for src in head.sources)
            if head
            else ""
        )
        notes.append(
            f"lm_head: the vocabulary split over every device of a stage, tp {parallel.tp} x dp {parallel.dp} (the "
            "engine's whole TP group under DP attention, as the serve command runs it"
            + (f": {head.sources[0].repo} {read})" if head else ")")
        )
    return Setup(
        model=m, hardware=hw, topology=topo, mesh=mesh, parallel=parallel, stack=st, plan=plan, notes=tuple(notes)
    )


def engine_kv_note(model: Model, stack: Stack) -> str | None:
    """Why the KV cache is the checkpoint's dtype and not the model's where no --kv-dtype was asked for
    (``Stack.for_model``); None where it is the stack's own."""
    ckpt = stack.checkpoint_kv(model)
    if ckpt is None and (arch := stack.architecture_kv(model)) is not None:
        return (
            f"KV {arch[0]}: {stack.name} sets --kv-cache-dtype auto to fp8_e4m3 for {model.name}'s architecture "
            f"({arch[1]}); --kv-dtype bf16 prices bfloat16, which its pool sizes at the same bytes a token"
        )
    if ckpt is None:
        return None
    kv, where = ckpt
    return (
        f"KV {kv}: the checkpoint's kv_cache_quant_algo FP8, which {stack.name} resolves --kv-cache-dtype auto to "
        f"({where}); --kv-dtype bf16 prices the model's own"
    )


def engine_refusals(model: Model, stack: Stack) -> list[str]:
    """What the stack's engine, as its code reads, refuses or cannot run for this model (Stack.refusals):
    one line each, for fit's warnings, plan's assumptions and the launch file."""
    if not stack.refusals:
        return []
    spec = model.spec
    layers = frozenset(k for k, n in (("mla", spec.n_mla), ("kda", spec.n_kda)) if n)
    return stack.refused(layers=layers)


def uneven_notes(plan: ShardingPlan, stack: Stack) -> list[str]:
    """One note an axis the plan splits unevenly: how many devices hold how many, whose rule, and
    that the fullest device is the one every per-device figure describes."""
    placed = stack.sharding.expert_placement
    if not plan.uneven or placed is None:
        return []
    return [placed.note(u.describe(), u.fullest) for u in plan.uneven]
