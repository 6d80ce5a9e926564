"""`k3plan census` of a tiny DeepSeek-V4 checkpoint laid out as the real ones are: the inventory's names,
dtypes (F8_E4M3 + F8_E8M0 scales, I8-packed FP4 experts, I64 tid2eid) and shapes round-trip."""

from __future__ import annotations

import json

from k3plan.models import load_model

TINY_V4 = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 192,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 128,
    "o_groups": 2,
    "o_lora_rank": 64,
    "index_n_heads": 4,
    "index_head_dim": 128,
    "index_topk": 8,
    "sliding_window": 16,
    "compress_ratios": [0, 4, 128, 4, 0],
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "num_hash_layers": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "num_nextn_predict_layers": 1,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "expert_dtype": "fp4",
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "scale_fmt": "ue8m0",
        "weight_block_size": [128, 128],
    },
}


def test_tiny_v4_checkpoint_censuses_clean(cli, tmp_path, write_st):
    folder = tmp_path / "tiny-v4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_V4))
    inv = load_model(str(folder / "config.json")).inventory
    tensors = {n: (d, tuple(s)) for t in inv.tensors for n, d, s in t.checkpoint_tensors()}
    assert "layers.0.ffn.gate.tid2eid" in tensors and "layers.1.attn.indexer.wq_b.scale" in tensors
    write_st(folder / "model-00001-of-00001.safetensors", tensors)
    weight_map = {n: "model-00001-of-00001.safetensors" for n in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    r = cli("census", folder, "--json")
    assert r.exit_code == 0, r.output
    comp = json.loads(r.stdout)["comparison"]
    assert comp["ok"] and comp["matched"] == len(tensors)
    assert comp["missing_count"] == comp["extra_count"] == comp["shape_mismatch_count"] == 0
