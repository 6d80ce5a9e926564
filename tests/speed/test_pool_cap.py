"""The term pool-cap: a client's concurrency above the sequences the KV pool holds runs as a queue (the scheduler
admits a request only when its pages fit), not as one batch."""

from __future__ import annotations

from pathlib import Path

CASE = "deepseek-v4-flash-sglang-h200-tp4-marlin-isl8192-osl1024-c4096"


def _model():
    from k3plan.app.score import Models
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.terms import default_terms

    (b,) = [b for b in load_benchmarks() if Path(b.path).stem == CASE]
    m, _, why = Models().of(b, default_terms())
    assert m is not None, why
    return m, b


def test_a_concurrency_above_the_pool_runs_as_a_queue():
    from k3plan.speed.serving import served_of

    m, b = _model()
    assert b.flags.max_num_seqs is None and b.workload.concurrency == 4096
    free, free_notes = served_of(m, b, pool_sequences=None)
    capped, notes = served_of(m, b, pool_sequences=512)
    groups = max(1, min(m.setup.parallel.dp, 4096))
    cap = 512 // groups
    assert any(f"the KV pool holds {cap:,} sequences of 9,216 tokens" in n for n in notes)
    assert not any("the KV pool holds" in n for n in free_notes)
    assert capped.tpot_s < free.tpot_s  # a smaller running batch decodes faster
    assert capped.ttft_s > free.ttft_s  # and the rest wait for a slot


def test_a_pool_above_the_concurrency_changes_nothing():
    from k3plan.speed.serving import served_of

    m, b = _model()
    free, _ = served_of(m, b, pool_sequences=None)
    roomy, notes = served_of(m, b, pool_sequences=10 * b.workload.concurrency)
    assert not any("the KV pool holds" in n for n in notes)
    assert (roomy.tpot_s, roomy.ttft_s) == (free.tpot_s, free.ttft_s)
