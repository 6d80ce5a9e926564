"""docs/device.md's tables of the engine's Attention Residual kernel and MoE decode glue on the TPU v5e (issue 38)
are the committed probe attnres / moe-glue records (k3plan/evidence/probes/attnres-tpu-v5-lite-*.json,
moe-glue-tpu-v5-lite-*.json), point for point, and its per-step sums are the records'."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVICE = (REPO / "docs" / "device.md").read_text()
PROBES = REPO / "k3plan" / "evidence" / "probes"


def _tail(p: dict, name: str) -> str:
    q, st = p["params"], p["stats"]
    return (
        f"| {p['value'] * 1e6:,.2f} | {st['min'] * 1e6:,.2f}-{st['p90'] * 1e6:,.2f} | {q['floor_s'] * 1e6:,.0f} | "
        f"{q['touched_bytes'] / 1e6:,.3f} | {q['flops'] / 1e6:,.2f} | {q['ceiling_s'] * 1e6:,.2f} | "
        f"{q['efficiency']:.3f} | `{name}` |"
    )


def test_device_md_attnres_table_is_the_records():
    calls = None
    rows = []
    for f in sorted(PROBES.glob("attnres-tpu-v5-lite-*.json")):
        rec = json.loads(f.read_text())
        calls = rec["params"]["calls_by_blocks"]
        for p in rec["points"]:
            q = p["params"]
            rows.append(f"| {q['tokens']} | {q['blocks']} | {calls[str(q['blocks'])]} {_tail(p, f.name)}")
    assert len(rows) == 28  # the full run's 16, the smoke run's 4, the 2,048/8,192-row run's 8
    for row in rows:
        assert row in DEVICE, row


def test_device_md_attnres_step_sums_are_the_records():
    recs = [json.loads(f.read_text()) for f in sorted(PROBES.glob("attnres-tpu-v5-lite-*.json"))]
    rec = next(r for r in recs if len(r["points"]) == 16)  # the full run: T 16 and 512 at every K
    step = rec["params"]["per_step"]
    assert f"decode (T = 16, the engine's padded rows): {step['16']['measured_s'] * 1e3:.3f} ms a step" in DEVICE
    assert f"(ceiling {step['16']['ceiling_s'] * 1e3:.3f} ms" in DEVICE
    assert f"a 512-token prefill\nchunk: {step['512']['measured_s'] * 1e3:.2f} ms" in DEVICE
    assert f"(ceiling {step['512']['ceiling_s'] * 1e3:.2f} ms" in DEVICE


def test_device_md_moe_glue_table_is_the_records():
    rows = []
    for f in sorted(PROBES.glob("moe-glue-tpu-v5-lite-*.json")):
        for p in json.loads(f.read_text())["points"]:
            q = p["params"]
            rows.append(
                f"| {q['tokens']} x top-{q['topk']} ({q['routed_rows']} rows), {q['local_experts']} local, "
                f"{q['hidden']} wide {_tail(p, f.name)}"
            )
    assert len(rows) == 2
    for row in rows:
        assert row in DEVICE, row


def test_device_md_states_how_the_time_scales_with_the_rows():
    at = {
        (p["params"]["tokens"], p["params"]["blocks"]): p["value"]
        for f in sorted(PROBES.glob("attnres-tpu-v5-lite-*.json"))
        for p in json.loads(f.read_text())["points"]
    }
    for k in (1, 8):
        assert f"{at[(2048, k)] / at[(512, k)]:.2f}x" in DEVICE
        assert f"{at[(8192, k)] / at[(512, k)]:.1f}x" in DEVICE
        assert 0.85 * 16 < at[(8192, k)] / at[(512, k)] < 1.2 * 16  # a cost a 16-row tile, within 15-20%
