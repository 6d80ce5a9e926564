"""tpu-inference's launch under its DP attention: one ``vllm serve`` over every device (k3plan.engines.vllm.launch
writes it), the split written in --additional-config's sharding_strategy (vllm-project/tpu-inference@811f8e20,
cited below)."""

from __future__ import annotations

from k3plan.engines.launch_config import LaunchConfig
from k3plan.errors import K3PlanError

# One engine over several hosts: tpu_platform.py TpuPlatform.check_and_update_config picks the executor from the
# environment alone (vllm-project/tpu-inference@811f8e20 and @b8692ff0): TPU_MULTIHOST_BACKEND unset forces "uni"
# (UniProcExecutor, this host's devices) whatever --distributed-executor-backend says, "ray" RayDistributedExecutor.
# Its CI's multi-host runs set it on every host's container (.buildkite/scripts/run_multihost.sh: -e
# TPU_MULTIHOST_BACKEND=ray for the Ray head and each worker, scripts/multihost/run_cluster.sh starting Ray there)
MULTIHOST_ENV = "TPU_MULTIHOST_BACKEND"
MULTIHOST_BACKEND = "ray"


def multihost_env(cfg: LaunchConfig) -> list[str]:
    """The environment a launch over several hosts needs (MULTIHOST_ENV); none on one host."""
    return [f"{MULTIHOST_ENV}={MULTIHOST_BACKEND}"] if cfg.hosts > 1 else []


def tpu_sharding_strategy(cfg: LaunchConfig) -> dict[str, bool | int]:
    """tpu-inference's additional_config sharding_strategy for k3plan's (tp, dp, ep) under DP attention
    (vllm-project/tpu-inference@811f8e20 tpu_inference/layers/common/sharding.py
    ShardingConfigManager.from_vllm_config; the mesh (data, attn_dp, attn_dp_expert, expert, model, dcp, pcp),
    tpu_runner.py _create_single_slice_mesh). tp 1 with the experts over every device: tensor_parallelism 1
    and expert_parallelism = the devices (attn_dp 1, attn_dp_expert = every device, model 1); tp > 1 with the
    experts over TP: attn_dp_size = dp of --tensor-parallel-size = the devices (attn_dp = dp, model = tp, the
    expert axis 1). Anything else (pp > 1, another ep) has no such launch: a one-line error."""
    devices = cfg.tp * cfg.dp
    if cfg.pp != 1:
        raise K3PlanError(f"tpu-inference DP attention: pp={cfg.pp}: k3plan writes no pipeline for it; expected pp 1")
    if cfg.tp == 1 and cfg.ep == devices:
        return {"enable_dp_attention": True, "tensor_parallelism": 1, "expert_parallelism": devices}
    if cfg.tp > 1 and cfg.dp > 1 and cfg.ep == cfg.tp:
        return {"enable_dp_attention": True, "attn_dp_size": cfg.dp}
    raise K3PlanError(
        f"tpu-inference DP attention: tp={cfg.tp} ep={cfg.ep} dp={cfg.dp}: expected tp 1 with ep {devices} "
        "(the experts over every device) or tp > 1, dp > 1 with ep = tp"
    )
