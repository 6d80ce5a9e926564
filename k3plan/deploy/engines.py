"""The engines k3plan writes launch commands for: which engine runs a stack, the flags k3plan writes
with the engine code that defines each (``FLAG_SOURCES``), and each engine's spelling of the KV
dtypes. Plain tables, no model classes: fit's advice asks ``stack_has_kv`` of them on every run
(k3plan.deploy.launch builds the commands from them). Sources: see k3plan/deploy/launch.py.
"""

from __future__ import annotations

from typing import Literal

from k3plan.errors import K3PlanError

VLLM = ("vllm-project/vllm", "vllm/engine/arg_utils.py", "EngineArgs")
SGLANG = ("sgl-project/sglang", "python/sglang/srt/server_args.py", "ServerArgs")
MAXTEXT = ("AI-Hypercomputer/maxtext", "src/MaxText/configs/base.yml", "base config")

# engine -> flag (or parameter) -> (repository, file, class) that defines it
FLAG_SOURCES: dict[str, dict[str, tuple[str, str, str]]] = {
    "vllm": {
        f: VLLM
        for f in (
            "--tensor-parallel-size",
            "--pipeline-parallel-size",
            "--data-parallel-size",
            "--enable-expert-parallel",
            "--max-model-len",
            "--max-num-batched-tokens",
            "--max-num-seqs",
            "--kv-cache-dtype",
            "--gpu-memory-utilization",
            "--enable-chunked-prefill",
            "--trust-remote-code",
            "--distributed-executor-backend",
        )
    },
    "sglang": {
        f: SGLANG
        for f in (
            "--model-path",
            "--tp-size",
            "--dp-size",
            "--ep-size",
            "--pp-size",
            "--enable-dp-attention",
            "--context-length",
            "--chunked-prefill-size",
            "--kv-cache-dtype",
            "--mem-fraction-static",
            "--max-running-requests",
            "--max-mamba-cache-size",
            "--trust-remote-code",
            "--nnodes",
            "--node-rank",
            "--dist-init-addr",
            "--moe-a2a-backend",
        )
    },
    "jax": {
        **{
            k: MAXTEXT
            for k in (
                "ici_tensor_parallelism",
                "ici_expert_parallelism",
                "ici_data_parallelism",
                "ici_pipeline_parallelism",
                "dcn_data_parallelism",
                "max_target_length",
                "max_prefill_predict_length",
                "per_device_batch_size",
            )
        },
        "kv_cache_dtype": ("k3plan", "k3plan/sharding/stacks/jax-native.yaml", "Stack.kv_cache.dtype"),
    },
}

# k3plan KV dtype -> engine spelling (None: the engine has no such KV dtype)
VLLM_KV = {"bf16": "bfloat16", "fp8": "fp8", "fp8_ds_mla": "fp8_ds_mla", "fp32": None}  # CacheDType
SGLANG_KV = {"bf16": "bf16", "fp8": "fp8_e4m3", "fp8_ds_mla": None, "fp32": None}  # kv_cache_dtype choices

# k3plan stack -> engine that runs it (dp-attention: per platform, ENGINE_FOR_STACK_ON)
ENGINE_FOR_STACK = {"vllm": "vllm", "vllm-tpu": "vllm", "dp-attention": "vllm", "sglang": "sglang", "jax-native": "jax"}
# dp-attention prices SGLang's --enable-dp-attention with DeepEP on GPUs (its YAML's description and
# platforms_source: shared experts tp_size=1, latent projections and router replicated, all-to-all
# dispatch); on TPUs tpu-inference (vllm serve) runs its attention data parallelism
ENGINE_FOR_STACK_ON = {("dp-attention", "gpu"): "sglang"}
# SGLang's moe_a2a_backend defaults to "none" (the all-reduce MoE; sgl-project/sglang
# python/sglang/srt/server_args.py ServerArgs.moe_a2a_backend): an all-to-all stack writes "deepep"
SGLANG_A2A = ("--moe-a2a-backend", "deepep")


def engine_for_stack(stack: str, platform: str | None = None) -> Literal["vllm", "sglang", "jax"]:
    """The engine whose launch command a k3plan stack gets on ``platform`` ("gpu" / "tpu"; None: the
    stack's engine on a TPU, vLLM's for dp-attention)."""
    engine = ENGINE_FOR_STACK_ON.get((stack, platform or ""), ENGINE_FOR_STACK.get(stack))
    if engine is None:
        raise K3PlanError(f"--emit launch: no engine known for stack {stack!r}; known: {', '.join(ENGINE_FOR_STACK)}")
    return engine  # type: ignore[return-value]
