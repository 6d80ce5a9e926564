"""Memory terms of a step, per device, each written once over ``int | numpy array`` columns.

- cache: per-device KV bytes a token a MLA layer, KDA state a layer (padded to the page under
  hybrid paging), the KV block in tokens (budget/cache.py's docstring has the rules);
- temporaries: the named live buffers of one prefill chunk and of one decode step, one layer at a
  time (docs/k3-facts.md §6: the two graphs are compiled apart, so the budget takes the larger);
- budget: reserve, sequences a device holds, KV and state, free bytes, room and capacity.
``budget.fit`` calls these with the ints of one Setup, ``plan`` with one entry per configuration.
"""

from __future__ import annotations

from k3plan.models.spec import ModelSpec
from k3plan.step.columns import maximum, where

KDA_CHUNK_TOKENS = 64  # chunk of the chunked gated delta rule (fla / tokamax default)


def cdiv(a, b):
    return -(-a // b)


def heads_local(heads: int, tp):
    """Heads a TP rank holds: split when TP divides them, else every rank holds all."""
    return where(heads % tp == 0, heads // tp, heads)


def cache_terms(
    spec: ModelSpec,
    *,
    kv_layer,
    replicate_across_tp,
    state_layer,
    shard_state_by_heads,
    align_tokens,
    hybrid_paging,
    tp,
) -> dict:
    """Per-device cache layout from the whole-model figures a layer (``kv_layer``, ``state_layer``)."""
    kv = where(replicate_across_tp, kv_layer, cdiv(kv_layer, tp))
    kda_heads = spec.kda.heads if spec.kda is not None else 1  # no KDA: the state is 0 bytes anyway
    state = where(shard_state_by_heads & (kda_heads % tp == 0), state_layer // tp, state_layer)
    hybrid = hybrid_paging & bool(spec.n_mla and spec.n_kda)
    block = where(hybrid, align_tokens * maximum(1, cdiv(state, align_tokens * maximum(kv, 1))), align_tokens)
    page = block * kv
    return {
        "kv_bytes_per_token_layer": kv,
        "state_bytes_per_layer": where(hybrid, maximum(page, state), state),
        "state_bytes_per_layer_unpadded": state,
        "block_tokens": block,
        "page_bytes": page,
        "hybrid": hybrid,
    }


def _moe_terms(spec: ModelSpec, *, tokens, ep, act, quantized) -> dict:
    moe = spec.moe
    local = cdiv(moe.num_experts, ep)
    rows = cdiv(tokens * moe.top_k * local, moe.num_experts)  # token-expert pairs on this device
    return {
        "router logits and top-k (f32)": tokens * (moe.num_experts * 4 + moe.top_k * 8),
        "expert inputs, gate/up and outputs": rows * (2 * moe.expert_in + 2 * moe.expert_intermediate) * act,
        "combine buffer (f32, before the all-reduce / all-to-all)": tokens * spec.hidden_size * 4,
        "one layer's local experts dequantized": where(
            quantized, local * 3 * moe.expert_in * moe.expert_intermediate * act, 0
        ),
    }


def prefill_temp_terms(spec: ModelSpec, *, act, quantized, tp, ep, chunk, context) -> dict:
    """One prefill chunk of ``chunk`` tokens per DP group, attending over ``context`` tokens."""
    mla = spec.mla
    terms = {"residual stream (2 live copies)": 2 * chunk * spec.hidden_size * act}
    if spec.kda is not None and spec.n_kda:
        hk, d = heads_local(spec.kda.heads, tp), spec.kda.head_dim
        terms["KDA q/k/v/gate projections"] = 5 * chunk * hk * d * act
        terms["KDA chunk states (f32)"] = cdiv(chunk, KDA_CHUNK_TOKENS) * hk * d * d * 4
    terms["MLA up-projected K/V over the context"] = (
        context * heads_local(mla.heads, tp) * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) * act
    )
    terms.update(_moe_terms(spec, tokens=chunk, ep=ep, act=act, quantized=quantized))
    return terms


def decode_temp_terms(spec: ModelSpec, *, act, quantized, tp, ep, dp, batch, context) -> dict:
    """One decode step for ``batch`` sequences at ``context`` tokens (a DP group's share)."""
    b = cdiv(batch, dp)
    terms = {
        "residual stream": 2 * b * spec.hidden_size * act,
        "absorbed MLA scores (f32)": b * heads_local(spec.mla.heads, tp) * context * 4,
        "logits (f32)": b * cdiv(spec.vocab_size, tp) * 4,
    }
    if spec.kda is not None and spec.n_kda:
        terms["KDA state update copy (f32)"] = b * heads_local(spec.kda.heads, tp) * spec.kda.head_dim**2 * 4
    terms.update(_moe_terms(spec, tokens=b, ep=ep, act=act, quantized=quantized))
    return terms


def total(terms: dict):
    return sum(terms.values())


def budget_terms(
    spec: ModelSpec,
    *,
    usable,
    reserve_fraction,
    split_across_dp,
    dp,
    weights,
    temp,
    cache: dict,
    context,
    batch,
    n_mla=None,
    n_kda=None,
    temp_in_reserve=False,
) -> dict:
    """The per-device budget at ``batch`` sequences of ``context`` tokens: what is used, what is
    free, and how many sequences the room after weights, temporaries and reserve holds. ``n_mla``,
    ``n_kda``: the MLA and KDA layers a device holds (a pipeline stage's, step/stages.py; default
    the model's). ``temp_in_reserve`` (the stack's ``KVPool.temps_in_reserve``): the engine sizes its
    pool as fraction x HBM - weights and runs the activations out of the rest (SGLang's
    mem_fraction_static), so the temporaries come out of the reserve, not on top of it: the reserve
    counted is what the temporaries leave of it (0 when they exceed it). Otherwise (vLLM: utilization
    x HBM - weights - profiled peak) the temporaries and the reserve add."""
    n_mla = spec.n_mla if n_mla is None else n_mla
    n_kda = spec.n_kda if n_kda is None else n_kda
    reserve = (
        (reserve_fraction * usable).astype("int64") if hasattr(usable, "shape") else int(reserve_fraction * usable)
    )
    reserve = where(temp_in_reserve, maximum(reserve - temp, 0), reserve)
    seqs = where(split_across_dp, cdiv(batch, dp), batch)
    block = cache["block_tokens"]
    kv_seq = n_mla * cdiv(context, block) * block * cache["kv_bytes_per_token_layer"]
    state_seq = n_kda * cache["state_bytes_per_layer"]
    per_seq = kv_seq + state_seq
    room = usable - (weights + temp + reserve)
    groups = maximum(room // maximum(per_seq, 1), 0)
    return {
        "reserve_bytes": reserve,
        "sequences": seqs,
        "kv_bytes": seqs * kv_seq,
        "state_bytes": seqs * state_seq,
        "free_bytes": room - seqs * per_seq,
        "room_bytes": room,
        "sequence_bytes": per_seq,
        "max_sequences": where(per_seq > 0, groups, 0) * where(split_across_dp, dp, 1),
        "kv_bytes_per_token": n_mla * cache["kv_bytes_per_token_layer"],
        "state_bytes_per_sequence": state_seq,
    }
