"""Issue 50: docs/device.md's grid table is the output of `python3 -m k3plan.probes.step.grid_table` over the
committed v5e grid records (reports/probes/grid-20261204/), and every grid record is one of its rows."""

from __future__ import annotations

from k3plan.probes.step import grid_table as gt


def test_docs_hold_the_scripts_table():
    rows = gt.rows()
    assert gt.doc_block(gt.DOC.read_text()) == gt.table(rows), "run python3 -m k3plan.probes.step.grid_table"


def test_every_record_is_a_row_and_refusals_are_points():
    rows = gt.rows()
    assert len(rows) == len(list(gt.GRID_DIR.rglob("*.json")))
    refused = [r for r in rows if r.refused]
    assert refused and all(r.measured_s is None and r.compiled_temp for r in refused)
    # no point the chip refused has a plain FITS from fit (issue 50: a lower bound says FITS IF)
    assert not [r for r in refused if r.fit_verdict == "FITS"]


def test_fit_and_the_chip_agree_where_fit_is_plain():
    # a plain FITS never met a refusal and a plain DOES NOT FIT never met a run (issue 50: jax-native MXFP4 2L 32E
    # prefill 4,096 ran at 4.93 GiB where fit refused it on the engine kernels' terms; its graph's own terms, 6.59
    # GiB, leave it a FITS IF)
    assert not [r for r in gt.rows() if not r.agrees and not r.fit_verdict.startswith("FITS IF")]
