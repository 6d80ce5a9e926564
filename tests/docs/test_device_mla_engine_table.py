"""docs/device.md's table of the engine's MLA kernel (issue 38, probe mla-engine) is the committed records
(k3plan/evidence/probes/mla-engine-tpu-v5-lite-*.json) row for row, and what the speed model takes from them holds: the
kernel at the engine's default blocks and 16-token pages is bound by its steps (far below its ceiling), grows with
the context, and the figures README and docs quote are what roofline adds."""

from __future__ import annotations

import json
from pathlib import Path

from k3plan.engines.torchtpu_vllm.speed import MLA_DEFAULT_BLOCKS, MLA_DEFAULT_PAGE, MLA_STEP_BOUND

REPO = Path(__file__).resolve().parents[2]
DEVICE = (REPO / "docs" / "device.md").read_text()
RECORDS = sorted((REPO / "k3plan" / "evidence" / "probes").glob("mla-engine-*.json"))


def _points():
    for f in RECORDS:
        rec = json.loads(f.read_text())
        assert rec["ok"] and rec["verified"] and rec["backend"] == "tpu" and rec["device_kind"] == "TPU v5 lite"
        for p in rec["points"]:
            yield f.name, p["params"], p


def test_device_md_mla_table_is_the_records():
    rows = 0
    for name, q, p in _points():
        st = p["stats"]
        what = "decode (16 rows, 1 real)" if q["pass"] == "decode" else "mixed (a prefill chunk)"
        row = (
            f"| {what} | {q['page_size']} | {q['rows']} | {q['context']:,} | {q['queries_a_block']} x "
            f"{q['pages_a_block']} | {p['value'] * 1e6:,.2f} | {st['min'] * 1e6:,.2f}-{st['p90'] * 1e6:,.2f} | "
            f"{q['kernel_kv_bytes'] / 1e6:.1f} | {q['ceiling_s'] * 1e6:,.2f} | {q['efficiency']:.3f} | `{name}` |"
        )
        assert row in DEVICE, row
        rows += 1
    assert rows == 16


def test_the_engines_points_are_step_bound_and_grow_with_the_context():
    for stage, key in (("mixed", "mixed"), ("decode", "decode")):
        pts = sorted(
            (q["context"], p["value"], q["efficiency"])
            for _, q, p in _points()
            if q["pass"] == stage
            and q["page_size"] == MLA_DEFAULT_PAGE
            and (q["queries_a_block"], q["pages_a_block"]) == MLA_DEFAULT_BLOCKS[key]
        )
        assert len(pts) >= 3, stage
        assert all(e < MLA_STEP_BOUND for _, _, e in pts)  # what the model takes as measured
        assert all(b[1] > a[1] for a, b in zip(pts, pts[1:]))  # grows with the context
    # the 16-token page against the 192-token one: the engine's "3 to 8.5x slower"
    by = {
        (q["page_size"], q["context"]): p["value"]
        for _, q, p in _points()
        if q["pass"] == "mixed" and q["queries_a_block"] == 16
    }
    assert 2.5 < by[16, 512] / by[192, 512] < by[16, 8192] / by[192, 8192] < 8.5


def test_readme_and_device_md_say_what_roofline_adds():
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    r = CliRunner().invoke(
        app, ["roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512", "--json"]
    )
    s = json.loads(r.stdout)["serving"]
    name = "the engine's MLA kernel at its blocks"
    pre = {t["name"]: t["seconds"] for t in s["prefill"]["model_terms"]}[name]
    dec = {t["name"]: t["seconds"] for t in s["decode"]["model_terms"]}[name]
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"adds {pre * 1e3:,.1f} ms to the TTFT and {dec * 1e3:.2f} ms to the TPOT" in readme
    device = " ".join(DEVICE.split())
    for st, ms in (
        (s["prefill"], f"{s['prefill']['model_s'] * 1e3:,.0f}"),
        (s["decode"], f"{s['decode']['model_s'] * 1e3:.2f}"),
    ):
        assert f"-> {ms} ms" in device and f"-> {st['model_over_measured']:.2f}x)" in device, ms
