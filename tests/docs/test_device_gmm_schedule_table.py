"""docs/device.md's table of the compiler's static schedule of gmm_v2 (issue 38) is the committed gmm-schedule
records (k3plan/evidence/probes/gmm-schedule-*.json) row for row, each set beside the call probe gmm measured on the same
TPU where one exists (k3plan/evidence/probes/gmm-tpu-v5-lite-*.json)."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVICE = (REPO / "docs" / "device.md").read_text()


def _call(q: dict) -> str:
    return f"{q['projection']} {q['weight_dtype']} {q['rows']}x{q['groups']}"


def table_rows() -> list[str]:
    probes = REPO / "k3plan" / "evidence" / "probes"
    measured = {}
    for f in sorted(probes.glob("gmm-tpu-*.json")):
        rec = json.loads(f.read_text())
        for p in rec["points"]:
            measured[(rec["device_kind"], _call(p["params"]))] = p["value"]
    rows = []
    for f in sorted(probes.glob("gmm-schedule-*.json")):
        rec = json.loads(f.read_text())
        for p in rec["points"]:
            q, s = p["params"], p["value"]
            m = measured.get((rec["device_kind"], _call(q)))
            ran = ("", "") if m is None else (f"{m * 1e6:,.1f}", f"{m / s:.2f}x")
            steps = ", ".join(f"{b:,}" for b in q["step_bundles"])
            rows.append(
                f"| {rec['device_kind']} | {q['rows']:,} x {q['groups']} | {q['projection']} | {q['weight_dtype']} | "
                f"{q['grid_steps']} | {steps} | {q['cycles']:,} | {s * 1e6:,.1f} | {ran[0]} | {ran[1]} | `{f.name}` |"
            )
    return rows


def test_device_md_schedule_table_is_the_records():
    rows = table_rows()
    assert len(rows) == 8
    for row in rows:
        assert row in DEVICE, row


def test_device_md_says_each_record_s_clock_as_the_record_has_it():
    text = " ".join(DEVICE.split())
    for f in sorted((REPO / "k3plan" / "evidence" / "probes").glob("gmm-schedule-*.json")):
        q = json.loads(f.read_text())["params"]
        assert f"{q['dot_cycles']:,} cycles, {q['seconds_a_cycle'] * 1e9:.4f} ns a cycle" in text, f.name
