"""vLLM's extensible KV cache (from 0.34.0): the pool sized from the memory free after warmup and CUDA-graph capture,
as the 0.34.0 wheel (PyPI) does it. Pure functions over numbers passed in; engines/vllm/memory.py vllm_kv_pool prices
the start with them.

What the engine does at start (vllm 0.34.0 wheel (PyPI)):

1. vllm/v1/worker/gpu_worker.py Worker.determine_available_memory: the profile run as before, but no CUDA-graph
   estimate (vllm/v1/worker/gpu/model_runner.py GPUModelRunner.profile_cudagraph_memory returns 0 under the extensible
   cache): the *capacity* = requested - (weights + non-torch + the profile's transient peak), requested =
   ceil(total x gpu_memory_utilization) (vllm/v1/worker/utils.py request_memory), gpu_memory_utilization 1.0 unless
   the command sets it (vllm/config/cache.py CacheConfig.resolved_gpu_memory_utilization). The engine core checks a
   max_model_len request against this capacity less the null block (vllm/v1/core/kv_cache_planning.py
   get_kv_cache_configs -> _check_enough_kv_cache_memory) and reserves it as address space.
2. Worker.compile_or_warm_up_model: warmup, the sizing steps (vllm/v1/worker/gpu/warmup.py
   run_kv_cache_sizing_warmup: full-budget steps with attention), the transient peak recorded
   (ExtensibleKVCache.record_transient_peak: the larger of the profile's peak, Worker.peak_activation_memory, and the
   sizing steps' allocated peak over current), then CUDA-graph capture.
3. vllm/v1/worker/extensible_kv_cache.py measure_kv_cache_blocks -> measure_kv_cache_bytes, after capture:
       non_kv_used = init_free - free - committed       (weights, non-torch, the captured graphs, persistent buffers)
       headroom    = free + committed
       margin      = max(KV_CACHE_MARGIN_FLOOR_BYTES, int(transient_peak x KV_CACHE_MARGIN_FRACTION))
       available   = min(requested - non_kv_used, headroom - margin) - max(transient_peak, torch_reserve_growth)
   blocks = ExtensibleKVCache.blocks_within(available) (each segment's commit rounded to the VMM granule), the minimum
   over ranks, capped at the capacity's (vllm/v1/core/kv_cache_planning.py finalize_extensible_kv_cache), then checked
   again: (blocks - 1) x the bytes a block against a max_model_len request (shrink_kv_cache_configs ->
   _check_enough_kv_cache_memory, the after-warmup hint).

In k3plan's terms (init_free = the visible HBM less what the worker holds before its first snapshot, the CUDA
context and NCCL's buffers: unpriced, so 0; the committed blocks cancel):
       available = min(u x visible - (weights + graphs), visible - (weights + graphs) - margin) - transient_peak
with graphs k3plan's CUDA-graph estimate (engines/vllm/cudagraph.py) standing for the measured capture and the
transient peak k3plan's profile-peak term (engines/vllm/memory.py engine_sizing) standing for Model Runner V2's.

Where it is on (vllm/config/vllm.py VllmConfig._resolve_extensible_kv_cache): unset, on CUDA and ROCm unless
kv_cache_memory_bytes or num_gpu_blocks_override is set, elastic EP is on, or a KV connector shares the cache through
legacy CUDA IPC, its own memory pool, RDMA registration on ROCm, or FABRIC handles without an IMEX channel; off where
the driver lacks VMM (Worker.extensible_kv_cache_unsupported_reason); --no-enable-extensible-kv-cache turns it off.
"""

from __future__ import annotations

import math

from k3plan.engines.release import Release
from k3plan.units import GiB

EXTENSIBLE_FROM: Release = (0, 34, 0)
WHEEL = "vllm 0.34.0 wheel (PyPI)"
EXTENSIBLE_SOURCE = (
    f"{WHEEL}, vllm/v1/worker/extensible_kv_cache.py measure_kv_cache_bytes (min(requested - non_kv_used, headroom - "
    "margin) - max(transient_peak, torch_reserve_growth)) via measure_kv_cache_blocks, called by "
    "vllm/v1/worker/gpu_worker.py Worker.compile_or_warm_up_model after CUDA-graph capture; "
    "vllm/config/cache.py CacheConfig.enable_extensible_kv_cache (on by default on CUDA and ROCm)"
)
# the margin kept beyond the transient peak: 1 GiB (3 GiB on ROCm) or 0.75 x the peak, the larger
# (vllm/v1/worker/extensible_kv_cache.py KV_CACHE_MARGIN_FLOOR_BYTES = (3 if current_platform.is_rocm() else 1) << 30,
# KV_CACHE_MARGIN_FRACTION = 0.75)
MARGIN_FLOOR_BYTES = {"cuda": GiB, "rocm": 3 * GiB}
MARGIN_FRACTION = 0.75
MARGIN_SOURCE = (
    f"{WHEEL}, vllm/v1/worker/extensible_kv_cache.py KV_CACHE_MARGIN_FLOOR_BYTES ((3 if ROCm else 1) << 30), "
    "KV_CACHE_MARGIN_FRACTION (0.75)"
)
# torch's caching allocator is capped after sizing to leave 0.5 GiB (1 GiB on ROCm) free for allocations outside it
# (KV_CACHE_NON_TORCH_RESERVE_BYTES = (2 if ROCm else 1) << 29): taken from what stays free, not from the pool
NON_TORCH_RESERVE_BYTES = {"cuda": GiB // 2, "rocm": GiB}
# gpu_memory_utilization's default: 1.0 under the extensible cache, 0.92 otherwise
# (vllm/config/cache.py CacheConfig.resolved_gpu_memory_utilization, DEFAULT_GPU_MEMORY_UTILIZATION)
DEFAULT_UTILIZATION = 1.0
DEFAULT_UTILIZATION_ESTIMATE = 0.92
UTILIZATION_SOURCE = (
    f"{WHEEL}, vllm/config/cache.py CacheConfig.resolved_gpu_memory_utilization (unset: 1.0 with the extensible KV "
    "cache, DEFAULT_GPU_MEMORY_UTILIZATION 0.92 without); vllm/v1/worker/utils.py request_memory "
    "(ceil(total x utilization))"
)
# the block a command without --block-size starts from: 64 from 0.34.0, 16 before (vllm/config/cache.py
# CacheConfig.DEFAULT_BLOCK_SIZE); vllm/platforms/interface.py Platform._preferred_block_size_for_backends /
# AttentionBackend.get_preferred_block_size keep it where the backend supports it, else take the backend's smallest
DEFAULT_BLOCK_SIZE = 64
DEFAULT_BLOCK_SIZE_BEFORE = 16
BLOCK_SOURCE = (
    f"{WHEEL}, vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE (64; 16 in 0.33.0), resolved by "
    "vllm/v1/attention/backend.py AttentionBackend.get_preferred_block_size (the default where the backend supports "
    "it, else its smallest) and, for a hybrid MLA model, vllm/platforms/interface.py Platform._align_hybrid_block_size "
    "(the kernel alignment max(the backend's smallest, block_size, 128 for MLA))"
)


def preferred_block(default: int, supported: tuple[int, ...]) -> int:
    """vllm/v1/attention/backend.py AttentionBackend.get_preferred_block_size: ``default`` where the backend supports
    it (a listed size, or a multiple of one where the backend lists a MultipleOf: pass those as negatives, -16 for
    MultipleOf(16)), else its smallest; no sizes listed: the default."""
    if not supported:
        return default
    if any(default == s if s > 0 else default % -s == 0 for s in supported):
        return default
    return min(abs(s) for s in supported)


def hybrid_mla_alignment(block: int, smallest_kernel_block: int) -> int:
    """Platform._align_hybrid_block_size's kernel alignment for a hybrid MLA model: max(the backend's smallest kernel
    block, block_size, 128)."""
    return max(smallest_kernel_block, block, 128)


# where the start checks raise, before and after warmup
CAPACITY_CHECK_AT = (
    f"{WHEEL}, vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory (ValueError), called by "
    "get_kv_cache_configs on the reserved capacity before warmup"
)
MEASURED_CHECK_AT = (
    f"{WHEEL}, vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory (ValueError), called by "
    "shrink_kv_cache_configs from finalize_extensible_kv_cache on the blocks measured after warmup and graph capture"
)
# what the measured sizing holds that k3plan does not price (the pool is then an upper bound)
UNPRICED = (
    "from 0.34.0 the memory vLLM measures after warmup and capture and k3plan estimates or leaves out: the captured "
    "CUDA graphs (k3plan's estimate of them stands in), the sizing warmup's transient peak and torch's reservation "
    "growth where they exceed the profile run's, and the CUDA context and NCCL buffers held before the worker's "
    "first snapshot (they shrink the free memory the headroom is measured from), and the commit's rounding of each "
    "segment to the driver's VMM granule (ExtensibleKVCache.blocks_within / physical_bytes_for: under a granule a "
    "layer segment)"
)


def platform_of(vendor: str) -> str:
    """The platform the margins read: 'rocm' on AMD GPUs, 'cuda' elsewhere (current_platform.is_rocm())."""
    return "rocm" if vendor == "amd" else "cuda"


def requested_bytes(visible_bytes: int, utilization: float) -> int:
    """vllm/v1/worker/utils.py request_memory: ceil(total x gpu_memory_utilization)."""
    return math.ceil(visible_bytes * utilization)


def margin_bytes(transient_peak: int, *, platform: str = "cuda") -> int:
    """measure_kv_cache_bytes' margin: max(the floor, int(transient_peak x 0.75))."""
    return max(MARGIN_FLOOR_BYTES[platform], int(transient_peak * MARGIN_FRACTION))


def measure_kv_cache_bytes(
    *,
    init_free_memory: int,
    free_memory: int,
    committed_bytes: int,
    requested_memory: int,
    transient_peak_bytes: int = 0,
    torch_reserve_growth_bytes: int = 0,
    platform: str = "cuda",
) -> int:
    """vllm 0.34.0's measure_kv_cache_bytes, term for term (``EXTENSIBLE_SOURCE``)."""
    non_kv_used = init_free_memory - free_memory - committed_bytes
    headroom = free_memory + committed_bytes
    margin = margin_bytes(transient_peak_bytes, platform=platform)
    available = min(requested_memory - non_kv_used, headroom - margin)
    available -= max(transient_peak_bytes, torch_reserve_growth_bytes)
    return max(available, 0)


class Measured:
    """The pool the extensible cache measures, in k3plan's terms (module docstring): the worker's view after capture
    with ``resident`` (weights + graphs + priced non-torch) held and ``transient_peak`` kept free."""

    def __init__(
        self, *, visible_bytes: int, utilization: float, resident: int, transient_peak: int, platform: str
    ) -> None:
        self.requested = requested_bytes(visible_bytes, utilization)
        self.margin = margin_bytes(transient_peak, platform=platform)
        self.bytes = measure_kv_cache_bytes(
            init_free_memory=visible_bytes,
            free_memory=visible_bytes - resident,
            committed_bytes=0,
            requested_memory=self.requested,
            transient_peak_bytes=transient_peak,
            platform=platform,
        )
        self.bound = "requested" if self.requested - resident <= visible_bytes - resident - self.margin else "headroom"
        self.text = (
            f"min(requested {self.requested:,} B - non-KV {resident:,} B, headroom {visible_bytes - resident:,} B - "
            f"margin {self.margin:,} B) - transient peak {transient_peak:,} B (the {self.bound} bound): "
            f"{EXTENSIBLE_SOURCE}; margin {MARGIN_SOURCE}"
        )


def hint(utilization: float, *, after_warmup: bool) -> str:
    """vllm/v1/core/kv_cache_planning.py _more_kv_cache_memory_hint under the extensible cache."""
    used_by = "the model, its activations, CUDA graphs and warmup" if after_warmup else "the model and its activations"
    graphs = (
        " CUDA graphs take less with fewer or smaller capture sizes in the compilation config." if after_warmup else ""
    )
    if utilization < 1.0:
        return (
            f"The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={utilization}; increase "
            "it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`."
            f"{graphs}"
        )
    return (
        f"The extensible KV cache already takes all device memory left after {used_by}; decrease `max_model_len` or "
        f"`max_num_seqs`, or the model needs a device with more memory.{graphs}"
    )


def no_memory_message(utilization: float, *, after_warmup: bool) -> str:
    """_check_enough_kv_cache_memory's first refusal (available <= 0)."""
    return (
        f"ValueError: No available memory for the cache blocks. {hint(utilization, after_warmup=after_warmup)} "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )


def too_long_message(*, max_model_len: int, need: int, available: int, utilization: float, after_warmup: bool) -> str:
    """_check_enough_kv_cache_memory's second refusal (a max_model_len request does not fit); the estimated length
    the engine adds is left out."""
    return (
        f"ValueError: To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({need / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({available / GiB:.2f} GiB). {hint(utilization, after_warmup=after_warmup)} Decreasing `max_model_len` also "
        "reduces what is needed."
    )
