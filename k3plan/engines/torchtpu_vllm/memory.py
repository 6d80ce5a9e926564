"""The torch_tpu vLLM plugin's side of vLLM's KV-pool sizing (k3plan.engines.vllm.memory runs the pool with
these): its worker's HBM budget after the profile run, its compact KDA-state slots, and where each of its start
refusals is raised, each cited to the plugin's code."""

from __future__ import annotations

from k3plan.engines.engine import HbmWorker

TORCHTPU_WORKER = (
    "kowalski-4831/vllm-torchtpu@0095cdcb src/vllm_torchtpu/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "(utils.compute_hbm_budget: cap = int(limit x utilization), available = cap - (limit - free) after profile_run)"
)
TORCHTPU_COMPACT = (
    "kowalski-4831/vllm-torchtpu@15e5264a src/vllm_torchtpu/runner/kv_cache_manager.py "
    "KVCacheManager._maybe_set_compact_mamba_num_blocks_override (N_attn = (avail // group_size - num_mamba_groups x "
    "(max_num_reqs + 1) x mamba_unpadded) // (num_attn_groups x attn_page), pinned as num_gpu_blocks_override; "
    "ValueError when the slots leave no attention block)"
)
TORCHTPU_NO_POOL_AT = (
    "kowalski-4831/vllm-torchtpu@0095cdcb src/vllm_torchtpu/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "-> utils.compute_hbm_budget (ValueError when available <= 0)"
)
TORCHTPU_WEIGHTS_OOM_AT = (
    "the plugin's weight loading, before TPUWorker.determine_available_memory sizes any KV cache (the torch_tpu "
    "allocator's own error text was not read)"
)

WORKER = HbmWorker(
    source=TORCHTPU_WORKER,
    no_pool=(
        "ValueError: total_hbm_used_gb {used:.2f} exceeds total_hbm_limit_cap_gb {cap:.2f} (--gpu-memory-utilization "
        "{util}): no room for the KV cache"
    ),
    no_pool_at=TORCHTPU_NO_POOL_AT,
    weights_oom="out of HBM",
    weights_oom_at=TORCHTPU_WEIGHTS_OOM_AT,
    compact_at=TORCHTPU_COMPACT,
    compact_short="raise",
)
