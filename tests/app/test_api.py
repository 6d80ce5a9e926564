"""issue 51 item 4: k3plan.api, the commands' answers as typed rows and DataFrames for a notebook, called
without the CLI. The rows are the app layer's (fit == plan's row 0 holds elsewhere); here: what a notebook
user relies on -- one column a field, units in the names, numbers typed, and a fit that imports neither pandas
nor jax until a DataFrame is asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import k3plan.api as k3
from k3plan.errors import K3PlanError
from k3plan.structs import dump

ROOT = Path(__file__).resolve().parents[2]


def test_fit_is_one_row_of_its_figures():
    f = k3.fit(topology="2x2x4", tp=32, context="8k")  # at 128k 0.33 GiB short (issue 50)
    assert f.fits and len(f) == 1
    row = f.row
    assert row["fits"] is True and row["reason_code"] == "feasible"
    assert row["workload.context_tokens"] == 8192
    assert row["per_device.weights_bytes"] == f.result.per_device.weights_bytes
    assert row["capacity.max_sequences"] == f.result.capacity.max_sequences
    df = f.to_pandas()
    assert df.shape == (1, len(row))
    assert df.loc[0, "per_device.free_bytes"] == f.result.per_device.free_bytes
    assert str(df["per_device.free_bytes"].dtype) == "Int64"


def test_a_fit_that_does_not_fit_is_a_row_saying_why():
    f = k3.fit(topology="2x2x2", tp=16, context="1M")
    assert not f.fits and f.row["fits"] is False
    assert f.row["reason_code"] != "feasible" and f.row["reason"]


def test_fit_imports_neither_pandas_nor_jax_until_a_frame_is_asked():
    probe = (
        "import sys, json, k3plan.api as k3; f = k3.fit(topology='2x2x4', tp=32, context='8k'); "
        "a = sorted(m for m in ('pandas', 'jax') if m in sys.modules); f.to_pandas(); "
        "print(json.dumps([a, 'pandas' in sys.modules]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    before, after = json.loads(run.stdout.strip().splitlines()[-1])
    assert before == [] and after is True


def test_plan_rows_are_the_ranked_rows_and_the_frame_has_a_column_a_field():
    p = k3.plan(hardware=["tpu-v7x", "nvidia-b200"], isl="4k", osl=500, concurrency=8, top=4)
    assert len(p.rows) == len(p) == 4 and p.recommended == p.rows[0]
    assert [r.rank for r in p.rows] == [1, 2, 3, 4]
    df = p.to_pandas()
    assert list(df["rank"]) == [1, 2, 3, 4]
    assert list(df["hardware"]) == [r.hardware for r in p.rows]
    # units in the names: the plan row's own fields, and a nested one by its path
    for col in ("tpot_ms", "free_gib_per_device", "tokens_per_s_per_chip", "per_device.kv_bytes", "sla.ttft_ms"):
        assert col in df.columns, col
    assert df["sla.ttft_ms"].tolist() == pytest.approx([r.sla.ttft_ms for r in p.rows])
    assert df["per_device.kv_bytes"].tolist() == [r.per_device.kv_bytes for r in p.rows]
    assert str(df["chips"].dtype) == "Int64" and str(df["tpot_ms"].dtype) == "float64"
    assert df["sla.meets"].dtype == "boolean"
    # every field of the JSON row is a column (nested ones flattened)
    first = dump(p.rows[0])
    for key, v in first.items():
        if isinstance(v, dict):  # a band (lo, hi) as two number columns, .lo and .hi (api._bands_split)
            assert all(f"{key}.{k}" in df.columns or f"{key}.{k}.lo" in df.columns for k in v)
        elif key.endswith("_band_ms"):
            assert f"{key}.lo" in df.columns and f"{key}.hi" in df.columns
        else:
            assert key in df.columns
    assert str(df["sla.tpot_band_ms.lo"].dtype) == "float64"


def test_plan_where_nothing_passes_is_an_empty_table_not_an_error():
    p = k3.plan(hardware="tpu-v7x", max_chips=4)
    assert p.recommended is None and len(p) == 0 and p.to_pandas().empty


def test_plan_bad_input_raises_the_projects_error():
    with pytest.raises(K3PlanError, match="objective"):
        k3.plan(objective="fastest")
    with pytest.raises(K3PlanError, match="context"):
        k3.plan(context="lots")


def test_curve_frame_is_chunk_vs_longest_context():
    c = k3.curve(topology="2x2x4", tp=32, context="8k")
    df = c.to_pandas()
    assert list(df.columns[:5]) == [
        "chunk_tokens",
        "prefill_temp_bytes",
        "decode_temp_bytes",
        "max_context_tokens",
        "max_sequences",
    ]
    assert df["chunk_tokens"].tolist() == [p.chunk_tokens for p in c.rows] == sorted(df["chunk_tokens"])
    assert df["max_context_tokens"].tolist() == [p.max_context_tokens for p in c.rows]
    refused = df[df["status"] == "refused"]
    assert refused["prefill_temp_bytes"].isna().all()  # a refused chunk has no temporaries: <NA>, not 0
    assert c.answer.why_not == ""


def test_report_platforms_table_is_a_row_a_platform_and_context():
    r = k3.report(hardware=["tpu-v7x"], contexts=["128k", "1M"])
    df = r.to_pandas()
    assert len(df) == 2 and df["hardware"].tolist() == ["tpu-v7x", "tpu-v7x"]
    assert df["context_tokens"].tolist() == [131072, 1048576]
    for col in ("setup.topology", "setup.chips", "per_device.free_bytes", "decode.concurrency.tokens_per_s"):
        assert col in df.columns, col
    rows = r.rows[0].rows
    assert df["setup.chips"].tolist() == [row.setup.chips if row.setup else None for row in rows]


def test_to_csv_reads_back_as_the_same_frame(tmp_path):
    p = k3.plan(hardware="tpu-v7x", top=3)
    path = tmp_path / "plan.csv"
    text = p.to_csv(path)
    assert path.read_text() == text
    back = pd.read_csv(path)
    df = p.to_pandas()
    assert list(back.columns) == list(df.columns)
    assert back["tpot_ms"].tolist() == df["tpot_ms"].tolist()
    assert back["per_device.weights_bytes"].tolist() == df["per_device.weights_bytes"].tolist()


def test_flatten_names_nested_fields_by_path():
    assert k3.flatten({"a": 1, "b": {"c_bytes": 2, "d": {"e_s": 0.5}}, "notes": ["x", "y"], "f": float("nan")}) == {
        "a": 1,
        "b.c_bytes": 2,
        "b.d.e_s": 0.5,
        "notes": "x\ny",
        "f": None,
    }
