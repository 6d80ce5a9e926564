"""The draft head a model ships (MTP layers): its weights and the KV it adds, from the inventory.

Kimi K3's published config sets ``num_nextn_predict_layers: 0`` and its checkpoint has no MTP
tensors, so K3 brings no draft head: speculative decoding on K3 needs an external draft model
(its bytes are the caller's input). DeepSeek-V3 ships one MTP layer (a full MoE decoder layer with
MLA, plus embedding projection and a shared head), listed in the inventory with kind ``mtp``.
"""

from __future__ import annotations

from dataclasses import replace

from k3plan.models.loader import Model
from k3plan.step.cache import kv_bytes_per_token_layer
from k3plan.step.memory import BudgetTerms, kv_sequence_bytes
from k3plan.structs import Frozen


class DraftHead(Frozen):
    model: str
    mtp_layers: int  # from the config (num_nextn_predict_layers)
    params: int  # every tensor of kind "mtp" in the inventory
    checkpoint_bytes: int
    mla_layers: int  # MTP layers with an MLA mixer: each caches a token's latent like a decoder layer
    kv_bytes_per_token: int  # whole model, one copy, in kv_dtype
    kv_dtype: str
    source: str
    # DeepSeek-V4.1's DSpark block drafter (kind mtp too): its blocks draft ``positions_per_pass`` positions in one
    # forward, each block attending a sliding window of the target's width (a fixed cache a sequence, not a token)
    drafter: str = "mtp"  # "mtp": one forward a drafted position; "dspark": a block of positions a forward
    positions_per_pass: int = 1
    window_bytes_per_sequence: int = 0

    def forwards(self, draft_tokens: int) -> int:
        """Draft forwards a step for ``draft_tokens`` drafted positions (an MTP head: one each)."""
        return -(-draft_tokens // self.positions_per_pass)


# vLLM's V4.1 cache for the DSpark blocks: one uncompressed BF16 KV plane, one head, the target window's geometry
# (vllm-project/vllm-ascend vllm_ascend/core/deepseek_v41.py @0dcdd80d DeepseekV41DraftSWASpec.__post_init__ and
# plan_cache_slots: 'Aurora DSpark requires one uncompressed BF16 KV plane', 'three ordered draft layers', draft
# geometry equal to the target SWA's)
DSPARK_WINDOW_SOURCE = (
    "vllm-project/vllm-ascend vllm_ascend/core/deepseek_v41.py @0dcdd80d DeepseekV41DraftSWASpec (bf16, one KV head, "
    "the target window's block, head size and sliding window)"
)


def draft_head(model: Model, *, kv_dtype: str) -> DraftHead:
    spec, inv = model.spec, model.inventory
    mtp = inv.of_kind("mtp")
    mla_layers = len({t.layer for t in mtp if "kv_a_proj_with_mqa" in t.name})
    source = (
        f"inventory: {len(mtp)} tensors of kind mtp"
        if mtp
        else f"{spec.source}: num_nextn_predict_layers {spec.mtp_layers}, no MTP tensors in the inventory; "
        "speculative decoding needs an external draft model"
    )
    dspark = spec.dsv4.dspark if spec.dsv4 is not None else None
    if dspark is not None and mtp:  # DeepSeek-V4.1: the drafter's blocks cache a window, not a latent a token
        d = spec.dsv4
        assert d is not None
        return DraftHead(
            model=spec.name,
            mtp_layers=spec.mtp_layers,
            params=sum(t.params for t in mtp),
            checkpoint_bytes=sum(t.nbytes for t in mtp),
            mla_layers=0,
            kv_bytes_per_token=0,
            kv_dtype="bf16",
            source=f"{source}; DSpark: {spec.mtp_layers} blocks, {dspark.block_size} positions a forward",
            drafter="dspark",
            positions_per_pass=dspark.block_size,
            window_bytes_per_sequence=spec.mtp_layers * d.sliding_window * d.head_dim * 2,
        )
    return DraftHead(
        model=spec.name,
        mtp_layers=spec.mtp_layers,
        params=sum(t.params for t in mtp),
        checkpoint_bytes=sum(t.nbytes for t in mtp),
        mla_layers=mla_layers,
        kv_bytes_per_token=mla_layers * kv_bytes_per_token_layer(spec, kv_dtype),
        kv_dtype=kv_dtype,
        source=source,
    )


class DraftKv(Frozen):
    """The draft's KV cache a token, per device, and where the figure comes from: derived from the
    model's MTP head (its MLA layers laid out like the target's by the stack), or given by the user
    for an external draft model (--draft-kv-bytes-per-token, whole draft, split over TP like its
    weights: an assumption printed with it). Recurrent draft state, if any, is the user's to add."""

    bytes_per_token_per_device: int
    given: bool  # True: the user's figure, not derived
    source: str


def mtp_draft_kv(head: DraftHead, *, kv_bytes_per_token_layer_per_device: int, layout_source: str) -> DraftKv:
    """An MTP head's KV a token a device: its MLA layers x the stack's per-layer, per-device bytes."""
    n = head.mla_layers * kv_bytes_per_token_layer_per_device
    return DraftKv(
        bytes_per_token_per_device=n,
        given=False,
        source=f"derived: {head.model}'s MTP head, {head.mla_layers} MLA layer(s) x "
        f"{kv_bytes_per_token_layer_per_device:,} B a token a device ({head.kv_dtype}, {layout_source})",
    )


def given_draft_kv(bytes_per_token: int, *, tp: int) -> DraftKv:
    """--draft-kv-bytes-per-token N (whole draft model, one copy): split over ``tp`` like its weights."""
    per_dev = -(-bytes_per_token // tp)
    return DraftKv(
        bytes_per_token_per_device=per_dev,
        given=True,
        source=f"given, not derived: --draft-kv-bytes-per-token {bytes_per_token:,} B (whole draft), split over "
        f"tp {tp} like its weights (an assumption): {per_dev:,} B a token a device",
    )


def add_draft_kv(
    terms: BudgetTerms[int], *, kv: DraftKv, context_tokens: int, block_tokens: int, split_across_dp: bool, dp: int
) -> BudgetTerms[int]:
    """``k3plan.step.memory.budget_terms`` at one point with the draft's KV added to every sequence:
    its KV (batch on this device x the one KV formula ``kv_sequence_bytes``: whole blocks of ``block_tokens``,
    the draft's bytes a token, paged with the target's) joins the KV term, the free bytes, the bytes a
    sequence and therefore the sequences the room holds. ``CacheLayout.max_context(...,
    extra_bytes_per_token=...)`` is its inverse."""
    per_seq = int(
        kv_sequence_bytes(
            context_tokens,
            block_tokens=block_tokens,
            layers=0,
            kv_bytes_per_token_layer=0,
            extra_bytes_per_token=kv.bytes_per_token_per_device,
        )
    )
    seq = int(terms.sequence_bytes) + per_seq
    groups = max(int(terms.room_bytes) // seq, 0) if seq > 0 else 0
    return replace(
        terms,
        kv_bytes=int(terms.kv_bytes) + int(terms.sequences) * per_seq,
        free_bytes=int(terms.free_bytes) - int(terms.sequences) * per_seq,
        sequence_bytes=seq,
        max_sequences=groups * (dp if split_across_dp else 1),
        kv_bytes_per_token=int(terms.kv_bytes_per_token) + kv.bytes_per_token_per_device,
    )
