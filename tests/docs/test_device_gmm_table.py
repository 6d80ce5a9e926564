"""docs/device.md's table of the engine's grouped matmul on the TPU v5e (issue 38) and README's figures from it are
the committed probe gmm records (k3plan/evidence/probes/gmm-tpu-v5-lite-*.json), row for row; and README's per-chunk model
figure is what roofline prints now."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVICE = (REPO / "docs" / "device.md").read_text()
README = " ".join((REPO / "README.md").read_text().split())


def table_rows() -> list[str]:
    """One markdown row a point of every gmm record of the TPU v5e, as docs/device.md has them."""
    rows = []
    for f in sorted((REPO / "k3plan" / "evidence" / "probes").glob("gmm-tpu-v5-lite-*.json")):
        rec = json.loads(f.read_text())
        for p in rec["points"]:
            q = p["params"]
            four = q["weight_dtype"] != "bfloat16"
            key = (q["rows"], q["projection"], not four)
            rows.append(
                (
                    key,
                    f"| {q['rows']:,} x {q['groups']} | {q['projection']} | "
                    f"{'int4 (MXFP4 stand-in)' if four else 'bf16 (control)'} | {p['value'] * 1e6:,.1f} | "
                    f"{p['stats']['min'] * 1e6:,.1f}-{p['stats']['p90'] * 1e6:,.1f} | {q['floor_s'] * 1e6:,.0f} | "
                    f"{q['touched_bytes'] / 1e6:,.1f} | {q['flops'] / 1e9:.2f} | {q['hbm_fraction']:.0%} | "
                    f"{q['mxu_fraction']:.1%} | {q['ceiling_s'] * 1e6:,.1f} | `{f.name}` |",
                )
            )
    return [r for _, r in sorted(rows)]


def test_device_md_gmm_table_is_the_records():
    for row in table_rows():
        assert row in DEVICE, row


def test_readme_gmm_figures_are_the_records():
    rec = json.loads(
        next((REPO / "k3plan" / "evidence" / "probes").glob("gmm-tpu-v5-lite-20261204T080902Z-19b3b9.json")).read_text()
    )
    w13 = next(p for p in rec["points"] if p["params"]["projection"] == "w13")
    ctrl = json.loads(
        (REPO / "k3plan" / "evidence" / "probes" / "gmm-tpu-v5-lite-20261204T080902Z-a2a791.json").read_text()
    )
    c = ctrl["points"][0]
    said = (
        f"the 4-bit w13 call takes {w13['value'] * 1e3:.2f} ms against its {w13['params']['ceiling_s'] * 1e3:.2f} ms "
        f"stream ceiling ({w13['params']['hbm_fraction']:.0%} of the HBM peak) while the bf16 control streams at "
        f"{c['params']['hbm_fraction']:.0%}"
    )
    assert said in README


def test_readme_per_chunk_model_is_roofline_s():
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    r = CliRunner().invoke(
        app, ["roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512", "--json"]
    )
    gap = {t["name"]: t for t in json.loads(r.stdout)["serving"]["prefill"]["gap_terms"]}
    src = gap["per-chunk fixed cost beyond the model's"]["source"]
    model = src.split("the model's own ")[1].split(" ms a chunk")[0]
    per_token = gap["per-token cost beyond the model's"]["source"].split("against the model's ")[1].split(";")[0]
    assert f"against the model's {model} ms and {float(per_token):.3f} ms" in README
