"""`k3plan census` of a tiny DeepSeek-V4.1 checkpoint laid out as the real one is (nested text_config /
vision_config, [32, 32] fp8 blocks, I8-packed FP4 experts, Engram tables with row scales, DSpark blocks, the
ViT): the inventory's names, dtypes and shapes round-trip, Engram and DSpark included."""

from __future__ import annotations

import json

from k3plan.models import load_model

TINY_V41 = {
    "architectures": ["DeepseekV41ForCausalLM"],
    "model_type": "deepseek_v41",
    "quantization_config": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [32, 32],
        "scale_fmt": "ue8m0",
        "expert_dtype": "fp4",
    },
    "text_config": {
        "vocab_size": 512,
        "hidden_size": 128,
        "moe_intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 96,
        "qk_rope_head_dim": 32,
        "q_lora_rank": 64,
        "o_lora_rank": 32,
        "o_groups": 2,
        "max_position_embeddings": 4096,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "sliding_window": 16,
        "compress_ratios": [0, 2, 1, 1, 0],
        "kv_source_layer_ids": [1, 2],
        "index_source_layer_ids": [1, 2, 3],
        "index_n_heads": 2,
        "index_head_dim": 32,
        "index_topk": 8,
        "candidate_source_layer_id": 2,
        "candidate_topk_blocks": 4,
        "candidate_block_size": 2,
        "hc_mult": 2,
        "hc_sinkhorn_iters": 4,
        "engram_layer_ids": [1],
        "engram_num_embeddings": [1000],
        "engram_max_ngram_size": 3,
        "engram_vocab_size": 512,
        "engram_n_heads": 2,
        "engram_head_dim": 64,
        "engram_pad_token_id": 2,
        "engram_compressed_vocab_size": 400,
        "num_nextn_predict_layers": 1,
        "dspark_block_size": 3,
        "dspark_target_layer_ids": [1, 2, 3],
        "dspark_markov_rank": 16,
        "dspark_n_routed_experts": 4,
        "dspark_num_experts_per_tok": 2,
    },
    "vision_config": {
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "intermediate_size": 96,
        "patch_size": 2,
        "downsample_ratio": 2,
    },
}


def test_tiny_v41_checkpoint_censuses_clean(cli, tmp_path, write_st):
    folder = tmp_path / "tiny-v41"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_V41))
    inv = load_model(str(folder / "config.json")).inventory
    tensors = {n: (d, tuple(s)) for t in inv.tensors for n, d, s in t.checkpoint_tensors()}
    assert tensors["layers.1.engram.embed.weight"] == ("F8_E4M3", (1000, 64))
    assert tensors["layers.1.engram.embed.scale"] == ("F8_E8M0", (1000, 2))
    assert tensors["layers.1.attn.wq_b.scale"] == ("F8_E8M0", (12, 2))  # [32, 32] blocks of [4 x 96, 64]
    assert "mtp.0.markov_head.embed.weight" in tensors and "vision.blocks.1.mlp.w1.weight" in tensors
    write_st(folder / "model-00001-of-00001.safetensors", tensors)
    weight_map = {n: "model-00001-of-00001.safetensors" for n in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    r = cli("census", folder, "--json")
    assert r.exit_code == 0, r.output
    comp = json.loads(r.stdout)["comparison"]
    assert comp["ok"] and comp["matched"] == len(tensors)
    assert comp["missing_count"] == comp["extra_count"] == comp["shape_mismatch_count"] == 0
