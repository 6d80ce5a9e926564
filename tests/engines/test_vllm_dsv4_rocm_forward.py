"""DeepSeek-V4's eager dummy forward on vLLM's ROCm model and its MoE under data parallelism (engines/vllm/
dsv4_workspace.py dsv4_rocm_forward_live, rocm_moe_rows).

Read in the vllm 0.26.0 wheel (PyPI): models/deepseek_v4/amd/model.py has no support_torch_compile, so a tensor lives
while a Python name holds it; DeepseekV4Attention.forward (attention.py) allocates o_padded [T, heads, 512] (ROCm pads
no heads: amd/rocm.py get_padded_num_q_heads) and keeps qr_kv, the float32 kv_scores and the normed qr / kv to its
return; amd/rocm.py _o_proj -> v1/attention/ops/rocm_aiter_mla_sparse.py rocm_inv_rope_einsum makes o_ref
(_fused_inverse_rope_gptj, torch.empty of o's shape), and on a layer's first call _get_cached_wo_a_bf16 multiplies the
float32 weight by _expand_2d_block_scales' float32 [groups, o_lora_rank, heads x 512 / groups] scale. Under DP the MXFP4
method's modular kernel takes the naive all-gather prepare/finalize (fused_moe/all2all_utils.py
maybe_make_prepare_finalize; prepare_finalize/naive_dp_ep.py; AiterExperts.expects_unquantized_inputs: bf16 rows), and
ROCm/aiter v0.1.13.post1 (the pin experts/rocm_aiter_moe.py names) runs fused_moe's CK 2-stage path at the profile's
rows (aiter/fused_moe.py get_ksplit: 0 once token x topk > experts): moe_buf [M, hidden] bf16, the sorted ids and
weights, the activations' MXFP4 and sorted scales, a2 [M, topk, shard intermediate] bf16 and its MXFP4 copy."""

from __future__ import annotations

from k3plan.engines.vllm.dsv4_workspace import (
    aiter_linear_on,
    aiter_moe_on,
    dsv4_rocm_forward_live,
    rocm_forward_applies,
    rocm_moe_rows,
)
from k3plan.models.loader import load_model

MiB = 2**20


def _pro():
    return load_model("deepseek-v4-pro").spec.dsv4


def _rows(**kw):
    args = dict(
        dp=8,
        expert_parallel=False,
        all2all_backend="",
        hardware="amd-mi355x",
        moe_backend="aiter",
        aiter_on=True,
        experts=384,
        top_k=6,
        hidden=7168,
        shard_intermediate=512,
    )
    args.update(kw)
    return rocm_moe_rows(**args)


def test_aiter_s_ck_two_stage_buffers_a_gathered_row():
    # moe_buf 7,168 x 2 + sorted ids / weights 6 x 8 + MXFP4 activations 3,584 + sorted scales 6 x 224 + a2
    # 6 x 512 x 2 + its MXFP4 6 x 256 + scales 6 x 16
    row = 14336 + 48 + 3584 + 1344 + 6144 + 1536 + 96
    gathered = 7168 * 2 + 6 * 8  # the all-gathered bf16 activations and top-k weights / ids
    local = 384 * 4 + 6 * 8  # the router's float32 logits and the local top-k
    total, how = _rows()
    assert total == local + 8 * (gathered + row)
    assert "8 rows gathered over DP" in how and "v0.1.13.post1" in how


def test_expert_parallel_keeps_the_whole_intermediate_and_the_naive_dispatch():
    whole, _ = _rows(dp=4, expert_parallel=True, shard_intermediate=3072)
    a2 = 6 * 3072 * 2 + 6 * 3072 // 2 + 6 * 3072 // 32
    assert whole == 384 * 4 + 48 + 4 * (7168 * 2 + 48 + 14336 + 48 + 3584 + 1344 + a2)
    # another all2all backend under EP is not the all-gather: the rows stay local
    other, _ = _rows(dp=4, expert_parallel=True, all2all_backend="mori", shard_intermediate=3072)
    assert other == 384 * 4 + 48 + 14336 + 48 + 3584 + 1344 + a2


def test_no_dp_no_gather_and_gfx942_s_kernel_is_not_traced():
    alone, _ = _rows(dp=1)
    assert alone == 384 * 4 + 48 + (14336 + 48 + 3584 + 1344 + 6144 + 1536 + 96)
    mi300, how = _rows(hardware="amd-mi300x")
    assert mi300 == 384 * 4 + 48 + 8 * (7168 * 2 + 48)
    assert "not traced" in how


def test_the_output_projection_at_tp_1_and_the_first_call_s_dequantization():
    d = _pro()
    t = 8192
    live, how = dsv4_rocm_forward_live(
        d, tokens=t, hidden_size=7168, local_heads=128, q_lora_rank=1536, tp=1, mtp=False, moe_bytes=0
    )
    stream, row, mix = 4 * 7168 * 2, 7168 * 2, 4 * 4 + 16 * 4
    o = 128 * 512 * 2  # o_padded, o_ref: 128 KiB a token at TP 1
    scores = 2 * 2 * 512 * 4 + 2 * 2 * 128 * 4 + 64 * 2  # the CSA layer's float32 kv_scores, indexer weights
    dequant = 3 * 4 * 128 * 512 * 1024  # float32 wo_a, expanded scale, product: 768 MiB
    assert dequant == 768 * MiB
    einsum = 16 * 1024 * 2
    attention = t * (stream + row + mix + 2 * o + 2 * 2 * (1536 + 512) + scores) + max(t * (2 * einsum + row), dequant)
    moe = t * (2 * stream + 3 * row + mix)
    assert live == max(attention, moe) == attention
    assert "output projection" in how


def test_the_mtp_drafter_adds_its_inputs_and_the_moe_can_lead():
    d = _pro()
    t = 8192
    moe_bytes, _ = _rows()
    base, _ = dsv4_rocm_forward_live(
        d, tokens=t, hidden_size=7168, local_heads=128, q_lora_rank=1536, tp=1, mtp=False, moe_bytes=moe_bytes
    )
    mtp, how = dsv4_rocm_forward_live(
        d, tokens=t, hidden_size=7168, local_heads=128, q_lora_rank=1536, tp=1, mtp=True, moe_bytes=moe_bytes
    )
    assert mtp - base == t * (3 * 7168 * 2 + 4 * 7168 * 2)  # target output, embedding, enorm; hnorm streams
    assert base == t * (2 * 4 * 7168 * 2 + 3 * 7168 * 2 + 80 + moe_bytes)  # DP 8's gathered MoE leads
    assert "the MoE" in how


def test_the_rule_covers_the_releases_traced():
    assert rocm_forward_applies((0, 26, 0)) and rocm_forward_applies((0, 25, 0))
    # the 0.27.0 and 0.28.0 wheels hold the same moments (dsv4_workspace.py ROCM_FORWARD_SOURCE)
    assert rocm_forward_applies((0, 27, 0)) and rocm_forward_applies((0, 28, 0))
    assert rocm_forward_applies((0, 29, 0))  # the fused mHC path, traced in the 0.29.0 wheel
    assert rocm_forward_applies((0, 30, 0))  # the attention locals freed before _o_proj, the 0.30.0 wheel
    assert rocm_forward_applies((0, 31, 0))  # the FP8 wo_a projection / no o_ref copy, the 0.31.0 wheel
    assert rocm_forward_applies((0, 31, 0), hardware="amd-mi355x")  # gfx950 without AITER's MoE
    # gfx950 under AITER's MoE: SiTUv2 a4w4 by default from 0.31.0 (_aiter_ops.py), its buffers not read
    assert not rocm_forward_applies((0, 31, 0), hardware="amd-mi355x", aiter_moe=True)
    assert rocm_forward_applies((0, 31, 0), hardware="amd-mi300x", aiter_moe=True)  # gfx942: AITER's MoE not on it
    assert rocm_forward_applies((0, 30, 0), hardware="amd-mi355x", aiter_moe=True)
    assert rocm_forward_applies((0, 32, 0))  # the 0.32.0 wheel keeps 0.31.0's moments
    assert not rocm_forward_applies((0, 32, 0), hardware="amd-mi355x", aiter_moe=True)  # SiTUv2 a4w4 still 'auto'
    assert not rocm_forward_applies((0, 33, 0))  # 0.33.0 changes amd/rocm.py, amd/model.py, attention.py
    assert not rocm_forward_applies(None)


def test_an_untraced_rocm_forward_is_said_to_be_unpriced():
    from k3plan.engines.vllm.dsv4_workspace import rocm_forward_unpriced

    assert "0.33.0" in rocm_forward_unpriced((0, 33, 0)) and "not traced" in rocm_forward_unpriced((0, 33, 0))
    assert rocm_forward_unpriced(None) == rocm_forward_unpriced((0, 24, 0)) == rocm_forward_unpriced((0, 34, 0))
    assert rocm_forward_unpriced((0, 32, 0)) == ""
    situ = rocm_forward_unpriced((0, 31, 0), hardware="amd-mi355x", aiter_moe=True)
    assert "SiTUv2" in situ and "not traced" in situ
    assert rocm_forward_unpriced((0, 31, 0), hardware="amd-mi300x") == ""


def test_0_28_reads_as_before():
    # the 0.29.0 terms are gated on their release: 0.28.0 keeps 0.26.0's unfused set whatever the AITER linear
    d = _pro()
    args = dict(tokens=8192, hidden_size=7168, local_heads=16, q_lora_rank=1536, tp=8, mtp=True, moe_bytes=1000)
    old, _ = dsv4_rocm_forward_live(d, **args)
    assert dsv4_rocm_forward_live(d, **args, release=(0, 28, 0), aiter_linear=True)[0] == old


def test_0_29_s_fused_mhc_layer_holds_the_caller_s_row_and_streams():
    # vllm 0.29.0 wheel: amd/model.py _forward_fused_post_pre on AITER's mHC (hidden 7,168 % 256 == 0, hc_mult 4);
    # DeepseekV4Model.forward's loop keeps the previous layer's x and residual; amd/rocm.py _split_qkv_and_norm under
    # AITER's linear: qr FP8 [T, 1,536] + float32 scales [T, 12] (_fused_mla_dual_rms_norm_group_quant_impl)
    d = _pro()
    t = 8192
    args = dict(tokens=t, hidden_size=7168, local_heads=16, q_lora_rank=1536, tp=8, moe_bytes=1000)
    live, how = dsv4_rocm_forward_live(d, **args, mtp=False, release=(0, 29, 0), aiter_linear=True)
    stream, row, mix = 4 * 7168 * 2, 7168 * 2, 4 * 4 + 16 * 4
    o = 16 * 512 * 2
    scores = 2 * 2 * 512 * 4 + 2 * 2 * 128 * 4 + 64 * 2
    locals_ = 2 * (1536 + 512) + 1536 + 12 * 4 + 2 * 512 + scores  # qr_kv, FP8 qr and scales, kv, the scores
    dequant = 3 * 4 * 16 * 512 * 1024
    einsum = 2 * 1024 * 2  # 16 groups / TP 8
    attention = t * (stream + row + mix + 2 * o + locals_) + max(t * (2 * einsum + row), dequant)
    caller = t * (row + stream + mix)
    post_pre = caller + t * (2 * stream + 2 * row + 2 * mix)
    moe = caller + t * (stream + 3 * row + mix + 1000)
    assert live == max(caller + attention, post_pre, moe)
    assert "fused mHC" in how and "0.29.0 wheel" in how
    # without AITER's linear the normed qr stays bf16: 1,536 B less 48 B of scales a token more
    bf16, _ = dsv4_rocm_forward_live(d, **args, mtp=False, release=(0, 29, 0), aiter_linear=False)
    assert live == caller + attention  # the output projection leads at TP 8 with a small MoE
    assert bf16 - live == t * (1536 - 48)
    # the MTP drafter's layer runs without a residual (amd/mtp.py): 0.26.0's unfused set beside its inputs
    drafted, _ = dsv4_rocm_forward_live(d, **args, mtp=True, release=(0, 29, 0), aiter_linear=True)
    unfused = max(attention, t * (2 * stream + 3 * row + mix + 1000)) + t * (3 * row + stream)
    assert drafted == max(live, unfused)


def test_aiter_s_linear_needs_vllm_rocm_use_aiter():
    assert not aiter_linear_on({})
    assert aiter_linear_on({"VLLM_ROCM_USE_AITER": "1"})
    assert not aiter_linear_on({"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_LINEAR": "0"})


def test_aiter_s_moe_needs_vllm_rocm_use_aiter():
    assert aiter_moe_on({"VLLM_ROCM_USE_AITER": "1"})
    assert not aiter_moe_on({})  # VLLM_ROCM_USE_AITER defaults off
    assert not aiter_moe_on({"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MOE": "0"})
    off, how = _rows(aiter_on=False)
    assert off == 384 * 4 + 48 + 8 * (7168 * 2 + 48)
    assert "not traced" in how


def test_0_30_frees_the_attention_locals_before_the_output_projection():
    # vllm 0.30.0 wheel: amd/rocm.py DeepseekV4ROCMAiterMLAAttention.forward builds qr_kv, the scores and the normed
    # qr / kv inside _run_sequential_pipeline or the CSA layer's multi-stream chains, so _o_proj holds only o_padded
    # and o_ref beside the einsum / wo_b or the wo_a dequantization; the locals live earlier beside o_padded and q
    d = _pro()
    t = 8192
    args = dict(tokens=t, hidden_size=7168, local_heads=16, q_lora_rank=1536, tp=8, moe_bytes=1000, mtp=False)
    live, how = dsv4_rocm_forward_live(d, **args, release=(0, 30, 0), aiter_linear=True)
    stream, row, mix = 4 * 7168 * 2, 7168 * 2, 4 * 4 + 16 * 4
    o = 16 * 512 * 2
    scores = 2 * 2 * 512 * 4 + 2 * 2 * 128 * 4 + 64 * 2
    locals_ = 2 * (1536 + 512) + 1536 + 12 * 4 + 2 * 512 + scores
    dequant = 3 * 4 * 16 * 512 * 1024
    einsum = 2 * 1024 * 2
    attention = t * (stream + row + mix + 2 * o) + max(t * locals_, t * (2 * einsum + row), dequant)
    caller = t * (row + stream + mix)
    post_pre = caller + t * (2 * stream + 2 * row + 2 * mix)
    moe = caller + t * (stream + 3 * row + mix + 1000)
    assert live == max(caller + attention, post_pre, moe)
    assert live < dsv4_rocm_forward_live(d, **args, release=(0, 29, 0), aiter_linear=True)[0]
    assert "0.30.0 wheel" in how


def test_0_31_s_projection_has_no_o_ref_and_on_gfx950_under_aiter_keeps_wo_a_fp8():
    # vllm 0.31.0 wheel: amd/rocm.py DeepseekV4ROCMAiterMLAAttention._o_proj. Where wo_a stays FP8 (gfx950,
    # VLLM_ROCM_USE_AITER and VLLM_ROCM_USE_AITER_FP8BMM: prepare_attn_preshuffle -> _prepare_fp8_wo_a) AITER's
    # inverse_rope_group_quant makes o_fp8 [T, 16 / 8 groups, 8 x 512] FP8 and e8m0 scales (a byte a 128), and
    # batched_gemm_a8w8_mxscale returns token-major [T, groups, 1,024] bf16 (ROCm/aiter aiter/ops/batched_gemm_op_a8w8.py:
    # Y = torch.empty((m, g, n)): flatten(1) a view), all held to wo_b's output; no dequantization. Elsewhere
    # rocm_inv_rope_einsum(..., inverse_rope=False): o_ref is o, the einsum and its flatten copy, the first call's
    # dequantization beside o_padded. The attention-time set is 0.30.0's (o_padded, q, the locals).
    d = _pro()
    t = 8192
    args = dict(tokens=t, hidden_size=7168, local_heads=16, q_lora_rank=1536, tp=8, moe_bytes=1000, mtp=False)
    stream, row, mix = 4 * 7168 * 2, 7168 * 2, 4 * 4 + 16 * 4
    o = 16 * 512 * 2
    scores = 2 * 2 * 512 * 4 + 2 * 2 * 128 * 4 + 64 * 2
    locals_ = 2 * (1536 + 512) + 1536 + 12 * 4 + 2 * 512 + scores
    dequant = 3 * 4 * 16 * 512 * 1024
    einsum = 2 * 1024 * 2
    o8 = 16 * 512 + 16 * 512 // 128
    caller = t * (row + stream + mix)
    post_pre = caller + t * (2 * stream + 2 * row + 2 * mix)
    moe = caller + t * (stream + 3 * row + mix + 1000)
    base = t * (stream + row + mix)
    bf16, how = dsv4_rocm_forward_live(d, **args, release=(0, 31, 0), aiter_linear=True)
    attention = base + max(t * (2 * o + locals_), t * o + max(t * (2 * einsum + row), dequant))
    assert bf16 == max(caller + attention, post_pre, moe)
    assert "0.31.0 wheel" in how and "o_ref" not in how.split(";")[0]
    fp8, how = dsv4_rocm_forward_live(d, **args, release=(0, 31, 0), aiter_linear=True, wo_a_fp8=True)
    attention = base + max(t * (2 * o + locals_), t * (o + o8 + einsum + row))
    assert fp8 == max(caller + attention, post_pre, moe)
    assert "no dequantization" in how
    # the same command at 0.30.0 holds o_ref beside the projection
    assert bf16 <= dsv4_rocm_forward_live(d, **args, release=(0, 30, 0), aiter_linear=True)[0]
    # wo_a_fp8 changes nothing before 0.31.0
    assert (
        dsv4_rocm_forward_live(d, **args, release=(0, 30, 0), wo_a_fp8=True)[0]
        == (dsv4_rocm_forward_live(d, **args, release=(0, 30, 0))[0])
    )


def test_wo_a_stays_fp8_only_under_aiter_on_gfx950_from_0_31():
    from k3plan.engines.vllm.dsv4_workspace import wo_a_fp8_on

    aiter = {"VLLM_ROCM_USE_AITER": "1"}
    assert wo_a_fp8_on(aiter, hardware="amd-mi355x", release=(0, 31, 0))
    assert wo_a_fp8_on(aiter, hardware="amd-mi355x", release=None)  # the newest read
    assert not wo_a_fp8_on({}, hardware="amd-mi355x", release=(0, 31, 0))  # prepare_attn_preshuffle returns first
    assert not wo_a_fp8_on({**aiter, "VLLM_ROCM_USE_AITER_FP8BMM": "0"}, hardware="amd-mi355x", release=(0, 31, 0))
    assert not wo_a_fp8_on(aiter, hardware="amd-mi300x", release=(0, 31, 0))  # gfx942
    assert not wo_a_fp8_on(aiter, hardware="amd-mi355x", release=(0, 30, 0))
