"""The report's deployment section: a Pareto plot and table, and a cost table with a row for every
platform (n/a where the spec has no price, saying how to give one), its figures the plan's."""

from __future__ import annotations

import pytest

from k3plan.plan import plan
from k3plan.report.capacity_deploy import REQUEST_ISL, REQUEST_OSL, deployment_blocks

HW = ["tpu-v7x", "nvidia-b200", "tpu-v5e"]


@pytest.fixture(scope="module")
def section(tmp_path_factory):
    path = tmp_path_factory.mktemp("deploy") / "p-pareto.png"
    blocks, files = deployment_blocks(
        model="kimi-k3", hardware=HW, stacks=["vllm-tpu", "sglang"], concurrency=1, max_chips=64, plot_path=path
    )
    return blocks, files, path


def test_pareto_plot_and_table(section):
    blocks, files, path = section
    assert files == [path] and path.read_bytes()[:4] == b"\x89PNG"
    assert ("img", path, "Pareto front: tokens/s per user vs tokens/s per chip") in blocks
    assert any("best estimate under the load" in b[1] for b in blocks if b[0] == "p")  # what the figures rest on


def test_cost_table_has_every_platform_and_the_plans_figures(section):
    blocks, _, _ = section
    table = next(b for b in blocks if b[0] == "table" and "price source" in b[1])
    rows = {r[0]: dict(zip(table[1], r)) for r in table[2]}
    assert set(rows) == set(HW)
    assert rows["tpu-v5e"]["pick"] == "no fit"  # K3 does not fit v5e within 64 chips
    res = plan(
        hardware=HW,
        stacks=["vllm-tpu", "sglang"],
        max_chips=64,
        context=REQUEST_ISL + REQUEST_OSL,
        isl=REQUEST_ISL,
        osl=REQUEST_OSL,
        top=10**6,
    )
    for hw in ("tpu-v7x", "nvidia-b200"):
        r = next(x for x in res.ranked if x.hardware == hw)
        price = next(p for p in res.prices if p.hardware == hw).usd_per_chip_hour
        if price is None:
            assert rows[hw]["$/hour"] == "n/a" and "--price" in rows[hw]["price source"]
        else:
            assert rows[hw]["$/hour"] == f"{r.chips * price:,.2f}"
            out = r.sla.output_tokens_per_s  # per million output tokens, by hand
            assert rows[hw]["$/M out"] == f"{r.chips * price * 1e6 / (out * 3600):,.2f}"
