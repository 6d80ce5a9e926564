"""Issue 50 (slow: a deviceless TPU compile, libtpu): one point of the v5e grid's graph compiled for a v5e now, its
memory_analysis against k3plan's graph temp (``validate_temp_terms``), as benchmarks/grid_temp_compile.py records
them in reports/validation/grid-temp-v5e/ (tests/step/test_graph_temp.py holds the model to those records)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu (jax[tpu])")


def test_a_decode_point_compiled_now_matches_the_graphs_temp(monkeypatch):
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "grid_temp_compile.py"
    spec = importlib.util.spec_from_file_location("grid_temp_compile", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    from k3plan.budget.temp_graph import TempGraph, validate_temps
    from k3plan.probes.step.probe import StepParams, step_setup

    got = mod.compile_point(stack="torchtpu-vllm", expert_format="bf16", layers=2, experts=16, stage="decode",
                        batch=4, context=4096)  # fmt: skip
    temp = got["memory_analysis"]["temp_bytes"]
    setup = step_setup(StepParams(width="k3", layers=2, experts=16, stack="torchtpu-vllm"), hardware="tpu-v5e")
    _, dec = validate_temps(setup, graph=TempGraph(form="ragged"), chunk=1, batch=4, context=4096)
    assert abs(dec.total_bytes / temp - 1) <= 0.15, (dec.total_bytes, temp)
