"""The records API the planner uses: newest matching record, CPU never applied to an accelerator."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from k3plan.errors import K3PlanError
from k3plan.evidence.probe_record import ProbeRecord
from k3plan.evidence.probe_records import describe, effective_bandwidth, latest_latency, load_records
from k3plan.probes.store import write_record
from k3plan.specfile import convert

FIXTURE = (
    Path(__file__).resolve().parents[2] / "k3plan" / "evidence" / "probes" / "tpu7x-a2a-chained-porting-study.json"
)


def _cpu_record(**kw) -> ProbeRecord:
    base = dict(
        probe="a2a",
        op="all-to-all",
        mode="chained",
        backend="cpu",
        device_kind="cpu",
        device_count=8,
        date="2030-01-01T00:00:00Z",
        label="CPU backend: correctness only, not representative",
        points=[{"params": {"bytes": 1792}, "value": 1e-4, "unit": "s/call"}],
    )
    base.update(kw)
    return convert(ProbeRecord, base, "a probe record")


def test_fixture_gives_the_porting_study_latency():
    latency, record, path = latest_latency(FIXTURE.parent, device_kind="TPU7x", op="a2a")
    assert latency == pytest.approx(9.88e-6)
    assert record.device_kind == "TPU7x" and record.mode == "chained" and path == FIXTURE
    assert "k3-facts.md §5" in record.label and "9.88 us" in record.source
    assert 184 * latency == pytest.approx(1818e-6, rel=1e-3)
    assert "TPU7x" in describe(record, path)


def test_no_unchained_or_other_kind_records():
    assert latest_latency(FIXTURE.parent, device_kind="TPU7x", op="all-to-all", mode="unchained") is None
    assert latest_latency(FIXTURE.parent, device_kind="TPU v6e", op="a2a") is None


def test_cpu_record_never_applied_to_an_accelerator_unless_forced(tmp_path):
    write_record(record=_cpu_record(), out_dir=tmp_path)
    assert latest_latency(tmp_path, device_kind="TPU7x", op="a2a") is None
    latency, record, _ = latest_latency(tmp_path, device_kind="TPU7x", op="a2a", allow_cpu=True)
    assert latency == 1e-4 and record.is_cpu
    shutil.copy(FIXTURE, tmp_path / FIXTURE.name)  # a real TPU7x record beats the forced CPU one
    assert latest_latency(tmp_path, device_kind="TPU7x", op="a2a", allow_cpu=True)[0] == pytest.approx(9.88e-6)


def test_newest_wins_and_failed_verification_is_skipped(tmp_path):
    write_record(record=_cpu_record(date="2030-01-01T00:00:00Z"), out_dir=tmp_path)
    write_record(
        record=_cpu_record(
            date="2031-01-01T00:00:00Z", points=[{"params": {"bytes": 64}, "value": 2e-4, "unit": "s/call"}]
        ),
        out_dir=tmp_path,
    )
    write_record(record=_cpu_record(date="2032-01-01T00:00:00Z", verified=False), out_dir=tmp_path)
    assert len(load_records(tmp_path)) == 3
    assert latest_latency(tmp_path, device_kind="cpu", op="a2a")[0] == 2e-4


def test_message_size_selection(tmp_path):
    pts = [{"params": {"bytes": b}, "value": v, "unit": "s/call"} for b, v in ((64, 1.0), (1792, 2.0), (16384, 3.0))]
    write_record(record=_cpu_record(points=pts), out_dir=tmp_path)
    get = lambda b: latest_latency(tmp_path, device_kind="cpu", op="a2a", message_bytes=b)[0]  # noqa: E731
    assert (get(None), get(1792), get(1000), get(10**6)) == (1.0, 2.0, 2.0, 3.0)


def test_effective_bandwidth_takes_the_envelope(tmp_path):
    pts = [{"params": {"bytes": b}, "value": v, "unit": "bytes/s"} for b, v in ((2**20, 1e9), (2**28, 3e9))]
    write_record(record=_cpu_record(probe="hbm", op=None, mode=None, points=pts), out_dir=tmp_path)
    assert effective_bandwidth(tmp_path, device_kind="cpu")[0] == 3e9
    assert effective_bandwidth(tmp_path, device_kind="TPU7x") is None


def test_records_never_overwrite(tmp_path):
    rec = _cpu_record()
    paths = {write_record(record=rec, out_dir=tmp_path) for _ in range(3)}
    assert len(paths) == 3 and all(p.name.startswith("a2a-chained-cpu-") for p in paths)


def test_bad_folder_and_bad_file(tmp_path):
    with pytest.raises(K3PlanError):
        load_records(tmp_path / "missing")
    (tmp_path / "junk.json").write_text(json.dumps({"probe": "x"}))
    assert load_records(tmp_path, strict=False) == []  # opt-in skipping, for listings only
    with pytest.raises(K3PlanError, match="junk.json"):
        load_records(tmp_path)


def test_fast_path_does_not_import_jax():
    code = (
        "import sys; import k3plan.evidence.probe_records, k3plan.probes.hlo, k3plan.cli.app; "
        "from k3plan.cli.app import app; sys.exit(1 if 'jax' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
