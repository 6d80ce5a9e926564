"""Bytes, FLOPs and time of one decode step a device, over ``int | numpy array`` columns.

  bytes = dense weights + the touched experts' share + KV read + KDA state read and write
  FLOPs = 2 x params a device applies to its tokens (dense: its DP group's sequences; experts:
          its EP group's tokens, k of E experts each) + absorbed MLA and KDA (roofline/work.py)
  step  = max(bytes / (HBM BW x bw_eff), FLOPs / (peak x mfu)) + collective time
Both are sums over the step's op list (k3plan/step/ops.py). ``weights``: the inventory's weight
groups with their per-device shares (one op each); a caller that holds only the sums (``plan``'s
columns: dense/expert bytes and params a device, embeddings excluded) gets one op for each sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic

from k3plan.columns import C, maximum, minimum, where
from k3plan.models.spec import ModelSpec
from k3plan.step.memory import cdiv
from k3plan.step.op import Op
from k3plan.step.ops import aggregate_groups, by_category, decode_ops
from k3plan.step.work import experts_touched

BINDING = ("memory", "compute", "communication")


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value); fit's import stays cheap
class DecodeTerms(Generic[C]):
    """One decode step a device (``decode_terms``); each figure one number (fit) or one entry a
    configuration (plan). Bytes by what is read and FLOPs by kind are ``roofline.terms.StepBytes`` and
    ``StepFlops``' terms, in their order; expectations (the routed experts touched) are floats."""

    ops: list[Op]  # the step's ops (``ops.decode_ops``), collectives not included
    experts_touched: C | float  # distinct experts an EP group's tokens touch a MoE layer (expected)
    weights_bytes: C  # dense weights, each read once a step
    experts_bytes: C | float  # the routed experts touched: expert bytes x touched / experts
    kv_bytes: C  # KV read: a DP group's sequences x context x KV bytes a token
    state_bytes: C  # KDA state read and written
    linear_flops: C | float  # 2 x params applied (routed experts: k of E a token)
    attention_flops: C | float  # absorbed MLA + KDA state products
    memory_s: C | float  # bytes / (HBM bandwidth x bw_efficiency)
    compute_s: C | float  # FLOPs / (peak x mfu)
    step_s: C | float  # max(memory_s, compute_s) + comm_s
    binding: C  # index into BINDING: 0 memory, 1 compute, 2 communication


def decode_terms(
    spec: ModelSpec,
    *,
    dense_bytes,
    expert_bytes,
    dense_params,
    expert_params,
    kv_bytes_per_token,
    state_bytes_per_sequence,
    tp: C,
    dp,
    ep,
    batch,
    context,
    hbm_bw,
    flops,
    bw_efficiency,
    mfu,
    comm_s,
    histogram=None,
    weights=None,
    verify_tokens: int = 1,
    verify_state_slots: tuple[int, int] = (1, 1),
    expert_rows=None,
    dsv4_sizes=None,
) -> DecodeTerms[C]:
    """``batch``: the rows a step runs (a verify step's: sequences x ``verify_tokens``, each sequence's
    tokens checked in one step); ``verify_state_slots``: (read, written) KDA state slots such a step moves a
    sequence a KDA layer (``Stack.verify_state_slots``): the KDA op's bytes count the DP group's
    cdiv(cdiv(batch, verify_tokens), dp) sequences so, where a plain step (``verify_tokens`` 1) reads and
    writes each row's one slot. ``expert_rows``: the stack's grouped-matmul row tiling (``ops.weight_ops``)."""
    moe = spec.moe
    seqs = cdiv(batch, dp)
    state_slots = None
    if verify_tokens > 1:
        sequences = cdiv(cdiv(batch, verify_tokens), dp)
        state_slots = (sequences * verify_state_slots[0], sequences * verify_state_slots[1])
    # tokens one EP group routes: its DP groups' sequences (ep = tp: one group; ep = all: the batch)
    ep_tokens = minimum(batch, seqs * maximum(1, ep // tp))
    touched = experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=ep_tokens, histogram=histogram)
    if weights is None:
        weights = aggregate_groups(
            dense_bytes=dense_bytes, expert_bytes=expert_bytes, dense_params=dense_params, expert_params=expert_params
        )
    ops = decode_ops(
        spec,
        weights=weights,
        kv_bytes_per_token=kv_bytes_per_token,
        state_bytes_per_sequence=state_bytes_per_sequence,
        tp=tp,
        seqs=seqs,
        ep_tokens=ep_tokens,
        touched=touched,
        context=context,
        state_slots=state_slots,
        expert_rows=expert_rows,
        dsv4_sizes=dsv4_sizes,
    )
    got = by_category(ops, "bytes")
    nbytes: Any = got.get("weights", 0)  # StepBytes.total()'s order (weights, experts, kv, state): the same float
    nbytes = nbytes + got.get("experts", 0) + got.get("kv", 0) + got.get("state", 0)
    flops_by = by_category(ops, "flops", key="flops_category")
    nflops: Any = flops_by.get("linear", 0)
    nflops = nflops + flops_by.get("attention", 0)
    memory_s = nbytes / (hbm_bw * bw_efficiency)
    compute_s = nflops / (flops * mfu)
    return DecodeTerms(
        ops=ops,
        experts_touched=touched,
        weights_bytes=got.get("weights", 0),
        experts_bytes=got.get("experts", 0),
        kv_bytes=got.get("kv", 0),
        state_bytes=got.get("state", 0),
        linear_flops=flops_by.get("linear", 0),
        attention_flops=flops_by.get("attention", 0),
        memory_s=memory_s,
        compute_s=compute_s,
        step_s=maximum(memory_s, compute_s) + comm_s,
        binding=where(comm_s > maximum(memory_s, compute_s), 2, where(memory_s >= compute_s, 0, 1)),
    )
