"""docs/device.md's table of DeepSeek-V4's attention-side ops (issue 46, probe dsv4-ops) is the shipped record
(k3plan/evidence/probes/dsv4-ops-tpu-v5-lite-*.json) row for row; the shipped record is the one
benchmarks/dsv4_ops_record.py derives from the chip's raw record (reports/probes/), and the figure the prose quotes
(CSA's nanoseconds a gathered row) is the record's."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVICE = (REPO / "docs" / "device.md").read_text()
SHIPPED = sorted((REPO / "k3plan" / "evidence" / "probes").glob("dsv4-ops-*.json"))


def _derive():
    spec = importlib.util.spec_from_file_location("dsv4_ops_record", REPO / "benchmarks" / "dsv4_ops_record.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dsv4_ops_record"] = mod
    spec.loader.exec_module(mod)
    return mod.derive


def test_device_md_dsv4_table_is_the_record():
    (path,) = SHIPPED
    rec = json.loads(path.read_text())
    assert rec["ok"] and rec["backend"] == "tpu" and rec["device_kind"] == "TPU v5 lite"
    for p in rec["points"]:
        q, st = p["params"], p["stats"]
        row = (
            f"| {q['op']} | {q['stage']} | {q['rows']:,} | {p['value'] * 1e6:,.1f} | {st['min'] * 1e6:,.1f}-"
            f"{st['p90'] * 1e6:,.1f} | {q['ceiling_s'] * 1e6:,.2f} | {q['efficiency']:.4f} |"
        )
        assert row in DEVICE, row
    csa = next(p for p in rec["points"] if p["params"]["op"] == "dsv4.csa_attention" and p["params"]["rows"] == 256)
    topk = 512  # V4 Flash's index_topk (config.json), the rows a query gathers
    from k3plan.models.loader import load_model

    assert load_model("deepseek-v4-flash").spec.dsv4.index_topk == topk
    assert f"~{round(csa['value'] / (256 * topk) * 1e9)} ns a row" in DEVICE


def test_the_shipped_record_is_the_raw_one_derived():
    (path,) = SHIPPED
    raw_path = REPO / "reports" / "probes" / path.name
    raw = json.loads(raw_path.read_text())
    assert not raw["ok"]  # the chip's record: its compressor points were refused
    assert _derive()(raw, raw_path.name) == json.loads(path.read_text())
