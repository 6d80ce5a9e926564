"""Absorbed MLA decode runs on W_UK / W_UV, which the engine splits out of each MLA layer's kv_b_proj at load and
holds BESIDE kv_b_proj (prefill's MHA path keeps calling it): Stack.absorbed_copies. vLLM's W_UK_T / W_UV are
views of get_and_maybe_dequant_weights(kv_b_proj, bf16) (mla_attention.py MLACommonBaseImpl
.process_weights_after_loading): a new bf16 tensor for DeepSeek-V3's block-fp8 kv_b_proj, kv_b_proj's own weight
for K3's bf16 one. SGLang always makes .contiguous() copies (deepseek_v2.py / kimi_k3.py post_load_weights).
k3plan counted kv_b_proj once, and decode read it in its checkpoint format (fp8: 1 B an element)."""

from __future__ import annotations

import numpy as np
import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import load_stack
from k3plan.models import load_model
from k3plan.setup import make_setup
from k3plan.speed.stage import decode_op_costs, prefill_op_costs
from k3plan.step.weights import mesh_weights, stage_classes

# DeepSeek-V3: 61 MLA layers, kv_b_proj [128 heads x (128 nope + 128 v), kv_lora 512] = 16,777,216 params,
# TP 8 by heads: 2,097,152 a GPU; bf16 copies 2 B each
DSV3_COPIES_TP8 = 61 * (128 * 256 * 512 // 8) * 2  # 255,852,544 B (0.238 GiB)
# the block-fp8 kv_b_proj a GPU: 1 B an element + an f32 scale a 128 x 128 block (32768/128/8 x 512/128 blocks)
DSV3_KV_B_FP8_TP8 = 128 * 256 * 512 // 8 + 4 * (32768 // 128 // 8) * (512 // 128)  # 2,097,664 B
# Kimi K3: 24 MLA layers, kv_b_proj [96 heads x 256, 512] bf16 = 12,582,912 params, TP 16
K3_COPIES_TP16 = 24 * (96 * 256 * 512 // 16) * 2  # 37,748,736 B


def _copies(r) -> int:
    return next((x.bytes for x in r.weights_by_role if x.role == "mla_absorbed"), 0)


def test_deepseek_v3_h200_tp8_vllm_holds_bf16_copies_beside_fp8_kv_b():
    s = make_setup(model="deepseek-v3", hardware="nvidia-h200", topology="8", tp=8, stack="vllm")
    r = fit(s, Workload(context_tokens=131072, batch=1))
    assert _copies(r) == DSV3_COPIES_TP8 == 255_852_544
    assert r.per_device.weights_bytes == 85_140_130_848 + DSV3_COPIES_TP8  # was 85,140,130,848 (79.29 GiB)
    assert any("absorbed MLA" in n and "90b0a26e" in n for n in r.notes)
    # decode reads the bf16 copies (2 B an element), prefill's MHA path the fp8 kv_b_proj
    dec = next(c for c in decode_op_costs(s, batch=1, context=4096) if c.name == "mla.self_attn.kv_b_proj")
    pre = next(c for c in prefill_op_costs(s, chunk=8192, context=8192) if c.name == "mla.self_attn.kv_b_proj")
    assert dec.bytes == (128 * 256 * 512 // 8) * 2 == 4_194_304  # was 2,097,664 (the fp8 bytes)
    assert pre.bytes == DSV3_KV_B_FP8_TP8 == 2_097_664
    # plan's columns hold the same bytes at that mesh (step.weights.mesh_weights: the one weight_terms)
    m = load_model("deepseek-v3")
    mw = mesh_weights(classes=stage_classes(m.inventory), stack=s.stack, tp=np.array([8]), dp=np.array([1]),
                      ep_all=np.array([True]), family=m.spec.family)  # fmt: skip
    assert int(mw.weights_bytes[0]) == r.per_device.weights_bytes


def test_deepseek_v3_sglang_copies_are_bf16_too():
    s = make_setup(model="deepseek-v3", hardware="nvidia-h200", topology="8", tp=8, stack="sglang")
    assert s.weights.role_bytes("mla_absorbed") == DSV3_COPIES_TP8


def test_kimi_k3_b200_vllm_views_add_nothing_sglang_doubles_kv_b():
    w = Workload(context_tokens=131072, batch=1)
    v = make_setup(model="kimi-k3", hardware="nvidia-b200", topology="2x8", tp=16, stack="vllm")
    rv = fit(v, w)
    # K3's kv_b_proj is bf16: vLLM's W_UK_T / W_UV are views of its weight (weight.to(bf16) is the weight)
    assert _copies(rv) == 0 and rv.per_device.weights_bytes == 108_277_399_552  # unchanged
    g = make_setup(model="kimi-k3", hardware="nvidia-b200", topology="2x8", tp=16, stack="sglang")
    rg = fit(g, w)
    kv_b = 24 * (96 * 256 * 512 // 16) * 2  # the bf16 kv_b_proj a GPU: the copies hold as much again
    assert _copies(rg) == K3_COPIES_TP16 == kv_b == 37_748_736
    assert rg.per_device.weights_bytes == 131_068_198_912 + K3_COPIES_TP16  # was 131,068,198,912
    dec = next(c for c in decode_op_costs(g, batch=1, context=4096) if c.name == "mla.self_attn.kv_b_proj")
    assert dec.bytes == kv_b // 24  # the copies are bf16 like kv_b_proj: decode reads as many bytes


def test_tpu_stacks_hold_one_or_the_other():
    # tpu-inference deletes kv_b_proj's params once k_up / v_up (or W_UK_T / W_UV) are made
    # (dp-attention runs on TPU as tpu-inference and on GPUs as SGLang; k3plan's weight columns are a stack's,
    # not a machine's, so it declares no copies: SGLang --enable-dp-attention's are not counted, an open item)
    for name in ("vllm-tpu", "jax-native", "dp-attention"):
        assert load_stack(name).absorbed_copies is None


def test_copies_need_the_role_dtype():
    import msgspec

    from k3plan.engines.stack import AbsorbedCopies, Source, Stack
    from k3plan.structs import dump

    st = load_stack("vllm")
    data = dump(st, mode="python")
    data["compute_dtype"]["roles"] = {}
    with pytest.raises(ValueError, match="absorbed_copies: declare compute_dtype.roles.mla_absorbed"):
        msgspec.convert(data, Stack)
    assert isinstance(st.absorbed_copies, AbsorbedCopies) and isinstance(st.absorbed_copies.sources[0], Source)


def test_tpu_inference_vllm_code_holds_fp8_copies_in_kv_b_projs_place():
    """tpu-inference's VllmMLAAttention.process_weights_after_loading (@56b1e079) quantizes W_UK_T [N, P, L] and W_UV
    [N, L, V] to the fp8 KV cache's dtype with one float32 scale a (head, latent) and a (head, v) (quantize_tensor
    axis=1) and deletes kv_b_proj: Kimi-K2.6 under DP attention (whole on each device), 8,224,768 B a layer less than
    kv_b_proj's bf16, 0.467 GiB a device over 61 layers. With --kv-cache-dtype auto the quantization is not read: kv_b_proj
    as loaded."""
    base = dict(model="kimi-k2.6", hardware="tpu-v7x", topology="2x2x1", tp=1, dp=8)
    s = make_setup(**base, stack="tpu-inference:model_impl=vllm", kv_dtype="fp8")
    r = fit(s, Workload(context_tokens=8192, batch=1))
    fp8_copies = 64 * 256 * 512 + 4 * 64 * (512 + 128)  # 8,388,608 fp8 values + 163,840 B of scales
    assert _copies(r) == 61 * fp8_copies
    held_bf16 = 64 * 256 * 512 * 2  # kv_b_proj as loaded
    assert held_bf16 - fp8_copies == 8_224_768
    plain = make_setup(**base, stack="tpu-inference:model_impl=vllm", kv_dtype="bf16")
    rp = fit(plain, Workload(context_tokens=8192, batch=1))
    assert _copies(rp) == 0
    assert rp.per_device.weights_bytes - r.per_device.weights_bytes == 61 * 8_224_768
    assert any("deletes kv_b_proj" in n for n in r.notes)
    # every pass reads the copies: prefill's kv_b_proj op streams them too
    pre = next(c for c in prefill_op_costs(s, chunk=1024, context=1024) if c.name == "mla.self_attn.kv_b_proj")
    assert pre.bytes == fp8_copies
