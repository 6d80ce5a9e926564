"""Ceiling and expected time of a stage, by op kind, worked by hand from speed_helpers' round numbers."""

from __future__ import annotations

import pytest
from speed_helpers import PEAKS, a2a_record, matmul_record, write

from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware
from k3plan.speed.curves import load_curves
from k3plan.speed.expected import expected_time
from k3plan.speed.peaks import Peaks
from k3plan.step.opcost import OpCost

N = 1024
OPS = [
    # 2 N^3 FLOPs, no HBM: 2,147,483,648 / 1e15 = 2.147483648e-6 s ceiling; matmul efficiency 0.5 at 1024
    OpCost(name="o_proj", kind="matmul", flops=2.0 * N**3, m=N, n=N, k=N),
    # 3 calls x (10 us + 1000 B / 1e9 B/s) = 33 us ceiling; efficiency 0.5 at 64 B
    OpCost(name="dispatch", kind="collective", collective="a2a", message_bytes=64, wire_bytes=1000, group=8, calls=3),
    # 1e6 B / 1e12 B/s = 1 us, no HBM record -> ceiling; twice a step
    OpCost(name="mla", kind="attention", bytes=1_000_000, count=2),
    OpCost(name="launch", kind="overhead", fixed_s=5e-6, source="test: a stated fixed cost"),
]


def test_stage_time_by_kind(tmp_path):
    write(tmp_path, "mm.json", matmul_record())
    write(tmp_path, "a2a.json", a2a_record())
    stage = expected_time(OPS, peaks=PEAKS, curves=load_curves(tmp_path, peaks=PEAKS))
    assert stage.by_kind.dense.ceiling_s == pytest.approx(2.147483648e-6)
    assert stage.by_kind.dense.expected_s == pytest.approx(4.294967296e-6)
    assert stage.by_kind.collectives.ceiling_s == pytest.approx(33e-6)
    assert stage.by_kind.collectives.expected_s == pytest.approx(66e-6)
    assert stage.by_kind.attention.ceiling_s == pytest.approx(2e-6)
    assert stage.by_kind.attention.expected_s == pytest.approx(2e-6)
    assert stage.by_kind.overhead.expected_s == pytest.approx(5e-6)
    assert stage.by_kind.experts.expected_s == 0.0 and stage.by_kind.kda.expected_s == 0.0
    assert stage.ceiling_s == pytest.approx(2.147483648e-6 + 33e-6 + 2e-6 + 5e-6)
    assert stage.expected_s == pytest.approx(4.294967296e-6 + 66e-6 + 2e-6 + 5e-6)
    # the unmeasured op is named first, in the exact words of the issue
    assert stage.labels[0] == "ceiling: no measured efficiency for HBM traffic on TPU7x"
    assert any("mm.json" in label for label in stage.labels)
    assert any("a2a.json" in label for label in stage.labels)


def test_without_records_expected_equals_ceiling_and_every_op_says_so():
    stage = expected_time(OPS[:3], peaks=PEAKS, curves=None)
    assert stage.expected_s == pytest.approx(stage.ceiling_s)
    assert all(label.startswith("ceiling: no measured efficiency for") for label in stage.labels)


def test_an_incomplete_op_is_refused():
    with pytest.raises(K3PlanError, match="missing m, n, k"):
        OpCost(name="x", kind="matmul", flops=1.0)
    with pytest.raises(K3PlanError, match="missing fixed_s, source"):
        OpCost(name="x", kind="overhead")


def test_gpu_has_no_efficiency_record_today():
    """The committed records are CPU and TPU7x: on an H200 every op runs at its ceiling, labelled."""
    peaks = Peaks.from_hardware(load_hardware("nvidia-h200"))
    assert peaks.device_kind == "NVIDIA H200" and "fp4" not in peaks.flops_per_s_by_dtype
    from pathlib import Path

    curves = load_curves(Path(__file__).resolve().parents[2] / "k3plan" / "evidence" / "probes", peaks=peaks)
    assert curves.curves == {}
    stage = expected_time(OPS[:2], peaks=peaks, curves=curves)
    assert stage.expected_s == pytest.approx(stage.ceiling_s)
    assert "ceiling: no measured efficiency for bf16 matmul on NVIDIA H200" in stage.labels
    assert "ceiling: no measured efficiency for all-to-all over 8 devices on NVIDIA H200" in stage.labels
