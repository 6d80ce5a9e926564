"""Each speed term is ON only where the leave-one-out score over the whole public benchmark set improves with it
(issue 46 item 4): k3plan/speed/admitted.json is what the admission decides on the shipped set now. Re-running it
scores the set about a dozen times (a minute or two on the 2-core machine), so the module is slow (tests/conftest.py
SLOW_MODULES: .ci/run runs it)."""

from __future__ import annotations

from pathlib import Path

from k3plan.app.score import Models, admitted_data, decide
from k3plan.evidence.benchmarks import load_benchmarks
from k3plan.speed.terms import SCORED, admitted, default_terms


def test_admitted_json_is_the_admission_of_the_shipped_set():
    """The admitted set is settled: every scored term, judged with and without it against it (the admission's
    last pass), keeps its decision, with the scores admitted.json records."""
    kept = admitted()
    assert kept["benchmarks"] == sorted(Path(b.path).stem for b in load_benchmarks())
    on = frozenset(n for n in SCORED if n in default_terms())
    models = Models()
    decisions = decide(on, models)
    assert admitted_data(decisions, models) == kept, "re-run: python3 benchmarks/score_speed.py --admit --write"
    assert all(d.on == (d.term in on) for d in decisions)
