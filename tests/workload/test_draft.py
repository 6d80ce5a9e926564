"""The draft head a model ships, from its inventory: K3 has none, DeepSeek-V3 one MTP layer."""

from __future__ import annotations

from k3plan.models import load_model
from k3plan.workload.draft import draft_head


def test_k3_has_no_mtp_head():
    d = draft_head(load_model("kimi-k3"), kv_dtype="bf16")
    # config: text_config.num_nextn_predict_layers = 0, and no tensor of kind mtp
    assert (d.mtp_layers, d.params, d.checkpoint_bytes, d.kv_bytes_per_token) == (0, 0, 0, 0)
    assert "external draft model" in d.source


def test_deepseek_v3_mtp_layer():
    m = load_model("deepseek-v3")
    d = draft_head(m, kv_dtype="bf16")
    assert d.mtp_layers == 1 and d.mla_layers == 1
    # one MLA layer: (kv_lora 512 + rope 64) values x 2 B (bf16) = 1,152 B a token
    assert d.kv_bytes_per_token == 1152
    assert draft_head(m, kv_dtype="fp8_ds_mla").kv_bytes_per_token == 656  # 512 fp8 + 4x4 scales + 64x2 rope
    # its own embedding + shared head (129,280 x 7,168 each) and eh_proj [7168, 14336] are part of it
    vocab_h = 129280 * 7168
    assert d.params > 2 * vocab_h + 7168 * 14336
    assert d.params == m.inventory.mtp_params  # the inventory is the one source
