"""vllm-project/tpu-inference (vLLM on TPU through JAX): its stack (``stack.yaml``); it runs its attention data
parallelism inside one ``vllm serve`` (--additional-config sharding_strategy). Its DeepSeek-V4 cache (``dsv4.py``):
its experimental V4 model's own records, which are the torch_tpu plugin's; its Engram placement the plugin's."""

from __future__ import annotations

from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.tpu_inference import dsv4
from k3plan.engines.tpu_inference.memory import WORKER
from k3plan.engines.tpu_inference.serve import INT4_F32_SCALES_FROM

ENGINE = Engine(
    engine_loop="vllm",  # a plugin of vLLM's engine (vllm/v1/engine/core.py EngineCore): vLLM's published host time a step (engines/vllm/speed.py)
    name="tpu-inference",
    package="tpu_inference",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="vllm",
    dsv4=dsv4.LAYOUT,
    engram=dsv4.ENGRAM,
    tpu_dp_attention=True,
    hbm_worker=WORKER,
    # the int4 group-32 experts (Kimi-K2.x) kept unrequantized with float32 group scales at 0.20.0-0.21.x
    # (serve.py INT4_F32_SCALES_SOURCE); the rest is each rule's cited commit
    by_release_rules=(
        (
            ("kimi-k2",),
            "the int4 group-32 experts kept as int4 with float32 group-32 scales at 0.20.0-0.21.x, where the W4A8 MoE "
            "method does not requantize them (serve.py INT4_F32_SCALES_SOURCE)",
        ),
    ),
    oldest_release_read=INT4_F32_SCALES_FROM,
)
