"""Efficiency curves from probe records: interpolation, clamping, labelling and which records count,
every expected number worked by hand from the round figures in speed_helpers."""

from __future__ import annotations

import pytest
from speed_helpers import PEAKS, a2a_record, matmul_record, record, write

from k3plan.errors import K3PlanError
from k3plan.speed.curves import load_curves
from k3plan.speed.efficiency import efficiency


def _matmul(curves, x):
    return efficiency(curves, key="matmul:bf16", x=x, device_kind="TPU7x", op="bf16 matmul")


def test_interpolation_is_linear_in_log_size(tmp_path):
    path = write(tmp_path, "mm.json", matmul_record())
    curves = load_curves(tmp_path, peaks=PEAKS)
    # 1024 is halfway between 256 and 4096 in log2 (8, 10, 12): 0.2 + (0.8 - 0.2) * 2/4 = 0.5
    e = _matmul(curves, 1024)
    assert e.value == pytest.approx(0.5)
    assert e.measured and e.record_path == str(path)
    assert "interpolated" in e.point_used
    # 512: log2 9 -> 0.2 + 0.6 * 1/4 = 0.35
    assert _matmul(curves, 512).value == pytest.approx(0.35)
    # a measured point is used as is
    exact = _matmul(curves, 256)
    assert exact.value == pytest.approx(0.2) and "measured point" in exact.point_used


def test_outside_the_range_clamps_to_the_nearest_point_and_says_so(tmp_path):
    write(tmp_path, "mm.json", matmul_record())
    curves = load_curves(tmp_path, peaks=PEAKS)
    low, high = _matmul(curves, 16), _matmul(curves, 65536)
    assert low.value == pytest.approx(0.2)  # not extrapolated below 0.2
    assert high.value == pytest.approx(0.8)  # not extrapolated above 0.8
    assert "clamped to the nearest measured point" in low.point_used
    assert "clamped to the nearest measured point" in high.point_used


def test_no_record_gives_the_ceiling_with_the_label(tmp_path):
    write(tmp_path, "mm.json", matmul_record())
    curves = load_curves(tmp_path, peaks=PEAKS)
    e = efficiency(curves, key="grouped_matmul:bf16", x=4.0, device_kind="TPU7x", op="bf16 grouped matmul")
    assert e.value == 1.0 and not e.measured and e.record_path is None
    assert e.label == "ceiling: no measured efficiency for bf16 grouped matmul on TPU7x"


def test_a_cpu_record_is_never_applied_to_an_accelerator(tmp_path):
    write(tmp_path, "mm-cpu.json", matmul_record(backend="cpu", device_kind="TPU7x"))
    curves = load_curves(tmp_path, peaks=PEAKS)
    assert curves.curves == {}
    assert any("CPU backend record" in s for s in curves.skipped)
    assert _matmul(curves, 1024).label == "ceiling: no measured efficiency for bf16 matmul on TPU7x"


def test_other_device_kinds_and_interpret_mode_are_skipped(tmp_path):
    write(tmp_path, "mm-h200.json", matmul_record(device_kind="NVIDIA H200", backend="gpu"))
    write(
        tmp_path,
        "hbm-interp.json",
        record("hbm", [({"bytes": 1 << 20}, 5e11, "bytes/s")], implementation="pallas-interpret", op="copy"),
    )
    curves = load_curves(tmp_path, peaks=PEAKS)
    assert curves.curves == {}
    assert len(curves.skipped) == 2


def test_asking_for_another_device_kind_is_an_error(tmp_path):
    write(tmp_path, "mm.json", matmul_record())
    curves = load_curves(tmp_path, peaks=PEAKS)
    with pytest.raises(K3PlanError, match="curves are for TPU7x, not cpu"):
        efficiency(curves, key="matmul:bf16", x=256, device_kind="cpu", op="matmul")


def test_newest_record_wins_and_implementations_take_the_envelope(tmp_path):
    old = record("hbm", [({"bytes": 1 << 20}, 9e11, "bytes/s")], op="copy", date="2026-11-01T00:00:00Z")
    new = record("hbm", [({"bytes": 1 << 20}, 3e11, "bytes/s")], op="copy", date="2026-11-30T00:00:00Z")
    write(tmp_path, "a-old.json", old)
    write(tmp_path, "b-new.json", new)
    curves = load_curves(tmp_path, peaks=PEAKS)
    # the newer xla copy (3e11 / 1e12) replaces the older one (0.9), not the better one
    assert curves.curves["hbm"].points[0].efficiency == pytest.approx(0.3)
    pallas = record("hbm", [({"bytes": 1 << 20}, 6e11, "bytes/s")], op="copy", implementation="pallas")
    write(tmp_path, "c-pallas.json", pallas)
    curves = load_curves(tmp_path, peaks=PEAKS)
    # across implementations, the best at the point: 0.6
    assert curves.curves["hbm"].points[0].efficiency == pytest.approx(0.6)


def test_collective_efficiency_by_size_and_group(tmp_path):
    write(tmp_path, "a2a.json", a2a_record())
    curves = load_curves(tmp_path, peaks=PEAKS)
    key = "collective:all-to-all:8"
    assert efficiency(curves, key=key, x=64, device_kind="TPU7x", op="a2a").value == pytest.approx(0.5)
    assert efficiency(curves, key=key, x=16384, device_kind="TPU7x", op="a2a").value == pytest.approx(0.25)
    # 1024 B: log2 6, 10, 14 -> halfway: 0.375
    assert efficiency(curves, key=key, x=1024, device_kind="TPU7x", op="a2a").value == pytest.approx(0.375)
    other_group = efficiency(curves, key="collective:all-to-all:16", x=64, device_kind="TPU7x", op="a2a over 16")
    assert other_group.label == "ceiling: no measured efficiency for a2a over 16 on TPU7x"


def test_grouped_matmul_and_kda_records(tmp_path):
    # ragged-dot: 64 rows over 8 touched experts = 8 rows a group; ceiling max(1e9 / 1e15, 1e6 / 1e12) = 1e-6 s;
    # measured 1e9 FLOP / 2.5e14 FLOP/s = 4e-6 s -> 0.25
    rd = record(
        "ragged-dot",
        [
            (
                {"tokens": 32, "rows": 64, "experts_touched": 8, "flops": 1e9, "weight_bytes_touched": 1_000_000},
                2.5e14,
                "flop/s",
            )
        ],
        params={"dtype": "bfloat16"},
    )
    write(tmp_path, "rd.json", rd)
    # kda recurrent, 4 heads x 128: 4 * 8 * 128 * 128 = 524,288 FLOP a token -> 5.24288e-10 s at 1e15;
    # best measured 1.048576e-9 s a token -> 0.5
    kda = record(
        "kda",
        [({"seq_len": 256}, 2e-9, "s/token"), ({"seq_len": 1024}, 1.048576e-9, "s/token")],
        mode="recurrent",
        params={"heads": 4, "head_dim": 128, "chunk": 64},
    )
    write(tmp_path, "kda.json", kda)
    curves = load_curves(tmp_path, peaks=PEAKS)
    g = efficiency(curves, key="grouped_matmul:bf16", x=8, device_kind="TPU7x", op="experts")
    assert g.value == pytest.approx(0.25)
    k = efficiency(curves, key="kda_recurrent", x=4, device_kind="TPU7x", op="KDA recurrent")
    assert k.value == pytest.approx(0.5)
