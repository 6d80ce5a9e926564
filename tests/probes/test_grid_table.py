"""Issue 50: docs/device.md's grid table is the output of `python3 -m k3plan.probes.step.grid_table` over the
committed v5e grid records (reports/probes/grid-20261204/), and every grid record is one of its rows."""

from __future__ import annotations

from k3plan.probes.step import grid_table as gt


def test_docs_hold_the_scripts_table():
    rows = gt.rows()
    assert gt.doc_block(gt.DOC.read_text()) == gt.table(rows), "run python3 -m k3plan.probes.step.grid_table"


def test_every_record_is_a_row_and_refusals_are_points():
    rows = gt.rows()
    current = [p for p in gt.GRID_DIR.rglob("*.json") if "superseded" not in p.parts]
    # one row a point, of the newest record; a superseded record (a re-run's older one) is no row
    assert sorted(r.record for r in rows) == sorted(p.relative_to(gt.GRID_DIR).as_posix() for p in current)
    assert not [r for r in rows if "superseded/" in r.record]
    refused = [r for r in rows if r.refused]
    assert refused and all(r.measured_s is None and r.compiled_temp for r in refused)
    # no point the chip refused has a plain FITS from fit (issue 50: a lower bound says FITS IF)
    assert not [r for r in refused if r.fit_verdict == "FITS"]


def test_fit_and_the_chip_agree_where_fit_is_plain():
    # a plain FITS never met a refusal and a plain DOES NOT FIT never met a run (issue 50: jax-native MXFP4 2L 32E
    # prefill 4,096 ran at 4.93 GiB where fit refused it on the engine kernels' terms; its graph's own terms, 6.59
    # GiB, leave it a FITS IF)
    assert not [r for r in gt.rows() if not r.agrees and not r.fit_verdict.startswith("FITS IF")]


def _row(record: str, measured: float) -> gt.Row:
    return gt.Row(
        model="m",
        stage="prefill",
        batch=1,
        context=1024,
        measured_s=measured,
        expected_s=1.0,
        compiled_temp=1,
        refused=False,
        fit_temp=1,
        fit_verdict="FITS",
        record=record,
    )


def test_the_newest_record_of_a_point_wins_wherever_it_lies():
    old, new = _row("a/superseded/x.json", 2.0), _row("a/y.json", 1.0)
    dates = {old.record: "2026-12-04T17:23:23Z", new.record: "2026-12-04T22:38:55Z"}
    assert gt.newest_per_point([old, new], dates) == [new]
    assert gt.newest_per_point([new, old], dates) == [new]
    # an older record left beside the newer one (not moved) still loses
    beside = _row("a/z.json", 3.0)
    assert gt.newest_per_point([beside, new], {**dates, beside.record: "2026-12-04T17:00:00Z"}) == [new]
    # another point keeps its own row
    other = gt.Row(**{**new.__dict__, "context": 4096})
    assert len(gt.newest_per_point([old, new, other], dates)) == 2
