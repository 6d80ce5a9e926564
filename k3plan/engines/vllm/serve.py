"""How ``vllm serve`` reads its command line, as far as k3plan prices it: flag spellings (underscores, --no-X
switches), human-readable ints, the defaults it picks for what a command leaves out, and the launch-line flags
k3plan writes that the reader takes (--all2all-backend)."""

from __future__ import annotations

import json
from typing import Any

from k3plan.engines.flags import TORCHTPU_DEFAULT_BLOCK
from k3plan.engines.release import Release, release_text
from k3plan.engines.serve_values import (
    OptionTable,
    Reading,
    ServeCommand,
    argparse_int,
    config_file_args,
    env_on,
    flag_int,
    json_object,
    read_dcp,
    read_hf_overrides,
    refuse_unpriced,
    suffix_int,
    unabbreviated,
)
from k3plan.engines.torchtpu_vllm import ENGINE as TORCHTPU
from k3plan.engines.tpu_inference import serve as tpu_inference_serve
from k3plan.engines.tpu_inference.llm_class import (
    LM_EVAL,
    translate,  # noqa: F401  # engines.serve's hook: LLM-class scripts
)
from k3plan.engines.vllm import frontend
from k3plan.engines.vllm.all2all_buffers import A2A_ENV, HT_NO_GRAPHS_SOURCE, ht_disables_graphs, read_a2a_env
from k3plan.engines.vllm.attention_config import SM100_FAMILY, fp4_indexer, read_attention
from k3plan.engines.vllm.backend_env import ENV as BACKEND_ENV
from k3plan.engines.vllm.backend_env import read_backend_env
from k3plan.engines.vllm.cudagraph import (
    ESTIMATE_ENV,
    CompilationRead,
    read_compilation,
    with_capture_sizes,
    with_max_capture,
)
from k3plan.engines.vllm.dsv4_pages import UNIFIED_READ, UNIFIED_SOURCE
from k3plan.engines.vllm.engram import ENGRAM_WHEEL_FROM, read_engram
from k3plan.engines.vllm.engram import ENV as ENGRAM_ENV
from k3plan.engines.vllm.eplb import EPLB_WINDOW_DEFAULT
from k3plan.engines.vllm.memory import KV_MEMORY_SOURCE
from k3plan.engines.vllm.online_quant import online_quantization
from k3plan.engines.vllm.serve_flags import FLAGS as SERVE_FLAGS
from k3plan.engines.vllm.serve_flags import RANGES as SERVE_FLAG_RANGES
from k3plan.engines.vllm.serve_flags import RELEASES as SERVE_FLAG_RELEASES
from k3plan.engines.vllm.spec import read_speculative
from k3plan.errors import K3PlanError

ENGINE = "vllm"
# the commands that start vLLM's server (k3plan.engines.serve recognises a command by them): `vllm serve MODEL` and
# vLLM's API server module, the entry point `vllm serve` wraps (the same EngineArgs, the model as --model)
COMMANDS = (
    ServeCommand(("vllm", "serve"), positional_model=True, usage="'vllm serve MODEL ...'"),
    ServeCommand(
        ("python", "-m", "vllm.entrypoints.openai.api_server"),
        positional_model=False,
        usage="'python3 -m vllm.entrypoints.openai.api_server --model MODEL ...'",
    ),
)

# vLLM's own defaults for what a command leaves out (vllm-project/vllm@99d7eb5d vllm/engine/arg_utils.py
# EngineArgs._set_default_args, `vllm serve` = UsageContext.OPENAI_API_SERVER): a device of >= 70 GiB that is
# not an A100 gets max_num_batched_tokens 8192 and max_num_seqs 1024, any other 2048 and 256; max_num_seqs is
# min(that, max_num_batched_tokens). The torch_tpu plugin is an out-of-tree platform (PlatformEnum.OOT, so
# upstream's is_tpu() chip table does not apply) whose get_device_total_memory raises NotImplementedError
# (kowalski-4831/vllm-torchtpu@0095cdcb src/vllm_torchtpu/platforms/tpu_platform.py): device_memory 0, the
# small defaults
VLLM_DEFAULTS_SOURCE = (
    "vllm-project/vllm@99d7eb5d vllm/engine/arg_utils.py EngineArgs._set_default_args (OPENAI_API_SERVER: >= 70 GiB "
    "and not an A100: 8192 / 1024, else 2048 / 256)"
)
VLLM_LARGE_GPU_GIB = 70
# vLLM's LLM class (UsageContext.LLM_CLASS: lm_eval's vllm backend, a script's LLM(...); engines/tpu_inference/
# llm_class.py reads the commands) takes its own entries of the same tables: the large tier 16,384 batched tokens and
# 1,024 sequences, any other 8,192 and 256 (the OpenAI server's 8,192 / 1,024 and 2,048 / 256). Read in the wheel
# (PyPI) of every release from 0.8.4 to 0.34.0 (0.8.5.post1, 0.9.0.1, 0.10.1.1 and the patch releases included),
# vllm/engine/arg_utils.py: EngineArgs._set_default_args_v1 (0.8.4-0.10.2), _set_default_args (0.11.0),
# get_batch_defaults (0.11.1-0.34.0); every release's vllm/entrypoints/llm.py LLM.__init__ passes
# usage_context=UsageContext.LLM_CLASS. The large tier is the OpenAI server's (above and below): a device named h100 or
# h200 at 0.8.4, >= 70 GiB from 0.8.5, an A100 excluded from 0.9.0; from 0.28.0 a >= 160 GiB device is a tier of its
# own whose LLM_CLASS entries are the same 16,384 / 1,024; from 0.33.0 a GB10 (compute capability 12.1) stays on the
# small tier (get_batch_defaults is_gb10; k3plan has no GB10). 0.8.4-0.9.1 keep one default_max_num_seqs for every
# usage context (1,024 / 256), 0.9.2 on a dict with the same LLM_CLASS values. Before 0.8.4 (the 0.8.0-0.8.3 wheels)
# default_max_num_seqs is 1,024 on every device, a release k3plan did not read for its other rules: refused there
LLM_CLASS_READ = ((0, 8, 4), (0, 34, 99))
LLM_CLASS_SOURCE = (
    "vllm 0.8.4-0.34.0 wheels (PyPI) vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (0.8.4-0.10.2) / "
    "_set_default_args (0.11.0) / get_batch_defaults (0.11.1-0.34.0) (LLM_CLASS: the large tier 16384 / 1024, "
    "else 8192 / 256)"
)
# vLLM's default max_num_seqs is cut to max_num_batched_tokens from 0.10.1 (EngineArgs._set_default_args_v1:
# min(default_max_num_seqs[usage_context], self.max_num_batched_tokens), read in the 0.10.1, 0.10.2 and 0.11.0
# wheels (PyPI); 0.8.5, 0.9.2 and 0.10.0 set the default as it is), and the scheduler's config refuses fewer batched
# tokens than sequences (max_num_batched_tokens < max_num_seqs: ValueError, vllm/config.py SchedulerConfig in 0.8.5,
# 0.9.2 and 0.10.0, vllm/config/scheduler.py in 0.10.1 and 0.10.2): a command of those releases that sets a budget
# under the default batch and no --max-num-seqs does not start. The check is priced in the releases read for it
SEQS_CLAMP_FROM = (0, 10, 1)
SEQS_CLAMP_SOURCE = (
    "vllm 0.10.0 wheel (PyPI) vllm/engine/arg_utils.py EngineArgs._set_default_args_v1: self.max_num_seqs = "
    "default_max_num_seqs[usage_context]; min(..., self.max_num_batched_tokens) from the 0.10.1 wheel"
)
BATCH_CHECK_READ = ((0, 8, 4), (0, 11, 0))
BATCH_CHECK_SOURCE = (
    "vllm 0.8.4 / 0.8.5 / 0.9.2 / 0.10.0 wheels (PyPI) vllm/config.py SchedulerConfig._verify_args, 0.10.1 / 0.10.2 "
    "and 0.26.0 / 0.28.0 / 0.29.0 / 0.31.0 / 0.33.0 / 0.34.0 vllm/config/scheduler.py SchedulerConfig._verify_args"
)
# --performance-mode (VllmConfig.performance_mode, registered from 0.17.0: the 0.16.0 wheel's parser has no such option,
# so a command read as an earlier release is refused by the parser's check): "balanced" is the default and changes
# nothing. "throughput" doubles max_num_batched_tokens and max_num_seqs where the command leaves each unset, after the
# defaults (the batched DP MoE's 256 included) and before max_num_seqs is cut to the budget
# (EngineArgs._set_default_max_num_seqs_and_batched_tokens_args); the doubled max_num_seqs then moves the default
# capture ceiling (min(max_num_seqs x (1 + k) x 2, ceiling): engines/vllm/cudagraph.py), which k3plan derives from
# it. Its only other reader is a log line (VllmConfig.__post_init__ 'Performance mode set to'). "interactivity"
# captures every size 1..min(ceiling, 32) where the compilation config gives no capture sizes
# (VllmConfig._set_cudagraph_sizes), and from 0.34.0 also picks the varlen-decode and prefill capture grids
# (get_varlen_decode_cudagraph_token_sizes, prefill_cudagraph_capture_grid): more graphs, not priced by k3plan's
# capture grid, so refused. Read in the 0.17.0, 0.20.0 and 0.34.0 wheels (PyPI): the only files naming
# performance_mode are vllm/config/vllm.py and vllm/engine/arg_utils.py
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")
PERFORMANCE_MODE_FROM = (0, 17, 0)
PERFORMANCE_MODE_SOURCE = (
    "vllm 0.17.0, 0.20.0 and 0.34.0 wheels (PyPI) vllm/engine/arg_utils.py EngineArgs."
    "_set_default_max_num_seqs_and_batched_tokens_args ('If throughput mode is set, double max_num_batched_tokens and "
    "max_num_seqs': each where the command left it unset, before max_num_seqs = min(max_num_seqs, "
    "max_num_batched_tokens)); vllm/config/vllm.py VllmConfig.performance_mode and _set_cudagraph_sizes (interactivity)"
)


def read_performance_mode(r: Reading, raw: str | None) -> bool:
    """--performance-mode (``PERFORMANCE_MODE_SOURCE``): True where it is "throughput" (the defaults doubled by the
    caller), "balanced" listed as ignored, "interactivity" refused (a capture grid k3plan does not price)."""
    if raw is None:
        return False
    if r.release is not None and r.release < PERFORMANCE_MODE_FROM:
        raise K3PlanError(
            f"--serve: vLLM {release_text(r.release)} refuses --performance-mode: its parser has no such option "
            f"(registered from {release_text(PERFORMANCE_MODE_FROM)}: the 0.16.0 wheel (PyPI) vllm/engine/arg_utils.py "
            "and vllm/config/vllm.py name no performance_mode, the 0.17.0 wheel's EngineArgs.performance_mode); "
            "remove it, or read the command as a later release (fit --engine-version)"
        )
    mode = raw.strip().lower()
    if mode not in PERFORMANCE_MODES:
        raise K3PlanError(f"--serve: --performance-mode {raw}: expected one of {', '.join(PERFORMANCE_MODES)}")
    if r.platform == "tpu":
        raise K3PlanError(
            "--serve: --performance-mode on a TPU: the plugin's batch defaults under it were not read by k3plan; "
            "remove it to price the command without it"
        )
    if mode == "interactivity":
        raise K3PlanError(
            "--serve: --performance-mode interactivity captures a CUDA graph for every batch size up to 32 (and, "
            f"from 0.34.0, its own decode and prefill grids: {PERFORMANCE_MODE_SOURCE}), which k3plan does not "
            "price; remove it to price vLLM without it"
        )
    if mode == "balanced":
        r.ignored.append("--performance-mode")
        return False
    return True


# VLLM_USE_V1=0 (default 1: vllm/envs.py) runs the V0 engine in the 0.8.5, 0.9.2 and 0.10.2 wheels (PyPI); its worker
# sizes the pool by the same memory_profiling (vllm/worker/worker.py Worker.determine_num_available_blocks:
# requested - non_kv_cache_memory, num_gpu_blocks = available // cache_block_size) after V0's own profile run and
# sampler (vllm/worker/model_runner.py, not read); the 0.11.0 wheel has no vllm/worker/worker.py
V0_GONE_FROM = (0, 11, 0)
V0_SOURCE = (
    "the 0.8.5 / 0.9.2 / 0.10.2 wheels (PyPI): vllm/worker/worker.py Worker.determine_num_available_blocks, "
    "requested - non_kv_cache_memory, after V0's own profile run and sampler (vllm/worker/model_runner.py, not read); "
    "gone from the 0.11.0 wheel"
)
# an A100 (80 GB) has the large defaults before 0.9.0: the 0.8.5 wheel's EngineArgs._set_default_args_v1 tiers on
# device_memory >= 70 GiB alone (8192 / 1024), the 0.9.0, 0.9.2, 0.10.2 and 0.11.0 wheels (PyPI) on
# `device_memory >= 70 * GiB_bytes and "a100" not in device_name` (vllm/engine/arg_utils.py)
VLLM_A100_SMALL_FROM = (0, 9, 0)
# 0.8.4 tiers by the device's name: `"h100" in device_name or "h200" in device_name` gets 8192 / 1024, any other GPU
# (an H20, a B200) 2048 / 256 (the 0.8.4 wheel (PyPI) vllm/engine/arg_utils.py EngineArgs._set_default_args_v1,
# current_platform.get_device_name().lower()); by memory (>= 70 GiB) from the 0.8.5 wheel
VLLM_LARGE_BY_MEMORY_FROM = (0, 8, 5)
VLLM_LARGE_BY_NAME_SOURCE = (
    "vllm 0.8.4 wheel (PyPI) vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (OPENAI_API_SERVER: a device "
    "named h100 or h200: 8192 / 1024, else 2048 / 256; by device memory from 0.8.5)"
)
VLLM_A100_LARGE_SOURCE = (
    "vllm 0.8.5 wheel (PyPI) vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 (OPENAI_API_SERVER: >= 70 GiB: "
    "8192 / 1024, an A100 included; 'a100' excluded from the 0.9.0 wheel)"
)
# from 0.28.0 a third tier: a device of >= 160 GiB gets max_num_batched_tokens 16,384 (and max_num_seqs 1,024)
# whatever its vendor (vllm-project/vllm#51726; EngineArgs.get_batch_defaults in the 0.28.0 wheel, unchanged through
# 0.31.0; 0.27.0's has the two tiers above): so at releases.py NEWEST_RELEASE, a command's release where it names none, and
# under fit --engine-version 0.28.0 or later. vllm-project/vllm#53961: MI300X (191.98 GiB) falls in it
VLLM_HUGE_GPU_GIB = 160
VLLM_HUGE_TIER_FROM = (0, 28, 0)
VLLM_HUGE_SOURCE = (
    "vllm 0.28.0 wheel vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (>= 160 GiB: 16384 / 1024; "
    "vllm-project/vllm#51726)"
)
# from 0.20.0 a command whose MoE runs the batched DP all2all (--all2all-backend deepep_low_latency or nixl_ep with
# --enable-expert-parallel and DP > 1: ParallelConfig.use_batched_dp_moe) and sets no --max-num-batched-tokens gets
# SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP, 256, whatever the device (and max_num_seqs cut to it);
# the 0.19.0 wheel has no such default (its low-latency buffers take VLLM_MOE_DP_CHUNK_SIZE: engines/vllm/
# all2all_buffers.py)
BATCHED_DP_DEFAULT_FROM = (0, 20, 0)
BATCHED_DP_BACKENDS = ("deepep_low_latency", "nixl_ep")
BATCHED_DP_DEFAULT_TOKENS = 256
BATCHED_DP_SOURCE = (
    "vllm 0.20.0 and 0.33.0 wheels (PyPI) vllm/engine/arg_utils.py EngineArgs."
    "_set_default_max_num_seqs_and_batched_tokens_args (parallel_config.use_batched_dp_moe: "
    "SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP = 256, vllm/config/scheduler.py; "
    "vllm/config/parallel.py ParallelConfig.use_batched_dp_moe: deepep_low_latency / nixl_ep, EP, DP > 1)"
)
# vLLM's extensible KV cache switch (CacheConfig.enable_extensible_kv_cache, 0.34.0): read where the release has it
EXTENSIBLE_FLAG_NAME = "--enable-extensible-kv-cache"
# vLLM's switches (argparse BooleanOptionalAction: --X and --no-X, no value) that k3plan reads
VLLM_SWITCHES = {
    "--enable-expert-parallel",
    "--language-model-only",
    "--enable-sleep-mode",
    "--enable-cumem-allocator",
    "--monokernel",
    EXTENSIBLE_FLAG_NAME,
    "--enable-dbo",  # dual-batch overlap (ParallelConfig.enable_dbo): read_dbo below
}
# EngineArgs' flags added in the 0.32.0-0.34.0 wheels (PyPI; vllm/engine/arg_utils.py, the fields' configs cited) that
# change nothing a GPU holds, read and ignored (0: a switch, with its --no- form; 1: a value): metrics histogram
# buckets (ObservabilityConfig.custom_histogram_buckets, 0.32.0), HyperConnection sequence parallelism ('Currently
# supported by Qwen4Exp', ParallelConfig.enable_hc_sp, 0.32.0), the engine -> worker broadcast's host shared-memory
# arena (ParallelConfig.enable_shm_tensor_arena, 0.32.0), sleep mode's graph backup to the CPU and its backend
# (ModelConfig.sleep_mode_offload_cudagraph 0.32.0, sleep_mode_backend 0.33.0), the engine watchdog
# (VllmConfig.watchdog_config, 0.33.0), cache-aware admission and a KV connector's in-flight loads (SchedulerConfig,
# 0.34.0), and the loader's startup checkpoint preparation and file order (ModelConfig.checkpoint_prepare_on_startup,
# LoadConfig.shuffle_safetensors_files, 0.34.0), and DeepSeek-V4.1's SWA bounded replay (CacheConfig.swa_bounded_replay,
# 0.31.0 wheel, not in 0.29.0's: which sliding-window blocks take part in prefix caching, read by the scheduler and the
# KV manager through vllm/v1/kv_cache_interface.py SlidingWindowMLASpec.prefix_cacheable / prefix_replay_tokens, not by
# max_memory_usage_bytes or the pool's sizing; forced off on ROCm, models/deepseek_v41/attention.py)
_NEWER_SWITCHES = (
    "--swa-bounded-replay",
    "--enable-hc-sp",
    "--enable-shm-tensor-arena",
    "--sleep-mode-offload-cudagraph",
    "--checkpoint-prepare-on-startup",
    "--shuffle-safetensors-files",
)
NEWER_IGNORED: dict[str, int] = {
    **{f: 0 for f in _NEWER_SWITCHES},
    **{f"--no-{f[2:]}": 0 for f in _NEWER_SWITCHES},
    "--custom-histogram-buckets": 1,
    "--sleep-mode-backend": 1,
    "--watchdog-config": 1,
    "--cache-aware-admission-threshold": 1,
    "--cache-aware-admission-window": 1,
    "--max-num-inflight-kv-loads": 1,
}
# the decode MonoKernel (KernelConfig.monokernel, vllm 0.33.0 wheel (PyPI) vllm/config/kernel.py: 'a persistent kernel
# that runs most or all of one decoder layer in a single launch (DeepSeek-V4.1 on MI355X, DeepSeek-V4-Pro at TP8 on
# MI355X)'): its buffers were not read
MONOKERNEL = "--monokernel"
# From 0.34.0 vLLM sizes the KV cache from the memory free after warmup and CUDA-graph capture: the extensible KV cache
# (CacheConfig.enable_extensible_kv_cache, on by default on CUDA and ROCm), priced in engines/vllm/extensible.py
# (engines/vllm/memory.py vllm_kv_pool). The 0.34 configurations whose sizing path k3plan has not read are refused:
# the cache turned off (--no-enable-extensible-kv-cache, --num-gpu-blocks-override: the estimate path, whose CUDA-graph
# estimate is now Model Runner V2's _profile_cudagraph_memory, not the V1 runner's engines/vllm/cudagraph.py reads) and
# a KV connector (--kv-transfer-config: whether the cache stays on, and how its segments are committed, follow the
# connector's kv_cache_access; vllm 0.34.0 wheel (PyPI), vllm/config/vllm.py VllmConfig._resolve_extensible_kv_cache).
# --kv-cache-memory-bytes turns it off too and is priced as before: the pool as given
MEASURED_POOL_FROM = (0, 34, 0)


def refuse_unread_034(r: Reading) -> None:
    """The 0.34 GPU commands whose KV sizing k3plan has not read (the comment above), refused with why; the
    extensible switch on (vLLM's default) read."""
    ver = ".".join(map(str, r.release or ()))
    on, off = r.flags.get(EXTENSIBLE_FLAG_NAME), r.flags.get("--no-" + EXTENSIBLE_FLAG_NAME[2:])
    why = ""
    if off is not None or (on is not None and on.strip().lower() in ("false", "0")):
        why = "--no-enable-extensible-kv-cache: the KV cache sized from the profiling estimate"
    elif r.flags.get("--num-gpu-blocks-override") is not None:
        why = "--num-gpu-blocks-override turns the extensible KV cache off: the KV cache sized from the profiling estimate"
    elif r.flags.get("--kv-transfer-config") is not None or r.flags.get("--kv-offloading-size") is not None:
        why = (
            "--kv-transfer-config / --kv-offloading-size: a KV connector (the offload's: VllmConfig."
            "_post_init_kv_transfer_config) decides whether the extensible KV cache stays on and how it is committed "
            "(its kv_cache_access)"
        )
    if why:
        raise K3PlanError(
            f"--serve: vLLM {ver}: {why}, a path of 0.34.0 k3plan has not read (Model Runner V2's CUDA-graph estimate, "
            "vllm 0.34.0 wheel (PyPI), vllm/config/vllm.py VllmConfig._resolve_extensible_kv_cache); price it with "
            "the extensible KV cache on, or at --engine-version 0.33.0"
        )


# and the API server's (FrontendArgs' bool fields: engines/vllm/frontend.py), read as switches and ignored
SWITCHES = frozenset(VLLM_SWITCHES) | frontend.SWITCHES
# EngineArgs' list flags (nargs="+"): --cudagraph-capture-sizes 1 2 4 8 (CompilationConfig.cudagraph_capture_sizes),
# the names the server answers to (ModelConfig.served_model_name: str | list[str], vllm/engine/arg_utils.py
# get_kwargs; vllm-project/vllm#42426's command passes five) and the API server's list flags (frontend.NARGS)
NARGS = frozenset({"--cudagraph-capture-sizes", "--served-model-name", "--allowed-media-domains"}) | frontend.NARGS
FRONTEND_IGNORED = frontend.ignored()


def human_readable_int(flag: str, value: str) -> int:
    """vLLM's reading of --max-model-len / --max-num-batched-tokens (vllm-project/vllm@99d7eb5d
    vllm/engine/arg_utils.py human_readable_int: serve_values.suffix_int), else a plain int."""
    try:
        n = suffix_int(value, flag)
    except ValueError as err:
        number = value.strip()[:-1]
        raise K3PlanError(
            f"--serve: {flag} {value!r}: decimals are not allowed with binary suffixes like {err} (vLLM's "
            f"human_readable_int); did you mean {number}{str(err).lower()}?"
        ) from None
    return flag_int(flag, value.strip() if n is None else str(n))


def dashes(tok: str) -> str:
    """vLLM takes --max_model_len as --max-model-len: underscores in a flag's name, up to its first '.', read as
    dashes (vllm-project/vllm@00da11e3 vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args)."""
    if not tok.startswith("--"):
        return tok
    key, eq, value = tok.partition("=")
    head, dot, tail = key[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail + eq + value


# vLLM's dotted config flags (vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args, read in
# yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2): a flag with a '.' in its name (before any '=') takes the next token (or what
# follows '=') as its value, parsed as JSON, else as a human-readable int, else kept as text; ``--X.a+ v1,v2`` is a
# list; the values of one ``--X`` merge into one nested dict, appended as ``--X '<json>'`` after the other flags
# (argparse keeps the last ``--X``): so ``--speculative_config.method=mtp`` (vLLM's own gsm8k config
# tests/evals/gsm8k/configs/moe-refactor/DeepSeek-V4-Flash-deepgemm-mega-moe.yaml) reads as its JSON flag does.


def _value(text: str, flag: str) -> Any:
    """A dotted flag's value as vLLM parses it: JSON, else a human-readable int (serve_values.suffix_int), else the
    text. Any ValueError of json.loads reads as not JSON: a JSONDecodeError, or a number of more than 4,300 digits
    (Python's int-from-text limit), which the field's own reader then refuses."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        n = suffix_int(text, flag)
    except ValueError:
        return text
    return text if n is None else n


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif isinstance(v, list) and isinstance(into.get(k), list):
            into[k] += v
        else:
            into[k] = v


def fold_dotted(rest: list[str]) -> list[str]:
    """The flags with vLLM's dotted config flags folded into one ``--X '<json>'`` each, appended last (module
    docstring). ``rest``: the flags with dashes already read (``engines.vllm.serve.dashes``)."""
    out: list[str] = []
    dicts: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(rest):
        tok = rest[i]
        name, eq, value = tok.partition("=")
        if not (tok.startswith("-") and "." in name):
            out.append(tok)
            i += 1
            continue
        if not eq:
            if i + 1 >= len(rest):
                raise K3PlanError(f"--serve: {tok} takes a value (vLLM's dotted config flag: {tok} VALUE)")
            value = rest[i + 1]
            i += 1
        i += 1
        if name.endswith("+"):
            name, parsed = name[:-1], list(value.split(","))
        else:
            parsed = _value(value, name)
        head, *keys = name.split(".")
        if not all(keys):
            raise K3PlanError(f"--serve: {tok}: expected --config.field VALUE")
        nested: Any = parsed
        for key in reversed(keys):
            nested = {key: nested}
        _merge(dicts.setdefault(head, {}), nested)
    for head, d in dicts.items():
        out += [head, json.dumps(d)]
    return out


def launch_flags(get, options: dict[str, str]) -> None:
    """Issue 48: vLLM's --all2all-backend (vllm/engine/arg_utils.py EngineArgs -> ParallelConfig.all2all_backend),
    the flag k3plan's launch lines write that the reading does not take: the vllm stack's all2all_backend option,
    which sets the MoE collectives priced."""
    a2a = get("--all2all-backend", None)
    if a2a is not None:
        options["all2all_backend"] = a2a


# vLLM refuses a --max-model-len above the length it derives from the config (max_position_embeddings and its
# kin, scaled by rope) before anything loads, unless the env var allows it (vllm-project/vllm@0052a5b8
# vllm/config/model.py _get_and_verify_max_len: "User-specified max_model_len (...) is greater than the derived
# max_model_len ...", raise ValueError unless envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN)
LONG_CONTEXT_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def long_context_refusal(context: int, model_max: int) -> str:
    return (
        f"--serve: --max-model-len {context:,} is above the model's {model_max:,} (max_position_embeddings): vLLM "
        f"refuses it at start (ValueError: User-specified max_model_len ({context}) is greater than the derived "
        f"max_model_len; vllm/config/model.py _get_and_verify_max_len) unless {LONG_CONTEXT_ENV}=1; expected at "
        f"most {model_max:,}"
    )


VLLM_UNPRICED = {
    "--no-enable-chunked-prefill": "whole prompts a step (the profile run's token budget then follows max_model_len)",
    "--offload-group-size": "weights offloaded to host memory and prefetched a group at a time",
    "--offload-num-in-group": "weights offloaded to host memory and prefetched a group at a time",
    "--offload-prefetch-step": "weights offloaded to host memory and prefetched a group at a time",
}
# ModelConfig.hf_overrides: a JSON object's fields whose values are not objects set over the Hugging Face config
# before the model is built (ModelConfig.__post_init__ gathers them as hf_overrides_kw, get_config calls
# config.update(hf_overrides_kw)), read alike in the 0.11.2, 0.28.0, 0.33.0 and 0.34.0 wheels (PyPI); priced over the
# fields k3plan's model spec reads whole (serve_values.read_hf_overrides), any other refused by name
HF_OVERRIDES_SOURCE = (
    "vllm 0.11.2-0.34.0 wheels (PyPI), vllm/config/model.py ModelConfig.__post_init__ hf_overrides_kw, "
    "vllm/transformers_utils/config.py get_config: config.update(hf_overrides_kw)"
)
# weights moved to host memory and read over UVA until this many GiB a GPU are offloaded, a parameter at a time
# (vLLM 0.31.0 wheel vllm/config/offload.py UVAOffloadConfig.cpu_offload_gb, default 0: nothing offloaded)
CPU_OFFLOAD = "--cpu-offload-gb"


def read_cpu_offload(r: Reading) -> None:
    """--cpu-offload-gb: 0 (vLLM's default) changes nothing and is listed; more is refused (the weights' offloaded
    share, whole parameters until the GiB are reached, is not priced)."""
    raw = r.get(CPU_OFFLOAD, None)
    if raw is None:
        return
    try:
        gib = float(raw)
    except ValueError:
        raise K3PlanError(f"--serve: {CPU_OFFLOAD} {raw!r}: expected a number of GiB (0 or more)") from None
    if not gib >= 0 or gib == float("inf"):
        raise K3PlanError(f"--serve: {CPU_OFFLOAD} {raw!r}: expected a number of GiB (0 or more)")
    if gib > 0:
        raise K3PlanError(
            f"--serve: {CPU_OFFLOAD} {raw}: weights offloaded to host memory over UVA, whole parameters until "
            f"{gib:g} GiB a GPU (vllm/config/offload.py UVAOffloadConfig), is not priced by k3plan; remove it to "
            "price vLLM without it"
        )
    r.ignored.append(CPU_OFFLOAD)


# the environment this family's commands read beside the listed harmless ones (k3plan.engines.serve.IGNORED_ENV):
# the long-context switch above, torchtpu-vllm's unified block pool (a caveat, finish below) and the Engram tables'
# default place (engines/vllm/engram.py)
UNIFIED_POOL_ENV = "TPU_VLLM_ENABLE_UNIFIED_BLOCK_POOL"
# FlashInfer's TRT-LLM MXINT4 MoE for INT4 group-32 experts (Kimi-K2.5 / K2.6): vLLM takes it only on the SM100 family
# (vllm-project/vllm@a33e53e1 vllm/model_executor/layers/quantization/utils/flashinfer_mxint4_moe.py
# is_flashinfer_mxint4_moe_available: envs.VLLM_USE_FLASHINFER_MOE_INT4 and has_flashinfer_trtllm_fused_moe() and
# is_cuda() and is_device_capability_family(100)); there prepare_static_weights_for_trtllm_mxint4_moe re-lays the
# experts out (uint8, block layout, interleaved scales), bytes k3plan has not read. Elsewhere the variable selects
# nothing: listed, not priced (SemiAnalysisAI/InferenceX's kimik2.5_int4_h100.sh exports it on H100)
FLASHINFER_INT4_ENV = "VLLM_USE_FLASHINFER_MOE_INT4"
# ESTIMATE_ENV: the CUDA-graph estimate's off switch, read where the estimate is priced (engines/vllm/cudagraph.py
# serve_estimate; InferenceX's dsv4_fp8_h200_mtp.sh and agentic/kimik3_fp4_b300_vllm_mtp.sh @843c6254 set it to 0);
# and tpu-inference's (engines/tpu_inference/serve.py: read there, refused by check_env on any other route)
# vLLM variables of older releases that recipes still export (ai-dynamo/dynamo recipes/deepseek-r1/vllm/disagg
# @40200470 / @0044eb90, llm-d/llm-d guides/wide-ep-lws @03da3b00), each from the first release whose wheel (PyPI, every
# file scanned) names it nowhere, and no later one does (vllm/envs.py declares none of them; nothing reads os.environ
# for them): at those releases they do nothing and are listed; before, what they did (MoE activation chunking, the
# all2all backend, MLA's fp8 projections) was not read, refused. Wheels scanned: 0.11.1, 0.11.2, 0.12.0, 0.13.0,
# 0.14.1, 0.15.0, 0.16.0, 0.17.0, 0.17.1, 0.18.0, 0.20.0, 0.21.0, 0.22.0, 0.23.0, 0.24.0, 0.25.0, 0.26.0, 0.28.0,
# 0.33.0, 0.34.0 (0.19.x not: VLLM_ENABLE_MOE_DP_CHUNK / VLLM_MOE_DP_CHUNK_SIZE, named in 0.18.0, are taken as gone from
# 0.20.0). VLLM_DEEPEP_LOW_LATENCY_ALLOW_NVLINK, VLLM_EP_USE_SBO and VLLM_MLA_FP8_PROJ are named in none of them
# (forks' variables), listed from 0.11.1. (FlashInfer's MoE backend, VLLM_FLASHINFER_MOE_BACKEND, and
# VLLM_ATTENTION_BACKEND are read per release: engines/vllm/backend_env.py)
STALE_GONE_FROM: dict[str, Release] = {
    "VLLM_ALL2ALL_BACKEND": (0, 16, 0),  # config/parallel.py in 0.15.0; --all2all-backend alone from 0.16.0
    "VLLM_DEEPEP_LOW_LATENCY_ALLOW_NVLINK": (0, 11, 1),
    "VLLM_ENABLE_FUSED_MOE_ACTIVATION_CHUNKING": (0, 18, 0),  # fused_moe/modular_kernel.py to 0.17.1
    "VLLM_ENABLE_MOE_DP_CHUNK": (0, 20, 0),  # fused_moe/runner/default_moe_runner.py in 0.18.0
    "VLLM_EP_USE_SBO": (0, 11, 1),
    "VLLM_FUSED_MOE_CHUNK_SIZE": (0, 18, 0),  # fused_moe/fused_moe.py to 0.17.1
    "VLLM_MLA_FP8_PROJ": (0, 11, 1),
    "VLLM_MOE_DP_CHUNK_SIZE": (0, 20, 0),  # fused_moe/config.py / layer.py in 0.18.0
}
STALE_ENV = frozenset(STALE_GONE_FROM)
# --max-model-len auto: EngineArgs.add_cli_args types max_model_len human_readable_int_or_auto ("Also accepts -1 or
# 'auto'") in the 0.14.1 wheel (PyPI), vllm/engine/arg_utils.py; plain human_readable_int in the 0.11.0, 0.11.2 and
# 0.13.0 wheels
MAX_MODEL_LEN_AUTO_FROM = (0, 14, 0)
MAX_MODEL_LEN_AUTO_SOURCE = "vllm 0.14.1 wheel (PyPI), vllm/engine/arg_utils.py human_readable_int_or_auto"
# the variables of KNOWN_ENV read on this family's commands only (k3plan.engines.serve refuses them on another's)
OWN_ENV = STALE_ENV | A2A_ENV | BACKEND_ENV | {"VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE"}
# the native CPU offload's connector switch (read_offload_env below)
SIMPLE_OFFLOAD_ENV = "VLLM_USE_SIMPLE_KV_OFFLOAD"
# VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE (vllm/envs.py, default 163,840): the token bound of vLLM's CUTLASS NVFP4 / MXFP4
# experts' activation quantization, which sizes its scale buffer (vllm/_custom_ops.py scaled_fp4_experts_quant,
# silu_and_mul_scaled_fp4_experts_quant, mxfp4_experts_quant, silu_and_mul_mxfp4_experts_quant: MAX_TOKENS_PER_EXPERT
# x top-k rows), whose only callers are fused_moe/experts/cutlass_moe.py's CutlassExpertsFp4 / CutlassExpertsMxfp4,
# built only by the NVFP4 oracle (fused_moe/oracle/nvfp4.py) and compressed-tensors' W4A4 MXFP4 method
# (compressed_tensors_moe_w4a4_mxfp4.py). DeepSeek-V4's MXFP4 routed experts never reach them: with --moe-backend
# deep_gemm_mega_moe and --enable-expert-parallel DeepseekV4MoE.use_mega_moe builds DeepseekV4MegaMoEExperts in place of
# FusedMoE (DeepGEMM's fp8_fp4_mega_moe), and otherwise the model's quant config gives FusedMoE an Mxfp4MoEMethod
# (DeepseekV4FP8Config.get_quant_method; ModelOptNvFp4FusedMoE only for an NVFP4 moe_quant_algo, not the bundled
# checkpoints), whose oracle (fused_moe/oracle/mxfp4.py select_mxfp4_moe_backend / backend_to_kernel_cls) offers
# TRT-LLM, DeepGEMM, FlashInfer CUTLASS (FlashInferExperts), Triton, Marlin and the others, none of them
# cutlass_moe.py's. So nothing on a DeepSeek-V4 command reads the variable: listed there, refused elsewhere (not
# priced). Read in the vllm 0.20.0, 0.21.0 (vllm/model_executor/models/deepseek_v4.py) and 0.22.0 (vllm/models/
# deepseek_v4/quant_config.py, nvidia/model.py) wheels (PyPI), with each one's _custom_ops.py, oracle/mxfp4.py and
# cutlass_moe.py
FP4_MOE_TOKENS_ENV = "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE"
FP4_MOE_TOKENS_READ: tuple[Release, Release] = ((0, 20, 0), (0, 23, 0))  # [first read, first not read)
KNOWN_ENV = frozenset(
    {LONG_CONTEXT_ENV, UNIFIED_POOL_ENV, ENGRAM_ENV, FLASHINFER_INT4_ENV, ESTIMATE_ENV, SIMPLE_OFFLOAD_ENV}
    | {FP4_MOE_TOKENS_ENV}
    | STALE_ENV
    | A2A_ENV
    | BACKEND_ENV
    | tpu_inference_serve.KNOWN_ENV
)


def read_stale_env(r: Reading) -> None:
    """``STALE_ENV``: listed from the release whose wheel names it nowhere (``STALE_GONE_FROM``; a GPU command),
    refused before."""
    stale = sorted(STALE_ENV & set(r.env))
    if not stale:
        return
    release = r.release or (0, 33, 0)
    for k in stale:
        gone = STALE_GONE_FROM[k]
        if r.platform == "tpu" or release < gone:
            raise K3PlanError(
                f"--serve: {k}: a variable of vLLM releases before {release_text(gone)} (no file of the "
                f"{release_text(gone)}-0.34.0 wheels read names it); what it did at vLLM {release_text(release)} was "
                "not read by k3plan: remove it"
            )
    r.ignored += [f"{k}={r.env[k]}" for k in stale]


def flashinfer_int4(r: Reading) -> None:
    """VLLM_USE_FLASHINFER_MOE_INT4 (FLASHINFER_INT4_ENV): ignored where vLLM's gate keeps it off (not the SM100
    family), refused on the SM100 family, where the MXINT4 experts' layout is not priced."""
    value = r.env.get(FLASHINFER_INT4_ENV)
    if value is None:
        return
    on = env_on(value)
    if on and r.device_name in SM100_FAMILY:
        raise K3PlanError(
            f"--serve: {FLASHINFER_INT4_ENV}=1 on {r.device_name}: vLLM re-lays the INT4 experts out for FlashInfer's "
            "TRT-LLM MXINT4 MoE on the SM100 family (flashinfer_mxint4_moe.py prepare_static_weights_for_trtllm_mxint4_moe), "
            "bytes k3plan has not read; remove it to price the Marlin path"
        )
    r.ignored.append(f"{FLASHINFER_INT4_ENV}={value}")


# From 0.33.0 vLLM's parser pairs every --enable-X switch with --disable-X and every --disable-X with --enable-X, the
# inverse spelling of --no-X (vllm 0.33.0 wheel (PyPI), vllm/utils/argparse_utils.py EnableDisableAction, registered
# for BooleanOptionalAction; the same in 0.34.0): read as the --no- form of the switches k3plan reads or names as
# ignored. An older release refuses the inverse spelling; k3plan reads it alike
_ENABLE_SWITCHES = tuple(
    sorted(
        f
        for f in (
            *VLLM_SWITCHES,
            *frontend.SWITCHES,
            *_NEWER_SWITCHES,
            "--enable-prefix-caching",
            "--enable-chunked-prefill",
        )
        if f.startswith("--enable-")
    )
)
_DISABLE_SWITCHES = ("--disable-hybrid-kv-cache-manager", "--disable-uvicorn-access-log", "--disable-fastapi-docs")
INVERSE_SWITCHES = {
    **{"--disable-" + f.removeprefix("--enable-"): "--no-" + f[2:] for f in _ENABLE_SWITCHES},
    **{"--enable-" + f.removeprefix("--disable-"): "--no-" + f[2:] for f in _DISABLE_SWITCHES},
}


# the options `vllm serve`'s parser registers, by release read (engines/vllm/serve_flags.py, written from the 0.11.2-
# 0.34.0 wheels by benchmarks/vllm_serve_flags.py): FlexibleArgumentParser (vllm/utils/argparse_utils.py) leaves
# argparse's allow_abbrev on (no allow_abbrev in vllm/utils, vllm/entrypoints or vllm/engine of any of those wheels)
# and adds no abbreviation handling of its own, so argparse takes an unambiguous prefix of one option for it
# (--hf-config=X: --hf-config-path, as tpu-inference's multi-host nightly writes it: scripts/multihost/
# nightly_benchmarking.sh @b8692ff0) and stops on an ambiguous one. A command read without a release (on a TPU, where
# tpu-inference and the torch_tpu plugin run vLLM's parser) is matched against the union of the releases read
OPTIONS = OptionTable(
    engine="vLLM",
    where="vllm/engine/arg_utils.py EngineArgs.add_cli_args and the frontend's make_arg_parser",
    flags=SERVE_FLAGS,
    ranges=SERVE_FLAG_RANGES,
    releases=SERVE_FLAG_RELEASES,
)


def tokens(
    model: str | None, rest: list[str], *, release: Release | None = None, release_post: int = 0
) -> tuple[str | None, list[str]]:
    """The flags as vLLM's parser reads them, in its order (FlexibleArgumentParser.parse_args, then argparse): a
    --config file's flags first, dashes, its dotted config flags folded into their JSON flag
    (serve_values.config_file_args, fold_dotted above), an abbreviated flag as the option it stands for in
    ``release``'s parser (``OPTIONS``, serve_values.unabbreviated), and the inverse spelling of a switch as its --no-
    form (``INVERSE_SWITCHES``). ``release_post`` (a post-release) reads as its release: the table holds no
    post-releases."""
    options, said = OPTIONS.options(release)
    flags = fold_dotted([dashes(tok) for tok in config_file_args(rest, engine=ENGINE)])
    flags = [unabbreviated(tok, options, said, engine=OPTIONS.engine, where=OPTIONS.where) for tok in flags]
    return model, [INVERSE_SWITCHES.get(tok, tok) for tok in flags]


# the most bytes --kv-cache-memory-bytes may name: more than any device holds (a PiB), so a typo is bad input
KV_MEMORY_MAX = 2**50


def read_kv_cache_memory_bytes(r: Reading, raw: str | None) -> None:
    """--kv-cache-memory-bytes: the KV pool a GPU as given, --gpu-memory-utilization ignored (``KV_MEMORY_SOURCE``);
    0 is vLLM's 'not set' (the worker tests it for truth). Refused on a TPU: the plugin's worker with it was not
    read."""
    if raw is None:
        return
    try:
        n = suffix_int(raw, "--kv-cache-memory-bytes")
        n = int(raw.strip()) if n is None else n
    except ValueError:
        raise K3PlanError(
            f"--serve: --kv-cache-memory-bytes {raw!r}: expected a number of bytes (10000000000, 10g or 10G)"
        ) from None
    if not 0 <= n <= KV_MEMORY_MAX:
        raise K3PlanError(
            f"--serve: --kv-cache-memory-bytes {raw!r}: expected 0 to {KV_MEMORY_MAX:,} bytes (a device's KV pool)"
        )
    if r.platform == "tpu":
        raise K3PlanError(
            "--serve: --kv-cache-memory-bytes on a TPU: the torch_tpu plugin's worker with it was not read; remove it "
            "(--gpu-memory-utilization sizes the pool)"
        )
    if n:
        r.kv_cache_memory_bytes = n
        r.caveats.append(
            f"--kv-cache-memory-bytes {n:,}: the engine's KV pool a GPU as given, --gpu-memory-utilization ignored "
            f"({KV_MEMORY_SOURCE}); k3plan's own budget keeps its reserve"
        )


# Dual-batch overlap / microbatching (ParallelConfig.enable_dbo, ubatch_size, dbo_decode_token_threshold 32,
# dbo_prefill_token_threshold 512; use_ubatching = enable_dbo or ubatch_size > 1, num_ubatches 2 under DBO else
# ubatch_size: vllm/config/parallel.py, the flags in vllm/engine/arg_utils.py, alike in the 0.26.0, 0.28.0, 0.29.0,
# 0.30.0, 0.31.0, 0.33.0 and 0.34.0 wheels (PyPI)). What it changes on a GPU, read in the 0.33.0 wheel:
# - the worker: init_workspace_manager(num_ubatches=2) gives every workspace reservation a slot a microbatch
#   (vllm/v1/worker/gpu_worker.py Worker._init_workspace_and_model_runner, vllm/v1/worker/workspace.py), and the
#   runner builds num_ubatches attention metadata builders a group (gpu_model_runner.py initialize_attn_backend);
# - the profile run: with DP > 1 a batch at or above the threshold runs as num_ubatches microbatches on their own
#   threads, overlapped on a second stream (coordinate_batch_across_dp -> maybe_create_ubatch_slices ->
#   vllm/v1/worker/gpu_ubatch_wrapper.py UBatchWrapper), so the peak the worker measures is the overlapped halves';
# - the graphs: the V1 runner wraps the model in UBatchWrapper (FULL graphs only; ubatched FULL graphs for uniform
#   decode sizes at or above dbo_decode_token_threshold, _capture_cudagraphs) and not in BreakableCUDAGraphWrapper,
#   and Model Runner V2 lists 'dual batch overlap' as unsupported unless VLLM_USE_V2_MODEL_RUNNER is set
#   (vllm/config/vllm.py _get_dbo_unsupported_features, 0.29.0-0.33.0), so the V1 runner runs it.
# Those bytes are measured by the engine, and no public log of a DBO start gives them: the switch is refused, after
# the engine's own start checks (below). Without microbatching the thresholds do nothing (check_ubatch_thresholds
# returns False when not use_ubatching) and are listed.
DBO_SOURCE = "vllm 0.26.0-0.34.0 wheels (PyPI), vllm/config/parallel.py ParallelConfig.enable_dbo / use_ubatching"
DBO_THRESHOLD_CHECK_FROM = (0, 30, 0)  # ParallelConfig's 'must be at least the number of microbatches' (not in 0.29.0)
DBO_ROCM_AGRS_FROM = (0, 33, 0)  # ROCm's allgather_reducescatter under DBO: in 0.33.0's list, not 0.31.0's
DBO_BACKENDS = ("deepep_low_latency", "deepep_high_throughput", "nixl_ep")
DBO_THRESHOLDS = {"--dbo-decode-token-threshold": 32, "--dbo-prefill-token-threshold": 512}


def read_dbo(r: Reading) -> None:
    """--enable-dbo / --ubatch-size / the DBO thresholds (the comment above): the engine's start checks, then the
    microbatched worker refused as not priced; the thresholds listed where nothing is microbatched."""
    on = r.get("--enable-dbo", None)
    dbo = on is not None and on.strip().lower() not in ("false", "0")
    raw_ub = r.get("--ubatch-size", None)
    ubatch = flag_int("--ubatch-size", raw_ub, lo=0) if raw_ub is not None else 0
    thresholds = {f: r.get(f, None) for f in DBO_THRESHOLDS}
    use = dbo or ubatch > 1
    if not use:
        for f, v in thresholds.items():  # moot without microbatching, still parsed as an int
            if v is not None:
                argparse_int(f, v)
        r.ignored += [f for f, v in (("--enable-dbo", on), ("--ubatch-size", raw_ub)) if v is not None]
        r.ignored += [f for f, v in thresholds.items() if v is not None]
        return
    n = 2 if dbo else ubatch
    what = "--enable-dbo" if dbo else f"--ubatch-size {ubatch}"
    release = r.release or (0, 33, 0)
    if r.platform != "tpu":
        low = min(flag_int(f, v, lo=0) if v is not None else DBO_THRESHOLDS[f] for f, v in thresholds.items())
        if low < n and release >= DBO_THRESHOLD_CHECK_FROM:
            raise K3PlanError(
                f"--serve: vLLM refuses {what} with a DBO token threshold of {low}: ValueError: "
                f"dbo_decode_token_threshold and dbo_prefill_token_threshold must be at least the number of "
                f"microbatches ({n}) (vllm/config/parallel.py ParallelConfig, {DBO_SOURCE})"
            )
        a2a = r.flags.get("--all2all-backend") or "allgather_reducescatter"  # read again by launch_flags
        a2a = "allgather_reducescatter" if a2a in ("pplx", "naive") else a2a  # ParallelConfig's fallback
        rocm = r.device_name.lower().startswith("amd")
        ok = DBO_BACKENDS + (("allgather_reducescatter",) if rocm and release >= DBO_ROCM_AGRS_FROM else ())
        if r.flags.get("--moe-backend") is None and a2a not in ok:  # a MoE backend may pass its own through
            raise K3PlanError(
                f"--serve: vLLM refuses {what} with --all2all-backend {a2a} (AssertionError: 'Microbatching "
                f"currently only supports the {', '.join(ok)} all2all backends'; vllm/config/vllm.py "
                f"VllmConfig.__post_init__, {DBO_SOURCE}); pass --all2all-backend {DBO_BACKENDS[0]}"
            )
    raise K3PlanError(
        f"--serve: {what}: vLLM's microbatching ({n} microbatches: a workspace slot and attention metadata builder "
        "each, the profile run's batch overlapped as microbatches on their own threads when DP > 1, FULL graphs "
        "through UBatchWrapper without breakable graphs, the V1 runner) holds memory the engine measures and no "
        "public log gives (vllm 0.33.0 wheel (PyPI): v1/worker/gpu_worker.py Worker._init_workspace_and_model_runner, "
        "v1/worker/gpu_ubatch_wrapper.py UBatchWrapper, v1/worker/gpu_model_runner.py _capture_cudagraphs); "
        "not priced by k3plan: remove it to price vLLM without it"
    )


# EngineArgs' flags gone from the 0.28.0 wheel (present in 0.26.0's vllm/engine/arg_utils.py; 0.27.0 not read): from
# 0.28.0 vLLM's parser refuses them as unrecognized arguments. In 0.26.0 the partial-prefill limits are read by the
# scheduler config alone (SchedulerConfig.max_num_partial_prefills / max_long_partial_prefills: no other reader in the
# wheel), listed; --calculate-kv-scales computes the fp8 KV scales in the first forward (gpu_model_runner.py,
# mla_attention.py), not read. --no-disable-cascade-attn turns cascade attention on in 0.26.0 (ModelConfig.
# disable_cascade_attn, default True), not read; from 0.28.0 it does nothing (k3plan.engines.serve IGNORED)
REMOVED_FROM = (0, 28, 0)
REMOVED_FLAGS = ("--max-num-partial-prefills", "--max-long-partial-prefills", "--calculate-kv-scales")
# V0's CPU swap space (CacheConfig.swap_space, host memory for preempted sequences: listed where the release has it)
# is in the 0.11.2, 0.13.0, 0.14.1, 0.16.0, 0.17.0 and 0.17.1 wheels' EngineArgs and gone from 0.18.0's (vllm/engine/
# arg_utils.py, PyPI wheels), so from 0.18.0 vLLM's parser refuses it
SWAP_SPACE_GONE_FROM = (0, 18, 0)
# EPLB's old flag: in the 0.11.0 / 0.11.2 wheels' EngineArgs (deprecated, "will be removed in v0.12.0"), gone from the
# 0.13.0 wheel's (0.12.0 not read)
REDUNDANT_FLAG_GONE_FROM = (0, 13, 0)
OLD_UNREAD = {
    "--calculate-kv-scales": "fp8 KV scales computed in the first forward (gpu_model_runner.py, mla_attention.py)",
    "--no-disable-cascade-attn": "cascade attention on (ModelConfig.disable_cascade_attn False)",
}


def read_removed(r: Reading) -> None:
    """The flags of ``REMOVED_FLAGS`` by release (the comment above): refused from 0.28.0 as vLLM's parser refuses
    them, read in 0.26.0 (listed, or refused where what they hold was not read)."""
    release = r.release or (0, 33, 0)
    if "--swap-space" in r.flags and release >= SWAP_SPACE_GONE_FROM:
        raise K3PlanError(
            f"--serve: --swap-space: vLLM {release_text(release)} has no such flag (CacheConfig.swap_space, in the "
            "0.17.1 wheel's EngineArgs, gone from 0.18.0's, vllm/engine/arg_utils.py): its parser refuses it as an "
            "unrecognized argument; remove it"
        )
    for flag in (*REMOVED_FLAGS, "--no-disable-cascade-attn"):
        if flag not in r.flags:
            continue
        if flag in REMOVED_FLAGS and release >= REMOVED_FROM:
            raise K3PlanError(
                f"--serve: {flag}: vLLM {release_text(release)} has no such flag (gone from the 0.28.0 wheel's "
                "EngineArgs, vllm/engine/arg_utils.py; present in 0.26.0's): its parser refuses it as an "
                "unrecognized argument; remove it"
            )
        if release < REMOVED_FROM and flag in OLD_UNREAD:
            raise K3PlanError(
                f"--serve: {flag} at vLLM {release_text(release)}: {OLD_UNREAD[flag]} is not priced by k3plan "
                "(vllm 0.26.0 wheel (PyPI)); remove it to price vLLM without it"
            )


# vLLM's runners (vllm 0.31.0 wheel vllm/config/model.py RunnerOption, ModelConfig._get_runner_type): 'auto' resolves a
# text-generation architecture to 'generate', the runner k3plan prices; 'pooling' and 'draft' run another model
RUNNERS_PRICED = ("auto", "generate")


# the KDA state's dtypes as vLLM takes them (CacheConfig.mamba_cache_dtype / mamba_ssm_cache_dtype, "auto" by
# default; MambaStateDtypeCalculator.kda_state_dtype: the conv state in mamba_cache_dtype, auto the model's bf16; the
# recurrent state float32 for auto, else mamba_ssm_cache_dtype: vllm 0.33.0 wheel (PyPI), model_executor/layers/mamba/
# mamba_utils.py): the values that keep k3plan's stack state (recurrent f32, conv bf16) -> what they resolve to
MAMBA_DTYPES_KEPT = {"--mamba-cache-dtype": ("auto", "bfloat16"), "--mamba-ssm-cache-dtype": ("auto", "float32")}
MAMBA_DTYPE_SOURCE = "vllm 0.33.0 wheel (PyPI) model_executor/layers/mamba/mamba_utils.py kda_state_dtype"


def read_mamba_dtypes(r: Reading) -> None:
    """--mamba-cache-dtype / --mamba-ssm-cache-dtype: no effect on a model without KDA layers, nor at the values that
    resolve to k3plan's state dtypes (``MAMBA_DTYPES_KEPT``); another dtype of a KDA state is refused by name."""
    for flag, kept in MAMBA_DTYPES_KEPT.items():
        value = r.get(flag)
        if value is None:
            continue
        model = r.resolve(r.model) if r.resolve is not None and r.model else ""
        if value.strip().lower() in kept or not model.startswith(("kimi-linear", "kimi-k3")):
            r.ignored.append(flag)
            continue
        raise K3PlanError(
            f"--serve: {flag} {value}: a KDA state dtype other than vLLM's default ({' / '.join(kept)} keep the "
            f"recurrent state float32 and the conv state bf16: {MAMBA_DTYPE_SOURCE}) is not priced by k3plan; "
            "remove it to price vLLM's default"
        )


# --disable-hybrid-kv-cache-manager (SchedulerConfig.disable_hybrid_kv_cache_manager): get_kv_cache_groups first
# unifies the layers' specs (vllm/v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs, read in the 0.20.0, 0.21.0,
# 0.26.0, 0.28.0, 0.31.0 and 0.33.0 wheels (PyPI); v1/core/kv_cache_planning.py from 0.33.0):
# - a model whose layers all hold one spec (DeepSeek-R1 / V3, Kimi-K2's MLA): returned at once, nothing changes;
# - DeepSeek-V4: every sliding-window cache and compressor state becomes a full-attention page of the block, all in
#   one group (engines/vllm/dsv4_pages.py dsv4_unified_pages), priced for the releases that conversion was read in
#   (UNIFIED_READ); 0.28.0's _promote_local_kv_cache_specs rewrites it (pages padded by the block ratio), not read for V4;
# - Kimi-K3 / Kimi-Linear (KDA state + MLA): a MambaSpec is neither converted nor uniform with the MLA layers, and the
#   0.20.0 code raises 'Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified
#   type.' (ValueError) when the KV cache groups are built.
# The CPU KV offload (--kv-offloading-size N GiB, --kv-offloading-backend native: VllmConfig.
# _post_init_kv_transfer_config makes a kv_transfer_config whose connector is SimpleCPUOffloadConnector where
# VLLM_USE_SIMPLE_KV_OFFLOAD=1, else OffloadingConnector) holds nothing on the GPU before the pool is sized: the worker
# builds the connector after the KV cache config (vllm/v1/worker/gpu_worker.py initialize_from_config ->
# ensure_kv_transfer_initialized(vllm_config, kv_cache_config)) and both keep their CPU tier in pinned host memory
# (v1/simple_kv_offload/worker.py register_kv_caches, v1/kv_offload/worker/cpu_gpu.py: cudaHostRegister / pinned
# torch.zeros), read in the 0.20.0 wheel
HYBRID_OFF_FLAG = "--disable-hybrid-kv-cache-manager"
HYBRID_OFF_SOURCE = "vllm 0.20.0 wheel (PyPI) vllm/v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs"
OFFLOAD_SOURCE = (
    "vllm 0.20.0 wheel (PyPI) vllm/config/vllm.py VllmConfig._post_init_kv_transfer_config, "
    "v1/worker/gpu_worker.py (ensure_kv_transfer_initialized after the KV cache config), "
    "v1/simple_kv_offload/worker.py / v1/kv_offload/worker/cpu_gpu.py (pinned host memory)"
)
# the bundled models whose vLLM layers all hold one KV spec (MLA), and those with KDA state beside MLA
UNIFORM_KV_MODELS = ("deepseek-r1", "deepseek-v3", "kimi-k2")
STATE_KV_MODELS = ("kimi-k3", "kimi-linear")


def read_hybrid_off(r: Reading) -> bool:
    """--disable-hybrid-kv-cache-manager (the comment above): DeepSeek-V4's caches unified where the release's
    conversion was read, nothing changed for a model of one spec, refused with the engine's error or what was not
    read otherwise; --no-disable-hybrid-kv-cache-manager (vLLM's default without a connector) listed. True where the
    command turns the manager off."""
    value = r.get(HYBRID_OFF_FLAG, None)
    if value is None:
        return False
    # a switch (BooleanOptionalAction): its --no- form is listed on every route (k3plan.engines.serve IGNORED); not in
    # SWITCHES, so that form keeps its own name on SGLang's and tpu-inference's routes too
    if value.strip().lower() in ("false", "0"):
        r.ignored.append("--no-" + HYBRID_OFF_FLAG[2:])
        return False
    if value.strip().lower() not in ("true", "1", ""):
        raise K3PlanError(f"--serve: {HYBRID_OFF_FLAG} takes no value (a switch); got {value!r}")
    model = r.resolve(r.model) if r.resolve is not None and r.model else ""
    ver = r.release
    at = f"vLLM {release_text(ver)}" if ver is not None else "vLLM"
    why = ""
    if r.platform == "tpu":
        why = "on a TPU the plugin's KV manager with it was not read"
    elif model.startswith(STATE_KV_MODELS):
        raise K3PlanError(
            f"--serve: {HYBRID_OFF_FLAG} on {model}: vLLM cannot put its KDA state and MLA caches in one spec and "
            "raises 'ValueError: Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one "
            f"unified type.' when it builds the KV cache groups ({HYBRID_OFF_SOURCE}); remove the flag"
        )
    elif model.startswith("deepseek-v4.1"):
        why = "DeepSeek-V4.1's caches with the manager off (its own planner) were not read"
    elif model.startswith("deepseek-v4"):
        lo, hi = UNIFIED_READ
        if ver is not None and not lo <= ver <= hi:
            why = (
                f"DeepSeek-V4's caches with the manager off were read in the {release_text(lo)}-{release_text(hi)} "
                f"wheels only ({UNIFIED_SOURCE}); price it at --engine-version {release_text(hi)}"
            )
        else:
            r.hybrid_kv_off = True
            r.caveats.append(
                f"{HYBRID_OFF_FLAG}: every DeepSeek-V4 cache (window, compressor states) a full-attention page held for "
                f"every token, in one group ({UNIFIED_SOURCE})"
            )
            return True
    elif not model.startswith(UNIFORM_KV_MODELS):
        why = f"what it changes for {model or r.model} was not read"
    elif ver is not None and ver >= MEASURED_POOL_FROM:
        why = "how it meets 0.34.0's extensible KV cache was not read"
    if why:
        raise K3PlanError(f"--serve: {HYBRID_OFF_FLAG} at {at}: {why}; remove it to price the manager on")
    r.ignored.append(HYBRID_OFF_FLAG)  # every layer one spec: unify_hybrid_kv_cache_specs returns at once
    return True


# Before 0.21.0 vLLM decides the hybrid manager before the offload's kv_transfer_config exists (VllmConfig.__post_init__
# runs the HMA rules, then _post_init_kv_transfer_config), so it stays on, and the connector factory refuses a connector
# that is not SupportsHMA: OffloadingConnector is not in the 0.18.0 and 0.20.0 wheels (PyPI; it is from 0.21.0),
# SimpleCPUOffloadConnector (VLLM_USE_SIMPLE_KV_OFFLOAD=1, from 0.20.0) is (vllm/distributed/kv_transfer/kv_connector/
# factory.py KVConnectorFactory.create_connector)
OFFLOAD_HMA_READ = ((0, 18, 0), (0, 21, 0))  # [first read, first where OffloadingConnector is SupportsHMA)
OFFLOAD_HMA_SOURCE = (
    "vllm 0.18.0 / 0.20.0 wheels (PyPI) vllm/config/vllm.py VllmConfig.__post_init__ (the HMA rules before "
    "_post_init_kv_transfer_config), distributed/kv_transfer/kv_connector/factory.py create_connector, "
    "v1/offloading_connector.py (SupportsHMA from the 0.21.0 wheel)"
)


def read_offload_env(r: Reading, *, hybrid_off: bool = False) -> None:
    """VLLM_USE_SIMPLE_KV_OFFLOAD: which connector the native CPU offload builds (OFFLOAD_SOURCE); neither holds GPU
    memory before the pool is sized, so it is listed, with a caveat where --kv-offloading-size turns the offload on.
    The native OffloadingConnector with the hybrid manager on is refused as vLLM refuses it before 0.21.0
    (OFFLOAD_HMA_SOURCE); ``hybrid_off``: the command turns the manager off."""
    value = r.env.get(SIMPLE_OFFLOAD_ENV)
    size = r.flags.get("--kv-offloading-size")  # listed by k3plan.engines.serve (IGNORED), read here only
    backend = (r.flags.get("--kv-offloading-backend") or "native").strip().lower()
    lo, hi = OFFLOAD_HMA_READ
    simple = value is not None and env_on(value) and r.release is not None and r.release >= (0, 20, 0)
    old = r.release is not None and lo <= r.release < hi
    if size is not None and backend == "native" and r.platform != "tpu" and old and not hybrid_off and not simple:
        raise K3PlanError(
            f"--serve: vLLM {release_text(r.release or lo)} refuses --kv-offloading-size with the hybrid KV cache "
            "manager on: ValueError: Connector OffloadingConnector does not support HMA but HMA is enabled. Please "
            f"set `--disable-hybrid-kv-cache-manager`. ({OFFLOAD_HMA_SOURCE})"
        )
    if value is None:
        return
    if size is not None and env_on(value):
        r.caveats.append(
            f"{SIMPLE_OFFLOAD_ENV}=1 with --kv-offloading-size {size}: vLLM's SimpleCPUOffloadConnector, its CPU tier "
            f"in pinned host memory, built after the KV cache is sized ({OFFLOAD_SOURCE}); the host memory is not "
            "priced"
        )
    r.ignored.append(f"{SIMPLE_OFFLOAD_ENV}={value}")


def read(r: Reading) -> None:
    """A vLLM command's flags, in the order the refusals come: the model, the split, the context, the chunk and the
    batch (with vLLM's defaults by device), the memory options, the launch-line flags, the dtypes, the
    quantization, the block-count override; refusing SGLang's spellings by name. tpu-inference's own command (on
    a TPU, --additional-config with a "sharding" key) is read by engines/tpu_inference/serve.py instead."""
    if tpu_inference_serve.routes(r):
        tpu_inference_serve.read(r)
        return
    if r.llm_class == tpu_inference_serve.OFFLINE:  # routes() takes it on a TPU
        raise K3PlanError(
            f"--serve: {r.llm_class} is tpu-inference's script (examples/offline_inference.py), which runs on a TPU; "
            "price it with a TPU -H"
        )
    unset = [f for f in ("--max-num-batched-tokens", "--max-num-seqs") if f not in r.flags]
    # the torch_tpu plugin (a TPU command off tpu-inference's route) takes the small tier's LLM_CLASS entries: an OOT
    # platform whose get_device_total_memory raises, device_memory 0 (VLLM_DEFAULTS_SOURCE), at every release read
    read_llm = r.release is None or LLM_CLASS_READ[0] <= r.release <= LLM_CLASS_READ[1]
    if r.llm_class is not None and unset and not read_llm:
        raise K3PlanError(
            f"--serve: {r.llm_class} starts vLLM's LLM class (UsageContext.LLM_CLASS), whose defaults k3plan reads "
            "for tpu-inference's route (a TPU command with --additional-config sharding) and elsewhere at vLLM "
            f"0.8.4-0.34.x (fit --engine-version; {LLM_CLASS_SOURCE}); give "
            + (f"{unset[0][2:].replace('-', '_')}=N in --model_args" if r.llm_class == LM_EVAL else unset[0])
        )
    get = r.get
    flag_model = get("--model", "")
    r.model = r.model or flag_model
    if not r.model:
        raise K3PlanError("--serve: vllm serve needs a model: 'vllm serve MODEL ...' (or --model MODEL)")
    if r.platform != "tpu" and r.release is not None and r.release >= MEASURED_POOL_FROM:
        refuse_unread_034(r)
    elif any(f in r.flags for f in (EXTENSIBLE_FLAG_NAME, "--no-" + EXTENSIBLE_FLAG_NAME[2:])):
        raise K3PlanError(
            f"--serve: {EXTENSIBLE_FLAG_NAME}: vLLM's extensible KV cache is a 0.34.0 option (CacheConfig."
            "enable_extensible_kv_cache); an older release refuses the flag (fit --engine-version 0.34.0)"
        )
    # --mamba-cache-mode all (a KDA / Mamba state block every block_size tokens, MambaSpec.max_memory_usage_bytes
    # cdiv(max_model_len, block) + speculative blocks a request: vllm 0.31.0 wheel (PyPI), vllm/v1/kv_cache_interface.py)
    # holds states k3plan's pool does not price; from 0.32.0 vLLM has no such mode (CacheConfig.MambaCacheMode
    # 'align' / 'none', the 0.32.0 wheel's vllm/config/cache.py). 'align' and 'none' are read as listed
    mamba_mode = r.flags.get("--mamba-cache-mode")
    if r.platform != "tpu" and mamba_mode is not None and mamba_mode.strip().lower() == "all":
        raise K3PlanError(
            "--serve: --mamba-cache-mode all: a state block every block_size tokens of a request (vLLM 0.31.0's "
            "MambaSpec.max_memory_usage_bytes; gone from 0.32.0) is not priced by k3plan; expected align or none"
        )
    read_mamba_dtypes(r)
    mono = get(MONOKERNEL, None)
    if mono is not None and mono.lower() not in ("false", "0"):
        raise K3PlanError(
            f"--serve: {MONOKERNEL}: vLLM's decode MonoKernel (KernelConfig.monokernel, a persistent kernel a decoder "
            "layer) holds buffers k3plan has not read; remove it to price vLLM without it"
        )
    r.parallel()
    runner = get("--runner", "auto").lower()
    if runner not in RUNNERS_PRICED:
        raise K3PlanError(
            f"--serve: --runner {runner}: k3plan prices vLLM's generate runner (what 'auto' resolves to for a "
            "text-generation model: vllm/config/model.py ModelConfig._get_runner_type); expected auto or generate"
        )
    # decode context parallelism: each rank of a DCP group holds 1/N of every request's attention KV. The start check
    # prices it as vLLM sizes it (engines/vllm/memory.py vllm_kv_pool, DCP_SOURCE): the pool's bytes are the same, a
    # request needs cdiv(max_model_len, N) tokens of it, the logged size is N x the tokens. Kimi-K2-Thinking's recipe
    # logs both sides (vllm-project/recipes@0d218d1e moonshotai/Kimi-K2-Think.md: 46.80 GiB at TP8 and at TP8+DCP8,
    # 715,072 and 5,721,088 tokens); k3plan's own budget and its decode time are not split (a caveat says so)
    dcp = flag_int("--decode-context-parallel-size", get("--decode-context-parallel-size", get("-dcp", "1")))
    read_dcp(
        r,
        dcp,
        flag="--decode-context-parallel-size",
        tp_flag="--tensor-parallel-size",
        engine="vLLM",
        group="vLLM builds the DCP groups inside the TP group",
        pool=f"a request holds cdiv(max_model_len, {dcp}) tokens of it a rank, the logged size {dcp}x the tokens",
    )
    # prefill context parallelism (InferenceX's dsv4_fp4_b200_vllm_mtp.sh): the prompt's tokens, and their KV, split
    # over N ranks; not priced either
    pcp = flag_int("--prefill-context-parallel-size", get("--prefill-context-parallel-size", get("-pcp", "1")))
    if pcp > 1:
        raise K3PlanError(
            f"--serve: --prefill-context-parallel-size {pcp}: vLLM's prefill context parallelism (each rank holds 1/{pcp} "
            "of a prompt's tokens and their KV) is not priced by k3plan; remove it to price the command without it"
        )
    # InferenceX's multi-node vLLM recipes (@843c6254 benchmarks/multi_node/srt-slurm-recipes/vllm/): settings that
    # size what a GPU holds in a way k3plan does not follow, refused with what they do
    refuse_unpriced(get, VLLM_UNPRICED, "vLLM")
    read_hf_overrides(r, "--hf-overrides", engine="vLLM", source=HF_OVERRIDES_SOURCE)
    read_cpu_offload(r)
    read_dbo(r)
    read_removed(r)
    read_stale_env(r)
    # async scheduling (read for the batches a windowed KV group holds in flight: engines/vllm/memory.py
    # in_flight_batches): --no-async-scheduling turns it off, --async-scheduling on
    on, off = get("--async-scheduling", None), get("--no-async-scheduling", None)
    if on is not None or off is not None:
        r.async_scheduling = off is None and on is not None and on.lower() not in ("false", "0")
    v1 = r.env.get("VLLM_USE_V1", "1").strip()
    if r.platform != "tpu" and v1 in ("0", "false", "False") and r.release is not None and r.release < V0_GONE_FROM:
        r.caveats.append(
            f"VLLM_USE_V1={v1}: vLLM {release_text(r.release)} runs its V0 engine ({V0_SOURCE}); "
            "k3plan prices the V1 engine's profile run and pool"
        )
    sleep = get("--enable-sleep-mode", None)
    if sleep is not None and sleep.lower() not in ("false", "0"):
        r.caveats.append(
            "--enable-sleep-mode: vLLM allocates the weights and the KV cache through its CuMemAllocator (tags "
            "'weights' and 'kv_cache', offloadable while the engine sleeps); k3plan prices the start as without it"
        )
    cumem = get("--enable-cumem-allocator", None)  # InferenceX's agentic V4 / K3 vLLM nightlies (@843c6254)
    if cumem is not None and cumem.lower() not in ("false", "0"):
        r.caveats.append(
            "--enable-cumem-allocator: vLLM allocates the weights and the KV cache through its CuMemAllocator (the "
            "allocator sleep mode uses: vllm-project/vllm vllm/v1/worker/gpu_worker.py "
            "Worker._maybe_get_memory_pool_context, read in the public code index) and turns the custom all-reduce "
            "off; k3plan prices the start as without it"
        )
    ep_flag = get("--enable-expert-parallel", None)
    get("--ep-size", get("--ep", None))  # SGLang's EP size: taken, not read (the experts spread over TP x DP below)
    if ep_flag is None and r.platform == "tpu":
        raise K3PlanError(
            "--serve: vllm serve on a TPU without --enable-expert-parallel: the plugin's expert placement without "
            f"EP was not read (its K3 CI always passes it); add --enable-expert-parallel "
            f"{tpu_inference_serve.UNROUTED_NOTE}"
        )
    # without EP vLLM splits each expert's intermediate over the TP x DP ranks: the same bytes a device as EP over
    # them, which k3plan prices, plus the model code's per-shard padding (engines.vllm.moe_padding.MOE_SHARD_RULES)
    r.expert_parallel = ep_flag is not None and ep_flag.lower() not in ("false", "0")
    if not r.expert_parallel and r.platform == "tpu":
        raise K3PlanError(
            "--serve: vllm serve on a TPU with --no-enable-expert-parallel: the plugin's expert placement without "
            "EP was not read (its K3 CI always passes --enable-expert-parallel)"
        )
    # either way the experts spread over every TP x DP rank: with EP whole experts, without it each expert's
    # intermediate TP-split over the flattened dp x tp group (vllm-project/vllm@00c1c6a2
    # vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make, flatten_tp_across_dp_and_pcp:
    # "There are actually dp_size * pcp_size * tp_size devices ... we shard across all devices"); the bytes a
    # device are the same, which k3plan prices as EP over those ranks
    r.ep = r.tp * r.dp
    raw_context = get("--max-model-len", get("--context-length", None))
    if raw_context is not None:
        if raw_context.strip().lower() == "auto" and r.release is not None and r.release < MAX_MODEL_LEN_AUTO_FROM:
            raise K3PlanError(
                f"--serve: --max-model-len auto: vLLM {release_text(r.release)} parses --max-model-len as an integer "
                f"(argparse: invalid human_readable_int value: 'auto'; 'auto' from {release_text(MAX_MODEL_LEN_AUTO_FROM)}: "
                f"{MAX_MODEL_LEN_AUTO_SOURCE}); give a length"
            )
        if raw_context.strip().lower() in ("auto", "-1"):
            r.context_auto = True  # human_readable_int_or_auto: the engine fits the length to its pool
        else:
            r.context = human_readable_int("--max-model-len", raw_context)
    raw_chunk = get("--max-num-batched-tokens", None)
    sg_chunk = get("--chunked-prefill-size", None)
    if raw_chunk is not None:
        r.chunk = human_readable_int("--max-num-batched-tokens", raw_chunk)
    elif sg_chunk is not None:
        raise K3PlanError(f"--serve: --chunked-prefill-size is not {ENGINE}'s flag")
    seqs = get("--max-num-seqs", None)
    throughput = read_performance_mode(r, get("--performance-mode", None))
    doubled = f" doubled by --performance-mode throughput ({PERFORMANCE_MODE_SOURCE})" if throughput else ""
    if get("--max-running-requests", None) is not None:
        raise K3PlanError("--serve: --max-running-requests is SGLang's flag; vllm serve takes --max-num-seqs")
    a100_large = r.release is not None and r.release < VLLM_A100_SMALL_FROM  # before 0.9.0 an A100 is not excluded
    large = (
        r.device_gib is not None
        and r.device_gib >= VLLM_LARGE_GPU_GIB
        and ("a100" not in r.device_name.lower() or a100_large)
    )
    by_name = r.release is not None and r.release < VLLM_LARGE_BY_MEMORY_FROM
    if by_name:  # 0.8.4: the large tier by the device's name (VLLM_LARGE_BY_NAME_SOURCE)
        large = any(n in r.device_name.lower() for n in ("h100", "h200"))
    if r.platform == "tpu":  # the plugin's get_device_total_memory raises: device_memory 0 (VLLM_DEFAULTS_SOURCE)
        large = False
    huge = (
        r.platform != "tpu"
        and r.release is not None
        and r.release >= VLLM_HUGE_TIER_FROM
        and r.device_gib is not None
        and r.device_gib >= VLLM_HUGE_GPU_GIB
    )
    llm = r.llm_class is not None  # read_llm above: 0.8.4-0.34.x, the huge tier's LLM_CLASS entries the large one's
    source = (
        LLM_CLASS_SOURCE
        if llm
        else VLLM_HUGE_SOURCE
        if huge
        else VLLM_LARGE_BY_NAME_SOURCE
        if by_name
        else VLLM_A100_LARGE_SOURCE
        if large and "a100" in r.device_name.lower()
        else VLLM_DEFAULTS_SOURCE
    )
    batched_dp = (
        r.platform != "tpu"
        and (r.release is None or r.release >= BATCHED_DP_DEFAULT_FROM)
        and r.flags.get("--all2all-backend") in BATCHED_DP_BACKENDS
        and r.expert_parallel
        and r.dp > 1
    )
    scale = 2 if throughput else 1
    if r.chunk is None and batched_dp:  # the batched DP MoE's default (BATCHED_DP_SOURCE)
        r.chunk = BATCHED_DP_DEFAULT_TOKENS * scale
        source = BATCHED_DP_SOURCE
        r.chunk_source = f"vLLM's default max_num_batched_tokens {r.chunk}: {source}{doubled}"
    elif r.chunk is None:
        r.chunk = ((16384 if large or huge else 8192) if llm else 16384 if huge else 8192 if large else 2048) * scale
        r.chunk_source = f"vLLM's default max_num_batched_tokens {r.chunk}: {source}{doubled}"
    old_read = r.platform != "tpu" and r.release is not None and BATCH_CHECK_READ[0] <= r.release < BATCH_CHECK_READ[1]
    if seqs is None:
        default_seqs = (1024 if large or huge else 256) * scale
        unclamped = old_read and r.release is not None and r.release < SEQS_CLAMP_FROM
        r.batch = default_seqs if unclamped else min(default_seqs, r.chunk)
        r.batch_source = f"vLLM's default max_num_seqs {r.batch}: {source}{doubled}" + (
            f" (not cut to max_num_batched_tokens before 0.10.1: {SEQS_CLAMP_SOURCE})" if unclamped else ""
        )
    else:
        r.batch = flag_int("--max-num-seqs", seqs)
    # SchedulerConfig's check, as every wheel read from 0.8.4 to 0.34.0 raises it at config time (from 0.10.1 only an
    # explicit --max-num-seqs above the token budget meets it: the default is cut to the budget)
    checked = r.platform != "tpu" and (r.release is None or r.release >= BATCH_CHECK_READ[0])
    if checked and r.chunk < r.batch:
        raise K3PlanError(
            f"--serve: vLLM {release_text(r.release) if r.release else ''} refuses it: ValueError: "
            f"max_num_batched_tokens ({r.chunk}) must be greater than or equal to max_num_seqs ({r.batch}) "
            f"({BATCH_CHECK_SOURCE}); set --max-num-seqs at most {r.chunk}"
        )
    r.memory_options()
    if get("--moe-a2a-backend", None) is not None:
        raise K3PlanError("--serve: --moe-a2a-backend is SGLang's flag; vllm serve takes --all2all-backend")
    launch_flags(get, r.options)  # issue 48: the flags k3plan's launch lines write
    r.dtypes()
    raw_engram = get("--engram-config", None)
    r.engram_flag = raw_engram is not None
    engram = read_engram(raw_engram, r.env, dp=r.dp, platform=r.platform, release=r.release)
    if engram is not None:  # vLLM's EngramConfig (engines/vllm/engram.py)
        r.engram, r.engram_host_copies = engram.placement, engram.host_copies
    if ENGRAM_ENV in r.env and r.release is not None and r.release >= ENGRAM_WHEEL_FROM:
        r.ignored.append(f"{ENGRAM_ENV}={r.env[ENGRAM_ENV]}")  # no such variable in the wheels from 0.31.0
    if r.platform != "tpu":  # online FP8 of a checkpoint stored unquantized (engines/vllm/online_quant.py)
        r.online_quant = online_quantization
    r.quantization()
    # issue 47 item 1: priced in engines/vllm/spec.py; a drafter's kv_cache_dtype read against the target's
    ds_mla = r.resolve is not None and r.resolve(r.model).startswith("deepseek-v4")  # V4's fp8_ds_mla layout
    r.speculative = read_speculative(get, r.model, kv_cache_dtype=r.kv_raw, ds_mla=ds_mla, release=r.release)
    if r.speculative is not None and r.platform == "tpu":
        raise K3PlanError(
            "--serve: speculative decoding on a TPU: the torch_tpu plugin's drafter (its weights, KV and compiled "
            "buckets) was not read; k3plan prices vLLM's on GPUs"
        )
    # EngineArgs -> CompilationConfig.max_cudagraph_capture_size / cudagraph_capture_sizes
    top, sizes = get("--max-cudagraph-capture-size", None), get("--cudagraph-capture-sizes", None)
    if r.platform != "tpu":  # the graphs vLLM's GPU worker profiles and subtracts (engines/vllm/cudagraph.py)
        eager = get("--enforce-eager", None)
        comp = get("--compilation-config", None)
        if top is not None:
            comp = with_max_capture(comp, flag_int("--max-cudagraph-capture-size", top))
        if sizes is not None:
            comp = with_capture_sizes(comp, sizes)
        r.compilation = read_compilation(comp, enforce_eager=eager is not None and eager.lower() not in ("false", "0"))
        vendor = "amd" if r.device_name.lower().startswith("amd") else "nvidia"
        a2a = r.options.get("all2all_backend")  # launch_flags took the flag
        if r.compilation.mode != "NONE" and ht_disables_graphs(backend=a2a, dp=r.dp, release=r.release, vendor=vendor):
            r.compilation = CompilationRead(mode="NONE")
            r.caveats.append(
                f"--all2all-backend {a2a} at DP {r.dp}: vLLM sets cudagraph_mode NONE, no graphs captured "
                f"({HT_NO_GRAPHS_SOURCE})"
            )
    else:  # CUDA graphs: none on a TPU
        r.ignored += [f for f, v in (("--max-cudagraph-capture-size", top), ("--cudagraph-capture-sizes", sizes)) if v]
    override = get("--num-gpu-blocks-override", None)
    r.blocks_override = flag_int("--num-gpu-blocks-override", override) if override is not None else None
    read_kv_cache_memory_bytes(r, get("--kv-cache-memory-bytes", None))
    read_offload_env(r, hybrid_off=read_hybrid_off(r))
    # kernels and the indexer cache's format: nothing k3plan prices, one start check (engines/vllm/attention_config.py)
    r.attention = read_attention(get("--attention-config", None))
    indexer_kv = (r.attention or {}).get("indexer_kv_dtype")
    if r.attention is not None and not fp4_indexer(r.attention) and indexer_kv in (None, "auto", "bf16", "fp8"):
        r.ignored.append("--attention-config")  # kernels only (the FP4 indexer cache is a start check, below)
    if indexer_kv not in (None, "auto", "bf16", "fp8"):
        r.caveats.append(
            f"--attention-config indexer_kv_dtype {indexer_kv}: newer vLLM stores a sparse indexer's K cache in it "
            "(NVIDIA Dynamo's DeepSeek-V4.1-Flash recipes: fp8 or mxfp4, mxfp4 on compute capability 10.0 only); "
            "k3plan prices it for DeepSeek-V4.1's index keys (mxfp4: 68 B an entry, engines/vllm/dsv4_pages.py "
            "dsv41_pages) and at fp8 for DeepSeek-V4's"
        )
    # expert-parallel load balancing (vLLM EPLBConfig): moving experts between ranks costs nothing k3plan prices;
    # redundant experts (num_redundant_experts > 0) add expert copies a rank, priced by the budget's weights
    # (engines/vllm/eplb.py redundant_expert_pad, applied in app/fit.py where the model's expert count is known)
    eplb, eplb_cfg = get("--enable-eplb", None), get("--eplb-config", None)
    redundant = get("--num-redundant-experts", None)
    if redundant is not None and (r.release or (0, 33, 0)) >= REDUNDANT_FLAG_GONE_FROM:
        raise K3PlanError(
            f"--serve: --num-redundant-experts: vLLM {release_text(r.release or (0, 33, 0))} has no such flag (the "
            "0.11.2 wheel's EngineArgs: '[DEPRECATED] --num-redundant-experts will be removed in v0.12.0'; gone from "
            "0.13.0's, vllm/engine/arg_utils.py); expected --eplb-config '{\"num_redundant_experts\": N}'"
        )
    window = None
    if eplb_cfg is not None:
        cfg = json_object("--eplb-config", eplb_cfg)
        redundant, window = cfg.get("num_redundant_experts", redundant), cfg.get("window_size")
    count = flag_int("num_redundant_experts", str(redundant), lo=0) if redundant is not None else 0  # EPLBConfig: ge=0
    eplb_on = eplb is not None and eplb.lower() not in ("false", "0")
    if count and not eplb_on:
        raise K3PlanError(
            f"--serve: vLLM refuses num_redundant_experts {count} without --enable-eplb ('Either enable EPLB or "
            "unset num_redundant_experts.': vllm 0.33.0 wheel, config/parallel.py ParallelConfig)"
        )
    if eplb_on and not r.expert_parallel:
        raise K3PlanError(
            "--serve: vLLM refuses --enable-eplb without --enable-expert-parallel ('enable_expert_parallel must be "
            "True to use EPLB.': vllm 0.33.0 wheel, config/parallel.py ParallelConfig)"
        )
    if eplb_on and r.platform != "tpu":
        # (redundant copies, load window): the copies and the EPLB state the model adds at load (engines/vllm/eplb.py)
        r.eplb = (count, flag_int("window_size", str(window)) if window is not None else EPLB_WINDOW_DEFAULT)
    r.ignored += [f for f, v in (("--enable-eplb", eplb), ("--eplb-config", eplb_cfg)) if v is not None]
    # --additional-config is the platform plugin's own dict (vLLM passes it whole); on a TPU a "sharding" key makes
    # the command tpu-inference's (read above, engines/tpu_inference/serve.py); on a GPU it is no platform's mesh,
    # and any other key stays a flag k3plan does not read (refused by k3plan.engines.serve)
    extra = r.flags.get("--additional-config")
    if extra is not None and "sharding" in json_object("--additional-config", extra):
        raise K3PlanError(
            "--serve: --additional-config sharding is tpu-inference's mesh (tpu_inference/layers/common/sharding.py), "
            f"a TPU platform's; on {r.device_name or 'a GPU'} vLLM has no such key: remove it"
        )
    flashinfer_int4(r)
    read_backend_env(r)  # after the parallelism (engines/vllm/backend_env.py)
    read_deepep_env(r)
    read_fp4_moe_tokens_env(r)  # after --moe-backend and --enable-expert-parallel


def read_fp4_moe_tokens_env(r: Reading) -> None:
    """VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE (the comment at FP4_MOE_TOKENS_ENV): listed on a DeepSeek-V4 command on an
    NVIDIA GPU at a release read, where no CUTLASS FP4 experts read it; refused elsewhere."""
    value = r.env.get(FP4_MOE_TOKENS_ENV)
    if value is None:
        return
    lo, hi = FP4_MOE_TOKENS_READ
    model = r.resolve(r.model) if r.resolve is not None and r.model else ""
    unread = (
        r.platform == "tpu"
        or r.device_name.lower().startswith("amd")
        or r.release is None
        or not lo <= r.release < hi
        or not model.startswith("deepseek-v4")
        or model.startswith("deepseek-v4.1")
    )
    if unread:
        raise K3PlanError(
            f"--serve: {FP4_MOE_TOKENS_ENV}: the FP4 MoE workspace's tokens an expert (its size) is not priced by "
            "k3plan; remove it to price the engine without"
        )
    r.ignored.append(f"{FP4_MOE_TOKENS_ENV}={value}")  # MegaMoE or Mxfp4MoEMethod: no CUTLASS FP4 experts to read it


def read_deepep_env(r: Reading) -> None:
    """The DeepEP buffers' size variables (engines/vllm/all2all_buffers.py A2A_ENV): read where the command makes
    DeepEP's buffers on NVIDIA (priced in the start check), listed where it makes none."""
    vendor = "tpu" if r.platform == "tpu" else "amd" if r.device_name.lower().startswith("amd") else "nvidia"
    used = read_a2a_env(
        r.env,
        backend=r.options.get("all2all_backend"),  # launch_flags took the flag
        expert_parallel=r.expert_parallel,
        dp=r.dp,
        vendor=vendor,
    )
    given = [k for k in r.env if k in A2A_ENV]
    if used:
        r.env_read.update(given)
    else:
        r.ignored += [f"{k}={r.env[k]}" for k in given]


def check_env(env: dict[str, str], *, stack: str = "") -> None:
    """torchtpu-vllm's exports k3plan prices at one value only (refused in one line otherwise); tpu-inference's
    command reads its own (engines/tpu_inference/serve.py), and its variables are refused on any other route."""
    if stack == tpu_inference_serve.STACK:
        return
    theirs = sorted(tpu_inference_serve.KNOWN_ENV & set(env))
    if theirs:
        raise K3PlanError(
            f"--serve: {theirs[0]}: read only for tpu-inference's command (a TPU vllm serve whose --additional-config "
            "holds a sharding_strategy); this command is not one: remove it"
        )
    if env.get("MODEL_IMPL_TYPE", "vllm").strip() not in ("vllm", "auto", ""):
        raise K3PlanError(
            f"--serve: MODEL_IMPL_TYPE={env['MODEL_IMPL_TYPE']}: k3plan prices vLLM's model code (MODEL_IMPL_TYPE=vllm)"
        )
    if env.get("MOE_REQUANTIZE_BLOCK_SIZE", "512").strip() not in ("512", ""):
        raise K3PlanError(
            f"--serve: MOE_REQUANTIZE_BLOCK_SIZE={env['MOE_REQUANTIZE_BLOCK_SIZE']}: k3plan prices the requantized "
            "experts at the plugin's default block, 512"
        )


def finish(r: Reading) -> None:
    """The stack: vllm serve on a TPU is torchtpu-vllm (tpu-inference's own command set its stack in read), on a
    GPU vllm; torchtpu-vllm's caveats."""
    if r.stack == tpu_inference_serve.STACK:
        return
    r.stack = TORCHTPU.name if r.platform == "tpu" else ENGINE
    if r.stack != TORCHTPU.name:
        return
    if r.env.get(UNIFIED_POOL_ENV, "").strip() in ("1", "true", "True"):
        r.caveats.append(
            f"{UNIFIED_POOL_ENV}=1: the plugin's unified pool grows the page to hold one KDA state "
            "(tpu_block_size_utils.py _derive_tpu_block_slot_config); k3plan prices the hybrid page its stack sets"
        )
    if r.block is not None and r.block != TORCHTPU_DEFAULT_BLOCK and r.kv_raw in ("auto", "bfloat16", "bf16"):
        r.ignored.remove("--block-size")
        r.caveats.append(
            f"--block-size {r.block}: the TTFT and TPOT models price the plugin's MLA kernel at its "
            f"{TORCHTPU_DEFAULT_BLOCK}-token default page, the only one probe mla-engine timed at the engine's "
            "default blocks (k3plan.engines.flags.TORCHTPU_DEFAULT_BLOCK); over "
            f"{r.block}-token pages it runs fewer steps, so for this command they are high"
        )
