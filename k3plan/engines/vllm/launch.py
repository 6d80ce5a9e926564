"""``vllm serve``: vLLM on GPUs, and the TPU engines that run under the same CLI (tpu-inference, the torch_tpu
plugin, whose CI's serve flags its folder cites: Engine.ci_serve_flags)."""

from __future__ import annotations

from k3plan.engines.flags import TPU_INFERENCE_KV, VLLM_KV, ci_serve_flags
from k3plan.engines.launch_config import LaunchConfig, env_args, join_args, kv_spelling, option_args, option_flags
from k3plan.engines.tpu_inference.launch import multihost_env, tpu_sharding_strategy
from k3plan.errors import K3PlanError


def vllm_command(cfg: LaunchConfig) -> str:
    """``vllm serve MODEL ...``; the same CLI drives vLLM on GPUs and tpu-inference on TPUs.

    vLLM has no EP size: ``--enable-expert-parallel`` puts experts over TP x DP ranks; DP attention
    is DP > 1 with expert parallelism on. ``--gpu-memory-utilization`` is the fraction of each
    device's memory the engine may take (CacheConfig); on TPU it is read the same way.
    """
    kv = (
        kv_spelling(cfg, TPU_INFERENCE_KV, "tpu-inference (tpu_inference/utils.py to_jax_dtype)")
        if cfg.platform == "tpu"
        else kv_spelling(cfg, VLLM_KV, "vLLM (vllm/config/cache.py CacheDType)")
    )
    if cfg.tpu_dp_attention:
        return _tpu_dp_attention_command(cfg, kv)
    if cfg.ep > 1 and cfg.ep != cfg.tp * cfg.dp:
        raise K3PlanError(
            f"vLLM: --enable-expert-parallel puts experts over all TP x DP = {cfg.tp * cfg.dp} "
            f"ranks; ep={cfg.ep} cannot be expressed"
        )
    args = env_args(cfg) + [
        "vllm",
        "serve",
        cfg.model_path,
        "--tensor-parallel-size",
        cfg.tp,
        "--pipeline-parallel-size",
        cfg.pp,
        "--data-parallel-size",
        cfg.dp,
    ]
    if cfg.ep > 1 or cfg.dp_attention:
        args.append("--enable-expert-parallel")
    args += [
        "--max-model-len",
        cfg.max_model_len,
        "--max-num-batched-tokens",
        cfg.max_num_batched_tokens,
        "--max-num-seqs",
        cfg.max_num_seqs,
        "--enable-chunked-prefill",
        "--kv-cache-dtype",
        kv,
        "--gpu-memory-utilization",
        f"{cfg.memory_fraction:.2f}",
    ]
    if cfg.hosts > 1 and cfg.tp * cfg.pp > 1:
        args += ["--distributed-executor-backend", "ray"]  # one engine over several hosts
    args += option_args(cfg)
    if cfg.trust_remote_code:
        args.append("--trust-remote-code")
    extra = option_flags(cfg)
    ci = ci_serve_flags(cfg.stack)
    if ci:
        # the plugin's K3 CI passes these: the vision tower is not loaded (k3plan prices the text model), and with
        # EP each rank streams only its experts' bytes from the checkpoint (host RAM at load, not HBM)
        args.append("--language-model-only")
        if cfg.ep > 1:
            args.append("--enable-ep-weight-filter")
        extra = {**extra, **ci}
    return join_args(args, engine="vllm", extra=extra)


def _tpu_dp_attention_command(cfg: LaunchConfig, kv: str) -> str:
    """``vllm serve`` for tpu-inference's DP attention: --tensor-parallel-size counts every device (the
    worker takes sharding_config.total_devices of them) and the split goes in --additional-config
    (tpu_sharding_strategy); --max-num-seqs and --max-num-batched-tokens are a DP rank's (tpu_runner.py: the
    total number of requests is dp_size x max_num_seqs; DPScheduler: per-rank limits), so the plan's sequences
    are divided over the DP groups."""
    import json

    devices = cfg.tp * cfg.dp
    strategy = json.dumps({"sharding": {"sharding_strategy": tpu_sharding_strategy(cfg)}})
    # over several hosts the executor is the environment's (multihost_env), not --distributed-executor-backend's
    args: list[str | int] = [*env_args(cfg), *multihost_env(cfg)]
    args += [
        "vllm",
        "serve",
        cfg.model_path,
        "--tensor-parallel-size",
        devices,
        "--additional-config",
        strategy,
        "--max-model-len",
        cfg.max_model_len,
        "--max-num-batched-tokens",
        cfg.max_num_batched_tokens,
        "--max-num-seqs",
        -(-cfg.max_num_seqs // cfg.dp),
        "--enable-chunked-prefill",
        "--kv-cache-dtype",
        kv,
        "--gpu-memory-utilization",
        f"{cfg.memory_fraction:.2f}",
    ]
    args += option_args(cfg)
    if cfg.trust_remote_code:
        args.append("--trust-remote-code")
    return join_args(args, engine="vllm", extra=option_flags(cfg))
