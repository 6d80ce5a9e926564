"""SemiAnalysisAI/InferenceX's single-node nightly commands (@843c6254) read through --serve, none refused for a setting
k3plan does not know (issue 47 item 2: "the engines' own recipe and nightly flags are never refused for being
unknown"). Each command below is what the nightly's script runs for one matrix row, as its benchmark_lib / workflow
compose it (configs/nvidia-master.yaml, amd-master.yaml through utils/matrix_logic/generate_sweep_configs.py); the
scripts: benchmarks/single_node/agentic/dsv4_fp4_b200_sglang_mtp.sh, agentic/kimik3_fp4_b300_vllm_mtp.sh,
fixed_seq_len/dsv4_fp8_h200_mtp.sh and fixed_seq_len/dsv4_fp4_mi355x_sglang.sh. Of the 228 distinct DeepSeek / Kimi
commands the matrix gives, the nightlies set 62 environment variables and 10 flags k3plan did not know (session 32's
sweep, each refusal peeled off in turn); after this 212 start and the 16 left are refused by name for what they do
(an unbundled checkpoint, SGLang's speculative decoding, a setting with an unpriced memory effect), none as unknown."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import CAVEAT_ENV, IGNORED_ENV, parse_serve
from k3plan.errors import K3PlanError

# agentic/dsv4_fp4_b200_sglang_mtp.sh at TP 8, concurrency 2 (its SGLang speculative flags are a separate refusal,
# below; the agentic row without MTP runs this line)
SGLANG_V4_AGENTIC = (
    "PYTHONNOUSERSITE=1 SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1 "
    "SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1 SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=1 "
    "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=1 SGLANG_OPT_USE_JIT_INDEXER_METADATA=1 SGLANG_OPT_USE_JIT_NORM=1 "
    "SGLANG_OPT_USE_TOPK_V2=1 SGLANG_SIMULATE_ACC_LEN=2.49 SGLANG_SIMULATE_ACC_METHOD=match-expected "
    "SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token SGLANG_TIMEOUT_KEEP_ALIVE=900 TORCH_CUDA_ARCH_LIST=10.0 "
    "TRITON_PTXAS_PATH=/usr/local/cuda-13.0/bin/ptxas python3 -m sglang.launch_server --model-path "
    "deepseek-ai/DeepSeek-V4-Pro --served-model-name /lustre/fsw/models/deepseek-v4-pro --host 0.0.0.0 --port 8888 "
    "--trust-remote-code --tp 8 --moe-runner-backend flashinfer_mxfp4 --disable-flashinfer-autotune "
    "--mem-fraction-static 0.88 --swa-full-tokens-ratio 0.1 --max-running-requests 16 --cuda-graph-max-bs 16 "
    "--chunked-prefill-size 8192 --tool-call-parser deepseekv4 --reasoning-parser deepseek-v4 --watchdog-timeout 1800 "
    "--weight-loader-prefetch-checkpoints --enable-metrics --enable-cache-report --enable-hierarchical-cache "
    "--hicache-ratio 8 --hicache-write-policy write_through --hicache-io-backend direct "
    "--hicache-mem-layout page_first_direct"
)
# agentic/kimik3_fp4_b300_vllm_mtp.sh's TP8 + DCP8 line (its separate DSpark draft is refused by name; the row
# without it runs this)
VLLM_K3_DCP = (
    "MC_ENABLE_DEST_DEVICE_AFFINITY=1 MC_GID_INDEX=3 MC_SLICE_SIZE=1048576 MC_STORE_MEMCPY=1 MC_WORKERS_PER_CTX=4 "
    "MOONCAKE_CONFIG_PATH=/workspace/results/mooncake_config.json PYTHONHASHSEED=42 PYTHONNOUSERSITE=1 "
    "TORCH_CUDA_ARCH_LIST=10.0 VLLM_ALLREDUCE_USE_FLASHINFER=1 VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION=1 "
    "VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_HTTP_TIMEOUT_KEEP_ALIVE=900 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 "
    "VLLM_MOONCAKE_LOAD_RECV_THREADS=4 VLLM_PREFIX_CACHE_RETENTION_INTERVAL=0 VLLM_RPC_TIMEOUT=600000 "
    "VLLM_USE_DIRECT_DCP_A2A=1 VLLM_USE_DIRECT_DCP_KV_GATHER=1 VLLM_USE_DIRECT_DCP_Q_GATHER=1 "
    "VLLM_USE_V2_MODEL_RUNNER=1 WITH_NVIDIA_PEERMEM=0 vllm serve moonshotai/Kimi-K3 --served-model-name "
    "moonshotai/Kimi-K3 --host 0.0.0.0 --port 8888 --tensor-parallel-size 8 --decode-context-parallel-size 8 "
    "--dcp-comm-backend a2a --max-num-seqs 2 --gpu-memory-utilization 0.92 --max-num-batched-tokens 16384 "
    "--trust-remote-code --language-model-only --load-format fastsafetensors --moe-backend auto "
    "--no-enable-flashinfer-autotune --enable-cumem-allocator --enable-prefix-caching --prefix-match-unit 128 "
    "--kv-cache-dtype fp8 --stream-interval 10 --attention-backend TOKENSPEED_MLA --attention-config "
    '\'{"mla_prefill_backend":"TRTLLM_RAGGED","use_prefill_query_quantization":true}\' --compilation-config '
    '\'{"cudagraph_mode":"FULL_AND_PIECEWISE","cudagraph_capture_sizes":[8,16,64,128,256,512,1024,2048,4096,8192]}\' '
    "--disable-uvicorn-access-log --kv-transfer-config "
    '\'{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute"}\''
)
# fixed_seq_len/dsv4_fp8_h200_mtp.sh at TP 8 (8k / 1k: max-model-len 9,472)
VLLM_V4_H200 = (
    "VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=<est> vllm serve "
    "deepseek-ai/DeepSeek-V4-Pro --host 0.0.0.0 --port 8888 --trust-remote-code --kv-cache-dtype fp8 --block-size 256 "
    "--no-enable-prefix-caching --tensor-parallel-size 8 --data-parallel-size 1 --max-model-len 9472 "
    "--quantization deepseek_v4_fp8 --gpu-memory-utilization 0.95 --max-num-seqs 512 --max-num-batched-tokens 512 "
    '--no-enable-flashinfer-autotune --compilation-config \'{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY"}\' '
    '--speculative-config \'{"method":"mtp","num_speculative_tokens":2}\' --tokenizer-mode deepseek_v4 '
    "--tool-call-parser deepseek_v4 --enable-auto-tool-choice --reasoning-parser deepseek_v4"
)
# fixed_seq_len/dsv4_fp4_mi355x_sglang.sh's DP-attention row (its --disable-shared-experts-fusion left out: DeepSeek-V4
# fuses nothing without --enforce-shared-experts-fusion, engines/sglang/serve.py shared_fusion)
SGLANG_V4_MI355X = (
    "AITER_BF16_FP8_MOE_BOUND=0 GPU_MAX_HW_QUEUES=5 SGLANG_DEFAULT_THINKING=1 SGLANG_DP_SHARED_EXPERT_LOCAL=1 "
    "SGLANG_DP_USE_GATHERV=1 SGLANG_DP_USE_REDUCE_SCATTER=1 SGLANG_DSV4_REASONING_EFFORT=max "
    "SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton SGLANG_SHARED_EXPERT_TP1=1 SGLANG_USE_ROCM700A=0 sglang serve "
    "--model-path deepseek-ai/DeepSeek-V4-Pro --host=0.0.0.0 --port 8888 --tensor-parallel-size 8 --dp 8 "
    "--enable-dp-attention --enable-prefill-delayer --enable-two-batch-overlap --trust-remote-code "
    "--disable-radix-cache --attention-backend dsv4 --cuda-graph-max-bs 64 --max-running-requests 64 "
    "--mem-fraction-static 0.90 --swa-full-tokens-ratio 0.15 --page-size 256 --kv-cache-dtype fp8_e4m3 "
    "--context-length 9472 --chunked-prefill-size 65536 --watchdog-timeout 1800"
)


def _env(command: str) -> dict[str, str]:
    head = command.split(" vllm serve ")[0].split(" python3 -m ")[0].split(" sglang serve ")[0]
    return dict(a.split("=", 1) for a in head.split())


# the SGLang release each nightly's image runs (configs/*-master.yaml @843c6254, fit --engine-version): the B200 agentic
# row's lmsysorg/sglang:dev-nightly-0820 precedes 0.5.18 (its wheel built 2026-08-21); the MI355X row's
# lmsysorg/sglang-rocm:v0.5.14-rocm720-mi35x-20260706 names 0.5.14. The vLLM rows keep vLLM's default read.
SGLANG_V4_AGENTIC_RELEASE = "0.5.18"
SGLANG_V4_MI355X_RELEASE = "0.5.14"


@pytest.mark.parametrize(
    ("hardware", "command", "caveats", "release"),
    [
        ("nvidia-b200", SGLANG_V4_AGENTIC, (), SGLANG_V4_AGENTIC_RELEASE),
        ("nvidia-b300", VLLM_K3_DCP, ("--enable-cumem-allocator", "VLLM_USE_V2_MODEL_RUNNER=1"), None),
        ("nvidia-h200", VLLM_V4_H200.replace("<est>", "0"), (), None),
        (
            "amd-mi355x",
            SGLANG_V4_MI355X,
            ("SGLANG_SHARED_EXPERT_TP1=1", "SGLANG_HACK_FLASHMLA_BACKEND=unified"),
            SGLANG_V4_MI355X_RELEASE,
        ),
    ],
    ids=["sglang-v4-b200-agentic", "vllm-k3-b300-dcp8", "vllm-v4-h200-mtp", "sglang-v4-mi355x-dp8"],
)
def test_an_inferencex_nightly_command_starts_with_every_setting_read(cli, hardware, command, caveats, release):
    at = ("--engine-version", release) if release else ()
    got = cli("fit", "-H", hardware, "-t", "8", "--serve", command, "--json", *at)
    assert got.exit_code == 0, got.stdout + got.stderr
    out = json.loads(got.stdout)
    assert out["engine"]["starts"] and out["engine"]["kv_pool_tokens"] > 0
    serve = out["engine"]["serve"]
    env = _env(command)
    # every variable is harmless (listed), caveated, or read by the engine's own rule (the CUDA-graph switch)
    assert set(env) <= IGNORED_ENV | set(CAVEAT_ENV) | {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"}
    listed = {i.split("=", 1)[0] for i in serve["ignored"] if "=" in i}
    assert listed >= {name for name in env if name in IGNORED_ENV}
    for caveat in caveats:
        assert any(c.startswith(caveat) for c in serve["caveats"]), (caveat, serve["caveats"])


def test_the_cuda_graph_estimate_switch_is_read_not_refused(cli):
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS was priced (engines/vllm/cudagraph.py serve_estimate) yet refused as
    unknown by --serve: the nightly's value now reaches the pool (0: the estimate is not subtracted)."""
    pools = {}
    for est in (0, 1):
        got = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", VLLM_V4_H200.replace("<est>", str(est)), "--json")
        assert got.exit_code == 0, got.stdout
        pools[est] = json.loads(got.stdout)["engine"]["kv_pool_bytes"]
    assert pools[0] > pools[1]


def test_a_local_checkpoint_path_is_refused_saying_what_to_write():
    with pytest.raises(K3PlanError, match="local path.*Hugging Face id in its place"):
        parse_serve(
            "vllm serve /lustre/fsw/models/deepseek-v4-pro --tensor-parallel-size 8", platform="gpu", device_gib=179
        )


def test_sglang_s_speculative_flags_are_read_with_their_companions():
    """InferenceX's dsr1_fp8_*_mtp.sh pass SGLang's algorithm with its companions: read as SGLang resolves them
    (engines/sglang/spec.py: topk 1, so the draft tokens are steps + 1); the companions without the algorithm run no
    speculative decoding and are refused saying so."""
    q = parse_serve(
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --tp 8 "
        "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1",
        platform="gpu",
        device_gib=140,
    )
    assert (q.speculative.algorithm, q.speculative.num_steps, q.speculative.num_draft_tokens) == ("EAGLE", 3, 4)
    with pytest.raises(K3PlanError, match="without --speculative-algorithm"):
        parse_serve(
            "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --tp 8 "
            "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
            platform="gpu",
            device_gib=140,
        )


@pytest.mark.parametrize(
    ("env", "listed"),
    [("HSA_NO_SCRATCH_RECLAIM=1", False), ("HSA_NO_SCRATCH_RECLAIM=0", True), ("SGLANG_AITER_MLA_PERSIST=0", True)],
)
def test_a_caveat_follows_its_value(env, listed):
    q = parse_serve(
        f"{env} SGLANG_USE_AITER=1 python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --tp 8",
        platform="gpu",
        device_gib=178,
    )
    assert (env in q.ignored) == listed
    assert any(c.startswith(env) for c in q.caveats) == (not listed)
    assert "SGLANG_USE_AITER=1" in q.ignored


def test_what_the_launchers_pass_into_the_container_is_read_as_harmless():
    """runners/launch_mi355x-amds.sh, launch_mi325x-amds.sh and launch_mi325x-tw.sh (@843c6254) add these to the
    script's own environment."""
    q = parse_serve(
        "VLLM_CACHE_ROOT=/it/vllm TRITON_CACHE_DIR=/it/triton CUDA_DEVICE_ORDER=PCI_BUS_ID vllm serve "
        "deepseek-ai/DeepSeek-V4-Pro --tensor-parallel-size 8",
        platform="gpu",
        device_gib=287,
    )
    assert {"VLLM_CACHE_ROOT=/it/vllm", "TRITON_CACHE_DIR=/it/triton", "CUDA_DEVICE_ORDER=PCI_BUS_ID"} <= set(q.ignored)


# InferenceX's multi-node recipes (@843c6254 benchmarks/multi_node/srt-slurm-recipes/): the prefill worker of
# sglang/deepseek-v4/8k1k/disagg-b200-low-latency-1p1d-tp8-tp8-mtp.yaml, its prefill_environment and sglang_config
# as srt-slurm writes them into the worker's command line (model-path: the checkpoint's id in place of /model/); its
# container lmsysorg/sglang:nightly-dev-cu13-20260710-cfc66e05 is the nightly of the day 0.5.15 was tagged (the 0.5.15
# wheel's scm_version.json: 2026-07-10): 0.5.15's code or the main just before it, read as 0.5.15 either way
SGLANG_V4_DISAGG_RELEASE = "0.5.15"
SGLANG_V4_DISAGG_PREFILL = (
    "PYTHONUNBUFFERED=1 SGLANG_RADIX_FORCE_MISS=1 SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1 SGLANG_DEFAULT_THINKING=1 "
    "SGLANG_DSV4_REASONING_EFFORT=max SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1 SGLANG_OPT_SWA_EVICT_DROP_PAGE_MARGIN=1 "
    "NCCL_CUMEM_ENABLE=1 UCX_TLS=rc,cuda_ipc,cuda_copy,tcp,self SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=100000 "
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT=100000 SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1 "
    "python3 -m sglang.launch_server --served-model-name deepseek-ai/DeepSeek-V4-Pro --model-path "
    "deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --tool-call-parser deepseekv4 --disaggregation-mode prefill "
    "--disaggregation-transfer-backend nixl --tensor-parallel-size 8 --data-parallel-size 1 --expert-parallel-size 1 "
    "--moe-runner-backend flashinfer_mxfp4 --disable-flashinfer-autotune --mem-fraction-static 0.9 "
    "--max-running-requests 16 --cuda-graph-max-bs 8 --chunked-prefill-size 65536"
)


def test_a_multi_node_recipe_s_disaggregated_worker_starts_with_its_settings_read(cli):
    at = ("--engine-version", SGLANG_V4_DISAGG_RELEASE)
    got = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", SGLANG_V4_DISAGG_PREFILL, "--json", *at)
    assert got.exit_code == 0, got.stdout + got.stderr
    out = json.loads(got.stdout)
    assert out["engine"]["starts"]
    assert {"--disaggregation-mode", "--disaggregation-transfer-backend"} <= set(out["engine"]["serve"]["ignored"])
    # --expert-parallel-size is ServerArgs' spelling of --ep-size: 1 is its TP-split experts, as --ep-size 1
    with_ep_size = SGLANG_V4_DISAGG_PREFILL.replace("--expert-parallel-size 1", "--ep-size 1")
    again = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", with_ep_size, "--json", *at).stdout)
    assert again["engine"]["kv_pool_tokens"] == out["engine"]["kv_pool_tokens"]


@pytest.mark.parametrize(
    ("command", "what"),
    [
        # vllm/kimi-k3 and vllm/deepseek-v4 recipes
        ("vllm serve deepseek-ai/DeepSeek-V4-Pro -tp 8 --no-enable-chunked-prefill", "whole prompts a step"),
        ("vllm serve deepseek-ai/DeepSeek-V4-Pro -tp 8 --offload-group-size 8", "weights offloaded to host"),
        ("NVSHMEM_SYMMETRIC_SIZE=16g vllm serve deepseek-ai/DeepSeek-V4-Pro -tp 8", "symmetric heap"),
    ],
)
def test_a_multi_node_recipe_setting_with_an_unpriced_effect_is_refused_with_what_it_does(command, what):
    with pytest.raises(K3PlanError, match=what):
        parse_serve(command, platform="gpu", device_gib=179)


def test_kv_cache_memory_is_vllm_s_abbreviation_of_kv_cache_memory_bytes():
    """The recipe's --kv-cache-memory N (and vLLM's own start log's suggestion, 'Replace gpu_memory_utilization config
    with `--kv-cache-memory=46779679130`', gpu_worker.py) is --kv-cache-memory-bytes to vLLM's parser (argparse's
    prefix matching: engines/vllm/serve.py OPTIONS), the pool a GPU as given."""
    for cmd in (
        "vllm serve moonshotai/Kimi-K3 -tp 8 --kv-cache-memory 10737418240",
        "vllm serve moonshotai/Kimi-K3 -tp 8 --kv-cache-memory=10737418240",
    ):
        assert parse_serve(cmd, platform="gpu", device_gib=179).kv_cache_memory_bytes == 10737418240


# InferenceX's gfx942 DeepSeek-V4.1-Flash arm (agentic/dsv41flash_fp4_mi300x_mtp.sh @0e01a6eb, TP 4)
VLLM_V41_MI300X = (
    "VLLM_ROCM_USE_AITER=1 VLLM_ROCM_USE_AITER_MOE=1 VLLM_USE_BREAKABLE_CUDAGRAPH=0 vllm serve "
    "deepseek-ai/DeepSeek-V4.1-Flash --tensor-parallel-size 4 --language-model-only --engram-config "
    """'{"cpu_offload":true}' --moe-backend aiter --max-model-len 1048576 --max-num-seqs 128 """
    "--max-cudagraph-capture-size 1024 --max-num-batched-tokens 8192 <replay> "
    """--compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}'"""
)


@pytest.mark.parametrize("replay", ["--no-swa-bounded-replay", "--swa-bounded-replay"])
def test_swa_bounded_replay_is_read_as_harmless(cli, replay):
    """--[no-]swa-bounded-replay (vllm 0.31.0 wheel (PyPI): vllm/config/cache.py CacheConfig.swa_bounded_replay) decides
    what prefix caching keeps and replays of V4.1's sliding window (vllm/v1/kv_cache_interface.py SlidingWindowMLASpec
    prefix_cacheable / prefix_replay_tokens; its page and max_memory_usage_bytes do not read it) and is off on ROCm
    whatever is passed (vllm/models/deepseek_v41/attention.py): the pool is the same with either spelling or none."""
    pools = []
    for flag in (replay, ""):
        got = cli(
            "fit", "-H", "amd-mi300x", "-t", "4", "--engine-version", "0.31.0", "--json",
            "--serve", " ".join(VLLM_V41_MI300X.replace("<replay>", flag).split()),
        )  # fmt: skip
        assert got.exit_code == 0, got.stdout
        out = json.loads(got.stdout)["engine"]
        pools.append(out["kv_pool_bytes"])
        if flag:
            assert flag in out["serve"]["ignored"]
    assert pools[0] == pools[1]
