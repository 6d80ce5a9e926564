"""k3plan's own JAX stack (MaxText's serving configs): its stack (``stack.yaml``); the expert formulation the
porting study compiled (issue 15: group_sort + ragged_dot, MXFP4 dequantized inside the expert computation; the
real v7x slice's calibration was measured on it). Its DeepSeek-V4 cache and Engram placement: vLLM's (none read
of its own), without vLLM's CUDA planner for DeepSeek-V4.1 (its graph is not vLLM's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from k3plan.engines.engine import Engine
from k3plan.engines.vllm import dsv4

ENGINE = Engine(
    name="jax-native",
    package="jax_native",
    stack_path=Path(__file__).resolve().parent / "stack.yaml",
    launcher="jax",
    dsv4=replace(dsv4.LAYOUT, request_charge=None),
    engram=dsv4.ENGRAM,
    expert_form="ragged",
    # the porting study's graph is jnp ops: a naive softmax over the chunk x context, group_sort + ragged_dot over
    # every token-expert pair, MXFP4 dequantized in XLA (reports/validation/README.md, "jax-native: the porting
    # study's graph against the real v7x slice"); its temporaries are that graph's (k3plan.step.temporaries)
    temp_graph="xla",
    # the temporaries grid of 2026-12-01 (temp-grid-tpu7x.json / temp-grid-cpu.json): jax-native compiled ``ragged``
    recorded_forms={"jax-native": "ragged"},
)
