"""Decode time per output token for arrays of configurations.

``roofline.bounds.decode_bound`` and ``roofline.comm.comm_cost`` over numpy arrays, term for term:
  bytes a device = dense weights + touched experts' share + KV read + KDA state read and write
  FLOPs a device = 2 x params a device applies to its EP group's tokens + absorbed MLA / KDA
  step = max(bytes / (HBM BW x bw_eff), FLOPs / (peak x mfu)) + calls x latency + bytes / link BW
The link is the scale-up one unless the EP group spans slices. Latencies are the hardware spec's
defaults (plan takes no probe records). tests/plan compares TPOT with decode_bound.
"""

from __future__ import annotations

import numpy as np

from k3plan.budget.dtypes import BYTES
from k3plan.models.spec import ModelSpec
from k3plan.roofline.bounds import Efficiency
from k3plan.roofline.work import attention_decode_flops_per_token, experts_touched
from k3plan.sharding.stack import Stack


def _ring(n: np.ndarray, message: np.ndarray, dpc: np.ndarray) -> np.ndarray:
    """Ring all-reduce bytes a chip: 2 (n-1)/n of the message a device, dpc devices a chip."""
    return np.where(n > 1, dpc * 2 * (n - 1) / np.maximum(n, 1) * message, 0.0)


def comm_arrays(*, spec: ModelSpec, variants: list[Stack], v: np.ndarray, tp: np.ndarray, dp: np.ndarray,
                ep: np.ndarray, hw: dict[str, np.ndarray], spans: np.ndarray, tokens: int) -> dict[str, np.ndarray]:
    """comm_cost(): collective calls and bytes a chip for one step over ``tokens`` tokens."""
    act = np.array([BYTES[s.activation_dtype] for s in variants])[v]
    a2a = np.array([s.collectives.experts == "all_to_all" for s in variants])[v]
    disp = np.array([BYTES[s.collectives.dispatch_dtype] for s in variants])[v]
    dpc, chips = hw["devices_per_chip"], hw["chips"]
    group_tokens = -(-tokens // dp)
    attn_calls = np.where(tp > 1, spec.num_layers, 0)
    attn_bytes = attn_calls * _ring(tp, group_tokens * spec.hidden_size * act, dpc)
    moe = spec.moe
    a2a_bytes = tokens * (2 * moe.top_k * moe.expert_in * disp) * spec.n_moe / chips
    ar_bytes = spec.n_moe * _ring(ep, tokens * spec.hidden_size * act, dpc)
    expert_calls = np.where(a2a, 2 * spec.n_moe, np.where(ep > 1, spec.n_moe, 0))
    bytes_chip = np.where(a2a, a2a_bytes, ar_bytes) + attn_bytes
    bw = np.where(spans, hw["scale_out_bw"], hw["scale_up_bw"])
    lat = np.where(spans, hw["scale_out_latency"], hw["scale_up_latency"])
    calls = expert_calls + attn_calls
    return {"comm_calls": calls, "comm_bytes_per_chip": bytes_chip, "comm_s": calls * lat + bytes_chip / bw}


def decode_arrays(*, spec: ModelSpec, weights: dict[str, np.ndarray], cache: dict[str, np.ndarray],
                  tp: np.ndarray, dp: np.ndarray, ep: np.ndarray, hw: dict[str, np.ndarray], comm_s: np.ndarray,
                  context: int, batch: int, eff: Efficiency) -> dict[str, np.ndarray]:
    """decode_bound(): seconds a step (= TPOT) for ``batch`` sequences at ``context`` tokens."""
    moe = spec.moe
    seqs = -(-batch // dp)
    # tokens one EP group routes: its DP groups' sequences (ep = tp: one group; ep = all: the batch)
    ep_tokens = np.minimum(batch, seqs * np.maximum(1, ep // tp))
    touched = experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=ep_tokens)
    nbytes = (weights["dense_bytes"] + weights["expert_bytes"] * (touched / moe.num_experts)
              + seqs * context * cache["kv_bytes_per_token"] + 2 * seqs * cache["state_bytes_per_sequence"])
    linear = (2 * (moe.top_k / moe.num_experts) * ep_tokens * weights["expert_params"]
              + 2 * seqs * weights["dense_params"])
    heads_split = np.where(spec.mla.heads % tp == 0, tp, 1)
    attention = seqs * attention_decode_flops_per_token(spec, context) / np.maximum(1, heads_split)
    memory_s = nbytes / (hw["hbm_bw"] * eff.bw_efficiency)
    compute_s = (linear + attention) / (hw["flops"] * eff.mfu)
    step = np.maximum(memory_s, compute_s) + comm_s
    return {"memory_s": memory_s, "compute_s": compute_s, "tpot_s": step,
            "binding": np.where(comm_s > np.maximum(memory_s, compute_s), 2, np.where(memory_s >= compute_s, 0, 1))}


BINDING = ("memory", "compute", "communication")
