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
