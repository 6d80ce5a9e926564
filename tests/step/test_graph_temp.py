"""Issue 50: the temporaries of k3plan's own graph (validate's step, ``k3plan.step.temporaries.validate_temp_terms``,
asked of fit as ``graph=TempGraph(form)``) against the compiler's memory_analysis of that graph: the v5e chip's grid
(reports/probes/grid-20261204/, read through the grid table) and deviceless v5e compiles off the grid
(reports/validation/grid-temp-v5e/, benchmarks/grid_temp_compile.py). No compile here: the records say what the
compiler said; the compile that makes a record is tests/step/test_graph_temp_compile.py (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.budget.temp_graph import VALIDATE_TEMP, TempGraph, validate_temps
from k3plan.probes.step import grid_table as gt
from k3plan.probes.step.probe import StepParams, expert_form, step_setup

BAND = 0.15
RECORDS = Path(__file__).resolve().parents[2] / "reports" / "validation" / "grid-temp-v5e"
# the timed grid points outside 15%, by what the buffers leave out (docs/device.md, "k3plan's graph's temporaries"):
# (model, stage, batch, context) -> (lowest, highest) model / compiled - 1 allowed
OUTSIDE = {
    # (bf16 6L 16E prefill 1,024 and MXFP4 4L 1,024 / 4,096 and 8L 1,024 were outside, -35% to -20%, on records of
    # an older validate graph; re-run with today's (grid_run.sh part 4) they are +12%, -5%, -2% and +13%)
}
# the deviceless records outside 15%: (stack, expert format, layers, experts, stage, batch, context) -> allowed error
OUTSIDE_DEVICELESS = {
    # the heap packs the block into 3.23 GiB and memory_analysis says 3.99; every buffer apart is 3.35 (-16%)
    ("jax-native", "bf16", 2, 16, "prefill", 1, 2048): (-0.20, -0.15),
    # a bf16 prefill's KDA scan intermediates counted whole: the heap held part of them beside the MoE rows here
    # (the model +13% at 1,024, +9% at 2,048, -5% at 4,096)
    ("torchtpu-vllm", "bf16", 2, 16, "prefill", 1, 3072): (0.15, 0.20),
}


@pytest.fixture(scope="module")
def rows():
    return gt.rows()


def test_the_grids_timed_points_within_15_percent(rows):
    timed = [r for r in rows if not r.refused]
    assert len(timed) == 60
    out = []
    for r in timed:
        err = r.fit_temp / r.compiled_temp - 1
        lo, hi = OUTSIDE.get((r.model, r.stage, r.batch, r.context), (-BAND, BAND))
        if not lo <= err <= hi:
            out.append(f"{r.model} {r.stage} {r.batch}x{r.context}: {err:+.1%}")
    assert not out, out
    assert sum(abs(r.fit_temp / r.compiled_temp - 1) <= BAND for r in timed) == len(timed) - len(OUTSIDE)


def test_refused_points_are_refused_by_fit(rows):
    # every point the chip refused is a DOES NOT FIT for the graph's own temp. torchtpu-vllm bf16 4L 32E prefill
    # 2,048 (a FITS IF temp <= 4.09 GiB, graph temp 2.73), refused at 17:30Z by 0.03 GiB on an older validate graph,
    # compiled and ran with today's (grid_run.sh part 4): temp 2.41 GiB, its condition met
    refused = [r for r in rows if r.refused]
    assert len(refused) == 14
    assert all(r.fit_verdict.startswith("DOES NOT FIT") for r in refused)
    (p2048,) = [r for r in rows if (r.model, r.stage, r.context) == ("torchtpu-vllm bf16 4L 32E", "prefill", 2048)]
    assert not p2048.refused and p2048.agrees and p2048.fit_verdict.startswith("FITS IF")


def _records() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RECORDS.glob("*.json"))]


def test_deviceless_points_off_the_grid():
    recs = _records()
    assert len(recs) >= 31
    out = []
    for rec in recs:
        pr, pt = rec["params"], rec["point"]
        sp = StepParams(width="k3", layers=pr["layers"], experts=pr["experts"], stack=pr["stack"],
                        expert_format=pr["expert_format"])  # fmt: skip
        setup = step_setup(sp, hardware="tpu-v5e")
        decode = pt["stage"] == "decode"
        pre, dec = validate_temps(setup, graph=TempGraph(form=expert_form(sp)), chunk=1 if decode else pt["context"],
                                  batch=pt["batch"], context=pt["context"])  # fmt: skip
        got = (dec if decode else pre).total_bytes
        temp = rec["memory_analysis"]["temp_bytes"]
        key = (pr["stack"], pr["expert_format"], pr["layers"], pr["experts"], pt["stage"], pt["batch"], pt["context"])
        lo, hi = OUTSIDE_DEVICELESS.get(key, (-BAND, BAND))
        if not lo <= got / temp - 1 <= hi:
            out.append(f"{pr} {pt}: model {got / 2**30:.2f} GiB, compiled {temp / 2**30:.2f} ({got / temp - 1:+.1%})")
    assert not out, out


def test_the_engines_temp_is_unchanged_without_the_graph():
    # fit's default torchtpu-vllm temp is the engine's kernels' (none of validate's relayout copies); the graph's
    # is asked for by name and says where it comes from
    sp = StepParams(width="k3", layers=2, experts=16, stack="torchtpu-vllm", expert_format="bf16")
    setup = step_setup(sp, hardware="tpu-v5e")
    w = Workload(context_tokens=2048, batch=1, prefill_chunk_tokens=1)
    engine = fit(setup, w, evidence=False)
    graph = fit(setup, w, graph=TempGraph(form="ragged"))
    assert not any("operand layout" in t.name for t in engine.temp.decode_terms)
    copy = next(t for t in graph.temp.decode_terms if "operand layout" in t.name)
    assert copy.bytes == 16 * 3072 * 3584 * 2  # one [experts, inter, latent] weight in bf16
    assert graph.provenance.temp_decode == VALIDATE_TEMP
    assert graph.temp.decode_bytes > 20 * engine.temp.decode_bytes
