"""vllm-project/tpu-inference (vLLM on TPU through JAX): its stack (``stack.yaml``); it runs its attention data
parallelism inside one ``vllm serve`` (--additional-config sharding_strategy). Its DeepSeek-V4 cache and Engram
placement are taken as the torch_tpu plugin's (both run vLLM's model code on TPU; no TPU backend's own read)."""

from __future__ import annotations

from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.torchtpu_vllm import dsv4

ENGINE = Engine(
    engine_loop="vllm",  # a plugin of vLLM's engine (vllm/v1/engine/core.py EngineCore): vLLM's published host time a step (engines/vllm/speed.py)
    name="tpu-inference",
    package="tpu_inference",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="vllm",
    dsv4=dsv4.LAYOUT,
    engram=dsv4.ENGRAM,
    tpu_dp_attention=True,
)
