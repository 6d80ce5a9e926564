"""Issue 10 item 3: `validate --json` is dumped from a typed ValidationResult (validate.result). Every
committed validation record (CPU, deviceless TPU, a compiler OOM) reads back into it and dumps to
the same JSON, key for key; the typed fields say what they are (no jax needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.evidence.calibration import load_calibration
from k3plan.structs import dump, fields
from k3plan.validate.calibration_out import calibration_dict, write_calibration
from k3plan.validate.result import ValidationResult

RECORDS = Path(__file__).resolve().parents[2] / "reports" / "validation"
# temp grids are another format (temp-grid*, and the v5e grid's deviceless compiles of k3plan's graph,
# benchmarks/grid_temp_compile.py: reports/validation/grid-temp-v5e/README.md); an exploratory run
# (reports/validation/README.md says so) is no validate result
FILES = sorted(
    p
    for p in RECORDS.rglob("*.json")
    if not p.name.startswith("temp-grid") and "exploratory" not in p.name and "grid-temp-v5e" not in p.parts
)


def test_there_are_records():
    assert len(FILES) >= 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_record_round_trips_to_the_same_json(path):
    raw = json.loads(path.read_text())
    r = ValidationResult.from_json(raw)
    known = {k: v for k, v in raw.items() if k in fields(ValidationResult)}
    assert json.dumps(dump(r)) == json.dumps(known)


def test_the_oom_record_is_typed_and_calibrates():
    r = ValidationResult.from_json(
        json.loads((RECORDS / "k3-tpu7x-2x2x4-tp32-layers8-prefill131072-oom.json").read_text())
    )
    (job,) = r.results
    assert not r.fits and job.oom is not None and job.memory is None and job.terms == []
    assert job.oom.required_bytes > job.oom.available_bytes  # why the compiler refused it
    cal = calibration_dict(r, usable_bytes=1)
    # the refused point is written with the temp it asked for and fits: false; HBM from the compiler's message
    # (issue 10: sizes are exact int bytes a device, no longer GiB rounded to 4 decimals)
    assert cal["prefill"] == [
        {"tokens": job.tokens, "temp_bytes": job.oom.required_bytes, "fits": False, "context": job.context}
    ]  # the context it read (issue 50)
    assert cal["available_hbm_bytes"] == job.oom.available_bytes
    assert type(cal["prefill"][0]["temp_bytes"]) is int and type(cal["available_hbm_bytes"]) is int
    assert not any(k.endswith("_gib") for k in cal)


def test_a_written_calibration_reads_back_to_the_byte(tmp_path):
    """validate's record -> calibration_dict -> write_calibration -> load_calibration: every size the
    record's own byte count (memory_analysis temp, the compiled weights, the hardware's usable bytes)."""
    r = ValidationResult.from_json(json.loads((RECORDS / "k3-cpu32-2x2x4-tp32-vllm-tpu.json").read_text()))
    usable = 94 * 2**30 + 3 * 2**28 + 1  # odd on purpose: no GiB rounding could keep it
    path = tmp_path / "out" / "cal.yaml"
    write_calibration(path, calibration_dict(r, usable_bytes=usable))
    text = path.read_text()
    assert text.startswith("# written by k3plan validate; sizes (*_bytes) are bytes a device")
    assert "_gib" not in text
    cal = load_calibration(str(path))
    pre = [j for j in r.results if j.stage == "prefill"]
    dec = [j for j in r.results if j.stage == "decode"]
    assert pre and dec
    assert [(p.tokens, p.temp_bytes, p.fits) for p in cal.prefill] == [
        (j.tokens, j.memory.temp_bytes, j.fits) for j in pre
    ]
    assert [(p.context, p.batch, p.temp_bytes) for p in cal.decode] == [
        (j.context, j.batch, j.memory.temp_bytes) for j in dec
    ]
    assert cal.available_hbm_bytes == usable  # a CPU compile reports no HBM: the hardware's usable bytes
    weights = next(t.compiled_bytes for t in r.results[0].terms if t.name == "weights")
    assert weights is not None and cal.argument_bytes == weights


def test_terms_and_census_are_named():
    r = ValidationResult.from_json(json.loads((RECORDS / "k3-cpu32-2x2x4-tp32-vllm-tpu.json").read_text()))
    for job in r.results:
        weights = next(t for t in job.terms if t.name == "weights")
        assert weights.compiled_bytes == weights.predicted_bytes == job.budget.weights_bytes  # CPU: exact
        assert weights.delta_bytes == 0 and weights.unexplained_bytes == 0
        assert job.census is not None and all(o.executed >= o.count for o in job.census.ops)
        assert sum(t.bytes for t in job.budget.temp_terms) > 0
