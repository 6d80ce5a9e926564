"""The draft head a model ships (MTP layers): its weights and the KV it adds, from the inventory.

Kimi K3's published config sets ``num_nextn_predict_layers: 0`` and its checkpoint has no MTP
tensors, so K3 brings no draft head: speculative decoding on K3 needs an external draft model
(its bytes are the caller's input). DeepSeek-V3 ships one MTP layer (a full MoE decoder layer with
MLA, plus embedding projection and a shared head), listed in the inventory with kind ``mtp``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from k3plan.budget.cache import kv_bytes_per_token_layer
from k3plan.models.loader import Model


class DraftHead(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    mtp_layers: int  # from the config (num_nextn_predict_layers)
    params: int  # every tensor of kind "mtp" in the inventory
    checkpoint_bytes: int
    mla_layers: int  # MTP layers with an MLA mixer: each caches a token's latent like a decoder layer
    kv_bytes_per_token: int  # whole model, one copy, in kv_dtype
    kv_dtype: str
    source: str


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
