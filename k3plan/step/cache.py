"""KV cache and KDA state: per token / per sequence, whole model and per device, with paging.

Whole model, one copy, in the stack's dtypes (docs/k3-facts.md §3):
- absorbed MLA caches kv_lora + rope dims (512 + 64 = 576 values) a token a MLA layer, or the engine's
  padded entry where the stack has a ``kv_cache.layout`` (tpu-inference: 512 + 128 = 640);
- KDA keeps a [heads, head_dim, head_dim] recurrent state and (kernel-1) past tokens of q, k, v
  for the short conv, a sequence a KDA layer, constant in context.
Per device: the MLA latent is shared by all heads, so under TP every rank holds it whole (when the
stack says so); KDA state splits by heads over TP when the heads divide.
Two state figures, kept apart: one *slot* (``state_bytes_per_slot``) is one copy of a sequence's state,
what a decode step reads and writes and what the temporaries are sized on; the state *pool* holds
``state.slots_per_request`` slots a running sequence (SGLang: 3 with its radix cache, 5 with the
extra-buffer strategy, 1 without the radix cache, and with speculative decoding one more a token verified;
engines/sglang/stack.yaml, ``Stack.for_spec_decode``), what the memory budget counts
(``CacheLayout.state_bytes_per_sequence`` = slots x slot). Under vLLM's hybrid manager
(``state.layer_groups``) the pool pads the KDA layers to whole layer groups: a slot holds 72 layer pages
for K3's 69 (``k3plan.step.memory.held_layers``), a step reads 69; under --pp a KV block may hold more
MLA pages than the stage has MLA layers (the stage's largest layer group).
Paging ``hybrid`` (vLLM): every layer gets pages of one size; the attention block (tokens) is
``align * ceil(state_page / (align * mla_bytes_per_token))`` per layer per device, the state page
is padded up to the attention page, and KV is allocated in whole blocks.
"""

from __future__ import annotations

import math

from k3plan.engines.stack import KVLayout, Stack
from k3plan.models.spec import ModelSpec
from k3plan.sharding.mesh import Parallel
from k3plan.step.dtypes import BYTES, FP8_DS_MLA_BYTES_PER_TOKEN_LAYER
from k3plan.structs import Frozen, replace


def kv_bytes_per_token_layer(
    spec: ModelSpec, kv_dtype: str, layout: KVLayout | None = None, *, stack_name: str = ""
) -> int:
    """One token, one MLA layer, one copy: the 576 values (kv_lora + rope), or the engine's padded entry
    (``layout``, a stack's ``kv_cache.layout``: tpu-inference's 640), in ``kv_dtype``; fp8_ds_mla is its
    own fixed 656-byte format. DeepSeek-V4 (``spec.dsv4``): its compressed cache spread over the layers
    (step/dsv4_cache.per_layer_kv_bytes_ceil), in the records of ``stack_name``'s engine (vLLM's where none is
    named), whatever ``kv_dtype`` says."""
    if spec.dsv4 is not None:
        from k3plan.step.dsv4_cache import layout_for_stack, per_layer_kv_bytes_ceil

        return per_layer_kv_bytes_ceil(spec, layout_for_stack(stack_name))
    if kv_dtype == "fp8_ds_mla":
        return FP8_DS_MLA_BYTES_PER_TOKEN_LAYER
    values = (
        spec.mla.cache_values_per_token
        if layout is None
        else layout.values_per_token(kv_lora_rank=spec.mla.kv_lora_rank, qk_rope_head_dim=spec.mla.qk_rope_head_dim)
    )
    return values * BYTES[kv_dtype]


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str, layout: KVLayout | None = None, *, stack_name: str = "") -> int:
    """Whole model, one copy: 24 MLA layers x 576 values for K3 (x 640 in tpu-inference's padded layout)."""
    return spec.n_mla * kv_bytes_per_token_layer(spec, kv_dtype, layout, stack_name=stack_name)


def stack_kv_bytes_per_token_layer(spec: ModelSpec, stack: Stack) -> int:
    """One MLA layer, one copy, as ``stack`` stores it (its KV dtype and layout; DeepSeek-V4: its engine's
    records)."""
    return kv_bytes_per_token_layer(spec, stack.kv_cache.dtype, stack.kv_cache.layout, stack_name=stack.name)


def stack_kv_bytes_per_token(spec: ModelSpec, stack: Stack) -> int:
    """Whole model, one copy, as ``stack`` stores it (its KV dtype and layout)."""
    return spec.n_mla * stack_kv_bytes_per_token_layer(spec, stack)


def state_bytes_per_layer(spec: ModelSpec, stack: Stack) -> int:
    if spec.kda is None:
        return 0
    return (
        spec.kda.recurrent_values * BYTES[stack.state.recurrent_dtype]
        + spec.kda.conv_values * BYTES[stack.state.conv_dtype]
    )


def fixed_state_bytes(spec: ModelSpec, stack: Stack) -> int:
    """DeepSeek-V4's fixed-size state a sequence, whole model, one copy: the window entries and the
    compressors' tails in the layout of ``stack``'s engine (step/dsv4_cache), with the longer tail ring
    an engine keeps under speculative decoding (``state.verify_tokens``, SGLang); 0 for every other model."""
    if spec.dsv4 is None:
        return 0
    from k3plan.step.dsv4_cache import layout_for_stack, state_bytes

    return state_bytes(spec, layout_for_stack(stack.name), speculative=stack.state.verify_tokens > 1)


def state_bytes_per_slot(spec: ModelSpec, stack: Stack) -> int:
    """Whole model, one slot (one copy of a sequence's state): constant in context length; what a step
    reads, a prefill hands over, a parked session keeps. The pool holds ``stack.state.slots_per_request``
    of them a sequence (``CacheLayout.state_bytes_per_sequence``). DeepSeek-V4: its fixed state."""
    return spec.n_kda * state_bytes_per_layer(spec, stack) + fixed_state_bytes(spec, stack)


def kv_state_crossover_tokens(spec: ModelSpec, stack: Stack) -> float | None:
    """Context at which one sequence's KV equals its KDA state (docs/k3-facts.md §3: ~32,507 at fp8)."""
    kv = stack_kv_bytes_per_token(spec, stack)
    state = state_bytes_per_slot(spec, stack)
    return state / kv if kv and state else None


class CacheLayout(Frozen):
    """Per device, per sequence."""

    kv_bytes_per_token_layer: int  # one MLA layer, per device
    state_bytes_per_layer: int  # one KDA layer, per device, padded to the page when paged
    state_bytes_per_layer_unpadded: int
    block_tokens: int  # KV allocation granularity
    page_bytes: int | None  # hybrid paging: one page, every layer
    n_mla: int
    n_kda: int
    paging: str
    state_slots_per_sequence: int = 1
    state_layer_groups: bool = False  # a slot holds whole layer groups (vLLM's hybrid manager: step.memory.held_layers)
    model_n_mla: int | None = None
    model_n_kda: int | None = None
    fixed_state_bytes: int = 0  # DeepSeek-V4's fixed state a sequence, a device, the whole model's (step/dsv4_cache)
    # what the pool holds a sequence beyond its KV blocks and KDA slots, a device, the whole model's: the fixed state,
    # or the engine planner's charge where it has one (step.memory.CacheTerms.pool_state_bytes); None: the fixed state
    pool_state_bytes: int | None = None
    # a block of context's KV a device, the whole model's, where the engine charges a block its own bytes
    # (step.memory.CacheTerms.kv_block_bytes: DeepSeek-V4.1 on vLLM); 0: ``block_tokens`` x the layers' pages
    kv_block_bytes: int = 0

    def _dump_extra(self, out):
        """One slot a sequence is every stack but SGLang's: the key appears only where it is more (the JSON
        contract of the other stacks' outputs is unchanged)."""
        if out.get("state_slots_per_sequence") == 1:
            out.pop("state_slots_per_sequence")
        if out.get("state_layer_groups") is False:  # likewise: the key appears only for vLLM's grouped pool
            out.pop("state_layer_groups")
        for k in ("model_n_mla", "model_n_kda"):  # only a pipeline stage's layout has them
            if out.get(k) is None:
                out.pop(k, None)
        if out.get("pool_state_bytes") in (None, out.get("fixed_state_bytes")):  # only an engine's own charge has it
            out.pop("pool_state_bytes", None)
        if not out.get("fixed_state_bytes"):  # only DeepSeek-V4's layout has it
            out.pop("fixed_state_bytes", None)
        if not out.get("kv_block_bytes"):  # only an engine's own block charge has it
            out.pop("kv_block_bytes", None)
        return out

    def for_stage(self, *, n_mla: int, n_kda: int) -> CacheLayout:
        """This layout on a pipeline stage holding ``n_mla`` / ``n_kda`` layers (the whole model's kept)."""
        return replace(
            self,
            n_mla=n_mla,
            n_kda=n_kda,
            model_n_mla=self.n_mla if self.model_n_mla is None else self.model_n_mla,
            model_n_kda=self.n_kda if self.model_n_kda is None else self.model_n_kda,
        )

    @property
    def layers_held(self) -> tuple[int, int]:
        """(MLA pages a KV block, KDA pages a state slot) the pool holds a sequence: ``n_mla`` and ``n_kda``, or
        whole layer groups under vLLM's hybrid manager (24 and 72 for K3 at pp 1; ``k3plan.step.memory.held_layers``)."""
        from k3plan.step.memory import held_layers

        mla, kda = held_layers(self.n_mla, self.n_kda, self.state_layer_groups, self.model_n_mla, self.model_n_kda)
        return int(mla), int(kda)

    @property
    def kv_bytes_per_token(self) -> int:
        return self.n_mla * self.kv_bytes_per_token_layer

    @property
    def fixed_state_bytes_held(self) -> int:
        """DeepSeek-V4's fixed state of the layers this layout holds (a pipeline stage's share)."""
        from k3plan.step.memory import fixed_state_share

        return int(fixed_state_share(self.fixed_state_bytes, self.n_mla, self.model_n_mla or self.n_mla))

    @property
    def pool_state_bytes_held(self) -> int:
        """What the pool holds a sequence besides its KV blocks and KDA slots, for the layers this layout holds
        (``pool_state_bytes``: the fixed state, or the engine planner's charge where it has one)."""
        from k3plan.step.memory import fixed_state_share

        if self.pool_state_bytes is None:
            return self.fixed_state_bytes_held
        return int(fixed_state_share(self.pool_state_bytes, self.n_mla, self.model_n_mla or self.n_mla))

    @property
    def state_bytes_per_slot(self) -> int:
        """One slot: what a decode step reads and writes of a sequence's state, a device."""
        return self.n_kda * self.state_bytes_per_layer + self.fixed_state_bytes_held

    @property
    def state_layers_held(self) -> int:
        """KDA layer pages a slot holds: ``n_kda``, or whole layer groups under vLLM's hybrid manager (72 for
        K3's 69; ``k3plan.step.memory.held_layers``)."""
        return self.layers_held[1]

    @property
    def state_bytes_per_sequence(self) -> int:
        """What the state pool holds a running sequence, a device: ``state_slots_per_sequence`` slots of
        ``state_layers_held`` layer pages each (a step reads ``n_kda`` of them: ``state_bytes_per_slot``)."""
        from k3plan.step.memory import state_pool_bytes

        return (
            int(
                state_pool_bytes(
                    self.n_mla,
                    self.n_kda,
                    self.state_bytes_per_layer,
                    self.state_slots_per_sequence,
                    self.state_layer_groups,
                    self.model_n_mla,
                    self.model_n_kda,
                )
            )
            + self.pool_state_bytes_held
        )

    def kv_bytes(self, context_tokens: int, extra_bytes_per_token: int = 0) -> int:
        """One sequence's KV the pool holds on a device, in whole blocks of ``layers_held[0]`` MLA pages
        (``k3plan.step.memory.kv_sequence_bytes``); ``extra_bytes_per_token``: a draft's KV paged alike."""
        from k3plan.step.memory import kv_sequence_bytes

        return int(
            kv_sequence_bytes(
                context_tokens,
                block_tokens=self.block_tokens,
                layers=self.layers_held[0],
                kv_bytes_per_token_layer=self.kv_bytes_per_token_layer,
                extra_bytes_per_token=extra_bytes_per_token,
                block_bytes=self.kv_block_bytes,
                model_layers=self.model_n_mla or self.n_mla,
            )
        )

    def sequence_bytes(self, context_tokens: int) -> int:
        return self.kv_bytes(context_tokens) + self.state_bytes_per_sequence

    def max_context(self, bytes_per_sequence: float, extra_bytes_per_token: int = 0) -> int:
        """Longest context whose KV (``kv_bytes``) fits ``bytes_per_sequence`` after the state, in whole blocks."""
        from k3plan.step.memory import kv_context_tokens

        return kv_context_tokens(
            bytes_per_sequence - self.state_bytes_per_sequence,
            block_tokens=self.block_tokens,
            layers=self.layers_held[0],
            kv_bytes_per_token_layer=self.kv_bytes_per_token_layer,
            extra_bytes_per_token=extra_bytes_per_token,
            block_bytes=self.kv_block_bytes,
            model_layers=self.model_n_mla or self.n_mla,
        )


def cache_inputs(
    spec: ModelSpec, stack: Stack, *, hardware: str = "", vendor: str = "", chunk: int = 0, context: int = 0
) -> dict[str, int | bool]:
    """What ``k3plan.step.memory.cache_terms`` reads of a model and a stack, besides tp: one place, which the
    layout of one Setup (``cache_layout``) and plan's columns (one entry a stack variant, gathered) both read.
    Where the stack's engine charges a request by its own pool accounting on ``hardware`` (step/dsv4_cache.
    engine_charge: DeepSeek-V4.1 on vLLM's CUDA and ROCm backends, DeepSeek-V4 and V4.1 on SGLang; at ``chunk``
    tokens a step and ``context`` tokens), the KV a token, its block and the pool's charge a request beyond the KV
    are the engine's: where the engine charges a block its own whole bytes (an int: vLLM's V4.1 groups), the budget
    carries that block (``kv_block``: the KV term is whole blocks of it, to the byte), the bytes a token and layer
    rounded up only for what reads a token's KV (the speed model's reads); SGLang's bytes a full token (a float) are
    spread over the layers, rounded up."""
    from k3plan.step.dsv4_cache import dsv4_block, engine_charge

    out: dict[str, int | bool] = dict(
        kv_layer=stack_kv_bytes_per_token_layer(spec, stack),
        replicate_across_tp=stack.kv_cache.replicate_across_tp,
        state_layer=state_bytes_per_layer(spec, stack),
        shard_state_by_heads=stack.state.shard_by_heads,
        align_tokens=stack.paging.align_tokens,
        hybrid_paging=stack.paging.kind == "hybrid",
        fixed_state=fixed_state_bytes(spec, stack),  # DeepSeek-V4's; else 0
        kv_block=0,  # the KV a block is block_tokens x the layers' pages, unless the engine charges its own (below)
    )
    if spec.hybrid_mla:  # a hybrid MLA model's block, aligned as the engine's release aligns it
        out["align_tokens"] = stack.hybrid_align(hardware)[0]
    if spec.dense_mla:  # a dense-MLA model at the block its engine's release runs it on the hardware
        out["align_tokens"] = stack.dense_mla_block(hardware)[0]
    out["pool_state"] = out["fixed_state"]  # the pool holds the fixed state, unless the engine's planner charges
    # DeepSeek-V4 in the block its engine sets (Dsv4Layout.block)
    out["align_tokens"] = dsv4_block(spec, stack.name)[0] or out["align_tokens"]
    charge = engine_charge(spec, stack, hardware=hardware, vendor=vendor, chunk=chunk, context=context)
    if charge is not None:  # a block of context is the block's bytes, spread over the layers (rounded up)
        out.update(
            kv_layer=math.ceil(charge.block_bytes / (charge.block_tokens * spec.n_mla)),
            align_tokens=charge.block_tokens,
            pool_state=charge.fixed_bytes,
            kv_block=charge.block_bytes if isinstance(charge.block_bytes, int) else 0,
        )
    return out


def cache_layout(
    *,
    spec: ModelSpec,
    stack: Stack,
    parallel: Parallel,
    hardware: str = "",
    vendor: str = "",
    chunk: int = 0,
    context: int = 0,
) -> CacheLayout:
    """The layout of one Setup: ``k3plan.step.memory.cache_terms`` at one point (``hardware``, ``vendor``,
    ``chunk``, ``context``: where an engine's own planner charges the request, ``cache_inputs``)."""
    from k3plan.step.memory import cache_terms

    c = cache_terms(
        spec,
        tp=parallel.tp,
        **cache_inputs(spec, stack, hardware=hardware, vendor=vendor, chunk=chunk, context=context),  # type: ignore[arg-type]
    )
    return CacheLayout(
        kv_bytes_per_token_layer=int(c.kv_bytes_per_token_layer),
        state_bytes_per_layer=int(c.state_bytes_per_layer),
        state_bytes_per_layer_unpadded=int(c.state_bytes_per_layer_unpadded),
        block_tokens=int(c.block_tokens),
        page_bytes=int(c.page_bytes) if c.hybrid else None,
        n_mla=spec.n_mla,
        n_kda=spec.n_kda,
        paging=stack.paging.kind,
        state_slots_per_sequence=stack.state.slots_per_request,
        state_layer_groups=stack.state.layer_groups,
        fixed_state_bytes=int(c.fixed_state_bytes),
        pool_state_bytes=None if c.pool_state_bytes is None else int(c.pool_state_bytes),
        kv_block_bytes=int(c.kv_block_bytes),
    )
