"""What vLLM's Triton fused MoE call holds in the profile run's forward for FP8-block experts on Hopper before 0.14.0
(k3plan.engines.vllm.triton_moe): fused_experts_impl's caches and the fp8 copies of its GEMM inputs, read in the vLLM
0.8.4, 0.9.2, 0.10.1 and 0.11.0-0.13.0 wheels (PyPI), model_executor/layers/fused_moe/fused_moe.py fused_experts_impl."""

from __future__ import annotations

from k3plan.engines.vllm.triton_moe import triton_forward_caches

# deepseek-ai/DeepSeek-R1's config.json: hidden_size, moe_intermediate_size, num_experts_per_tok
HIDDEN, INTERMEDIATE, TOP_K = 7168, 2048, 8


def _caches(release=(0, 8, 4), *, hardware="nvidia-h100-sxm", formats=("fp8_block",), ep=False, tp=16, dp=1,
            tokens=32768, moe_backend="", env=None):  # fmt: skip
    got = triton_forward_caches(
        release=release,
        vendor="nvidia",
        hardware=hardware,
        expert_formats=formats,
        expert_parallel=ep,
        tp=tp,
        top_k=TOP_K,
        hidden=HIDDEN,
        intermediate=INTERMEDIATE,
        tokens=tokens,
        dp=dp,
        moe_backend=moe_backend,
        env=env,
    )
    return None if got is None else got[0]


def _expected(m: int, n: int) -> int:
    """cache13 M x top_k x max(N, K) and intermediate_cache2 (M x top_k, N / 2) in bf16, the hidden states and
    intermediate_cache2 in fp8 with float32 scales a group of 128 (per_token_group_quant_fp8)."""
    k = HIDDEN
    return (
        m * TOP_K * max(n, k) * 2
        + m * TOP_K * (n // 2) * 2
        + m * k
        + m * (k // 128) * 4
        + m * TOP_K * (n // 2)
        + m * TOP_K * (n // 2 // 128) * 4
    )


def test_expert_parallelism_gives_the_whole_intermediate():
    """FusedMoE.__init__ use_ep: MoE TP 1, w1.size(1) = 2 x 2,048; without EP 2 x 2,048 / 16 = 256."""
    assert _caches(ep=True) == _expected(32768, 4096)
    assert _caches() == _expected(32768, 256)


def test_m_is_capped_by_the_chunk():
    """M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE), the default 32,768 in vllm/envs.py (0.8.4 / 0.9.2 / 0.10.1)."""
    assert _caches(tokens=57344) == _expected(32768, 256)
    assert _caches(tokens=8192) == _expected(8192, 256)
    assert _caches(tokens=57344, env={"VLLM_FUSED_MOE_CHUNK_SIZE": "16384"}) == _expected(16384, 256)


def test_outside_the_read_path_nothing_is_priced():
    assert _caches(release=(0, 14, 0)) is None  # the modular kernels' workspace: engines/vllm/moe_workspace.py
    assert _caches(release=(0, 8, 2)) is None  # before the oldest wheel read
    assert _caches(hardware="nvidia-b200") is None
    assert _caches(formats=("int4_g32",)) is None
    assert _caches(dp=2) is None  # the naive multicast of the DP ranks' tokens: not priced
    assert _caches(env={"VLLM_USE_DEEP_GEMM": "1"}) is None
    assert _caches(moe_backend="triton") is None


def test_0_11_to_0_13_run_triton_where_deep_gemm_cannot_whatever_is_installed():
    """VLLM_USE_DEEP_GEMM defaults to '1' from 0.11.0 (envs.py), so deep_gemm_moe_fp8 runs where the deep_gemm package is
    installed (has_deep_gemm) unless: 0.11.0, w2's N (the shard's intermediate) <= 512 (deep_gemm_moe.py
    _valid_deep_gemm; Hopper's E8M0 under VLLM_USE_DEEP_GEMM_E8M0_HOPPER, default '0'); 0.12.0 / 0.13.x, the MoE's TP
    >= 8 without VLLM_MOE_USE_DEEP_GEMM set (quantization/fp8.py get_fp8_moe_backend); any of 0.11.x-0.13.x, a switch
    0. fused_experts_impl's caches are the 0.10.1 wheel's; VLLM_FUSED_MOE_CHUNK_SIZE 32,768 to 0.11.x, 16,384 from
    0.12.0 (envs.py)."""
    # DeepSeek-R1 at TP 16 (N = 256) and TP 8 (w2's N 256): Triton at 0.11.0 whatever is installed
    assert _caches((0, 11, 0)) == _expected(32768, 256)
    assert _caches((0, 11, 0), tp=8) == _expected(32768, 512)
    assert _caches((0, 11, 0), tp=2) is None  # w2's N 1,024 > 512: DeepGEMM where installed, not read
    assert _caches((0, 11, 0), tp=2, env={"VLLM_USE_DEEP_GEMM": "0"}) == _expected(32768, 2048)
    # 0.11.1 / 0.11.2: the DEEPGEMM backend wherever installed, E8M0 on by default: Triton only with a switch 0
    assert _caches((0, 11, 2)) is None
    assert _caches((0, 11, 2), env={"VLLM_MOE_USE_DEEP_GEMM": "0"}) == _expected(32768, 256)
    assert _caches((0, 11, 1), env={"VLLM_USE_DEEP_GEMM": "0"}) == _expected(32768, 256)
    # 0.12.0 / 0.13.x: DeepGEMM off at MoE TP >= 8 unless VLLM_MOE_USE_DEEP_GEMM is set; the chunk 16,384
    assert _caches((0, 13, 0), tp=8) == _expected(16384, 512)
    assert _caches((0, 12, 0), tp=8, tokens=8192) == _expected(8192, 512)
    assert _caches((0, 13, 0), tp=8, env={"VLLM_MOE_USE_DEEP_GEMM": "1"}) is None
    assert _caches((0, 13, 0), tp=8, ep=True) is None  # EP: the MoE's TP is 1, DeepGEMM where installed
    assert _caches((0, 13, 0), tp=4) is None
    assert _caches((0, 13, 0), tp=4, env={"VLLM_USE_DEEP_GEMM": "0"}) == _expected(16384, 1024)
    # FlashInfer's FP8 MoE asked for: not read
    assert _caches((0, 13, 0), tp=8, env={"VLLM_USE_FLASHINFER_MOE_FP8": "1"}) is None
