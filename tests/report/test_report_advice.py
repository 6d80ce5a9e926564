"""Issue 14 in `k3plan report`: an advice section per platform and a memory-tier table where the
hardware spec has tiers; the tier figures derived by hand from the published sizes."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    out = tmp_path_factory.mktemp("advice") / "r.md"
    r = CliRunner().invoke(app, ["report", "-H", "tpu-v7x", "-c", "131072", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["platforms"][0], out.read_text()


def test_advice_section_per_platform(report):
    p, md = report
    (a,) = p["advice"]
    row = p["rows"][0]
    assert a["context_tokens"] == 131072
    free, usable = row["per_device"]["free_bytes"], row["usable_bytes_per_device"]
    assert a["headroom_fraction"] == free / usable
    assert a["verdict"] == ("fails" if free < 0 else "thin" if free < usable / 10 else "ok")
    assert "### Advice" in md and f"131,072 context: {a['verdict']}" in md
    # memory-bound at batch 1 with headroom: larger batches, each TPOT the roofline's, batch / TPOT tokens/s
    # (a thin pick gets none: k3plan.advice.wiring prices no larger batch when the headroom is short)
    if a["verdict"] == "thin":
        assert not any(s.startswith("[bandwidth] batch") for s in a["suggestions"])
    elif row["decode"]["concurrency"]["binding"] == "memory" and row["max_sequences"] > 1:
        top = next(s for s in a["suggestions"] if s.startswith("[bandwidth] batch 1 -> "))
        assert f"batch 1 -> {row['max_sequences']}:" in top  # the most that fit gains most: ranked first
        full = row["decode"]["full"]
        # the advice prices a batch on the decode bound (k3plan.advice.wiring._bound_tpot), the row's ceiling
        bound = full.get("ceiling_tpot_s") or full["tpot_s"]
        assert f"TPOT {bound * 1e3:.2f} ms" in top and f"{full['batch'] / bound:,.0f} tok/s" in top
        # and now is the bound too, not the figure the row stands behind (the model's 26.08 ms against bound
        # options once read as a x28 gain)
        conc = row["decode"]["concurrency"]
        now = conc.get("ceiling_tpot_s") or conc["tpot_s"]
        assert f"({now * 1e3:.2f} now), {conc['batch'] / now:,.0f} -> " in top


def test_memory_tier_table_for_a_spec_with_tiers(report):
    p, md = report
    tiers = {t["tier"]: t for t in p["tiers"]}
    host = tiers["host_dram"]
    # tpu-v7x spec: 960 GB a 4-chip host; the smallest viable topology here is 2x4x4 (issue 50: 2x2x4's compiled
    # 128K prefill is refused): 32 chips = 8 hosts
    assert p["rows"][0]["setup"]["hosts"] == 8
    assert host["capacity_bytes"] == 8 * 960 * 10**9
    # one 131,072-token K3 session, one copy: 30,720 B a token of bf16 KV (vllm-tpu: tpu-inference's 640-value
    # MLA entry) + 449,372,160 B of KDA state
    assert host["sessions_held"] == 8 * 960 * 10**9 // (30_720 * 131_072 + 449_372_160) == 1715
    assert tiers["remote"]["sessions_held"] is None
    # bytes print in GiB like every other figure: 8 x 960e9 B / 2^30 = 7,153 GiB
    assert f"{8 * 960 * 10**9 / 2**30:,.0f}" == "7,153"
    assert "### Memory tiers: suspended sessions" in md and "| host_dram | 7,153 GiB | 1,715 |" in md
