"""The MoE workspace vLLM's profile run leaves allocated under the sampler warm-up (k3plan.engines.vllm.moe_workspace):
the kernel each release picks for FP8-block experts and what its workspace holds, read in the vLLM 0.11.0-0.20.0
wheels (PyPI), and where it enters the activation the worker subtracts."""

from __future__ import annotations

import json

from k3plan.engines.vllm.moe_workspace import profile_moe_workspace
from k3plan.engines.vllm.sampler import sampler_profile_peak

# deepseek-ai/DeepSeek-R1-0528's config.json: hidden_size, moe_intermediate_size, num_experts_per_tok, vocab_size
HIDDEN, INTERMEDIATE, TOP_K, VOCAB = 7168, 2048, 8, 129_280


def _ws(release, *, hardware="nvidia-h200", vendor="nvidia", tokens=8192, ep=False, env=None, formats=("fp8_block",)):
    return profile_moe_workspace(
        release=release,
        vendor=vendor,
        hardware=hardware,
        expert_formats=formats,
        expert_parallel=ep,
        tp=8,
        top_k=TOP_K,
        hidden=HIDDEN,
        intermediate=INTERMEDIATE,
        tokens=tokens,
        env=env or {},
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
    assert _ws((0, 18, 0), ep=True) == 0  # expert parallelism: not read
    assert _ws((0, 18, 0), hardware="amd-mi300x", vendor="amd", env={"VLLM_ROCM_USE_AITER": "1"}) == 0
    assert _ws((0, 18, 0), formats=("int4_g32",)) == 0
    # the 0.26.0, 0.28.0, 0.33.0 and 0.34.0 wheels keep the selection, the shapes and the workspace manager
    assert _ws((0, 21, 0)) == _ws((0, 33, 0)) == _ws((0, 34, 0)) == triton
    assert _ws((0, 35, 0)) == triton  # a later release: priced by the newest read's rules (0.34.0)
    assert _ws(None) == 0


def test_the_chunk_caps_the_tokens_to_0_17_and_not_after():
    """VLLM_FUSED_MOE_CHUNK_SIZE (16,384) chunks the modular kernel to 0.17.x; 0.18.0 dropped the chunking."""
    assert _ws((0, 17, 0), tokens=32768) == _ws((0, 17, 0), tokens=16384)
    assert _ws((0, 18, 0), tokens=32768) == 2 * _ws((0, 18, 0), tokens=16384)


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
