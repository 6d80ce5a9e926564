"""tpu-inference's side of vLLM's KV-pool sizing (k3plan.engines.vllm.memory runs the pool with it): its worker
sizes the pool from the HBM its devices report, with no profile run before it, and its compact KDA-state slots fall
back to vLLM's uniform pages when they leave no attention block. Each rule is read in vllm-project/tpu-inference at
811f8e20 (the K3 branch the stack prices; the same code at main b8692ff0)."""

from __future__ import annotations

from k3plan.engines.engine import HbmWorker

COMMIT = "811f8e20"
WORKER_SOURCE = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "(total_hbm_avail = int(sum of the devices' bytes_limit x gpu_memory_utilization - sum of their bytes_in_use); "
    "no profile run before it: the step is compiled in compile_or_warm_up_model -> runner.capture_model, after the "
    "KV cache is allocated)"
)
NO_POOL_AT = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/worker/tpu_worker.py TPUWorker.determine_available_memory "
    "(ValueError when total_hbm_avail <= 0)"
)
WEIGHTS_OOM_AT = (
    f"the sharded weights' allocation in vllm-project/tpu-inference@{COMMIT} tpu_inference/models/common/"
    "model_loader.py get_model, before TPUWorker.determine_available_memory sizes any KV cache (XLA's own error text "
    "was not read)"
)
COMPACT_AT = (
    f"vllm-project/tpu-inference@{COMMIT} tpu_inference/runner/kv_cache_manager.py "
    "KVCacheManager._maybe_set_compact_mamba_num_blocks_override (N_attn = (avail // group_size - num_mamba_groups x "
    "mamba_num_blocks x mamba_unpadded) // (num_attn_groups x attn_page), both counts rounded to the sharding "
    "divisor, the attention-DP axes under DP attention: a device's share is max_num_seqs + 1 state slots; when the "
    "slots leave no attention block it logs 'Compact-mamba sizing skipped' and vLLM sizes the uniform pages)"
)

WORKER = HbmWorker(
    source=WORKER_SOURCE,
    # the worker's f-string ({total_hbm_used_gb=}GiB ...), over one device's share: it sums its devices
    no_pool=(
        "ValueError: total_hbm_used_gb={used}GiB exceeds total_hbm_limit_cap_gb={cap}GiB by {over}GiB. Please "
        "consider increasing --gpu-memory-utilization from {util} to a larger value. (a device's share: the worker "
        "sums its devices)"
    ),
    no_pool_at=NO_POOL_AT,
    weights_oom="RESOURCE_EXHAUSTED (XLA's allocator)",
    weights_oom_at=WEIGHTS_OOM_AT,
    compact_at=COMPACT_AT,
    compact_short="uniform",
)
