"""DeepSeek-V4-Flash and -Pro: the bundled config.json files against the public checkpoints.

Golden figures, typed from public sources (never from the code under test):

- Published sizes (the deepseek-ai model cards on Hugging Face, https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash
  and .../DeepSeek-V4-Pro): Flash 284B total / 13B activated; Pro 1.6T total / 49B activated.
- ``model.safetensors.index.json`` (``.../resolve/main/model.safetensors.index.json`` of each repository):
  ``metadata.total_size`` Flash 159,609,485,896 bytes over 69,187 weight_map entries; Pro 864,704,792,696
  bytes over 145,116 entries (as read and quoted in public notes found through the code search index:
  a mistral.rs port's config audit for Flash, a V4-Pro "ground-truth verification" note for Pro).
- Pro's safetensors headers (a public per-tensor dump of all 64 shards, "模型信息报告" for
  deepseek-ai/DeepSeek-V4-Pro): the dtypes and shapes pinned below; the headers' params, I8-packed FP4 counted
  as one element a byte and scales included, total 861,608,274,846.
"""

from __future__ import annotations

import pytest

from k3plan.models import load_model
from k3plan.models.inventory import checkpoint_table


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash")


@pytest.fixture(scope="module")
def pro():
    return load_model("deepseek-v4-pro")


def _all_bytes(m) -> int:
    return sum(t.nbytes for t in m.inventory.tensors)


def test_published_sizes(flash, pro):
    assert round(flash.inventory.total_params / 1e9) == 284
    assert round(flash.inventory.active_params / 1e9) == 13
    assert round(pro.inventory.total_params / 1e12, 1) == 1.6
    assert round(pro.inventory.active_params / 1e9) == 49
    # the V4-Pro verification note's "true parameter count (sum of tensor element counts, excl. scale
    # tensors)", FP4 unpacked, MTP included: 1,598.84 B
    assert round(sum(t.params for t in pro.inventory.tensors) / 1e7) == 159_884


def test_checkpoint_index_total_size_and_count_exact(flash, pro):
    assert _all_bytes(flash) == 159_609_485_896
    assert len(checkpoint_table(flash.inventory)) == 69_187
    assert _all_bytes(pro) == 864_704_792_696
    assert len(checkpoint_table(pro.inventory)) == 145_116


def test_pro_header_element_count(pro):
    # every stored element: I8 bytes (two FP4 values each), scales and i64 ids all count one
    table = checkpoint_table(pro.inventory)
    n = 0
    for _dtype, shape in table.values():
        k = 1
        for d in shape:
            k *= d
        n += k
    assert n == 861_608_274_846


PRO_HEADER = {
    # name: (safetensors dtype, shape), from the public dump of DeepSeek-V4-Pro's headers
    "embed.weight": ("BF16", [129280, 7168]),
    "hc_head_fn": ("F32", [4, 28672]),
    "layers.0.ffn.gate.tid2eid": ("I64", [129280, 6]),
    "layers.2.attn.wkv.scale": ("F8_E8M0", [4, 56]),
    "layers.5.attn.wo_a.weight": ("F8_E4M3", [16384, 4096]),
    "layers.5.attn.wo_b.scale": ("F8_E8M0", [56, 128]),
    "layers.7.attn.wq_b.weight": ("F8_E4M3", [65536, 1536]),
    "layers.9.ffn.experts.383.w1.weight": ("I8", [3072, 3584]),
    "layers.9.ffn.experts.0.w2.scale": ("F8_E8M0", [7168, 96]),
    "layers.60.ffn.shared_experts.w2.scale": ("F8_E8M0", [56, 24]),
    "layers.0.attn.compressor.ape": ("F32", [128, 512]),
    "layers.2.attn.compressor.wkv.weight": ("BF16", [1024, 7168]),
    "layers.2.attn.compressor.ape": ("F32", [4, 1024]),
    "layers.4.attn.indexer.compressor.ape": ("F32", [4, 256]),
    "layers.4.attn.indexer.wq_b.scale": ("F8_E8M0", [64, 12]),
    "layers.4.attn.indexer.weights_proj.weight": ("BF16", [64, 7168]),
    "layers.3.ffn.gate.bias": ("F32", [384]),
    "layers.1.hc_attn_fn": ("F32", [24, 28672]),
    "layers.1.hc_ffn_scale": ("F32", [3]),
    "mtp.0.e_proj.scale": ("F8_E8M0", [56, 56]),
    "mtp.0.hc_head_fn": ("F32", [4, 28672]),
    "mtp.0.ffn.gate.bias": ("F32", [384]),
}


def test_pro_header_dtypes_and_shapes(pro):
    table = checkpoint_table(pro.inventory)
    for name, want in PRO_HEADER.items():
        assert table[name] == want, name
    # hash routing on layers 0-2 only (no gate.bias there); no indexer on HCA layers; no compressor in MTP
    assert {n for n in table if n.endswith("tid2eid")} == {f"layers.{i}.ffn.gate.tid2eid" for i in range(3)}
    assert "layers.2.ffn.gate.bias" not in table and "layers.3.attn.indexer.wq_b.weight" not in table
    assert not any(n.startswith("mtp.0.attn.compressor") for n in table)


FLASH_HEADER_LAYER0 = {
    # layer 0 of DeepSeek-V4-Flash's shard 2 header, as quoted in the public audit note
    "layers.0.attn.attn_sink": ("F32", [64]),
    "layers.0.attn.q_norm.weight": ("BF16", [1024]),
    "layers.0.attn.kv_norm.weight": ("BF16", [512]),
    "layers.0.attn.wq_a.weight": ("F8_E4M3", [1024, 4096]),
    "layers.0.attn.wq_a.scale": ("F8_E8M0", [8, 32]),
    "layers.0.attn.wq_b.weight": ("F8_E4M3", [32768, 1024]),
    "layers.0.attn.wkv.weight": ("F8_E4M3", [512, 4096]),
    "layers.0.attn.wo_a.weight": ("F8_E4M3", [8192, 4096]),
    "layers.0.attn.wo_a.scale": ("F8_E8M0", [64, 32]),
    "layers.0.attn.wo_b.weight": ("F8_E4M3", [4096, 8192]),
    "layers.0.ffn.gate.weight": ("BF16", [256, 4096]),
    "layers.0.ffn.gate.tid2eid": ("I64", [129280, 6]),
    "layers.0.hc_attn_scale": ("F32", [3]),
    "layers.0.hc_attn_base": ("F32", [24]),
    "layers.0.hc_attn_fn": ("F32", [24, 16384]),
    "layers.0.ffn.experts.0.w1.weight": ("I8", [2048, 2048]),
    "layers.0.ffn.experts.0.w1.scale": ("F8_E8M0", [2048, 128]),
    "layers.0.ffn.shared_experts.w1.weight": ("F8_E4M3", [2048, 4096]),
    "layers.0.ffn.shared_experts.w1.scale": ("F8_E8M0", [16, 32]),
}


def test_flash_header_layer0_and_families(flash):
    table = checkpoint_table(flash.inventory)
    for name, want in FLASH_HEADER_LAYER0.items():
        assert table[name] == want, name

    def count(suffix: str) -> int:
        return sum(1 for n in table if n.endswith(suffix) and n.startswith("layers."))

    # the audit note's tensor-family counts from the weight_map
    assert count("attn.compressor.wkv.weight") == 41
    assert count("attn.indexer.wq_b.weight") == 21
    assert count("ffn.gate.bias") == 40 and count("ffn.gate.tid2eid") == 3
    assert sum(1 for n in table if n.startswith("layers.") and ".ffn.experts." in n and n.endswith("w1.weight")) == (
        43 * 256
    )


def test_spec_layer_kinds(flash, pro):
    f, p = flash.spec.dsv4, pro.spec.dsv4
    assert (f.n_csa, f.n_hca, f.n_swa) == (21, 20, 2)
    assert (p.n_csa, p.n_hca, p.n_swa) == (30, 31, 0)
    assert f.mtp_compress_ratios == (0,) and p.mtp_compress_ratios == (0,)
    assert flash.spec.mla.cache_values_per_token == 512  # one shared K=V head of head_dim values
    assert flash.spec.n_mla == 43 and pro.spec.n_moe == 61


def test_bad_compress_ratios_one_line_error(tmp_path):
    import json

    from k3plan.errors import K3PlanError
    from k3plan.models.loader import BUNDLED_DIR

    raw = json.loads((BUNDLED_DIR / "deepseek-v4-flash" / "config.json").read_text())
    raw["compress_ratios"] = raw["compress_ratios"][:10]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(K3PlanError, match="compress_ratios lists 10 layers"):
        load_model(str(tmp_path))
