"""Golden numbers from k3-facts.md §1-§2 and the published model cards: exact where published exactly."""

from __future__ import annotations

import math

import pytest

from k3plan.models import load_model
from k3plan.models.formats import get_format

K3 = "kimi-k3"


@pytest.fixture(scope="module")
def k3():
    return load_model(K3)


def test_k3_totals_exact(k3):
    inv = k3.inventory
    assert inv.total_params == 2_779_484_478_208
    assert inv.active_params == 104_189_614_848
    assert inv.vision_params == 447_358_976
    assert inv.mtp_params == 0


def test_k3_active_is_all_but_embedding_and_unused_experts(k3):
    inv = k3.inventory
    embed = inv.get("language_model.model.embed_tokens.weight").params
    experts = sum(t.params for t in inv.text if t.role == "expert")
    unused = experts * (896 - 16) // 896
    assert inv.active_params == inv.total_params - embed - unused


def test_k3_routed_experts_exact(k3):
    experts = [t for t in k3.inventory.text if t.role == "expert"]
    assert sum(t.params for t in experts) == 2_722_740_830_208
    assert {t.fmt for t in experts} == {"mxfp4"}


def test_k3_layer_counts(k3):
    assert (k3.spec.n_kda, k3.spec.n_mla, k3.spec.n_moe, k3.spec.num_layers) == (69, 24, 92, 93)
    # 1-indexed full_attn_layers 4, 8, ..., 92, 93 -> 0-indexed 3, 7, ..., 91, 92
    assert [i for i, m in enumerate(k3.spec.mixers) if m == "mla"] == list(range(3, 92, 4)) + [92]
    assert k3.spec.mlps[0] == "dense" and set(k3.spec.mlps[1:]) == {"moe"}


def _attn(inv, layer):
    return sum(t.params for t in inv.tensors if t.layer == layer and t.role == "attn")


def test_k3_mixer_params_per_layer(k3):
    inv, spec = k3.inventory, k3.spec
    for i, mixer in enumerate(spec.mixers):
        assert _attn(inv, i) == {"kda": 443_740_416, "mla": 232_196_096}[mixer], i


def test_k3_norm_params_per_layer(k3):
    inv = k3.inventory
    for i in range(93):
        norms = [t for t in inv.tensors if t.layer == i and t.role == "norm"]
        assert sum(t.params for t in norms) == 43_008
        assert len(norms) == 6


def test_k3_one_expert_params_and_bytes(k3):
    inv = k3.inventory
    pre = "language_model.model.layers.1.block_sparse_moe.experts.{e}."
    ws = [inv.get(f"{pre}w{k}.weight") for k in (1, 2, 3)]
    assert [w.shape for w in ws] == [(896, 3072, 3584), (896, 3584, 3072), (896, 3072, 3584)]
    assert sum(w.params for w in ws) // 896 == 33_030_144
    assert sum(w.nbytes for w in ws) // 896 == 17_547_264
    assert sum(w.nbytes for w in ws) == 896 * 17_547_264  # no rounding hidden in the division
    assert 17_547_264 / 33_030_144 == 0.53125


def test_k3_experts_are_one_entry_per_layer_with_expert_axis(k3):
    inv = k3.inventory
    experts = [t for t in inv.tensors if t.role == "expert"]
    assert len(experts) == 92 * 3  # w1, w2, w3 per MoE layer, never one object per expert
    for t in experts:
        assert t.axes[0] == "expert" and t.shape[0] == 896 and t.n_experts == 896
        assert "{e}" in t.name
        assert t.active == pytest.approx(16 / 896)
    assert len(inv.tensors) < 3000


def test_k3_only_routed_experts_quantized(k3):
    fmts = {t.fmt for t in k3.inventory.text if t.role != "expert"}
    assert "mxfp4" not in fmts and fmts <= {"bf16", "f32"}
    for name in (
        "language_model.model.layers.1.block_sparse_moe.gate.weight",
        "language_model.model.layers.1.block_sparse_moe.routed_expert_down_proj.weight",
        "language_model.model.layers.1.block_sparse_moe.routed_expert_up_proj.weight",
    ):
        assert k3.inventory.get(name).fmt == "bf16"


def test_k3_notes_name_the_quantization_trap(k3):
    notes = " ".join(k3.notes).lower()
    assert "quantiz" in notes and "bf16" in notes and "checkpoint" in notes
    assert "router" in notes and "latent_proj" in notes


def test_k3_shapes_from_facts(k3):
    inv = k3.inventory
    L = "language_model.model.layers."
    expect = {
        f"{L}0.self_attn.q_proj.weight": (12288, 7168),
        f"{L}0.self_attn.q_conv1d.weight": (12288, 1, 4),
        f"{L}0.self_attn.f_a_proj.weight": (128, 7168),
        f"{L}0.self_attn.f_b_proj.weight": (12288, 128),
        f"{L}0.self_attn.A_log": (128,),
        f"{L}0.self_attn.dt_bias": (12288,),
        f"{L}0.self_attn.b_proj.weight": (96, 7168),
        f"{L}0.self_attn.g_proj.weight": (12288, 7168),
        f"{L}0.self_attn.o_norm.weight": (128,),
        f"{L}0.self_attn.o_proj.weight": (7168, 12288),
        f"{L}0.mlp.gate_proj.weight": (33792, 7168),
        f"{L}0.mlp.down_proj.weight": (7168, 33792),
        f"{L}3.self_attn.q_a_proj.weight": (1536, 7168),
        f"{L}3.self_attn.q_b_proj.weight": (18432, 1536),
        f"{L}3.self_attn.kv_a_proj_with_mqa.weight": (576, 7168),
        f"{L}3.self_attn.kv_a_layernorm.weight": (512,),
        f"{L}3.self_attn.kv_b_proj.weight": (24576, 512),
        f"{L}3.self_attn.g_proj.weight": (12288, 7168),
        f"{L}3.self_attn.o_proj.weight": (7168, 12288),
        f"{L}3.self_attention_res_proj.weight": (1, 7168),
        f"{L}1.block_sparse_moe.gate.weight": (896, 7168),
        f"{L}1.block_sparse_moe.gate.e_score_correction_bias": (896,),
        f"{L}1.block_sparse_moe.routed_expert_down_proj.weight": (3584, 7168),
        f"{L}1.block_sparse_moe.routed_expert_up_proj.weight": (7168, 3584),
        f"{L}1.block_sparse_moe.routed_expert_norm.weight": (3584,),
        f"{L}1.block_sparse_moe.shared_experts.gate_proj.weight": (6144, 7168),
        f"{L}1.block_sparse_moe.shared_experts.down_proj.weight": (7168, 6144),
        "language_model.model.embed_tokens.weight": (163840, 7168),
        "language_model.lm_head.weight": (163840, 7168),
    }
    for name, shape in expect.items():
        assert inv.get(name).shape == shape, name


def test_k3_logical_axes_split_heads(k3):
    inv = k3.inventory
    q = inv.get("language_model.model.layers.0.self_attn.q_proj.weight")
    assert q.axes == ("heads", "head_dim", "embed") and q.logical_shape == (96, 128, 7168)
    w1 = inv.get("language_model.model.layers.1.block_sparse_moe.experts.{e}.w1.weight")
    assert w1.axes == ("expert", "mlp", "latent")
    kv = inv.get("language_model.model.layers.3.self_attn.kv_b_proj.weight")
    assert kv.axes == ("heads", "head_dim", "kv_lora") and kv.logical_shape == (96, 256, 512)
    conv = inv.get("language_model.model.layers.0.self_attn.k_conv1d.weight")
    assert "conv" in conv.axes
    assert inv.get("language_model.model.embed_tokens.weight").axes == ("vocab", "embed")


def test_k3_kinds_and_layers(k3):
    inv = k3.inventory
    assert {t.kind for t in inv.tensors} == {"kda", "mla", "dense", "moe", "global", "vision"}
    assert all(t.layer is None for t in inv.tensors if t.kind in ("global", "vision"))
    assert all(t.layer is not None for t in inv.tensors if t.kind in ("kda", "mla", "dense", "moe"))


def test_k3_vision_tensor_count(k3):
    vision = [n for t in k3.inventory.of_kind("vision") for n, _, _ in t.checkpoint_tensors()]
    assert sum(n.startswith("vision_tower.") for n in vision) == 165
    assert sum(n.startswith("mm_projector.") for n in vision) == 3
    assert all(t.fmt == "bf16" for t in k3.inventory.of_kind("vision"))


# --- companion models --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,total,tol_t,active,tol_a",
    [
        ("deepseek-v3", 671.03e9, 0.01e9, 36.63e9, 0.05e9),
        ("kimi-k2", 1026.41e9, 0.01e9, 31.69e9, 0.01e9),
    ],
)
def test_deepseek_family_totals(name, total, tol_t, active, tol_a):
    inv = load_model(name).inventory
    assert abs(inv.total_params - total) <= tol_t
    assert abs(inv.active_params - active) <= tol_a


def test_deepseek_v3_mtp_separate():
    m = load_model("deepseek-v3")
    assert m.spec.mtp_layers == 1
    assert m.inventory.mtp_params > 0
    assert all(t.kind == "mtp" for t in m.inventory.tensors if t.layer == 61)
    assert any("MTP" in n for n in m.notes)


def test_kimi_linear_48b_total():
    m = load_model("kimi-linear-48b-a3b")
    assert abs(m.inventory.total_params - 49.12e9) <= 0.01e9
    assert m.inventory.vision_params == 0
    inv = m.inventory
    # low-rank output gate, plain q_proj (q_lora_rank null), no AttnRes, no latent MoE
    assert inv.get("model.layers.0.self_attn.g_a_proj.weight").shape == (128, 2304)
    assert inv.get("model.layers.3.self_attn.q_proj.weight").shape == (32 * 192, 2304)
    names = {t.name for t in inv.tensors}
    assert not any("attn_res" in n or "res_proj" in n or "routed_expert_" in n for n in names)


def test_fp8_bytes_include_block_scales():
    inv = load_model("deepseek-v3").inventory
    # computed independently: e4m3 is 1 B a param, one f32 scale per [128, 128] block (ceil)
    cases = {
        "model.layers.0.self_attn.q_a_proj.weight": (1536, 7168, 12 * 56),
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": (576, 7168, 5 * 56),  # 576/128 = 4.5 -> 5
        "model.layers.0.mlp.down_proj.weight": (7168, 18432, 56 * 144),
    }
    for name, (out, inp, blocks) in cases.items():
        t = inv.get(name)
        assert t.fmt == "fp8_block" and t.shape == (out, inp)
        assert t.nbytes == out * inp + 4 * blocks, name
        parts = {n: (d, s) for n, d, s in t.checkpoint_tensors()}
        assert parts[name + "_scale_inv"] == ("F32", (math.ceil(out / 128), math.ceil(inp / 128)))
    experts = inv.get("model.layers.3.mlp.experts.{e}.gate_proj.weight")
    assert experts.shape == (256, 2048, 7168)
    assert experts.nbytes == 256 * (2048 * 7168 + 4 * 16 * 56)
    # the router and the norms stay BF16 / F32
    assert inv.get("model.layers.3.mlp.gate.weight").fmt == "bf16"
    assert inv.checkpoint_bytes > inv.total_params  # scales + 2 B embeddings on top of 1 B params


def test_mxfp4_format_bytes():
    fmt = get_format("mxfp4")
    assert fmt.nbytes((3072, 3584)) == 3072 * 3584 // 2 + 3072 * 3584 // 32
    assert fmt.nbytes((896, 3072, 3584)) == 896 * fmt.nbytes((3072, 3584))
