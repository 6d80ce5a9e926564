"""DeepSeek-V4's model buffers and cached wo_a copies on vLLM's ROCm backends (engines/vllm/dsv4_workspace.py
dsv4_rocm_model_buffers, dsv4_rocm_wo_a_bf16).

Read in the vllm 0.26.0 wheel (PyPI): models/deepseek_v4/amd/model.py DeepseekV4Model.__init__ allocates
topk_indices_buffer [max_num_batched_tokens, index_topk] int32 and, on the last PP rank whatever the speculative config,
_mtp_hidden_buffer [max_num_batched_tokens, hc_mult x hidden] in the model dtype; amd/mtp.py
DeepSeekV4MultiTokenPredictor.__init__ its own topk_indices_buffer. v1/attention/ops/rocm_aiter_mla_sparse.py
_get_cached_wo_a_bf16 (called by rocm_inv_rope_einsum from amd/rocm.py DeepseekV4ROCMAiterMLAAttention._o_proj)
dequantizes a layer's FP8 wo_a to bf16 [n_local_groups, o_lora_rank, heads x head_dim / o_groups] on the first forward
and keeps it on the module; the same in the 0.25.0 and 0.28.0-0.30.0 wheels. From 0.31.0 (read in 0.31.0, 0.33.0,
0.34.0) DeepseekV4ROCMAiterMLAAttention._prepare_fp8_wo_a keeps wo_a FP8 on gfx950 (VLLM_ROCM_USE_AITER_FP8BMM)."""

from __future__ import annotations

from k3plan.engines.vllm.dsv4_workspace import dsv4_rocm_model_buffers, dsv4_rocm_wo_a_bf16
from k3plan.models.loader import load_model

MiB = 2**20


def _pro():
    return load_model("deepseek-v4-pro").spec.dsv4


def test_a_v4_pro_layer_caches_128_mib_of_bf16_wo_a_at_tp_1():
    d = _pro()
    # 16 groups x o_lora_rank 1,024 x (128 heads x 512 / 16 = 4,096) bf16: 128 heads x 512 x 1,024 x 2 B
    one, how = dsv4_rocm_wo_a_bf16(d, local_heads=128, layers=1, hardware="amd-mi355x", release=(0, 26, 0))
    assert one == 16 * 1024 * 4096 * 2 == 128 * MiB
    # the 61 decoder layers and the MTP drafter's one
    total, _ = dsv4_rocm_wo_a_bf16(d, local_heads=128, layers=62, hardware="amd-mi355x", release=(0, 26, 0))
    assert total == 62 * 128 * MiB
    assert "_get_cached_wo_a_bf16" in how


def test_tp_8_caches_an_eighth():
    d = _pro()
    tp8, _ = dsv4_rocm_wo_a_bf16(d, local_heads=16, layers=61, hardware="amd-mi300x", release=(0, 29, 0))
    assert tp8 == 61 * 16 * MiB  # 2 local groups of the 16


def test_from_0_31_gfx950_keeps_wo_a_fp8_and_gfx942_still_caches():
    d = _pro()
    assert dsv4_rocm_wo_a_bf16(d, local_heads=128, layers=61, hardware="amd-mi355x", release=(0, 31, 0))[0] == 0
    assert dsv4_rocm_wo_a_bf16(d, local_heads=128, layers=61, hardware="amd-mi355x", release=None)[0] == 0
    assert dsv4_rocm_wo_a_bf16(d, local_heads=128, layers=61, hardware="amd-mi300x", release=(0, 31, 0))[0] > 0
    assert dsv4_rocm_wo_a_bf16(d, local_heads=128, layers=61, hardware="amd-mi355x", release=(0, 30, 0))[0] > 0


def test_the_rocm_model_holds_the_mtp_hidden_buffer_and_the_drafter_s_topk_buffer():
    d = _pro()
    t = 16384
    base, _ = dsv4_rocm_model_buffers(d, max_num_batched_tokens=t)
    full, how = dsv4_rocm_model_buffers(d, max_num_batched_tokens=t, hidden_size=7168, mtp_ratios=(0,))
    hidden = t * 4 * 7168 * 2  # _mtp_hidden_buffer [16,384, hc_mult 4 x 7,168] bf16: 0.875 GiB
    topk = t * 1024 * 4  # the drafter's topk_indices_buffer
    rope = full - base - hidden - topk
    assert rope >= 0  # the RoPE tables (rope_tables, shared with the CUDA model's rule)
    assert "_mtp_hidden_buffer" in how and "MTP drafter" in how


def test_gfx950_keeps_the_bf16_copies_without_vllm_rocm_use_aiter():
    """The 0.31.0 wheel's amd/rocm.py prepare_attn_preshuffle returns before _prepare_fp8_wo_a where
    rocm_aiter_ops.is_enabled() is false (VLLM_ROCM_USE_AITER, default off): wo_a goes the bf16 way, cached."""
    d = load_model("deepseek-v4-pro").spec.dsv4
    args = dict(local_heads=128, layers=1, hardware="amd-mi355x", release=(0, 31, 0))
    assert dsv4_rocm_wo_a_bf16(d, **args, wo_a_fp8=True)[0] == 0
    assert dsv4_rocm_wo_a_bf16(d, **args, wo_a_fp8=False)[0] == 128 * 512 * 1024 * 2
    assert dsv4_rocm_wo_a_bf16(d, **args)[0] == 0  # None: taken as on where the release and GPU allow
