"""Memory terms of a step, per device, each written once over ``int | numpy array`` columns.

- cache: per-device KV bytes a token a MLA layer, KDA state a layer (padded to the page under
  hybrid paging), the KV block in tokens (budget/cache.py's docstring has the rules);
- temporaries: ``k3plan.step.temporaries``;
- budget: reserve, sequences a device holds, KV and state, free bytes, room and capacity.
``budget.fit`` calls these with the ints of one Setup, ``plan`` with one entry per configuration.
Each returns a frozen typed result with named terms (``CacheTerms``, ``BudgetTerms``), generic in the
column type (``k3plan.step.columns.C``: ``BudgetTerms[int]`` in fit, ``BudgetTerms[np.ndarray]`` in
plan). Dataclasses, not pydantic: their fields hold numpy columns, and fit's path builds them without
validation cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol

from k3plan.models.spec import ModelSpec
from k3plan.step.columns import C, C_co, maximum, minimum, where

KDA_CHUNK_TOKENS = 64  # chunk of the chunked gated delta rule (fla / tokamax default)


def cdiv(a, b):
    return -(-a // b)


def heads_local(heads: int, tp):
    """Heads a TP rank holds: split when TP divides them, else every rank holds all."""
    return where(heads % tp == 0, heads // tp, heads)


def state_pool_bytes(n_mla, n_kda, state_bytes_per_layer, slots, layer_groups):
    """What the state pool holds a running sequence, a device: ``slots`` slots (the stack's
    ``state.slots_per_request``) of ``held_state_layers`` KDA layer pages each; a decode step reads one slot
    of ``n_kda`` pages. Over ``int | numpy`` columns (budget_terms; CacheLayout.state_bytes_per_sequence)."""
    return held_state_layers(n_mla, n_kda, layer_groups) * state_bytes_per_layer * slots


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class CacheTerms(Generic[C]):
    """Per-device cache layout, per sequence (``cache_terms``); each field one int (fit) or one entry a
    configuration (plan)."""

    kv_bytes_per_token_layer: C  # one MLA layer
    state_bytes_per_layer: C  # one KDA layer, padded up to the page under hybrid paging
    state_bytes_per_layer_unpadded: C
    block_tokens: C  # KV allocation granularity
    page_bytes: C  # one page, every layer (meaningful where ``hybrid``)
    hybrid: C  # bool (an int to the type checker): hybrid paging applies (the stack pages hybrid, the model has both)


class CacheCols(Protocol[C_co]):
    """What ``budget_terms`` reads of a cache layout: ``CacheTerms`` (plan's columns) or one Setup's
    ``k3plan.budget.cache.CacheLayout`` (fit)."""

    @property
    def kv_bytes_per_token_layer(self) -> C_co: ...
    @property
    def state_bytes_per_layer(self) -> C_co: ...
    @property
    def block_tokens(self) -> C_co: ...


def cache_terms(
    spec: ModelSpec,
    *,
    kv_layer: C,
    replicate_across_tp,
    state_layer,
    shard_state_by_heads,
    align_tokens,
    hybrid_paging,
    tp,
) -> CacheTerms[C]:
    """Per-device cache layout from the whole-model figures a layer (``kv_layer``, ``state_layer``)."""
    kv = where(replicate_across_tp, kv_layer, cdiv(kv_layer, tp))
    kda_heads = spec.kda.heads if spec.kda is not None else 1  # no KDA: the state is 0 bytes anyway
    state = where(shard_state_by_heads & (kda_heads % tp == 0), state_layer // tp, state_layer)
    hybrid = hybrid_paging & bool(spec.n_mla and spec.n_kda)
    block = where(hybrid, align_tokens * maximum(1, cdiv(state, align_tokens * maximum(kv, 1))), align_tokens)
    page = block * kv
    return CacheTerms(
        kv_bytes_per_token_layer=kv,
        state_bytes_per_layer=where(hybrid, maximum(page, state), state),
        state_bytes_per_layer_unpadded=state,
        block_tokens=block,
        page_bytes=page,
        hybrid=hybrid,
    )


def held_state_layers(n_mla, n_kda, layer_groups):
    """KDA layer slots the state pool holds a sequence: ``n_kda``, or under vLLM's hybrid KV-cache manager
    (``layer_groups``, a stack's ``state.layer_groups``) whole groups. vLLM splits each layer type into
    groups of ``group_size`` layers -- the smaller type's count, or the larger's when it is under 1.5 x the
    smaller -- pads the last group of a type, and backs the groups with ``group_size`` tensors each shared by
    one layer of every group, so a block of any group costs ``group_size`` pages: K3's 69 KDA layers fill
    3 groups of 24, 72 slots (3 padded), while a decode step reads 69 (vllm-project/vllm
    vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size, get_kv_cache_config_from_groups).
    Over ``int | numpy`` columns; ``n_mla``/``n_kda`` the layers a device holds (a pipeline stage's)."""
    lo, hi = minimum(n_mla, n_kda), maximum(n_mla, n_kda)
    group = maximum(where(2 * hi < 3 * lo, hi, lo), 1)  # hi < 1.5 x lo, exactly, in integers
    grouped = layer_groups & (n_mla > 0) & (n_kda > 0)
    return where(grouped, cdiv(n_kda, group) * group, n_kda)


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class BudgetTerms(Generic[C]):
    """The per-device budget at a batch and context (``budget_terms``); each field one int or one entry a
    configuration. ``stage``: the pipeline stage whose terms these are (``k3plan.step.stages.bind`` sets the
    binding one's; 0 without pipeline parallelism)."""

    weights_bytes: C  # the weights a device (of this stage) holds: an input, carried so bind keeps the binding one's
    reserve_bytes: C
    sequences: C  # sequences a device holds
    kv_bytes: C
    state_bytes: C
    free_bytes: C
    room_bytes: C  # usable - (weights + temp + reserve): what KV and state may take
    sequence_bytes: C  # one sequence's KV and state
    max_sequences: C  # most sequences the room holds, over the DP groups that split the batch
    kv_bytes_per_token: C
    state_bytes_per_sequence: C  # what the state pool holds a sequence: state_slots x one slot (the slot a step reads)
    stage: C | int = 0  # budget_terms: 0; bind: the binding stage, per configuration where the terms are columns


def budget_terms(
    spec: ModelSpec,
    *,
    usable: C,
    reserve_fraction,
    split_across_dp,
    dp,
    weights,
    temp,
    cache: CacheCols[C],
    context,
    batch,
    n_mla=None,
    n_kda=None,
    temp_in_reserve=False,
    state_slots=1,
    state_layer_groups=False,
) -> BudgetTerms[C]:
    """The per-device budget at ``batch`` sequences of ``context`` tokens: what is used, what is
    free, and how many sequences the room after weights, temporaries and reserve holds. ``n_mla``,
    ``n_kda``: the MLA and KDA layers a device holds (a pipeline stage's, step/stages.py; default
    the model's). ``temp_in_reserve`` (the stack's ``KVPool.temps_in_reserve``): the engine sizes its
    pool as fraction x HBM - weights and runs the activations out of the rest (SGLang's
    mem_fraction_static), so the temporaries come out of the reserve, not on top of it: the reserve
    counted is what the temporaries leave of it (0 when they exceed it). Otherwise (vLLM: utilization
    x HBM - weights - profiled peak) the temporaries and the reserve add. ``state_slots`` (the stack's
    ``state.slots_per_request``): KDA state slots the engine's state pool holds a running sequence (SGLang
    sizes it at 3 or 5 a request, sharding/stacks/sglang.yaml); the budget counts them all, a decode step
    reads one (``cache.state_bytes_per_layer`` a KDA layer, what plan and roofline pass to decode_terms).
    ``state_layer_groups`` (the stack's ``state.layer_groups``): each slot holds ``held_state_layers`` KDA
    layers' pages (vLLM: 72 for K3's 69), a decode step reads ``n_kda``."""
    n_mla = spec.n_mla if n_mla is None else n_mla
    n_kda = spec.n_kda if n_kda is None else n_kda
    reserve = (
        (reserve_fraction * usable).astype("int64") if hasattr(usable, "shape") else int(reserve_fraction * usable)
    )
    reserve = where(temp_in_reserve, maximum(reserve - temp, 0), reserve)
    seqs = where(split_across_dp, cdiv(batch, dp), batch)
    block = cache.block_tokens
    kv_seq = n_mla * cdiv(context, block) * block * cache.kv_bytes_per_token_layer
    state_seq = state_pool_bytes(n_mla, n_kda, cache.state_bytes_per_layer, state_slots, state_layer_groups)
    per_seq = kv_seq + state_seq
    room = usable - (weights + temp + reserve)
    groups = maximum(room // maximum(per_seq, 1), 0)
    return BudgetTerms(
        weights_bytes=weights,
        reserve_bytes=reserve,
        sequences=seqs,
        kv_bytes=seqs * kv_seq,
        state_bytes=seqs * state_seq,
        free_bytes=room - seqs * per_seq,
        room_bytes=room,
        sequence_bytes=per_seq,
        max_sequences=where(per_seq > 0, groups, 0) * where(split_across_dp, dp, 1),
        kv_bytes_per_token=n_mla * cache.kv_bytes_per_token_layer,
        state_bytes_per_sequence=state_seq,
    )
