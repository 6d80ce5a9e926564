"""vllm-project/tpu-inference (vLLM on TPU through JAX): its stack (``stack.yaml``); it runs its attention data
parallelism inside one ``vllm serve`` (--additional-config sharding_strategy). Its DeepSeek-V4 cache (``dsv4.py``):
its experimental V4 model's own records, which are the torch_tpu plugin's; its Engram placement the plugin's."""

from __future__ import annotations

from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.tpu_inference import dsv4
from k3plan.engines.tpu_inference.memory import WORKER

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
)
