"""a2a, allreduce, allgather on 8 fake CPU devices: quick, valid records, HLO verified."""

from __future__ import annotations

import json

import pytest

from k3plan.evidence.probe_record import CPU_LABEL, ProbeRecord
from k3plan.evidence.probe_records import latest_latency
from k3plan.specfile import convert

OPS = {"a2a": "all-to-all", "allreduce": "all-reduce", "allgather": "all-gather"}


@pytest.mark.parametrize("name", list(OPS))
def test_collective_probe_writes_valid_records(name, run_probe_cli):
    result, records, out = run_probe_cli(name, "--bytes", "65536,1048576", "--iters", "1,3", "--unchained-iters", "1,4")
    assert result.exit_code == 0, result.stderr
    assert [r["mode"] for r in records] == ["chained", "unchained"]
    files = sorted(out.glob("*.json"))
    assert len(files) == 2
    for path in files:
        rec = convert(ProbeRecord, json.loads(path.read_text()), "a probe record")
        assert rec.op == OPS[name] and rec.backend == "cpu" and rec.device_count == 8
        assert rec.label.startswith(CPU_LABEL) and rec.verified is True and rec.implementation == "xla-shard-map"
        assert rec.jax_version and rec.date.endswith("Z") and rec.baseline
        assert [p.params["bytes"] for p in rec.points] == [65536, 1048576]
        for pt in rec.points:
            assert pt.stats.n == 2 and pt.baseline_s is not None and len(pt.samples_s) == 4  # two N, and baseline
            # a small collective on a shared CPU can time at or below its baseline: that point is dropped with the
            # reason named (timing noise), never written as a value; the record keeps a valued point to be ok
            assert (pt.value is not None and pt.value >= 0) or any("timing noise" in n for n in pt.notes), pt
        assert any(pt.value is not None for pt in rec.points)
        assert rec.expectation is not None and rec.expectation.value is None and rec.expectation.missing
    # the planner sees CPU records only when forced
    assert latest_latency(out, device_kind="TPU7x", op=name) is None
    assert latest_latency(out, device_kind="TPU7x", op=name, allow_cpu=True)[0] >= 0


def test_axis_size_and_rounding(run_probe_cli):
    result, records, _ = run_probe_cli(
        "a2a", "--bytes", "10", "--mode", "chained", "--iters", "1,2", "--axis-size", "4"
    )
    (rec,) = records
    # 16 bytes on a shared CPU may time at or below the baseline: then the record says so and the exit is 1 (issue 48:
    # no valued point is no measurement); the shape this test holds is written either way
    valued = any(p["value"] is not None for p in rec["points"])
    assert result.exit_code == (0 if valued else 1), result.stderr
    assert rec["params"]["axis_size"] == 4
    assert rec["points"][0]["params"]["bytes"] == 16  # 3 f32 -> rounded up to a multiple of 4 devices


def test_timeout_cuts_short_and_says_so(run_probe_cli):
    result, records, _ = run_probe_cli(
        "allreduce", "--bytes", "64,128,256,512", "--mode", "chained", "--iters", "1,2", "--timeout", "0.001"
    )
    (rec,) = records
    assert rec["cut_short"] is True and "--timeout" in rec["cut_short_reason"]
    assert len(rec["points"]) < 4
    # issue 48: a sweep cut short before any point has a value is no measurement: not ok, exit 1, and it says why
    valued = any(p["value"] is not None for p in rec["points"])
    assert result.exit_code == (0 if valued else 1), result.stderr
    assert valued or (rec["ok"] is False and rec["error"].startswith("measured nothing")), rec["error"]
