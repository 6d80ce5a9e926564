"""Bytes, FLOPs and time of one decode step a device, over ``int | numpy array`` columns.

  bytes = dense weights + the touched experts' share + KV read + KDA state read and write
  FLOPs = 2 x params a device applies to its tokens (dense: its DP group's sequences; experts:
          its EP group's tokens, k of E experts each) + absorbed MLA and KDA (roofline/work.py)
  step  = max(bytes / (HBM BW x bw_eff), FLOPs / (peak x mfu)) + collective time
The weight sums (dense/expert bytes and params a device, embeddings excluded: decode gathers rows)
come from ``plan``'s tensor classes or from one resolved ShardingPlan; both give the same numbers.
"""

from __future__ import annotations

from k3plan.models.spec import ModelSpec
from k3plan.roofline.work import attention_decode_flops_per_token, experts_touched
from k3plan.step.columns import maximum, minimum, where
from k3plan.step.memory import cdiv

BINDING = ("memory", "compute", "communication")


def decode_terms(spec: ModelSpec, *, dense_bytes, expert_bytes, dense_params, expert_params, kv_bytes_per_token,
                 state_bytes_per_sequence, tp, dp, ep, batch, context, hbm_bw, flops, bw_efficiency, mfu, comm_s,
                 histogram=None) -> dict:
    moe = spec.moe
    seqs = cdiv(batch, dp)
    # tokens one EP group routes: its DP groups' sequences (ep = tp: one group; ep = all: the batch)
    ep_tokens = minimum(batch, seqs * maximum(1, ep // tp))
    touched = experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=ep_tokens, histogram=histogram)
    nbytes = {"weights": dense_bytes, "experts": expert_bytes * (touched / moe.num_experts),
              "kv": seqs * context * kv_bytes_per_token, "state": 2 * seqs * state_bytes_per_sequence}
    heads_split = where(spec.mla.heads % tp == 0, tp, 1)
    nflops = {"linear": 2 * (moe.top_k / moe.num_experts) * ep_tokens * expert_params + 2 * seqs * dense_params,
              "attention": seqs * attention_decode_flops_per_token(spec, context) / maximum(1, heads_split)}
    memory_s = sum(nbytes.values()) / (hbm_bw * bw_efficiency)
    compute_s = sum(nflops.values()) / (flops * mfu)
    return {"experts_touched": touched, "bytes": nbytes, "flops": nflops, "memory_s": memory_s,
            "compute_s": compute_s, "step_s": maximum(memory_s, compute_s) + comm_s,
            "binding": where(comm_s > maximum(memory_s, compute_s), 2, where(memory_s >= compute_s, 0, 1))}

