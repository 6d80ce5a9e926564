"""Property tests: for random small configs of both families, the parts sum to the totals."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3plan.models.families import family_for
from k3plan.models.formats import get_format
from k3plan.models.inventory import TensorInventory

ITEMSIZE = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
m32 = st.integers(1, 8).map(lambda k: 32 * k)  # dims mxfp4 can pack (input dim % 32 == 0)


def build(raw: dict) -> tuple[TensorInventory, object]:
    family = family_for(raw)
    assert family is not None
    spec = family.parse(raw, name="prop", source="<hypothesis>")
    inv, _ = family.inventory(spec, raw)
    return inv, spec


@st.composite
def kimi_linear_configs(draw) -> dict:
    n = draw(st.integers(1, 6))
    mla = draw(st.sets(st.integers(1, n), max_size=n))
    latent = draw(st.none() | m32)
    text = {
        "num_hidden_layers": n,
        "hidden_size": draw(m32),
        "vocab_size": draw(st.integers(1, 2048)),
        "intermediate_size": draw(st.integers(1, 512)),
        "first_k_dense_replace": draw(st.integers(0, n)),
        "num_attention_heads": draw(st.integers(1, 4)),
        "q_lora_rank": draw(st.none() | st.integers(1, 96)),
        "kv_lora_rank": draw(st.integers(1, 96)),
        "qk_nope_head_dim": draw(st.integers(1, 48)),
        "qk_rope_head_dim": draw(st.integers(1, 32)),
        "v_head_dim": draw(st.integers(1, 48)),
        "mla_use_output_gate": draw(st.booleans()),
        "num_experts": (E := draw(st.integers(1, 8))),
        "num_experts_per_token": draw(st.integers(1, E)),
        "moe_intermediate_size": draw(m32),
        "num_shared_experts": draw(st.integers(0, 2)),
        "linear_attn_config": {
            "kda_layers": sorted(set(range(1, n + 1)) - mla),
            "full_attn_layers": sorted(mla),
            "num_heads": draw(st.integers(1, 4)),
            "head_dim": draw(st.integers(1, 64)),
            "short_conv_kernel_size": draw(st.integers(1, 4)),
            "use_full_rank_gate": draw(st.booleans()),
        },
    }
    if latent:
        text["routed_expert_hidden_size"] = latent
        text["latent_moe_use_norm"] = draw(st.booleans())
    if draw(st.booleans()):
        text["attn_res_block_size"] = 12
    if draw(st.booleans()):
        text["quantization_config"] = {
            "quant_method": "compressed-tensors",
            "format": "mxfp4-pack-quantized",
            "ignore": ["re:.*self_attn.*"],
        }
    if draw(st.booleans()):  # K3 layout: text model under text_config, optional vision tower
        raw = {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text}
        if draw(st.booleans()):
            raw["vision_config"] = {
                "patch_size": 14,
                "vt_hidden_size": 1024,
                "vt_num_hidden_layers": draw(st.integers(1, 3)),
            }
        return raw
    return {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", **text}


@st.composite
def deepseek_v3_configs(draw) -> dict:
    n = draw(st.integers(1, 5))
    E = draw(st.integers(1, 16))
    raw = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": n,
        "first_k_dense_replace": draw(st.integers(0, n)),
        "hidden_size": draw(st.integers(1, 400)),
        "vocab_size": draw(st.integers(1, 2048)),
        "intermediate_size": draw(st.integers(1, 600)),
        "num_attention_heads": draw(st.integers(1, 4)),
        "q_lora_rank": draw(st.none() | st.integers(1, 200)),
        "kv_lora_rank": draw(st.integers(1, 200)),
        "qk_nope_head_dim": draw(st.integers(1, 64)),
        "qk_rope_head_dim": draw(st.integers(1, 64)),
        "v_head_dim": draw(st.integers(1, 64)),
        "n_routed_experts": E,
        "num_experts_per_tok": draw(st.integers(1, E)),
        "n_shared_experts": draw(st.integers(0, 2)),
        "moe_intermediate_size": draw(st.integers(1, 300)),
        "num_nextn_predict_layers": draw(st.integers(0, 1)),
    }
    if draw(st.booleans()):
        raw["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    return raw


def check_invariants(inv: TensorInventory, spec) -> None:
    total = inv.total_params
    for key in ("role", "kind", "fmt"):
        rows = inv.breakdown(key)
        assert sum(r["params"] for r in rows.values()) == total
        assert sum(r["bytes"] for r in rows.values()) == inv.checkpoint_bytes
        assert sum(r["tensors"] for r in rows.values()) == len(inv.text)
        everything = inv.breakdown(key, include_extra=True)
        assert sum(r["params"] for r in everything.values()) == total + inv.vision_params + inv.mtp_params
    assert 0 < inv.active_params <= total
    # the embedding table is never active, so active < total whenever there is one
    assert inv.active_params < total
    # storage bytes computed independently from the checkpoint tensors each entry expands to
    for t in inv.tensors:
        parts = list(t.checkpoint_tensors())
        assert sum(ITEMSIZE[d] * math.prod(s) for _, d, s in parts) == t.nbytes, t.name
        stacked = t.shape[0] if "{e}" in t.name else 1
        assert len(parts) == stacked * len(get_format(t.fmt).parts)
    assert spec.n_kda + spec.n_mla == spec.num_layers
    experts = [t for t in inv.text if t.role == "expert"]
    assert len(experts) == 3 * spec.n_moe  # one entry per weight per MoE layer
    names = [t.name for t in inv.tensors]
    assert len(names) == len(set(names))


@SETTINGS
@given(kimi_linear_configs())
def test_kimi_linear_parts_sum_to_totals(raw):
    inv, spec = build(raw)
    check_invariants(inv, spec)
    assert spec.family == "kimi_linear"
    q = raw.get("text_config", raw).get("quantization_config")
    assert {t.fmt for t in inv.text if t.role == "expert"} <= ({"mxfp4"} if q else {"bf16"})
    assert all(t.fmt in ("bf16", "f32") for t in inv.text if t.role != "expert")


@SETTINGS
@given(deepseek_v3_configs())
def test_deepseek_v3_parts_sum_to_totals(raw):
    inv, spec = build(raw)
    check_invariants(inv, spec)
    assert (inv.mtp_params > 0) == (raw["num_nextn_predict_layers"] > 0)
    if "quantization_config" in raw:
        for t in inv.text:
            if t.fmt == "fp8_block":
                out, inp = t.shape[-2:]
                lead = math.prod(t.shape[:-2])
                assert t.nbytes == t.params + 4 * lead * math.ceil(out / 128) * math.ceil(inp / 128)


def test_checked_tensor_equals_a_validated_one():
    """Tensor.checked (what families use) builds the same object as Tensor(...), and both refuse what the
    checks refuse (a msgspec Struct: its __post_init__ checks every construction)."""
    import pytest

    from k3plan.models.inventory import Tensor
    from k3plan.structs import dump, fields, replace

    kw = dict(
        name="w",
        shape=(8, 6),
        logical_shape=(8, 2, 3),
        axes=("embed", "heads", "head_dim"),
        fmt="bf16",
        kind="mla",
        role="attn",
        layer=3,
        active=0.25,
    )
    fast, slow = Tensor.checked(**kw), Tensor(**kw)
    assert fast == slow and hash(fast) == hash(slow)
    assert dump(fast) == dump(slow) and list(dump(fast)) == list(fields(Tensor)) == list(kw)[:5] + [
        "layer",
        "kind",
        "role",
        "active",
    ]
    assert replace(fast, layer=4).layer == 4 and fast.nbytes == 2 * 48
    assert type(Tensor.checked(**{**kw, "active": 1}).active) is float
    with pytest.raises(Exception):
        fast.name = "x"  # frozen
    for bad in (
        {"logical_shape": (8, 7)},
        {"shape": (8, 0), "logical_shape": (8, 0), "axes": ("a", "b")},
        {"axes": ("embed",)},
        {"kind": "nope"},
        {"role": "nope"},
        {"active": 1.5},
    ):
        with pytest.raises(ValueError):
            Tensor.checked(**{**kw, **bad})
        with pytest.raises(ValueError):
            Tensor(**{**kw, **bad})
