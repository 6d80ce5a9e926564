"""Points compiled one process each merge into one calibration only when they describe one setup."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.validate.calibration_out import merge_calibrations


def _part(**kw):
    base = {"model": "kimi-k3", "hardware": "tpu-v7x", "topology": "2x2x4", "tp": 32, "ep": 32, "dp": 1,
            "stack": "jax-native", "backend": "tpu", "device_kind": "TPU7x", "jax_version": "0.10.2",
            "libtpu_version": "0.0.42.1", "date": "2026-12-01T02:00:00Z", "available_hbm_gib": 94.75,
            "argument_gib": 50.27, "prefill": [], "decode": [], "notes": ["a"]}
    return {**base, **kw}


def test_points_are_merged_sorted_and_dated_by_the_last_run():
    m = merge_calibrations([
        _part(prefill=[{"tokens": 16384, "temp_gib": 18.0, "fits": True}], date="2026-12-01T02:10:00Z"),
        _part(prefill=[{"tokens": 4096, "temp_gib": 9.0, "fits": True}], notes=["a", "b"]),
        _part(decode=[{"context": 4096, "temp_gib": 29.0, "batch": 32, "fits": True}])])
    assert [p["tokens"] for p in m["prefill"]] == [4096, 16384]
    assert m["decode"][0]["temp_gib"] == 29.0
    assert m["date"] == "2026-12-01T02:10:00Z" and m["notes"] == ["a", "b"]


def test_different_configurations_refuse_to_merge():
    with pytest.raises(K3PlanError, match="differ in tp, stack"):
        merge_calibrations([_part(), _part(tp=16, stack="vllm-tpu")])
