"""Issue 10 item 3: `validate --json` is dumped from a typed ValidationResult (validate.result). Every
committed validation record (CPU, deviceless TPU, a compiler OOM) reads back into it and dumps to
the same JSON, key for key; the typed fields say what they are (no jax needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.validate.calibration_out import calibration_dict
from k3plan.validate.result import ValidationResult

RECORDS = Path(__file__).resolve().parents[2] / "reports" / "validation"
FILES = sorted(p for p in RECORDS.rglob("*.json") if not p.name.startswith("temp-grid"))  # grids: another format


def test_there_are_records():
    assert len(FILES) >= 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_record_round_trips_to_the_same_json(path):
    raw = json.loads(path.read_text())
    r = ValidationResult.from_json(raw)
    known = {k: v for k, v in raw.items() if k in ValidationResult.model_fields}
    assert json.dumps(r.model_dump(mode="json")) == json.dumps(known)


def test_the_oom_record_is_typed_and_calibrates():
    r = ValidationResult.from_json(json.loads((RECORDS / "k3-tpu7x-2x2x4-tp32-layers8-prefill131072-oom.json").read_text()))
    (job,) = r.results
    assert not r.fits and job.oom is not None and job.memory is None and job.terms == []
    assert job.oom.required_bytes > job.oom.available_bytes  # why the compiler refused it
    cal = calibration_dict(r, usable_bytes=1)
    # the refused point is written with the temp it asked for and fits: false; HBM from the compiler's message
    assert cal["prefill"] == [{"tokens": job.tokens, "temp_gib": round(job.oom.required_bytes / 2**30, 4), "fits": False}]
    assert cal["available_hbm_gib"] == round(job.oom.available_bytes / 2**30, 4)


def test_terms_and_census_are_named():
    r = ValidationResult.from_json(json.loads((RECORDS / "k3-cpu32-2x2x4-tp32-vllm-tpu.json").read_text()))
    for job in r.results:
        weights = next(t for t in job.terms if t.name == "weights")
        assert weights.compiled_bytes == weights.predicted_bytes == job.budget.weights_bytes  # CPU: exact
        assert weights.delta_bytes == 0 and weights.unexplained_bytes == 0
        assert job.census is not None and all(o.executed >= o.count for o in job.census.ops)
        assert sum(t.bytes for t in job.budget.temp_terms) > 0
