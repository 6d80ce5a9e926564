"""The engines k3plan writes launch commands for: which engine runs a stack, the flags k3plan writes
with the engine code that defines each (``FLAG_SOURCES``), and each engine's spelling of the KV
dtypes. Plain tables, no model classes: fit's advice asks ``stack_has_kv`` of them on every run
(k3plan.engines.launch builds the commands from them). Sources: see k3plan/engines/launch.py.
"""

from __future__ import annotations

from typing import Literal

from k3plan.engines import torchtpu_vllm
from k3plan.engines.registry import find_engine, registry
from k3plan.errors import K3PlanError

VLLM = ("vllm-project/vllm", "vllm/engine/arg_utils.py", "EngineArgs")
SGLANG = ("sgl-project/sglang", "python/sglang/srt/server_args.py", "ServerArgs")
# MaxText (AI-Hypercomputer/maxtext@e591f30c, src/maxtext/...; the src/MaxText/ paths are gone): the keys of
# its config, which pyconfig refuses when unknown (configs/pyconfig.py: "'KEY' not in ..."), the serving entry
# point that reads them from its command line, and the model names it ships
MAXTEXT = ("AI-Hypercomputer/maxtext", "src/maxtext/configs/base.yml", "base config")
MAXTEXT_SERVER = (
    "AI-Hypercomputer/maxtext",
    "src/maxtext/inference/maxengine/maxengine_server.py",
    "__main__: pyconfig.initialize(sys.argv)",
)
MAXTEXT_MODELS = ("AI-Hypercomputer/maxtext", "src/maxtext/configs/types.py", "ModelName")
# k3plan's bundled model -> MaxText's model_name for it (types.py ModelName; configs/models/<name>.yml); a model
# not here (kimi-k3, kimi-linear-48b-a3b: MaxText has no KDA model) needs a MaxText config file of its own
MAXTEXT_MODEL_NAMES = {"kimi-k2": "kimi-k2-1t", "deepseek-v3": "deepseek3-671b"}

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
            "--additional-config",
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
        "model_name": MAXTEXT_MODELS,
        **{
            k: MAXTEXT
            for k in (
                "ici_data_parallelism",
                "ici_fsdp_parallelism",
                "ici_tensor_parallelism",
                "ici_expert_parallelism",
                "dcn_data_parallelism",
                "dcn_tensor_parallelism",
                "dcn_expert_parallelism",
                "max_target_length",
                "max_prefill_predict_length",
                "use_chunked_prefill",
                "prefill_chunk_size",
                "per_device_batch_size",
                "dtype",
            )
        },
    },
}

# k3plan KV dtype -> engine spelling (None: the engine has no such KV dtype)
VLLM_KV = {"bf16": "bfloat16", "fp8": "fp8", "fp8_ds_mla": "fp8_ds_mla", "fp32": None}  # CacheDType
SGLANG_KV = {"bf16": "bf16", "fp8": "fp8_e4m3", "fp8_ds_mla": None, "fp32": None}  # kv_cache_dtype choices
# tpu-inference (vLLM on TPU) turns the KV-cache dtype string into a JAX dtype (vllm-project/tpu-inference
# tpu_inference/utils.py to_jax_dtype @811f8e20: its fp8 aliases -> float8_e4m3fn, else jnp.dtype(name)), so
# vLLM's CUDA layout fp8_ds_mla is no dtype there; "fp8" is e4m3. The torch_tpu plugin (torchtpu-vllm) takes
# the same two (kowalski-4831/vllm-torchtpu src/vllm_torchtpu/platforms/tpu_block_size_utils.py
# _TPU_CACHE_DTYPE_TO_TORCH_DTYPE @1b4d7d61: "fp8" float8_e4m3fn; its "fp8_ds_mla" is a uint8 row of the padded
# MLA cache, not vLLM's 656 B layout that k3plan's fp8_ds_mla prices)
TPU_INFERENCE_KV = {"bf16": "bfloat16", "fp8": "fp8", "fp8_ds_mla": None, "fp32": None}
# MaxText keeps its KV cache in the activation dtype, `dtype` (types.py DType: bfloat16, float32, float16): the
# cache is made with the attention's dtype (layers/attentions.py -> inference/kvcache.py KVCache
# _get_cached_kv_dtype) unless quantize_kvcache, whose kv_quant_dtype is int8 or int4 (types.py), so fp8 has none
MAXTEXT_KV = {"bf16": "bfloat16", "fp8": None, "fp8_ds_mla": None, "fp32": "float32"}

# The torch_tpu plugin's default KV block (k3plan.engines.torchtpu_vllm: Engine.default_block, cited there), by the
# names serve.py, the mla-engine probe and the speed terms read it
TORCHTPU_DEFAULT_BLOCK = torchtpu_vllm.DEFAULT_BLOCK
TORCHTPU_DEFAULT_BLOCK_SOURCE = torchtpu_vllm.DEFAULT_BLOCK_SOURCE

# A stack's engine (Engine.launcher, Engine.launcher_on) starts it: ``vllm serve``, SGLang's launch_server or
# MaxText; tpu-inference runs its attention data parallelism inside one ``vllm serve`` (Engine.tpu_dp_attention)
# SGLang's moe_a2a_backend defaults to "none" (the all-reduce MoE; sgl-project/sglang
# python/sglang/srt/server_args.py ServerArgs.moe_a2a_backend): an all-to-all stack writes "deepep"
SGLANG_A2A = ("--moe-a2a-backend", "deepep")


def kv_table(engine: str, platform: str | None) -> dict[str, str | None] | None:
    """The KV-cache dtypes the engine takes on ``platform`` (k3plan dtype -> the engine's spelling; None: not
    offered); None for jax-native, k3plan's own stack (its launch checks MAXTEXT_KV itself)."""
    if engine == "vllm":
        return TPU_INFERENCE_KV if platform == "tpu" else VLLM_KV
    return SGLANG_KV if engine == "sglang" else None


def engine_offers_kv(stack: str, kv_dtype: str, platform: str | None) -> bool:
    """Whether the engine that runs ``stack`` on ``platform`` takes the KV-cache dtype ``kv_dtype`` (kv_table);
    a stack with no launch engine, or jax-native (k3plan's own), takes any."""
    engine = _engine(stack, platform)
    table = None if engine is None else kv_table(engine, platform)
    return True if table is None else table.get(kv_dtype) is not None


def _engine(stack: str, platform: str | None) -> str | None:
    engine = find_engine(stack)
    return None if engine is None else engine.launcher_for(platform)


def engine_for_stack(stack: str, platform: str | None = None) -> Literal["vllm", "sglang", "jax"]:
    """The engine whose launch command a k3plan stack gets on ``platform`` ("gpu" / "tpu"; None: the
    stack's engine's own launcher, as on a TPU)."""
    engine = _engine(stack, platform)
    if engine is None:
        raise K3PlanError(f"--emit launch: no engine known for stack {stack!r}; known: {', '.join(registry())}")
    return engine  # type: ignore[return-value]


def ci_serve_flags(stack: str) -> dict[str, tuple[str, str, str]]:
    """The serve flags the CI of ``stack``'s engine passes (flag -> its cited config); {} for none."""
    engine = find_engine(stack)
    return {} if engine is None else dict(engine.ci_serve_flags)


def run_scheduling(engine: str, published: bool | None) -> tuple[bool | None, str]:
    """(async or not, where it was read) for a run on ``engine`` whose source says ``published`` (None: unsaid);
    (None, why) where neither the source nor a cited default says (``Engine.scheduling_default``: the scheduling a
    run used where its source does not publish it, issue 46 item 4: async where the engine or the benchmark's own
    harness overlaps the host's step with the device's, each read in its code)."""
    if published is not None:
        return published, "the run's own flag"
    found = find_engine(engine)
    if found is not None and found.scheduling_default is not None:
        value, source = found.scheduling_default
        return value, source
    return None, f"unpublished, and no default of {engine} read"


# SGLang's --chunked-prefill-size (its token budget a prefill batch) when unset: by the GPU's memory
# (sgl-project/sglang python/sglang/srt/server_args.py ServerArgs, the chunked-prefill default: 2,048 below 35 GB,
# 8,192 below 160 GB -- "H100, H200, A100, H20" -- else 16,384, "B200, MI300")
SGLANG_CHUNK_SOURCE = "SGLang's --chunked-prefill-size default by GPU memory (server_args.py ServerArgs)"


def sglang_default_chunk(hbm_bytes_per_device: int) -> int:
    mib = hbm_bytes_per_device / 2**20
    return 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384


# Engines whose scheduler runs a prefill whenever one forms, in a step of its own (speed.scheduler.simulate's
# prefill_first; its PREFILL_FIRST_RULE cites SGLang's code); vLLM's V1 scheduler mixes them (speed.scheduler.RULE)
PREFILL_FIRST_ENGINES = ("sglang",)
