"""Issue 48 item 3: one pick and one $/M a platform in a report, and the source of every time.

`k3plan report` printed three $/M decode figures for nvidia-b200 ($16.06 in the summary and findings, $180.64 in
the cost table) from two picks (the summary's 2x8 TP8 PP2 and the cost table's 2x8 TP16: plan's own first row at
the deployment section's request shape). The cost table now prices the summary's pick, with the summary's figures;
the Pareto table is priced by the hour only; the summary says the source of its times."""

from __future__ import annotations

import pytest

from k3plan.report.capacity_deploy import deployment_blocks
from k3plan.report.capacity_doc import SOURCE_LEGEND, document, summary_table
from k3plan.report.capacity_write import collect
from k3plan.roofline.bounds import Efficiency

HW = ["nvidia-b200", "tpu-v7x"]


@pytest.fixture(scope="module")
def reports():
    return collect(
        model="kimi-k3",
        hardware=HW,
        stacks={},
        contexts=[131072],
        concurrency=1,
        max_chips=64,
        eff=Efficiency(),
        evidence=None,
        progress=lambda m: None,
    )


@pytest.fixture(scope="module")
def section(reports, tmp_path_factory):
    path = tmp_path_factory.mktemp("deploy") / "p-pareto.png"
    blocks, _ = deployment_blocks(
        model="kimi-k3", hardware=HW, stacks=None, concurrency=1, max_chips=64, plot_path=path, reports=reports
    )
    return blocks


def _table(block):
    _, headers, rows = block
    return [dict(zip(headers, r)) for r in rows]


def test_the_cost_table_prices_the_summary_s_pick_with_the_summary_s_figure(reports, section):
    summary = {r["platform"]: r for r in _table(summary_table(reports))}
    cost = next(b for b in section if b[0] == "table" and "price source" in b[1])
    rows = {r["hardware"]: r for r in _table(cost)}
    assert set(rows) == set(HW)
    for hw in HW:
        s, c = summary[hw], rows[hw]
        pick = c["pick (the summary's, at its first context)"]
        assert pick.startswith(f"{s['smallest viable']} {s['split (tp/ep/dp, pp)']} {s['stack']} @ ")
        assert c["chips"] == s["chips"]
        figure = c["$/M decode"].split(" (")[0]
        assert (figure == "n/a") == (s["$ / M decode tokens"] == "—")
        if figure != "n/a":
            assert f"${figure}" == s["$ / M decode tokens"]  # one $/M a platform and pick
        assert c["time source"].startswith("decode ")


def test_the_pareto_table_prints_no_second_dollars_per_million(section):
    pareto = [b for b in section if b[0] == "table" and "tok/s/user" in b[1]]
    assert all("$/M out" not in b[1] for b in pareto)


def test_the_summary_says_the_source_of_its_times(reports):
    rows = _table(summary_table(reports))
    kinds = {"ceiling", "model", "measured", "transferred"}
    for r in rows:
        src = r["source (decode 1 / most, TTFT)"]
        assert src == "—" or {w.strip(",") for w in src.replace("/", " ").split()} <= kinds, src
    blocks = document(reports, title="t", intro=[], plots=[], concurrency=1)
    assert ("p", SOURCE_LEGEND) in blocks
