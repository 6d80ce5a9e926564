"""docs/device.md's table of the engine's KDA kernels on the TPU v5e (issue 38) is the committed probe kda-engine
records (k3plan/evidence/probes/kda-engine-tpu-v5-lite-*.json), point for point."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVICE = (REPO / "docs" / "device.md").read_text()


def row_tails() -> list[str]:
    """The measured columns of one markdown row a point of every kda-engine record of the TPU v5e."""
    rows = []
    for f in sorted((REPO / "k3plan" / "evidence" / "probes").glob("kda-engine-tpu-v5-lite-*.json")):
        rec = json.loads(f.read_text())
        for p in rec["points"]:
            q, st = p["params"], p["stats"]
            rows.append(
                f"| {p['value'] * 1e6:,.2f} | {st['min'] * 1e6:,.2f}-{st['p90'] * 1e6:,.2f} | {q['floor_s'] * 1e6:,.0f} | "
                f"{q['touched_bytes'] / 1e6:,.3f} | {q['flops'] / 1e6:,.1f} | {q['ceiling_s'] * 1e6:,.2f} | "
                f"{q['efficiency']:.3f} | `{f.name}` |"
            )
    return rows


def test_device_md_kda_engine_table_is_the_records():
    rows = row_tails()
    assert len(rows) == 8
    for row in rows:
        assert row in DEVICE, row
