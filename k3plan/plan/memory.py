"""KV/state layout, temporaries and the fit verdict for arrays of configurations.

The formulas of ``budget/cache.py`` (cache_layout), ``budget/temp.py`` (prefill_temp, decode_temp)
and ``budget/fit.py`` (fit) evaluated over numpy arrays instead of one Setup at a time; every
term is an integer, and tests/plan compares each with the scalar functions (exact bytes). Chosen
over calling the scalar functions per unique (stack, kv dtype, tp, ep, dp, chunk): with several
chunks and kv dtypes those are thousands of pydantic round trips (~40 us each), the arrays cost
~10 ms for 100k configurations.
"""

from __future__ import annotations

import numpy as np

from k3plan.budget.cache import kv_bytes_per_token_layer, state_bytes_per_layer
from k3plan.budget.dtypes import BYTES
from k3plan.budget.temp import KDA_CHUNK_TOKENS
from k3plan.models.formats import get_format
from k3plan.models.spec import ModelSpec
from k3plan.sharding.stack import Stack


def _cdiv(a, b):
    return -(-a // b)


def _heads_local(heads: int, tp: np.ndarray) -> np.ndarray:
    return np.where(heads % tp == 0, heads // tp, heads)


def _per_variant(variants: list[Stack], fn) -> np.ndarray:
    return np.array([fn(v) for v in variants], dtype=np.int64)


def cache_arrays(*, spec: ModelSpec, variants: list[Stack], v: np.ndarray, tp: np.ndarray) -> dict[str, np.ndarray]:
    """cache_layout() per configuration: per-device KV bytes a token a layer, state a layer
    (padded to the page under hybrid paging) and the KV block in tokens."""
    kv0 = _per_variant(variants, lambda s: kv_bytes_per_token_layer(spec, s.kv_cache.dtype))[v]
    kv_layer = np.where(_per_variant(variants, lambda s: s.kv_cache.replicate_across_tp)[v] == 1, kv0,
                        _cdiv(kv0, tp))
    st0 = _per_variant(variants, lambda s: state_bytes_per_layer(spec, s))[v]
    kda_heads = spec.kda.heads if spec.kda is not None else 1  # no KDA: the state is 0 bytes anyway
    split = (_per_variant(variants, lambda s: s.state.shard_by_heads)[v] == 1) & (kda_heads % tp == 0)
    state_layer = np.where(split, st0 // tp, st0)
    align = _per_variant(variants, lambda s: s.paging.align_tokens)[v]
    hybrid = (_per_variant(variants, lambda s: s.paging.kind == "hybrid")[v] == 1) & bool(spec.n_mla and spec.n_kda)
    safe_kv = np.maximum(kv_layer, 1)
    block = np.where(hybrid, align * np.maximum(1, _cdiv(state_layer, align * safe_kv)), align)
    padded = np.where(hybrid, np.maximum(block * kv_layer, state_layer), state_layer)
    return {"kv_bytes_per_token_layer": kv_layer, "state_bytes_per_layer": padded, "block_tokens": block}


def _moe(spec: ModelSpec, tokens, ep, act, quantized):
    moe = spec.moe
    local = _cdiv(moe.num_experts, ep)
    rows = _cdiv(tokens * moe.top_k * local, moe.num_experts)
    out = (tokens * (moe.num_experts * 4 + moe.top_k * 8)
           + rows * (2 * moe.expert_in + 2 * moe.expert_intermediate) * act
           + tokens * spec.hidden_size * 4)
    return out + np.where(quantized, local * 3 * moe.expert_in * moe.expert_intermediate * act, 0)


def temp_arrays(*, spec: ModelSpec, variants: list[Stack], expert_fmt: str, v: np.ndarray, tp: np.ndarray,
                ep: np.ndarray, dp: np.ndarray, chunk: np.ndarray, context: int, batch: int) -> dict[str, np.ndarray]:
    """prefill_temp().total and decode_temp().total per configuration."""
    act = _per_variant(variants, lambda s: BYTES[s.activation_dtype])[v]
    quantized = _per_variant(variants, lambda s: get_format(s.runtime_format("expert", expert_fmt)).quantized)[v] == 1
    mla = spec.mla
    h = _heads_local(mla.heads, tp)
    n = chunk
    pre = 2 * n * spec.hidden_size * act + context * h * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) * act
    b = _cdiv(batch, dp)
    dec = (2 * b * spec.hidden_size * act + b * h * context * 4 + b * _cdiv(spec.vocab_size, tp) * 4)
    if spec.kda is not None and spec.n_kda:
        hk, d = _heads_local(spec.kda.heads, tp), spec.kda.head_dim
        pre = pre + 5 * n * hk * d * act + _cdiv(n, KDA_CHUNK_TOKENS) * hk * d * d * 4
        dec = dec + b * hk * d * d * 4
    pre = pre + _moe(spec, n, ep, act, quantized)
    dec = dec + _moe(spec, b, ep, act, quantized)
    return {"prefill_temp_bytes": pre, "decode_temp_bytes": dec}


def fit_arrays(*, spec: ModelSpec, variants: list[Stack], v: np.ndarray, tp: np.ndarray, dp: np.ndarray,
               usable: np.ndarray, weights: np.ndarray, temp: np.ndarray, cache: dict[str, np.ndarray],
               context: int, batch: int) -> dict[str, np.ndarray]:
    """fit()'s per_device terms and capacity at ``batch`` sequences of ``context`` tokens."""
    frac = np.array([s.reserve.fraction_of_usable_hbm for s in variants])[v]
    reserve = (frac * usable).astype(np.int64)
    split = _per_variant(variants, lambda s: s.kv_cache.split_across_dp)[v] == 1
    seqs = np.where(split, _cdiv(batch, dp), batch)
    block = cache["block_tokens"]
    kv_seq = spec.n_mla * _cdiv(context, block) * block * cache["kv_bytes_per_token_layer"]
    state_seq = spec.n_kda * cache["state_bytes_per_layer"]
    per_seq = kv_seq + state_seq
    room = usable - (weights + temp + reserve)
    groups = np.maximum(0, room // np.maximum(per_seq, 1))
    return {
        "reserve_bytes": reserve, "sequences": seqs, "kv_bytes": seqs * kv_seq, "state_bytes": seqs * state_seq,
        "free_bytes": room - seqs * per_seq, "room_bytes": room, "sequence_bytes": per_seq,
        "max_sequences": np.where(per_seq > 0, groups, 0) * np.where(split, dp, 1),
        "kv_bytes_per_token": spec.n_mla * cache["kv_bytes_per_token_layer"],
        "state_bytes_per_sequence": state_seq,
    }
