"""The score's throughput: output tokens/s where a run publishes them, else its total (input + output) tokens/s --
the model's counted as the clients count theirs (total_token_throughput = input and output tokens over the run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3plan.evidence.benchmarks import load_benchmarks


def test_a_run_that_publishes_both_says_the_same_of_the_model_either_way():
    """Where a run publishes output and total throughput (InferenceX's B200 curve), the model's total / measured total
    is its output / measured output: its total rate is the same run's, input tokens counted as the client counts
    them (each request's own drawn ISL)."""
    from k3plan.app.score import Models, _fit_note
    from k3plan.speed.serving import served_of
    from k3plan.speed.terms import default_terms

    both = [
        b
        for b in load_benchmarks()
        if b.measured.output_token_throughput is not None and b.measured.total_token_throughput is not None
    ]
    assert len(both) >= 10
    models, on = Models(), default_terms()
    for b in both[:3]:
        m, _, why = models.of(b, on)
        assert m is not None, why
        s, _ = served_of(m, b, pool_sequences=_fit_note(m.setup, b)[1], client_lengths=True)
        out = s.result.output_tokens_per_s / b.measured.output_token_throughput
        total = s.result.total_tokens_per_s / b.measured.total_token_throughput
        assert total == pytest.approx(out, rel=0.03), Path(b.path).stem


def test_the_score_reads_total_throughput_only_where_output_is_unpublished():
    from k3plan.app.score import score_rows

    runs = {Path(b.path).stem: b for b in load_benchmarks()}
    for r in score_rows():
        m = runs[r.case].measured
        if m.output_token_throughput is not None:
            assert r.throughput_kind == "output" and r.throughput_measured_tok_s == m.output_token_throughput
        elif m.total_token_throughput is not None:
            assert r.throughput_kind == "total" and r.throughput_measured_tok_s == m.total_token_throughput
        else:
            assert r.throughput_kind is None and r.throughput_ratio is None
