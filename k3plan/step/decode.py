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

from k3plan.models.spec import ModelSpec
from k3plan.roofline.work import experts_touched
from k3plan.step.columns import maximum, minimum, where
from k3plan.step.memory import cdiv
from k3plan.step.ops import aggregate_groups, by_category, decode_ops

BINDING = ("memory", "compute", "communication")


def decode_terms(
    spec: ModelSpec,
    *,
    dense_bytes,
    expert_bytes,
    dense_params,
    expert_params,
    kv_bytes_per_token,
    state_bytes_per_sequence,
    tp,
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
) -> dict:
    moe = spec.moe
    seqs = cdiv(batch, dp)
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
    )
    got = by_category(ops, "bytes")
    nbytes = {k: got.get(k, 0) for k in ("weights", "experts", "kv", "state")}
    got = by_category(ops, "flops", key="flops_category")
    nflops = {k: got.get(k, 0) for k in ("linear", "attention")}
    memory_s = sum(nbytes.values()) / (hbm_bw * bw_efficiency)
    compute_s = sum(nflops.values()) / (flops * mfu)
    return {
        "ops": ops,
        "experts_touched": touched,
        "bytes": nbytes,
        "flops": nflops,
        "memory_s": memory_s,
        "compute_s": compute_s,
        "step_s": maximum(memory_s, compute_s) + comm_s,
        "binding": where(comm_s > maximum(memory_s, compute_s), 2, where(memory_s >= compute_s, 0, 1)),
    }
