"""Issue 48 item 3: plan orders by each row's best estimate (measured > transferred > model > ceiling), marks the
kind on every ranked figure and says so when the rows rest on different kinds of evidence.

At 8,192 tokens, one sequence, on v7x: torchtpu-vllm 2x2x4 TP32 EP32 is the main job, whose nightly median the plan
stands behind (measured where the whole key matches, else transferred); the other rows rest on the model (the decode
ops against the efficiency records).
Ranked on the ceiling, its 4.6 ms bound sat beside measured medians as if like for like."""

from __future__ import annotations

import json

import pytest

from k3plan.plan import plan
from k3plan.plan.expected import ESTIMATE_KINDS, evidence_line

ASK = {"hardware": ["tpu-v7x"], "context": 8192, "concurrency": 1}


@pytest.fixture(scope="module")
def best():
    return plan(**ASK)


def test_every_row_carries_its_best_estimate_and_its_kind(best):
    assert best.workload.rank_by == "best"
    for r in best.ranked:
        assert r.estimate_source in ESTIMATE_KINDS and r.estimate_tpot_ms is not None
        if r.tpot_source:  # a serving benchmark speaks for it
            assert r.estimate_source in ("measured", "transferred") and r.estimate_tpot_ms == r.tpot_ms
        elif r.expected_tpot_ms is not None:
            assert r.estimate_source == "model" and r.estimate_tpot_ms == r.expected_tpot_ms
        # tok/s a chip is the estimate's
        assert r.tokens_per_s_per_chip == pytest.approx(1 / (r.estimate_tpot_ms / 1e3) / r.chips)
    assert any(r.estimate_source in ("measured", "transferred") for r in best.ranked)


def test_rows_are_ordered_by_the_objective_then_the_best_estimate(best):
    keys = [(r.chips, r.estimate_tpot_ms) for r in best.ranked]
    assert keys == sorted(keys)
    assert [r.rank for r in best.ranked] == list(range(1, len(best.ranked) + 1))


def test_the_ceiling_ranking_is_still_there():
    ceiling = plan(**ASK, rank_by="ceiling")
    keys = [(r.chips, r.tpot_ms) for r in ceiling.ranked if not r.tpot_source]
    assert keys == sorted(keys)


def test_mixed_evidence_is_said_under_the_table(best, cli):
    line = evidence_line(best.ranked)
    assert line is not None and ("m = measured" in line or "t = transferred" in line) and "e = model" in line
    r = cli("plan", "-H", "tpu-v7x", "--context", "8192")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "ranked on different kinds of evidence" in text
    assert "ceiling ms" in text and (" m │" in r.output or " t │" in r.output) and " e │" in r.output


def test_one_kind_says_nothing():
    for hw in ("nvidia-h200", "amd-mi300x"):  # each row the model's (the kernel floor's trace sets a decode term)
        rows = plan(hardware=[hw], context=32768, top=3).ranked
        assert {r.estimate_source for r in rows} == {"model"} and evidence_line(rows) is None


def test_json_carries_the_estimate(cli):
    r = cli("plan", "-H", "tpu-v7x", "--context", "8192", "--top", "3", "--json")
    rows = json.loads(r.stdout)["ranked"]
    assert all(x["estimate_source"] in ESTIMATE_KINDS and x["estimate_tpot_ms"] > 0 for x in rows)


def test_under_a_load_mixed_evidence_is_said_too(cli):
    """--isl/--osl: the main job's row stands on the nightly's medians (m, t), the others on the model under the load
    (e: the scheduler on the model's step, issue 46 item 7): the line says the ranking mixes them."""
    r = cli("plan", "-H", "tpu-v7x", "--isl", "8192", "--osl", "1024", "--concurrency", "1")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "ranked on different kinds of evidence: " in text and "e = model" in text
    assert "m = measured" in text or "t = transferred" in text
