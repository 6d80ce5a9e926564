"""Memory terms of a step, per device, each written once over ``int | numpy array`` columns.

- cache: per-device KV bytes a token a MLA layer, KDA state a layer (padded to the page under
  hybrid paging), the KV block in tokens (step/cache.py's docstring has the rules);
- temporaries: ``k3plan.step.temporaries``;
- budget: reserve, sequences a device holds, KV and state, free bytes, room and capacity.
``budget.fit`` calls these with the ints of one Setup, ``plan`` with one entry per configuration.
Each returns a frozen typed result with named terms (``CacheTerms``, ``BudgetTerms``), generic in the
column type (``k3plan.columns.C``: ``BudgetTerms[int]`` in fit, ``BudgetTerms[np.ndarray]`` in
plan). Dataclasses, not pydantic: their fields hold numpy columns, and fit's path builds them without
validation cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol

from k3plan.columns import C, C_co, maximum, minimum, where
from k3plan.models.spec import ModelSpec

KDA_CHUNK_TOKENS = 64  # chunk of the chunked gated delta rule (fla / tokamax default)


def cdiv(a, b):
    return -(-a // b)


def heads_local(heads: int, tp):
    """Heads a TP rank holds: split when TP divides them, else every rank holds all."""
    return where(heads % tp == 0, heads // tp, heads)


def kv_sequence_bytes(
    context, *, block_tokens, layers, kv_bytes_per_token_layer, extra_bytes_per_token=0, block_bytes=0, model_layers=0
):
    """THE KV bytes of one sequence of ``context`` tokens a device: whole blocks of ``block_tokens``, each token
    ``layers`` MLA pages of ``kv_bytes_per_token_layer`` (the pool's ``held_layers``), plus
    ``extra_bytes_per_token`` a token paged alike (a speculative-decoding draft's KV, k3plan.workload.draft).
    ``block_bytes`` (> 0): where an engine charges a block of context its own whole bytes (``CacheTerms.
    kv_block_bytes``, the ``model_layers`` MLA layers of the model), a block costs those bytes to the byte, a pipeline
    stage's ``layers`` their share rounded up, not ``block_tokens x layers`` pages rounded up a token and layer.
    Over ``int | numpy`` columns; budget_terms, CacheLayout, the draft's KV and a parked session all call it (a
    test holds that nothing else computes it), and ``kv_context_tokens`` is its inverse."""
    return cdiv(context, block_tokens) * _kv_block(
        block_tokens, layers, kv_bytes_per_token_layer, extra_bytes_per_token, block_bytes, model_layers
    )


def _kv_block(block_tokens, layers, kv_bytes_per_token_layer, extra_bytes_per_token, block_bytes, model_layers):
    """One block's KV a device (``kv_sequence_bytes``): the engine's block bytes where it has them, else the pages."""
    pages = block_tokens * (layers * kv_bytes_per_token_layer + extra_bytes_per_token)
    if not hasattr(block_bytes, "shape") and not block_bytes:  # the hot scalar path: no engine block
        return pages
    own = cdiv(block_bytes * layers, maximum(model_layers, 1)) + block_tokens * extra_bytes_per_token
    return where(block_bytes > 0, own, pages)


def kv_context_tokens(
    kv_room, *, block_tokens, layers, kv_bytes_per_token_layer, extra_bytes_per_token=0, block_bytes=0, model_layers=0
) -> int:
    """The longest context whose ``kv_sequence_bytes`` fits ``kv_room`` bytes (whole blocks; 0 when none does)."""
    per_block = _kv_block(
        block_tokens, layers, kv_bytes_per_token_layer, extra_bytes_per_token, block_bytes, model_layers
    )
    if kv_room <= 0 or per_block <= 0:
        return 0
    return int(kv_room // per_block) * block_tokens


def state_pool_bytes(n_mla, n_kda, state_bytes_per_layer, slots, layer_groups, total_mla=None, total_kda=None):
    """What the state pool holds a running sequence, a device: ``slots`` slots (the stack's
    ``state.slots_per_request``) of ``held_layers`` KDA layer pages each; a decode step reads one slot
    of ``n_kda`` pages. Over ``int | numpy`` columns (budget_terms; CacheLayout.state_bytes_per_sequence)."""
    return held_layers(n_mla, n_kda, layer_groups, total_mla, total_kda)[1] * state_bytes_per_layer * slots


def fixed_state_share(fixed, n_mla, total_mla):
    """DeepSeek-V4's fixed state a sequence (``CacheTerms.fixed_state_bytes``) held by ``n_mla`` of the model's
    ``total_mla`` layers (a pipeline stage's share, rounded up); over ``int | numpy`` columns."""
    return cdiv(fixed * n_mla, maximum(total_mla, 1))


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
    fixed_state_bytes: C | int = 0  # DeepSeek-V4's fixed state a sequence, a device (step/dsv4_cache); else 0
    # what the pool holds a sequence beyond its KV blocks and KDA slots, a device: the model's fixed state, or the
    # engine planner's charge where it has one (DeepSeek-V4.1 on vLLM: windows holding the tokens in flight, rings;
    # DeepSeek-V4 on SGLang: none apart, its full-token bytes hold it); None: the fixed state
    pool_state_bytes: C | int | None = None
    # a block of context's KV a device where the engine charges a block its own whole bytes (DeepSeek-V4.1 on vLLM:
    # step/cache.py cache_inputs), the model's MLA layers together; 0: ``block_tokens`` x the layers' pages
    kv_block_bytes: C | int = 0


class CacheCols(Protocol[C_co]):
    """What ``budget_terms`` reads of a cache layout: ``CacheTerms`` (plan's columns) or one Setup's
    ``k3plan.step.cache.CacheLayout`` (fit)."""

    @property
    def kv_bytes_per_token_layer(self) -> C_co: ...
    @property
    def state_bytes_per_layer(self) -> C_co: ...
    @property
    def block_tokens(self) -> C_co: ...
    @property
    def fixed_state_bytes(self) -> C_co | int: ...
    @property
    def pool_state_bytes(self) -> C_co | int | None: ...
    @property
    def kv_block_bytes(self) -> C_co | int: ...


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
    fixed_state=0,
    pool_state=None,
    kv_block=0,
) -> CacheTerms[C]:
    """Per-device cache layout from the whole-model figures a layer (``kv_layer``, ``state_layer``);
    ``fixed_state``: DeepSeek-V4's fixed state a sequence, whole model (held as its KV is: whole on every TP
    rank where the stack replicates the latent, else split); ``pool_state``: what the pool holds a request beyond its
    KV blocks, whole model, held alike (``CacheTerms.pool_state_bytes``; None: ``fixed_state``)."""
    pool_state = fixed_state if pool_state is None else pool_state
    kv = where(replicate_across_tp, kv_layer, cdiv(kv_layer, tp))
    kda_heads = spec.kda.heads if spec.kda is not None else 1  # no KDA: the state is 0 bytes anyway
    state = where(shard_state_by_heads & (kda_heads % tp == 0), state_layer // tp, state_layer)
    hybrid = hybrid_paging & spec.hybrid_mla
    block = where(hybrid, align_tokens * maximum(1, cdiv(state, align_tokens * maximum(kv, 1))), align_tokens)
    page = block * kv
    return CacheTerms(
        kv_bytes_per_token_layer=kv,
        state_bytes_per_layer=where(hybrid, maximum(page, state), state),
        state_bytes_per_layer_unpadded=state,
        block_tokens=block,
        page_bytes=page,
        hybrid=hybrid,
        fixed_state_bytes=where(replicate_across_tp, fixed_state, cdiv(fixed_state, tp)),
        pool_state_bytes=where(replicate_across_tp, pool_state, cdiv(pool_state, tp)),
        kv_block_bytes=where(replicate_across_tp, kv_block, cdiv(kv_block, tp)),
    )


def held_layers(n_mla, n_kda, layer_groups, total_mla=None, total_kda=None):
    """(MLA, KDA) layer pages the pool holds a sequence on a device: ``n_mla`` a KV block and ``n_kda`` a state
    slot, or under vLLM's hybrid KV-cache manager (``layer_groups``, a stack's ``state.layer_groups``) whole
    groups. ``n_mla``/``n_kda``: the layers the device holds (a pipeline stage's); ``total_mla``/``total_kda``:
    the whole model's (default: the same, pp 1). Over ``int | numpy`` columns.

    vLLM groups the whole model's layers, merged over every pipeline stage (get_kv_cache_configs), not a
    stage's: each type splits into ``cdiv(total, g)`` groups, ``g`` the smaller type's count, or the larger's
    when it is under 1.5 x the smaller, a group taking the type's layers ``[i::groups]`` (strided, so that
    every stage gets about its share of each group); each worker keeps the global groups with its own layers
    only (_project_kv_cache_groups_to_worker) and backs them with ``group_size`` = its largest group's layer
    count tensors, each shared by one layer of every group, so a block of any group costs ``group_size``
    pages on that worker; every worker runs the fewest blocks any has (min num_blocks). A sequence takes a
    block of every group: ``groups x group_size`` pages a type. At pp 1, K3's 24 MLA + 69 KDA: g = 24, MLA 1
    group, KDA 3 groups of 23, group_size 24: 24 KV pages a block, 72 state pages (3 padded), a step reads
    69. At pp 2, stage 1 (11 MLA, KDA 0-35: 12 of each KDA group): group_size 12, 12 KV pages a block (one
    padded) and 36 state pages; stage 2 (13 MLA, 11 of each KDA group): 13 and 39 (vllm-project/vllm@001cabc1
    vllm/v1/core/kv_cache_utils.py get_kv_cache_configs, _get_kv_cache_groups_uniform_page_size,
    _project_kv_cache_groups_to_worker, get_kv_cache_config_from_groups). A stage's layers of one type are
    contiguous in that type's order, so a stage's largest share of one group is ``cdiv(stage's, groups)``."""
    total_mla = n_mla if total_mla is None else total_mla
    total_kda = n_kda if total_kda is None else total_kda
    lo, hi = minimum(total_mla, total_kda), maximum(total_mla, total_kda)
    g = maximum(where(2 * hi < 3 * lo, hi, lo), 1)  # hi < 1.5 x lo, exactly, in integers
    groups_mla, groups_kda = cdiv(total_mla, g), cdiv(total_kda, g)
    group_size = maximum(cdiv(n_mla, maximum(groups_mla, 1)), cdiv(n_kda, maximum(groups_kda, 1)))
    grouped = layer_groups & (total_mla > 0) & (total_kda > 0)
    return where(grouped, groups_mla * group_size, n_mla), where(grouped, groups_kda * group_size, n_kda)


def held_state_layers(n_mla, n_kda, layer_groups, total_mla=None, total_kda=None):
    """KDA layer pages a state slot holds (``held_layers``' second): 72 for K3's 69 under vLLM at pp 1."""
    return held_layers(n_mla, n_kda, layer_groups, total_mla, total_kda)[1]


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
    kv_bytes_per_token: C  # KV the pool holds a token (held_layers' MLA pages; a step reads n_mla of them)
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
    sizes it at 3 or 5 a request, engines/sglang/stack.yaml); the budget counts them all, a decode step
    reads one (``cache.state_bytes_per_layer`` a KDA layer, what plan and roofline pass to decode_terms).
    ``state_layer_groups`` (the stack's ``state.layer_groups``): each slot holds ``held_layers`` KDA layers'
    pages (vLLM: 72 for K3's 69), a decode step reads ``n_kda``; under pipeline parallelism a KV block holds
    ``held_layers`` MLA pages too (the stage's largest layer group, which can pass its MLA count)."""
    n_mla = spec.n_mla if n_mla is None else n_mla
    n_kda = spec.n_kda if n_kda is None else n_kda
    reserve = (
        (reserve_fraction * usable).astype("int64") if hasattr(usable, "shape") else int(reserve_fraction * usable)
    )
    reserve = where(temp_in_reserve, maximum(reserve - temp, 0), reserve)
    seqs = where(split_across_dp, cdiv(batch, dp), batch)
    block = cache.block_tokens
    held_mla, _ = held_layers(n_mla, n_kda, state_layer_groups, spec.n_mla, spec.n_kda)
    kv_seq = kv_sequence_bytes(
        context,
        block_tokens=block,
        layers=held_mla,
        kv_bytes_per_token_layer=cache.kv_bytes_per_token_layer,
        block_bytes=cache.kv_block_bytes,
        model_layers=spec.n_mla,
    )
    state_seq = state_pool_bytes(
        n_mla, n_kda, cache.state_bytes_per_layer, state_slots, state_layer_groups, spec.n_mla, spec.n_kda
    ) + fixed_state_share(
        cache.fixed_state_bytes if cache.pool_state_bytes is None else cache.pool_state_bytes, n_mla, spec.n_mla
    )
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
        kv_bytes_per_token=held_mla * cache.kv_bytes_per_token_layer,
        state_bytes_per_sequence=state_seq,
    )
