"""Points compiled one process each merge into one calibration only when they describe one setup."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.evidence.calibration import load_calibration
from k3plan.validate.calibration_out import merge_calibrations, write_calibration

HBM = 94 * 2**30 + 3 * 2**28  # 94.75 GiB
ARGS = 53_977_001_492  # a weights byte count as the compiler reports it


def _part(**kw):
    """A run as calibration_dict writes it (int bytes a device)."""
    base = {
        "model": "kimi-k3",
        "hardware": "tpu-v7x",
        "topology": "2x2x4",
        "tp": 32,
        "ep": 32,
        "dp": 1,
        "stack": "jax-native",
        "backend": "tpu",
        "device_kind": "TPU7x",
        "jax_version": "0.10.2",
        "libtpu_version": "0.0.42.1",
        "date": "2026-12-01T02:00:00Z",
        "available_hbm_bytes": HBM,
        "argument_bytes": ARGS,
        "prefill": [],
        "decode": [],
        "notes": ["a"],
    }
    return {**base, **kw}


def _old_part(**kw):
    """A run as written before issue 10 (GiB a device, 4 decimals)."""
    base = {k: v for k, v in _part().items() if not k.endswith("_bytes")}
    return {**base, "available_hbm_gib": 94.75, "argument_gib": 50.27, **kw}


def test_points_are_merged_sorted_and_dated_by_the_last_run():
    m = merge_calibrations(
        [
            _part(prefill=[{"tokens": 16384, "temp_bytes": 18 * 2**30, "fits": True}], date="2026-12-01T02:10:00Z"),
            _part(
                prefill=[{"tokens": 4096, "temp_bytes": 9 * 2**30, "fits": True}],
                notes=["a", "b"],
                available_hbm_bytes=HBM - 1,
            ),
            _part(decode=[{"context": 4096, "temp_bytes": 29 * 2**30, "batch": 32, "fits": True}]),
        ]
    )
    assert [p["tokens"] for p in m["prefill"]] == [4096, 16384]
    assert m["decode"][0]["temp_bytes"] == 29 * 2**30
    assert m["date"] == "2026-12-01T02:10:00Z" and m["notes"] == ["a", "b"]
    assert m["available_hbm_bytes"] == HBM - 1 and m["argument_bytes"] == ARGS  # the least HBM any run saw
    assert not any(k.endswith("_gib") for k in m)


def test_old_gib_parts_merge_as_before():
    m = merge_calibrations(
        [
            _old_part(prefill=[{"tokens": 16384, "temp_gib": 18.0, "fits": True}], available_hbm_gib=94.5),
            _old_part(prefill=[{"tokens": 4096, "temp_gib": 9.0, "fits": True}]),
        ]
    )
    assert (m["available_hbm_gib"], m["argument_gib"]) == (94.5, 50.27)
    assert not any(k.endswith("_bytes") for k in m)
    assert list(m) == list(_old_part())  # the keys in the runs' order


def test_a_merge_of_old_and_new_parts_keeps_each_point_and_reads_back(tmp_path):
    m = merge_calibrations(
        [
            _old_part(prefill=[{"tokens": 16384, "temp_gib": 18.0, "fits": True}], available_hbm_gib=94.5),
            _part(prefill=[{"tokens": 4096, "temp_bytes": 9 * 2**30 + 7, "fits": True}], argument_bytes=None),
        ]
    )
    assert m["prefill"] == [
        {"tokens": 4096, "temp_bytes": 9 * 2**30 + 7, "fits": True},
        {"tokens": 16384, "temp_gib": 18.0, "fits": True},
    ]  # each as written
    # HBM in both spellings: the smaller in bytes (94.5 GiB = 94 * 2^30 + 2^29 < 94.75 GiB)
    assert m["available_hbm_bytes"] == 94 * 2**30 + 2**29 and "available_hbm_gib" not in m
    # the weights: the first run's that recorded them, in its spelling
    assert m["argument_gib"] == 50.27 and "argument_bytes" not in m
    path = tmp_path / "merged.yaml"
    write_calibration(path, m)
    cal = load_calibration(str(path))
    assert [p.temp_bytes for p in cal.prefill] == [9 * 2**30 + 7, 18 * 2**30]
    assert cal.available_hbm_bytes == 94 * 2**30 + 2**29 and cal.argument_bytes == int(50.27 * 2**30)


def test_a_run_with_both_spellings_of_a_size_refuses_to_merge():
    with pytest.raises(K3PlanError, match="both available_hbm_bytes and available_hbm_gib"):
        merge_calibrations([_part(), _part(available_hbm_gib=94.75)])


def test_different_configurations_refuse_to_merge():
    with pytest.raises(K3PlanError, match="differ in tp, stack"):
        merge_calibrations([_part(), _part(tp=16, stack="vllm-tpu")])
