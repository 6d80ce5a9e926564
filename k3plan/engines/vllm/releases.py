"""The vLLM releases k3plan's rules follow (k3plan.engines.release): the one a GPU question that names none is read
as, and the batches in flight a windowed KV group holds pages for, which the engine's pool (engines/vllm/memory.py)
and the budget's charge for a DeepSeek-V4.1 request (engines/vllm/dsv4_pages.py v41_request_charge) both read."""

from __future__ import annotations

from k3plan.engines.release import Release
from k3plan.engines.vllm.extensible import hybrid_mla_alignment
from k3plan.engines.vllm.mla_block import smallest_kernel_block
from k3plan.errors import K3PlanError

# the newest vLLM release k3plan prices, 0.33.0 (PyPI): a GPU question without fit --engine-version is read as it.
# The rules that changed between releases were read in the 0.11.1-0.33.0 wheels, each naming its own
# (Engine.by_release in engines/vllm/__init__.py). A planner is asked about the engine people install today, not the
# release a rule was first read in; a log of an older release is read with its own --engine-version
# (tests/engines/cases). The 0.32.0, 0.33.0 and 0.34.0 wheels were diffed against 0.31.0: the changes k3plan prices
# are gated on their releases (by_release). 0.34.0's pool, sized from the memory free after warmup and graph capture,
# is priced under fit --engine-version 0.34.0 (engines/vllm/extensible.py EXTENSIBLE_FROM), its measured terms as
# k3plan's estimates; the default stays the newest release before it until that reading is checked against a log
# (none public was found). What a move would change, counted with NEWEST_RELEASE at 0.34.0 over the 351 vLLM tests
# of tests/engines (10 fail, each passing at 0.33.0): a command with --kv-transfer-config is refused (a KV connector's
# say over the extensible cache is unread: the recipes' DeepSeek-V4-Flash PD cases, InferenceX's Kimi-K3 B300 DCP8
# nightly); the budget's reserve stays at 0.92 (option_defaults) where the pool takes 1.0 less the margin, so the
# budget holds fewer sequences than the engine (tests/engines/test_vllm_dsv41_pages.py, test_vllm_dsv4_pages.py,
# test_vllm_moe_padding.py); tests/engines/test_vllm_sampler.py's pool identity (activation + graphs) gains the
# margin, max(1 GiB, 0.75 x the peak). The other 16 cases read at the default keep their verdicts.
NEWEST_RELEASE: Release = (0, 33, 0)
# the newest vLLM release whose code k3plan read (its wheel diffed against 0.31.0, its changes gated on it), priced
# under fit --engine-version 0.34.0: a command of a later release is priced by its rules, and says so
NEWEST_READ: Release = (0, 34, 0)

# From 0.26.0 a windowed KV group (a sliding window or a compressor state) charges each request its window plus the
# tokens scheduled and not yet settled, one max_num_batched_tokens a concurrent batch (VllmConfig.max_in_flight_tokens,
# SlidingWindowSpec.max_admission_blocks_per_request); 0.25.0 charged one batch (read in the 0.25.0, 0.26.0 and 0.31.0
# wheels). The batches: 2 with async scheduling on the V1 runner at PP 1, PP + 1 on Model Runner V2 (DSpark's), PP
# without async scheduling (VllmConfig.max_concurrent_batches). vllm-project/vllm#53961's 23.32 GiB needs them.
IN_FLIGHT_FROM: Release = (0, 26, 0)
IN_FLIGHT_SOURCE = (
    "vllm 0.26.0 wheel vllm/config/vllm.py VllmConfig.max_concurrent_batches x max_num_batched_tokens "
    "(max_in_flight_tokens); 0.25.0's windowed specs take one max_num_batched_tokens"
)
# From 0.34.0 vLLM has one GPU runner, Model Runner V2 (the V1 runner's vllm/v1/worker/gpu_model_runner.py is gone
# from the wheel): VllmConfig.max_concurrent_batches is PP + 1 under async scheduling whatever the runner, PP without
# it (vllm 0.34.0 wheel (PyPI), vllm/config/vllm.py; 0.31.0-0.33.0 still branch on use_v2_model_runner)
ONE_RUNNER_FROM: Release = (0, 34, 0)


def in_flight_batches(release: Release | None, *, async_scheduling: bool | None, pp: int, v2_runner: bool) -> int:
    """The batches of max_num_batched_tokens a windowed group holds pages for (``IN_FLIGHT_SOURCE``): 1 before
    0.26.0 or where no release is named (the cited v0.25.0 code); ``async_scheduling`` None: vLLM's default, on;
    ``v2_runner``: Model Runner V2 runs the command (from 0.34.0 every command, ``ONE_RUNNER_FROM``)."""
    if release is None or release < IN_FLIGHT_FROM:
        return 1
    if async_scheduling is False:
        return pp
    if v2_runner or release >= ONE_RUNNER_FROM:  # Model Runner V2's PP + 1 (from 0.34.0 the only runner)
        return pp + 1
    return 2 if pp <= 1 else pp


# From 0.27.0 the block vLLM sets for a hybrid model whose attention is MLA is aligned to 128 tokens (the TRT-LLM /
# FlashInfer MLA decode kernels want the kernel blocks a block splits into aligned to 128 / the kernel block):
# Platform._align_hybrid_block_size takes kernel_block_alignment_size = max(the backend's smallest kernel block,
# cache_config.block_size, 128) where model_config.use_mla, then attn_block_size = that x cdiv(mamba page, that x
# the attention page a token). Read in the 0.27.0, 0.28.0, 0.33.0 and 0.34.0 wheels (PyPI) vllm/platforms/
# interface.py; 0.26.0's takes max(smallest kernel block, block_size) alone (below). Kimi-K3 (first in the 0.27.0
# wheel) with an fp8 cache at TP 8 on B200: 1,536-token blocks from 0.27.0, 1,440 at 0.24.0-0.26.x (FlashInfer MLA's 32).
HYBRID_MLA_ALIGN_FROM: Release = (0, 27, 0)
HYBRID_MLA_ALIGN_SOURCE = (
    "vllm 0.27.0 wheel (PyPI), vllm/platforms/interface.py Platform._align_hybrid_block_size: "
    "kernel_block_alignment_size = max(kernel_block_alignment_size, 128) where model_config.use_mla (0.26.0: not)"
)


# 0.24.0-0.26.x: kernel_block_alignment_size = max(the backend's smallest kernel block, cache_config.block_size, which
# update_block_size_for_backend has set to the backend's preferred (0.25.0, 0.26.0; 16 for a hybrid in 0.24.0)): the
# default MLA backend's smallest block (engines/vllm/mla_block.py smallest_kernel_block), FlashInfer MLA's 32 on the
# SM100 family (Kimi-K3's qk_nope_head_dim 128 passes its supports_combination), FLASH_ATTN_MLA's 16 on SM90 (FlashMLA's
# 64 with an fp8 cache). Read in the 0.24.0, 0.25.0 and 0.26.0 wheels (PyPI), vllm/platforms/interface.py.
HYBRID_KERNEL_BLOCK_FROM: Release = (0, 24, 0)
HYBRID_KERNEL_BLOCK_SOURCE = (
    "vllm {v} wheel (PyPI), vllm/platforms/interface.py Platform._align_hybrid_block_size: kernel_block_alignment_size "
    "= max(the backend's smallest kernel block, block_size), the backend {k}"
)


def hybrid_mla_align(
    release: Release, align: int, *, hardware: str = "", fp8_kv: bool = False
) -> tuple[int, str] | None:
    """The token alignment of the attention block vLLM ``release`` sets for a hybrid MLA + linear-attention model
    whose kernel alignment is ``align`` (``HYBRID_MLA_ALIGN_SOURCE``); at 0.24.0-0.26.x the default MLA backend's
    smallest kernel block on ``hardware`` (``HYBRID_KERNEL_BLOCK_SOURCE``); None before, or on a GPU not read
    (``align`` holds)."""
    if release >= HYBRID_MLA_ALIGN_FROM:
        return hybrid_mla_alignment(align, align), HYBRID_MLA_ALIGN_SOURCE
    if release < HYBRID_KERNEL_BLOCK_FROM:
        return None
    got = smallest_kernel_block(hardware, fp8_kv=fp8_kv)
    if got is None:
        return None
    return got[0], HYBRID_KERNEL_BLOCK_SOURCE.format(v=".".join(map(str, release)), k=got[1])


def default_in_flight() -> int:
    """The batches in flight where a question gives no command to read them from (fit or plan without --serve):
    ``NEWEST_RELEASE``'s default scheduling at PP 1, the one value the budget's charge and the engine's pool read
    (async scheduling's 2 on the V1 runner and Model Runner V2's PP + 1 alike)."""
    return in_flight_batches(NEWEST_RELEASE, async_scheduling=None, pp=1, v2_runner=False)


# CacheConfig.gpu_memory_utilization's default: 0.9 to 0.19.x, 0.92 from 0.20.0 (Field(default=0.9) in the 0.15.0
# and 0.19.0 wheels (PyPI), vllm/config/cache.py; Field(default=0.92) in 0.20.0, 0.21.0, 0.22.0, 0.23.0, 0.26.0-0.33.0).
# The stack's default (engines/vllm/stack.yaml) is the newest release's; an older release's command that sets none
# runs at its own. From 0.34.0 an unset utilization resolves by the extensible KV cache (engines/vllm/extensible.py).
UTILIZATION_092_FROM: Release = (0, 20, 0)
UTILIZATION_09_SOURCE = (
    "vllm 0.19.0 wheel (PyPI), vllm/config/cache.py CacheConfig.gpu_memory_utilization Field(default=0.9); 0.92 from "
    "0.20.0"
)


def option_defaults(release: Release) -> dict[str, tuple[str, str]]:
    """The stack options whose default differs at ``release`` from the stack YAML's (the newest release's): value
    and where it was read (``Engine.option_defaults``)."""
    if release < UTILIZATION_092_FROM:
        return {"gpu_memory_utilization": ("0.9", UTILIZATION_09_SOURCE)}
    return {}


# Which GPU runner runs a command (VllmConfig.use_v2_model_runner): VLLM_USE_V2_MODEL_RUNNER where set (an int, then
# bool); else DSpark (only Model Runner V2 implements it); else by release: V1 before 0.28.0; in 0.28.0 V2 for
# DeepSeek-V4 on CUDA (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES) unless an ngram drafter; from 0.29.0 V2 by default,
# except on ROCm for DeepSeek-V4 to 0.32.x (ROCM_DEFAULT_MRV1_ARCHITECTURES, gone from 0.33.0's wheel) and for a
# drafter V2 lacks (0.29.0-0.32.x: ngram / ngram_gpu; suffix, medusa, mlp_speculator, custom_class in every one);
# from 0.34.0 V2 is the only runner (ONE_RUNNER_FROM). Read in the 0.28.0, 0.29.0, 0.30.0, 0.31.0 and 0.33.0 wheels
# (PyPI), vllm/config/vllm.py use_v2_model_runner / _get_v2_model_runner_unsupported_features
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V2_V4_DEFAULT_FROM: Release = (0, 28, 0)
V2_DEFAULT_FROM: Release = (0, 29, 0)
ROCM_V4_ON_V1_UNTIL: Release = (0, 33, 0)
V2_NGRAM_FROM: Release = (0, 33, 0)
V2_LACKS = ("suffix", "medusa", "mlp_speculator", "custom_class")
RUNNER_SOURCE = (
    "vllm 0.28.0-0.33.0 wheels (PyPI) vllm/config/vllm.py VllmConfig.use_v2_model_runner, "
    "_get_v2_model_runner_unsupported_features, ROCM_DEFAULT_MRV1_ARCHITECTURES"
)


def model_runner_v2(
    *, release: Release | None, env: dict[str, str], spec_method: str | None, vendor: str, v4: bool
) -> tuple[bool, str]:
    """Whether Model Runner V2 runs the command, and why (above); ``v4``: DeepSeek-V4 (not V4.1); ``release`` None:
    the code k3plan's vLLM rules cite (before 0.28.0), so V1 unless the command asks otherwise."""
    if V2_ENV in env:
        try:
            on = bool(int(env[V2_ENV].strip()))
        except ValueError:
            raise K3PlanError(f"--serve: {V2_ENV}={env[V2_ENV]!r}: vLLM reads it as a whole number (0 or 1)") from None
        return on, f"{V2_ENV}={env[V2_ENV].strip()}"
    if spec_method == "dspark":
        return True, "DSpark, which runs on Model Runner V2 only"
    if release is None or release < V2_V4_DEFAULT_FROM:
        return False, "the V1 runner, the default before 0.28.0"
    if release >= ONE_RUNNER_FROM:
        return True, "Model Runner V2, the only runner from 0.34.0"
    ngram = spec_method in ("ngram", "ngram_gpu")
    if release < V2_DEFAULT_FROM:
        on = vendor == "nvidia" and v4 and not ngram
        return on, (
            "DeepSeek-V4 on CUDA, a default Model Runner V2 architecture in 0.28.0"
            if on
            else "the V1 runner, 0.28.0's default but for DeepSeek-V4 on CUDA"
        )
    if spec_method in V2_LACKS or (ngram and release < V2_NGRAM_FROM):
        return False, f"the V1 runner: Model Runner V2 lacks the {spec_method} drafter"
    if vendor != "nvidia" and v4 and release < ROCM_V4_ON_V1_UNTIL:
        return False, "the V1 runner, ROCm's default for DeepSeek-V4 to 0.32.x"
    return True, "Model Runner V2, the default from 0.29.0"
