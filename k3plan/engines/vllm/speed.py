"""vLLM's engine loop as the speed model prices it (issue 51 item 2: an engine's speed rules in its folder).

Data only: the stacks that run vLLM's engine loop (scheduler, input preparation, output processing a step), so the
speed model's host term (``k3plan.speed.terms``: ``host``) reads vLLM's published host time a step for them
(k3plan/evidence/engine_step_overheads.yaml, whose ``engine_family`` is ``vllm``).
"""

from __future__ import annotations

from k3plan.engines.registry import engines

ENGINE_FAMILY = "vllm"  # the engine_family of its published host time (k3plan/evidence/engine_step_overheads.yaml)
# stacks that run vLLM's engine loop, each engine's folder saying so (``Engine.engine_loop``): vLLM itself, the
# torch_tpu plugin (torchtpu-vllm and its old name vllm-tpu) and tpu-inference (both plugins of vLLM's engine:
# vllm/v1/engine/core.py EngineCore)
ENGINE_LOOP_STACKS = tuple(n for e in engines() if e.engine_loop == ENGINE_FAMILY for n in e.names)


def engine_family(stack: str) -> str | None:
    """The engine family whose published host time a step prices ``stack`` (a stack's name), or None."""
    return ENGINE_FAMILY if stack in ENGINE_LOOP_STACKS else None
