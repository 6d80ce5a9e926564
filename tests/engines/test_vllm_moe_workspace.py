"""The MoE workspace vLLM's profile run leaves allocated under the sampler warm-up (k3plan.engines.vllm.moe_workspace):
the kernel each release picks for FP8-block experts and what its workspace holds, read in the vLLM 0.11.0-0.20.0
wheels (PyPI), and where it enters the activation the worker subtracts."""

from __future__ import annotations

import json

from k3plan.engines.vllm.moe_workspace import profile_moe_workspace
from k3plan.engines.vllm.sampler import sampler_profile_peak

# deepseek-ai/DeepSeek-R1-0528's config.json: hidden_size, moe_intermediate_size, num_experts_per_tok, vocab_size
HIDDEN, INTERMEDIATE, TOP_K, VOCAB = 7168, 2048, 8, 129_280


def _ws(
    release,
    *,
    hardware="nvidia-h200",
    vendor="nvidia",
    tokens=8192,
    ep=False,
    env=None,
    formats=("fp8_block",),
    tp=8,
    dp=1,
    a2a="",
    moe_backend="",
):
    return profile_moe_workspace(
        release=release,
        vendor=vendor,
        hardware=hardware,
        expert_formats=formats,
        expert_parallel=ep,
        tp=tp,
        top_k=TOP_K,
        hidden=HIDDEN,
        intermediate=INTERMEDIATE,
        tokens=tokens,
        env=env or {},
        dp=dp,
        all2all_backend=a2a,
        moe_backend=moe_backend,
    )[0]


def test_the_kernel_each_release_picks_for_fp8_block_experts_at_tp8():
    """TritonExperts holds workspace13 and workspace2, each tokens x top_k x max(N, K) (N = 2 x 2,048 / 8 = 512 < K),
    the output inside workspace13; FlashInferExperts (0.15-0.16 on SM90) one tokens x K buffer; bfloat16."""
    triton = 2 * 8192 * TOP_K * HIDDEN * 2
    flashinfer = 8192 * HIDDEN * 2
    assert _ws((0, 13, 0)) == 0  # fused_experts' per-call caches, freed before the sampler
    assert _ws((0, 14, 0)) == _ws((0, 14, 1)) == triton  # the modular kernel for TP, DeepGEMM off at TP >= 8
    assert _ws((0, 15, 0)) == _ws((0, 16, 0)) == flashinfer  # FlashInfer CUTLASS before Triton on SM90
    assert _ws((0, 17, 0)) == _ws((0, 18, 0)) == _ws((0, 20, 0)) == triton  # Triton to the front on Hopper for TP
    assert _ws((0, 16, 0), hardware="amd-mi300x", vendor="amd") == triton  # ROCm: Triton from 0.14.0
    assert _ws((0, 18, 0), hardware="nvidia-b200") == 0  # sm_10x: FlashInfer TRT-LLM, workspaces FlashInfer's
    assert _ws((0, 18, 0), ep=True) == 8192 * HIDDEN * 2  # TP 8 with EP: FlashInferExperts (test below)
    assert _ws((0, 18, 0), hardware="amd-mi300x", vendor="amd", env={"VLLM_ROCM_USE_AITER": "1"}) == 0
    assert _ws((0, 18, 0), formats=("int4_g32",)) == 0
    # the 0.26.0, 0.28.0, 0.33.0 and 0.34.0 wheels keep the selection, the shapes and the workspace manager
    assert _ws((0, 21, 0)) == _ws((0, 33, 0)) == _ws((0, 34, 0)) == triton
    assert _ws((0, 35, 0)) == triton  # a later release: priced by the newest read's rules (0.34.0)
    assert _ws(None) == 0


def test_the_chunk_caps_the_tokens_to_0_17_and_not_after():
    """VLLM_FUSED_MOE_CHUNK_SIZE (16,384) chunks the modular kernel's two workspaces to 0.17.x, the output then its own
    M_full x K part (_allocate_buffers: three parts from get_simultaneous where num_chunks > 1); 0.18.0 dropped the
    chunking."""
    assert _ws((0, 17, 0), tokens=32768) == _ws((0, 17, 0), tokens=16384) + 32768 * HIDDEN * 2
    assert _ws((0, 18, 0), tokens=32768) == 2 * _ws((0, 18, 0), tokens=16384)


# DeepSeek-R1 on 8 H200, 8,192 tokens a DP rank: vLLM all-gathers every rank's tokens before the experts
# (AgRsAll2AllManager.dispatch, the default --all2all-backend allgather_reducescatter), M_full = 8 x 8,192
M_DP8 = 8 * 8192
CHUNK = 16384  # VLLM_FUSED_MOE_CHUNK_SIZE, 0.14.0-0.17.x


def test_dp8_without_ep_gathers_the_tokens_and_cuts_the_experts_over_tp_x_dp():
    """--data-parallel-size 8, no EP: the MoE's TP is flattened over TP x DP (FusedMoEParallelConfig.make), N = 2 x
    2,048 / 8 = 512 < K, so TritonExperts (0.14.x, 0.17.0 on; FlashInferExperts 0.15-0.16) holds 2 x M x 8 x K; M the
    gathered 65,536 rows, unchunked from 0.18.0 (0.18.0 and the default release, 0.33.0), chunked at 16,384 to 0.17.x
    with the 65,536 x K output apart."""
    triton = 2 * M_DP8 * TOP_K * HIDDEN * 2
    assert _ws((0, 18, 0), tp=1, dp=8) == _ws((0, 33, 0), tp=1, dp=8) == triton  # 14.0 GiB
    assert triton == 14 * 2**30
    chunked = 2 * CHUNK * TOP_K * HIDDEN * 2 + M_DP8 * HIDDEN * 2
    assert _ws((0, 17, 0), tp=1, dp=8) == _ws((0, 14, 1), tp=1, dp=8) == chunked
    assert _ws((0, 16, 0), tp=1, dp=8) == CHUNK * HIDDEN * 2 + M_DP8 * HIDDEN * 2  # FlashInferExperts, chunked
    # TP 2 x DP 4 cuts N like TP 8 but gathers over the 4 DP ranks only (the DP group): half the rows
    assert 2 * _ws((0, 18, 0), tp=2, dp=4) == _ws((0, 18, 0), tp=1, dp=8)
    # on ROCm (no AITER) TritonExperts too
    assert _ws((0, 18, 0), tp=1, dp=8, hardware="amd-mi300x", vendor="amd") == triton


def test_dp8_with_ep_takes_flashinfer_cutlass_on_hopper_from_0_17():
    """--data-parallel-size 8 --enable-expert-parallel: the oracle moves FlashInfer CUTLASS to the front where
    ep_size > 1 (_get_priority_backends, 0.17.0 on); FlashInferExperts holds M x K (workspace2 empty), M the gathered
    65,536 rows: 0.88 GiB at 0.18.0 and 0.33.0. 0.15.0-0.17.x force a full chunk's three parts in the profile run
    under DP + EP (is_dp_ep), below the actual request here."""
    fi = M_DP8 * HIDDEN * 2
    assert _ws((0, 18, 0), tp=1, dp=8, ep=True) == _ws((0, 33, 0), tp=1, dp=8, ep=True) == fi
    assert _ws((0, 17, 0), tp=1, dp=8, ep=True) == CHUNK * HIDDEN * 2 + fi
    # 0.14.x: TritonExperts (the MoE's TP is 1 under EP; DeepGEMM absent from a pip install), N = 4,096 < K
    assert _ws((0, 14, 1), tp=1, dp=8, ep=True) == 2 * CHUNK * TOP_K * HIDDEN * 2 + fi
    # the forced worst case where it is the larger: ROCm's Triton at 0.16 with 1,024 tokens a rank
    forced = 2 * CHUNK * TOP_K * HIDDEN * 2 + CHUNK * HIDDEN * 2
    assert _ws((0, 16, 0), tp=1, dp=8, ep=True, tokens=1024, hardware="amd-mi300x", vendor="amd") == forced
    assert _ws((0, 16, 0), tp=1, dp=8, tokens=1024, hardware="amd-mi300x", vendor="amd") < forced  # not without EP


def test_what_is_not_read_is_not_priced():
    assert _ws((0, 18, 0), tp=1, dp=8, ep=True, a2a="deepep_high_throughput") == 0  # another backend's buffers
    assert _ws((0, 15, 0), tp=1, dp=8, ep=True, env={"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}) == 0
    # named by no file of the 0.16.0 wheel on: the default backend's workspace
    assert _ws((0, 18, 0), tp=1, dp=8, ep=True, env={"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}) == _ws(
        (0, 18, 0), tp=1, dp=8, ep=True
    )
    assert _ws((0, 18, 0), tp=1, dp=8, ep=True, a2a="allgather_reducescatter") > 0
    assert _ws((0, 18, 0), tp=2, dp=4, ep=True) == 0  # sequence-parallel MoE
    assert _ws((0, 18, 0), moe_backend="triton") == 0
    assert _ws((0, 18, 0), moe_backend="auto") > 0
    assert _ws((0, 18, 0), env={"VLLM_USE_FLASHINFER_MOE_FP8": "1"}) == 0  # read before 0.26.0
    assert _ws((0, 26, 0), env={"VLLM_USE_FLASHINFER_MOE_FP8": "1"}) == _ws((0, 26, 0))  # gone from the oracle
    assert _ws((0, 18, 0), env={"VLLM_USE_DEEP_GEMM": "1"}) == 0


def test_deep_gemm_switches_that_leave_the_pick_are_priced():
    """VLLM_USE_DEEP_GEMM / VLLM_MOE_USE_DEEP_GEMM default to 1 from 0.11.0 (envs.py, the 0.11.0-0.34.0 wheels (PyPI)).
    0.14.x (oracle/fp8.py select_fp8_moe_backend, the 0.14.0 wheel): DeepGEMM needs VLLM_USE_DEEP_GEMM and, at TP >= 8,
    VLLM_MOE_USE_DEEP_GEMM set; from 0.15.0 (the 0.15.0, 0.17.0, 0.20.0, 0.26.0, 0.34.0 wheels) a set switch forces
    DeepGEMM where both are true, else removes it from a list where FlashInfer CUTLASS and (0.17.0 on, Hopper's
    block-FP8 reorder) Triton stand before it: the kernel the rule prices either way."""
    for release in ((0, 14, 1), (0, 15, 0), (0, 18, 0), (0, 33, 0)):
        base = _ws(release)
        assert base > 0
        assert _ws(release, env={"VLLM_USE_DEEP_GEMM": "0"}) == base
        assert _ws(release, env={"VLLM_MOE_USE_DEEP_GEMM": "0"}) == base
        assert _ws(release, env={"VLLM_USE_DEEP_GEMM": "1", "VLLM_MOE_USE_DEEP_GEMM": "0"}) == base
        assert _ws(release, env={"VLLM_MOE_USE_DEEP_GEMM": "1"}) == 0  # DeepGEMM asked for: not read
        assert _ws(release, env={"VLLM_USE_DEEP_GEMM": "yes"}) == 0  # vLLM's int() would refuse it: not read
    assert _ws((0, 14, 1), env={"VLLM_USE_DEEP_GEMM": "1"}) == _ws((0, 14, 1))  # 0.14.x: the default's value
    assert _ws((0, 15, 0), env={"VLLM_USE_DEEP_GEMM": "1"}) == 0  # 0.15.0 on: set and true forces DeepGEMM


def _engine(cli, release: str, hardware: str = "nvidia-h200") -> dict:
    serve = (
        "vllm serve deepseek-ai/DeepSeek-R1-0528 --max-model-len 8192 --trust-remote-code --tensor-parallel-size 8 "
        "--gpu-memory-utilization 0.92 --no-enable-prefix-caching"
    )
    out = cli("fit", "-H", hardware, "-t", "8", "--serve", serve, "--engine-version", release, "--json").stdout
    return json.loads(out)["engine"]


def test_the_workspace_sits_under_the_sampler_in_the_profile_peak(cli):
    """The activation is the sort-era sampler warm-up plus the workspace (0.14.1), the sampler alone where the
    forward's caches are freed (0.13.0): the pools differ by the workspace, as Red Hat's starts of this command do
    (tests/engines/cases/vllm-kamra-r1-0528-h200-tp8-8k-v0130 / -v0141: 43.11 and 41.43 GiB)."""
    before, after = _engine(cli, "0.13.0"), _engine(cli, "0.14.1")
    sampler = sampler_profile_peak(max_num_seqs=1024, max_num_batched_tokens=8192, vocab_size=VOCAB, release=(0, 14, 1))
    assert after["activation_bytes"] == sampler[0] + _ws((0, 14, 1))
    assert before["activation_bytes"] == sampler[0]
    assert before["kv_pool_bytes"] - after["kv_pool_bytes"] == _ws((0, 14, 1))
    assert "TritonExperts" in after["sources"]["activation"]
    assert "MoE workspace" not in _engine(cli, "0.18.0", "nvidia-b200")["sources"]["activation"]


def test_dp8_without_ep_puts_the_gathered_workspace_under_the_sampler(cli):
    """The recipe's DP 8 command without --enable-expert-parallel at 0.18.0 and at the default release: the sampler
    warm-up plus the 14.0 GiB TritonExperts workspace tops k3plan's temporaries, so the activation is their sum; with
    EP the 0.88 GiB FlashInferExperts workspace stays under them and the pool does not move."""
    serve = "vllm serve deepseek-ai/DeepSeek-R1-0528 --trust-remote-code --data-parallel-size 8"
    for release, version in (((0, 18, 0), "0.18.0"), ((0, 33, 0), "0.33.0")):
        runs = {}
        for flag in ("", " --enable-expert-parallel"):
            out = cli(
                "fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve + flag, "--engine-version", version, "--json"
            )
            runs[flag] = json.loads(out.stdout)["engine"]
        sampler = sampler_profile_peak(
            max_num_seqs=1024, max_num_batched_tokens=8192, vocab_size=VOCAB, release=release
        )
        assert runs[""]["activation_bytes"] == sampler[0] + _ws(release, tp=1, dp=8)
        assert "TritonExperts: M 65,536 = DP 8 x 8,192 all-gathered" in runs[""]["sources"]["activation"]
        with_ep = runs[" --enable-expert-parallel"]
        assert "FlashInferExperts" in with_ep["sources"]["activation"]
        assert with_ep["activation_bytes"] > sampler[0] + _ws(release, tp=1, dp=8, ep=True)


# deepseek-ai/DeepSeek-V4-Flash's config.json (k3plan/models/bundled/deepseek-v4-flash): hidden_size,
# moe_intermediate_size, num_experts_per_tok; moonshotai Kimi-K3's (k3plan/models/bundled/kimi-k3)
V4F_HIDDEN, V4F_INTERMEDIATE, V4F_TOP_K = 4096, 2048, 6
K3_LATENT, K3_INTERMEDIATE, K3_TOP_K = 3584, 3072, 16  # routed_expert_hidden_size: the experts' K


def _mxfp4(release, fmt="ds_fp4", *, hardware="nvidia-h200", vendor="nvidia", tp=2, tokens=8192, **kw):
    hidden, inter, top_k = (
        (V4F_HIDDEN, V4F_INTERMEDIATE, V4F_TOP_K) if fmt == "ds_fp4" else (K3_LATENT, K3_INTERMEDIATE, K3_TOP_K)
    )
    return profile_moe_workspace(
        release=release,
        vendor=vendor,
        hardware=hardware,
        expert_formats=(fmt,),
        expert_parallel=kw.get("ep", False),
        tp=tp,
        top_k=top_k,
        hidden=hidden,
        intermediate=inter,
        tokens=tokens,
        env={},
        dp=kw.get("dp", 1),
        moe_backend=kw.get("moe_backend", ""),
    )


def test_mxfp4_experts_take_marlin_experts_on_hopper_to_0_31():
    """DeepSeek-V4's Mxfp4MoEMethod on SM90 (0.20.0-0.31.x wheels): MarlinExperts, workspace1 (M x top_k, max(N, K))
    and workspace2 M x top_k x max(2N, K), N = 2,048 / TP 2 = 1,024 < K, the output in workspace1's buffer: 2 x 8,192 x
    6 x 4,096 x 2 B = 0.75 GiB, the ptocu V4-Flash TP2 probes' buffer; 0.19 GiB at nanoserve's 2,048 tokens, TP 8."""
    marlin = 2 * 8192 * V4F_TOP_K * V4F_HIDDEN * 2
    for release in ((0, 20, 0), (0, 20, 2), (0, 23, 0), (0, 26, 0), (0, 31, 0)):
        nbytes, how = _mxfp4(release)
        assert nbytes == marlin and "MarlinExperts" in how
    assert _mxfp4((0, 20, 0), tp=8, tokens=2048)[0] == 2 * 2048 * V4F_TOP_K * V4F_HIDDEN * 2
    # DP 2 without EP: the gathered rows, the experts cut over TP x DP
    assert _mxfp4((0, 26, 0), tp=1, dp=2)[0] == 2 * 2 * 8192 * V4F_TOP_K * V4F_HIDDEN * 2


def test_mxfp4_experts_not_priced_where_not_read():
    assert _mxfp4((0, 19, 0))[0] == 0  # no V4 in vLLM before 0.20.0
    zero, how = _mxfp4((0, 32, 0))  # prioritize_humming: Humming ahead of Marlin on SM90
    assert zero == 0 and "Humming" in how
    assert _mxfp4((0, 34, 0))[0] == 0
    assert _mxfp4((0, 26, 0), hardware="nvidia-b200")[0] == 0  # TRTLLM MXFP8 on the SM100 family
    assert _mxfp4((0, 26, 0), hardware="amd-mi300x", vendor="amd")[0] == 0  # ROCm's own V4 MoE path
    assert _mxfp4((0, 26, 0), moe_backend="marlin")[0] == 0  # a named backend: not read
    assert _mxfp4((0, 26, 0), fmt="quark_mxfp4")[0] == 0  # another checkpoint's MXFP4 method


def test_kimi_k3_mxfp4_experts_take_marlin_experts_on_hopper_to_0_31():
    """Kimi-K3's CompressedTensorsW4A4Mxfp4MoEMethod takes MarlinExperts off SM100 (0.27.0-0.31.0 wheels), its FusedMoE
    at the latent width (models/kimi_k3/nvidia/model.py moe_hidden_size = routed_expert_hidden_size 3,584): at TP 8,
    N = 3,072 / 8 = 384 < K = 3,584, so 2 x 8,192 x 16 x 3,584 x 2 B = 1.75 GiB. The K3 bring-up images pinned before
    0.27.0 (no wheel has the model before it) are priced by that code."""
    k3 = 2 * 8192 * K3_TOP_K * K3_LATENT * 2
    for release in ((0, 25, 0), (0, 27, 0), (0, 28, 0), (0, 31, 0)):
        assert _mxfp4(release, "mxfp4", tp=8)[0] == k3
    assert _mxfp4((0, 32, 0), "mxfp4", tp=8)[0] == 0


def test_kimi_k3_mxfp4_method_reads_no_moe_backend():
    """compressed_tensors_moe.py get_moe_method returns the MXFP4 method before any branch reads
    kernel_config.moe_backend (0.27.0 / 0.28.0 wheels): --moe-backend marlin (the InferenceX H200 K3 PP2 x DP16
    command) runs the same MarlinExperts; only deep_gemm_mega_moe changes K3's MoE (model.py use_mega_moe: not read).
    Under EP over DP 16 at 1,024 tokens: M = 16,384 gathered rows, N = 2 x 3,072, workspace1 M x 16 x 3,584 (the output
    M x 3,584 inside), workspace2 M x 16 x 6,144, x 2 B = 4.75 GiB."""
    k3 = 2 * 8192 * K3_TOP_K * K3_LATENT * 2
    assert _mxfp4((0, 28, 0), "mxfp4", tp=8, moe_backend="marlin")[0] == k3
    assert _mxfp4((0, 28, 0), "mxfp4", tp=8, moe_backend="deep_gemm_mega_moe")[0] == 0
    m = 16 * 1024
    ep16 = m * K3_TOP_K * K3_LATENT * 2 + m * K3_TOP_K * 2 * K3_INTERMEDIATE * 2
    assert _mxfp4((0, 25, 0), "mxfp4", tp=1, dp=16, ep=True, tokens=1024, moe_backend="marlin")[0] == ep16


def _v4_engine(cli, max_model_len: int, backend: str = "") -> dict:
    serve = (
        "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 2 --trust-remote-code "
        f"--max-model-len {max_model_len} --max-num-batched-tokens 8192"
        + (f" --moe-backend {backend}" if backend else "")
    )
    out = cli("fit", "-H", "nvidia-h200", "-t", "2", "--serve", serve, "--engine-version", "0.23.0", "--json").stdout
    return json.loads(out)["engine"]


def test_v4_shares_one_workspace_buffer_with_the_moe(cli):
    """V4's attention reservations and the Marlin MoE workspace are views of one WorkspaceManager buffer, so the
    activation holds the larger of them, not their sum. Against the same command with the MoE workspace unpriced
    (--moe-backend named: not read): at 4,096 tokens of context the buffer grows from V4's reservation to the MoE's
    0.75 GiB, the activation by their difference; at 1,048,576 the indexer's 1.29 GiB gather holds the MoE's views and
    the activation does not move."""
    marlin = _mxfp4((0, 23, 0))[0]
    short, short_unpriced = _v4_engine(cli, 4096), _v4_engine(cli, 4096, "marlin")
    assert "grown to the MoE's 0.75 GiB" in short["sources"]["activation"]
    flashmla = 4 * (4096 // 4 + 128 + 8192) * 512 * 2  # FlashMLA's dummy-run request (engines/vllm/dsv4_workspace.py)
    assert short["activation_bytes"] - short_unpriced["activation_bytes"] == marlin - flashmla
    long, long_unpriced = _v4_engine(cli, 1_048_576), _v4_engine(cli, 1_048_576, "marlin")
    assert "views of the same buffer fit in it" in long["sources"]["activation"]
    assert long["activation_bytes"] == long_unpriced["activation_bytes"]


# moonshotai/Kimi-K2.6's config.json (text_config): hidden_size, moe_intermediate_size, num_experts_per_tok
K26_HIDDEN, K26_INTERMEDIATE, K26_TOP_K = 7168, 2048, 8


def _int4(release, *, hardware="nvidia-h200", vendor="nvidia", tp=8, dp=1, ep=False, tokens=8192, env=None, **kw):
    return profile_moe_workspace(
        release=release,
        vendor=vendor,
        hardware=hardware,
        expert_formats=("int4_g32",),
        expert_parallel=ep,
        tp=tp,
        top_k=K26_TOP_K,
        hidden=K26_HIDDEN,
        intermediate=K26_INTERMEDIATE,
        tokens=tokens,
        env=env or {},
        dp=dp,
        moe_backend=kw.get("moe_backend", ""),
    )


def test_int4_w4a16_experts_take_marlin_experts_from_0_23():
    """Kimi-K2.x's INT4 experts: a modular kernel from 0.23.0 (make_wna16_moe_kernel), MARLIN the oracle's first
    supported backend on CUDA with VLLM_USE_FLASHINFER_MOE_INT4 off (0.23.0-0.31.0 wheels): MarlinExperts at TP 8,
    N = 2,048 / 8 = 256 < K, 2 x 8,192 x 8 x 7,168 x 2 B = 1.75 GiB; on the SM100 family through 0.34.0 (Humming is
    preferred on compute capability 9.0 only). To 0.22.x the method's own fused_marlin_moe call frees its caches
    (engines/vllm/marlin_moe.py)."""
    marlin = 2 * 8192 * K26_TOP_K * K26_HIDDEN * 2
    assert _int4((0, 22, 0))[0] == 0
    for release in ((0, 23, 0), (0, 26, 0), (0, 30, 0), (0, 31, 0)):
        nbytes, how = _int4(release)
        assert nbytes == marlin and "MarlinExperts" in how
        assert _int4(release, ep=True)[0] == marlin  # N the whole 2,048, still below K
    assert _int4((0, 23, 0), hardware="nvidia-b200")[0] == _int4((0, 33, 0), hardware="nvidia-b300")[0] == marlin
    # DP 8 with EP (nanoserve's command): the gathered 65,536 rows
    assert _int4((0, 26, 0), tp=1, dp=8, ep=True)[0] == 8 * marlin


def test_int4_w4a16_experts_take_humming_on_hopper_from_0_32():
    """prioritize_humming (0.32.0-0.34.0 wheels): HUMMING ahead of MARLIN on SM90; HummingIndexedExperts without EP,
    workspace1 max(M x K, M x top_k x N, M x K) and workspace2 max(M x top_k x K, M x top_k x 2N): (8,192 x 7,168 +
    8,192 x 8 x 7,168) x 2 B = 0.98 GiB at TP 8; with EP HummingGroupedExperts, its w13 input M x top_k rows: the
    same 1.75 GiB as Marlin."""
    indexed = (8192 * K26_HIDDEN + 8192 * K26_TOP_K * K26_HIDDEN) * 2
    for release in ((0, 32, 0), (0, 33, 0), (0, 34, 0)):
        nbytes, how = _int4(release)
        assert nbytes == indexed and "HummingIndexedExperts" in how
        nbytes, how = _int4(release, ep=True)
        assert nbytes == 2 * 8192 * K26_TOP_K * K26_HIDDEN * 2 and "HummingGroupedExperts" in how
    assert _int4((0, 33, 0), env={"VLLM_HUMMING_MOE_GEMM_TYPE": "grouped"})[0] == 0  # not read


def test_int4_w4a16_experts_not_priced_where_not_read():
    assert _int4((0, 26, 0), hardware="amd-mi300x", vendor="amd")[0] == 0
    assert _int4((0, 26, 0), moe_backend="marlin")[0] == 0
    assert _int4((0, 26, 0), tp=2, dp=4, ep=True)[0] == 0  # sequence-parallel MoE
    assert _int4((0, 26, 0), tp=64)[0] == 0  # a 32-wide shard: off Marlin's tiles


def test_int4_workspace_enters_the_activation_under_the_sampler(cli):
    """The same Kimi-K2.6 command at 0.26.0 with and without --moe-backend (named: not read): the sampler warm-up's
    1,024 rows hold 2.19 GiB, above the forward's temporaries, and the Marlin workspace sits under it, so the
    activation moves by the workspace, 1.75 GiB."""
    serve = "vllm serve moonshotai/Kimi-K2.6 --tensor-parallel-size 8 --max-model-len 131072"
    runs = {}
    for extra in ("", " --moe-backend marlin"):
        out = cli(
            "fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve + extra, "--engine-version", "0.26.0", "--json"
        )
        runs[extra] = json.loads(out.stdout)["engine"]
    assert "MarlinExperts for the INT4 W4A16 experts" in runs[""]["sources"]["activation"]
    marlin = _int4((0, 26, 0))[0]
    assert runs[""]["activation_bytes"] - runs[" --moe-backend marlin"]["activation_bytes"] == marlin


def test_v4_mxfp4_on_sm100_at_0_20_takes_trtllm_modular_over_the_gathered_rows():
    """DeepSeek-V4's MXFP4 experts on the SM100 family in vLLM 0.20.0 at DP > 1 with EP (moe_workspace.py: the
    monolithic TRT-LLM kernel refuses dp_size > 1, TrtLlmMxfp4ExpertsModular's workspace_shapes gives (0,), (0,) and
    the (M, K) output): the manager's buffer is the all-gathered M x K bf16 output; at DP 1, another release or a named
    backend it is not read (0)."""
    nbytes, how = _mxfp4((0, 20, 0), hardware="nvidia-gb200-nvl72", tp=1, dp=8, ep=True, tokens=32768)
    assert nbytes == 8 * 32768 * V4F_HIDDEN * 2 and "TrtLlmMxfp4ExpertsModular" in how
    for kw in (dict(dp=1, tp=8, ep=True), dict(dp=8, tp=1, ep=False), dict(dp=8, tp=1, ep=True, moe_backend="marlin")):
        assert _mxfp4((0, 20, 0), hardware="nvidia-b200", **kw)[0] == 0
    assert _mxfp4((0, 21, 0), hardware="nvidia-b200", tp=1, dp=8, ep=True)[0] == 0


def test_trtllm_mxfp4_moment_follows_flashinfer_0_6_8_sizing():
    """flashinfer-python 0.6.8.post1 (vLLM 0.20.0's pin), trtllm_fused_moe_kernel_launcher.cu: the default tile is the
    smallest candidate around nextPowerOfTwo(M x top_k / local experts) (tiles 8-256 for MXFP8 activations), and the
    padded rows are one CTA an expert plus one a tile of the rest (runner.h getMaxPermutedPaddedCount). DeepSeek-V4-Pro
    (hidden 7,168, intermediate 3,072, 384 experts, top 6, mHC 4) at DP 8 x 32,768 tokens, the InferenceX GB200
    prefill worker: 262,144 rows, 32,768 a local expert -> tile 128, 384 x 128 + (1,572,864 - 384) // 128 x 128 =
    1,621,632 padded rows, gemm2_output 1,621,632 x 7,168 bf16."""
    from k3plan.engines.vllm.moe_workspace import trtllm_mxfp4_moe_moment, trtllm_padded_rows, trtllm_tile

    assert trtllm_tile(262_144, 6, 48) == 128
    assert trtllm_tile(1, 6, 48) == 8  # nextPowerOfTwo(0.125) = 1, clamped to the first tile
    assert trtllm_padded_rows(262_144, 6, 384, 128) == 1_621_632
    args = dict(
        release=(0, 20, 0),
        vendor="nvidia",
        hardware="nvidia-gb200-nvl72",
        expert_formats=("ds_fp4",),
        expert_parallel=True,
        tp=1,
        dp=8,
        top_k=6,
        hidden=7168,
        intermediate=3072,
        experts=384,
        hc_mult=4,
        tokens=32768,
    )
    got = trtllm_mxfp4_moe_moment(**args)
    assert got is not None
    gemm2 = 1_621_632 * 7168 * 2
    gemm1 = 1_621_632 * 3072 + 1_621_632 * 96
    gathered = 262_144 * 7168 * 2 + 262_144 * 6 * 12
    quantized = 262_144 * 7168 + 262_144 * 224
    layer = 2 * 32768 * 4 * 7168 * 2 + 2 * 32768 * 7168 * 2 + 32768 * 384 * 4
    index = 4 * (262_144 * 6 + 1_621_632)
    assert got[0] == gemm2 + gemm1 + gathered + quantized + layer + index
    for change in (dict(release=(0, 21, 0)), dict(dp=1), dict(hardware="nvidia-h200"), dict(moe_backend="marlin")):
        assert trtllm_mxfp4_moe_moment(**{**args, **change}) is None
