"""The inventory expands to the checkpoint's own tensor names, dtypes and shapes (k3-facts.md §2)."""

from __future__ import annotations

import re

import pytest

from k3plan.models import load_model


@pytest.fixture(scope="module")
def k3_ckpt():
    inv = load_model("kimi-k3").inventory
    return {name: (dtype, shape) for t in inv.tensors for name, dtype, shape in t.checkpoint_tensors()}


def test_k3_expands_to_named_tensors(k3_ckpt):
    L = "language_model.model.layers."
    assert k3_ckpt[f"{L}0.self_attn.A_log"] == ("F32", (128,))
    assert k3_ckpt[f"{L}0.self_attn.dt_bias"] == ("F32", (12288,))
    assert k3_ckpt[f"{L}0.self_attn.q_conv1d.weight"] == ("F32", (12288, 1, 4))
    assert k3_ckpt[f"{L}0.self_attn.q_proj.weight"] == ("BF16", (12288, 7168))
    assert k3_ckpt[f"{L}1.block_sparse_moe.experts.895.w2.weight_packed"] == ("U8", (3584, 1536))
    assert k3_ckpt[f"{L}1.block_sparse_moe.experts.895.w2.weight_scale"] == ("U8", (3584, 96))
    assert k3_ckpt[f"{L}92.block_sparse_moe.experts.0.w1.weight_packed"] == ("U8", (3072, 1792))
    assert k3_ckpt[f"{L}92.block_sparse_moe.experts.0.w3.weight_scale"] == ("U8", (3072, 112))
    assert f"{L}1.block_sparse_moe.experts.896.w1.weight_packed" not in k3_ckpt
    assert f"{L}0.block_sparse_moe.gate.weight" not in k3_ckpt  # layer 0 (1-indexed 1) is dense
    for g in (
        "language_model.model.embed_tokens.weight",
        "language_model.lm_head.weight",
        "language_model.model.norm.weight",
        "language_model.model.output_attn_res_norm.weight",
        "language_model.model.output_attn_res_proj.weight",
    ):
        assert g in k3_ckpt


def test_k3_checkpoint_tensor_count(k3_ckpt):
    per_layer = 6  # norms + AttnRes
    kda, mla = 14, 8  # KDA: q,k,v proj + 3 conv + f_a, f_b, A_log, dt_bias, b, g, o_norm, o
    moe = 8 + 896 * 3 * 2  # gate, bias, 2 latent proj, latent norm, 3 shared + experts packed/scale
    dense = 3
    text = 93 * per_layer + 69 * kda + 24 * mla + 92 * moe + dense + 5
    assert len(k3_ckpt) == text + 165 + 3


def test_k3_per_layer_names_follow_the_mixer_pattern(k3_ckpt):
    pat = re.compile(r"language_model\.model\.layers\.(\d+)\.self_attn\.(\w+)")
    found: dict[int, set[str]] = {}
    for name in k3_ckpt:
        m = pat.match(name)
        if m:
            found.setdefault(int(m.group(1)), set()).add(m.group(2))
    for i, names in found.items():
        assert ("A_log" in names) == ((i + 1) % 4 != 0 and i != 92), i
        assert ("kv_b_proj" in names) == ("A_log" not in names), i


def test_every_expert_entry_expands_to_all_experts():
    inv = load_model("deepseek-v3").inventory
    t = inv.get("model.layers.3.mlp.experts.{e}.down_proj.weight")
    names = [n for n, _, _ in t.checkpoint_tensors()]
    assert len(names) == 256 * 2  # weight + weight_scale_inv per expert
    assert names[0] == "model.layers.3.mlp.experts.0.down_proj.weight"
    assert names[-1] == "model.layers.3.mlp.experts.255.down_proj.weight_scale_inv"
    dtypes = {n: (d, s) for n, d, s in t.checkpoint_tensors()}
    assert dtypes["model.layers.3.mlp.experts.7.down_proj.weight"] == ("F8_E4M3", (7168, 2048))
    assert dtypes["model.layers.3.mlp.experts.7.down_proj.weight_scale_inv"] == ("F32", (56, 16))
