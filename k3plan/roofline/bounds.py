"""Decode and prefill bounds for one Setup.

Decode step for batch B at context C, per device (the slowest device sets the step):
  bytes = weights touched on the device (replicated tensors whole, sharded ones their share,
          routed experts: expected distinct experts touched / EP) + KV read + KDA state read+write
  FLOPs = 2 x params the device applies to its tokens + absorbed MLA + KDA state products
  step  = max(bytes / (BW x bw_eff), FLOPs / (peak x mfu)) + collective time
``ideal_*`` is the porting study's aggregate view: one copy of every byte over the summed HBM
bandwidth of all chips (docs/k3-facts.md §5), kept for comparison.
Prefill: FLOPs a token (linear + attention) over chips x peak x MFU; time to first token for a
prompt, chunked, with the collectives (and under --pp the stage-to-stage sends) of every chunk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from k3plan.errors import K3PlanError
from k3plan.evidence.value import Evidence, measures_hardware
from k3plan.roofline.comm import CommCost, comm_cost
from k3plan.roofline.latency import collective_latency
from k3plan.roofline.terms import StepBytes, StepFlops, WeightSums
from k3plan.setup import Setup
from k3plan.step.cache import cache_layout, stack_kv_bytes_per_token, state_bytes_per_slot
from k3plan.step.collective import Collective
from k3plan.step.dsv4_cache import stack_sizes
from k3plan.step.work import (
    attention_decode_flops_per_token,
    attention_linear_crossover_tokens,
    expert_flops_per_token,
    experts_touched,
    linear_flops_per_token,
    prompt_devices,
    prompt_flops_per_token,
)
from k3plan.structs import Frozen

if TYPE_CHECKING:
    from k3plan.roofline.result import LongContext


class Efficiency(Frozen):
    mfu: float = 0.3  # the porting study's prefill figure (docs/k3-facts.md §5: 30% and 45%)
    bw_efficiency: float = 1.0  # "at 100%" in the study
    compute_dtype: str = "bf16"


# the least fraction of a roof an efficiency may be: below a thousandth is a typo (a percent divided by 100
# twice), not a rate any accelerator runs at; 1e-320 of the HBM roof made every decode step "inf ms"
MIN_EFFICIENCY = 1e-3


def check_efficiency(*, mfu: float, bw_efficiency: float, compute_dtype: str = "bf16") -> Efficiency:
    for flag, v in (("--mfu", mfu), ("--bw-efficiency", bw_efficiency)):
        if not (MIN_EFFICIENCY <= v <= 1):
            raise K3PlanError(f"{flag} {v:g}: expected a fraction from {MIN_EFFICIENCY:g} to 1")
    return Efficiency(mfu=mfu, bw_efficiency=bw_efficiency, compute_dtype=compute_dtype)


class DecodeBound(Frozen):
    batch: int
    context_tokens: int
    experts_touched_per_layer: float
    bytes_per_device: StepBytes
    flops_per_device: StepFlops
    memory_s: float
    compute_s: float
    comm: CommCost
    step_s: float
    binding: str
    tokens_per_s: float
    tpot_s: float
    tokens_per_s_per_chip: float
    comm_share: float
    ideal_bytes_per_step: StepBytes
    ideal_step_s: float
    # issue 38: tpot_s is the figure k3plan stands behind (k3plan.speed.serving): the ceiling (step_s) unless a
    # serving benchmark of the configuration measured it ("measured") or one near it does ("transferred")
    tpot_source: str = "ceiling"
    tpot_label: str = ""


class PrefillBound(Frozen):
    prompt_tokens: int
    chunk_tokens: int
    chunks: int
    linear_flops_per_token: float
    attention_flops_per_token: float
    expert_flops_per_token: float  # the routed experts' share of the linear FLOPs
    tokens_per_s: float  # the deployment's: every device busy (the porting study's method, docs/k3-facts.md §5)
    tokens_per_s_linear_only: float
    devices: int  # a prompt's DP group: tp x pp devices run its attention and non-expert matmuls
    expert_devices: int  # the EP group's ep x pp devices run its routed experts
    prompt_tokens_per_s: float  # one prompt's, on those devices: what its TTFT takes (= tokens_per_s at DP 1)
    compute_s: float
    comm: CommCost  # one chunk
    ttft_s: float
    comm_bytes_per_s_per_chip: float  # expert traffic a chip needs at this rate
    link_share: float  # of one-way link bandwidth
    feasible: bool
    note: str = ""
    # issue 38: ttft_s is the figure stood behind (k3plan.speed.serving); ceiling_ttft_s the bound's own
    ttft_source: str = "ceiling"
    ttft_label: str = ""
    ceiling_ttft_s: float | None = None


_SUMS: dict[tuple[int, int, int], tuple[Any, WeightSums]] = {}  # (inventory, stack, plan) ids -> sums
_SUMS_MAX = 64


def weight_sums(setup: Setup) -> WeightSums:
    """Dense and routed-expert bytes and params a device (embeddings excluded: decode gathers rows),
    and the whole-model bytes of each, from the Setup's resolved ShardingPlan (``plan`` gets the
    same sums from its tensor classes, ``step.weights.mesh_weights``). Cached per (inventory, stack,
    plan) objects -- they are frozen -- so the decode bound at several batches (fit's advice, the
    report's roofline points) walks the tensors once."""
    key = (id(setup.model.inventory), id(setup.stack), id(setup.plan))
    hit = _SUMS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], (setup.model.inventory, setup.stack, setup.plan))):
        return hit[1]
    out = _weight_sums(setup)
    if len(_SUMS) >= _SUMS_MAX:
        _SUMS.clear()
    _SUMS[key] = ((setup.model.inventory, setup.stack, setup.plan), out)  # holds the objects: ids stay valid
    return out


def _weight_sums(setup: Setup) -> WeightSums:
    # budget.weights.weight_terms: the one sum of bytes a device (fit's weight_budget, plan's mesh_weights)
    from k3plan.step.weight_budget import plan_classes, weight_terms

    plan = setup.plan
    classes, _ = plan_classes(inventory=setup.model.inventory, plan=plan)
    w = weight_terms(classes, stack=setup.stack, multi=plan.mesh.size(tuple(plan.mesh.axes)) > 1)
    return WeightSums(
        dense_bytes=w.dense_bytes,
        expert_bytes=w.expert_bytes,
        dense_params=w.dense_params,
        expert_params=w.expert_params,
        dense_total_bytes=w.dense_total_bytes,
        expert_total_bytes=w.expert_total_bytes,
    )


def decode_bound(
    setup: Setup,
    *,
    batch: int,
    context_tokens: int,
    eff: Efficiency,
    evidence: Evidence | None = None,
    histogram: Sequence[float] | None = None,
    allow_cpu_probes: bool = False,
    verify_tokens: int = 1,
) -> DecodeBound:
    """``k3plan.step.decode.decode_terms`` at one Setup, with the collectives of ``comm_cost``.
    ``verify_tokens`` > 1: a speculative verify step, ``batch`` rows being batch / verify_tokens sequences of
    that many tokens each; its KDA state traffic is the stack's (``Stack.verify_state_slots``)."""
    from k3plan.step.comm import padded_tokens
    from k3plan.step.decode import BINDING, decode_terms
    from k3plan.step.ops import weight_groups_of_setup
    from k3plan.step.stages import microbatch

    spec, st, par, hw, topo = setup.model.spec, setup.stack, setup.parallel, setup.hardware, setup.topology
    moe = spec.moe
    w = weight_sums(setup)
    layout = cache_layout(spec=spec, stack=st, parallel=par)
    # under --pp the batch runs as pp microbatches (step.stages.microbatch); a microbatch's step is the
    # sum over the stages of its layers (the whole model's per-device sums on a stage's mesh) plus
    # the stage-to-stage sends, and the batch advances a token in that time
    micro = microbatch(batch, par.pp)
    # the collectives carry the rows the engine pads the step to (Stack.token_buckets), logits the real ones
    buckets = st.token_buckets
    rows = padded_tokens(micro, par.dp, buckets.min_tokens if buckets else None)
    comm = comm_cost(
        setup,
        tokens=rows,
        sequences=micro,
        latency=_scale_up_latency(setup, evidence, allow_cpu_probes),
        send_tokens=micro,
    )
    d = decode_terms(
        spec,
        dense_bytes=w.dense_bytes,
        expert_bytes=w.expert_bytes,
        dense_params=w.dense_params,
        expert_params=w.expert_params,
        kv_bytes_per_token=layout.kv_bytes_per_token,
        state_bytes_per_sequence=layout.state_bytes_per_slot,  # one slot: what the step reads
        tp=par.tp,
        dp=par.dp,
        ep=par.ep,
        batch=micro,
        context=context_tokens,
        hbm_bw=hw.hbm_bw_bytes_per_s_per_device,
        flops=hw.flops_per_s_per_device(eff.compute_dtype),
        bw_efficiency=eff.bw_efficiency,
        mfu=eff.mfu,
        comm_s=comm.time_s,
        histogram=histogram,
        weights=weight_groups_of_setup(setup),
        verify_tokens=verify_tokens,
        verify_state_slots=st.verify_state_slots(verify_tokens),
        dsv4_sizes=stack_sizes(spec, st.name),
    )
    touched = float(d.experts_touched)
    touched_all = experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=batch, histogram=histogram)
    bytes_dev = StepBytes.of_step(
        weights=float(d.weights_bytes), experts=float(d.experts_bytes), kv=float(d.kv_bytes), state=float(d.state_bytes)
    )
    flops_dev = StepFlops(linear=float(d.linear_flops), attention=float(d.attention_flops))
    memory_s, compute_s, step = float(d.memory_s), float(d.compute_s), float(d.step_s)
    binding = BINDING[int(d.binding)]
    state_slot = state_bytes_per_slot(spec, st)
    ideal_terms = {
        "weights": w.dense_total_bytes,
        "experts": w.expert_total_bytes * touched_all / moe.num_experts,
        "kv": batch * context_tokens * stack_kv_bytes_per_token(spec, st),
        # a step's sequences (batch / verify_tokens rows each) x the slots each reads and writes
        "state": sum(st.verify_state_slots(verify_tokens)) * math.ceil(batch / verify_tokens) * state_slot,
    }
    ideal = StepBytes.of_step(**ideal_terms)
    chip_bw = hw.hbm_bw_bytes_per_s_per_device * hw.devices_per_chip * topo.chips * eff.bw_efficiency
    return DecodeBound(
        batch=batch,
        context_tokens=context_tokens,
        experts_touched_per_layer=touched,
        bytes_per_device=bytes_dev,
        flops_per_device=flops_dev,
        memory_s=memory_s,
        compute_s=compute_s,
        comm=comm,
        step_s=step,
        binding=binding,
        tokens_per_s=batch / step,
        tpot_s=step,
        tokens_per_s_per_chip=batch / step / topo.chips,
        comm_share=comm.time_s / step,
        ideal_bytes_per_step=ideal,
        ideal_step_s=sum(ideal_terms.values()) / chip_bw,  # the unrounded sum: the time as before the ints
    )


def prefill_bound(
    setup: Setup,
    *,
    prompt_tokens: int,
    chunk_tokens: int,
    eff: Efficiency,
    evidence: Evidence | None = None,
    allow_cpu_probes: bool = False,
) -> PrefillBound:
    """FLOPs a token are sums over the whole model's prefill ops (k3plan/step/ops.py): the linear ops
    of one token (= 2 x active params) and the attention / KDA scan of one chunk spanning the prompt
    (= ``roofline.work.attention_prefill_flops_per_token``), at ``mfu``: spread over every device, the
    deployment's prefill rate (the porting study's tables). One prompt runs on one DP group: its attention
    and non-expert matmuls are spread over the group's tp x pp devices, its routed experts over the EP
    group's ep x pp (all devices when EP spans the DP groups; the other groups' prompts are not counted:
    one prompt on an otherwise idle deployment, as the expected table's), and its TTFT takes that rate."""
    from k3plan.step.ops import by_category, prefill_ops, whole_model_groups

    spec, inv, hw, topo = setup.model.spec, setup.model.inventory, setup.hardware, setup.topology
    groups = whole_model_groups(inv, setup.stack)
    kv_tok, state_seq = (
        stack_kv_bytes_per_token(spec, setup.stack),
        state_bytes_per_slot(spec, setup.stack),
    )

    def ops_at(tokens: int) -> list:
        return prefill_ops(
            spec,
            weights=groups,
            kv_bytes_per_token=kv_tok,
            state_bytes_per_sequence=state_seq,
            tp=1,
            chunk=tokens,
            ep_tokens=tokens,
            touched=spec.moe.num_experts,
            context=tokens,
            dsv4_sizes=stack_sizes(spec, setup.stack.name),
        )

    linear = by_category(ops_at(1), "flops", key="flops_category")["linear"]
    experts = expert_flops_per_token(inv)
    attn = by_category(ops_at(prompt_tokens), "flops", key="flops_category").get("attention", 0) / prompt_tokens
    per_device = hw.flops_per_s_per_device(eff.compute_dtype)
    peak = per_device * topo.devices * eff.mfu
    rate = peak / (linear + attn)
    par = setup.parallel
    group, expert_group = prompt_devices(devices=topo.devices, dp=par.dp, ep=par.ep, pp=par.pp)
    flops = prompt_flops_per_token(
        linear=linear, attention=attn, experts=experts, group=group, expert_group=expert_group
    )
    prompt_rate = per_device * group * eff.mfu / flops
    chunk = min(chunk_tokens, prompt_tokens)
    chunks = math.ceil(prompt_tokens / chunk)
    comm = comm_cost(setup, tokens=chunk, sequences=1, latency=_scale_up_latency(setup, evidence, allow_cpu_probes))
    compute_s = prompt_tokens / prompt_rate
    need = rate * comm.bytes_per_chip_per_step / chunk  # bytes a chip must send a second
    # each link carries its own collectives' bytes: the fullest link's share binds
    share = max((rate * x.bytes_per_chip_per_step / chunk / x.link_bw_bytes_per_s for x in comm.links), default=0.0)
    # issue 38: a share above 1 inside a scale-up domain does not stop a prefill, it slows it: the link
    # sets the pace (ttft_s below is max(compute, link time)). The nightly prefill of K3 at TP 32 runs at
    # "111% of ICI". Only collectives that cross the scale-out link beyond its bandwidth are infeasible
    # (docs/k3-facts.md §5: EP over DCN fails prefill), and the note says so.
    feasible = True
    note = ""
    if share > 1.0:
        note = (
            f"link-bound: at the compute rate the collectives need {share:.0%} of the one-way link, so the "
            "link sets the pace (TTFT = the link time)"
        )
    out = comm.scale_out
    if out is not None:
        out_share = rate * out.bytes_per_chip_per_step / chunk / out.link_bw_bytes_per_s
        feasible = out_share <= 1.0
        note = (note + "; " if note else "") + (
            f"the step spans {topo.slices} slices: {', '.join(out.collectives)} cross {out.link_name}"
            + ("" if feasible else f", needing {out_share:.0%} of its bandwidth: infeasible for prefill")
        )
    return PrefillBound(
        prompt_tokens=prompt_tokens,
        chunk_tokens=chunk,
        chunks=chunks,
        linear_flops_per_token=linear,
        attention_flops_per_token=attn,
        expert_flops_per_token=experts,
        tokens_per_s=rate,
        tokens_per_s_linear_only=peak / linear,
        devices=group,
        expert_devices=expert_group,
        prompt_tokens_per_s=prompt_rate,
        compute_s=compute_s,
        comm=comm,
        # the stage-to-stage sends (--pp) of every chunk on top, one after another like the latency (their
        # link may not be the collectives'): what the expected table's collectives count (speed/stage.py)
        ttft_s=max(compute_s, chunks * comm.bandwidth_time_s) + chunks * (comm.latency_time_s + comm.pipeline_time_s),
        comm_bytes_per_s_per_chip=need,
        link_share=share,
        feasible=feasible,
        note=note,
    )


def _scale_up_latency(setup: Setup, evidence: Evidence | None, allow_cpu: bool) -> tuple[float, str] | None:
    """A probe record's latency a call of the stack's expert collective on the scale-up link, or None (the
    spec's): what ``comm_cost`` charges the calls that stay in a scale-up domain."""
    if not measures_hardware(evidence):
        return None
    op = Collective.of_pattern(setup.stack.collectives.experts)
    return collective_latency(setup.hardware, op=op.value, link="scale_up", evidence=evidence, allow_cpu=allow_cpu)


def crossover(setup: Setup, contexts: Sequence[int]) -> LongContext:
    from k3plan.roofline.result import ContextRatio, LongContext

    spec, inv = setup.model.spec, setup.model.inventory
    linear = linear_flops_per_token(inv.active_params)
    return LongContext(
        crossover_tokens=attention_linear_crossover_tokens(spec, inv.active_params),
        linear_flops_per_token=linear,
        ratio_by_context=tuple(
            ContextRatio(
                context_tokens=c,
                ratio=(attention_decode_flops_per_token(spec, c) - attention_decode_flops_per_token(spec, 0)) / linear,
            )
            for c in contexts
        ),
    )
