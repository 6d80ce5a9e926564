"""The term pool-cap: a client's concurrency above the sequences the KV pool holds runs as a queue (the scheduler
admits a request only when its pages fit), not as one batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3plan.errors import K3PlanError

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
    capped, notes = served_of(m, b, pool_sequences=128)  # below SGLang's 256 running requests: the pool binds
    groups = max(1, min(m.setup.parallel.dp, 4096))
    cap = 128 // groups
    assert any(
        f"the KV pool holds {cap:,} sequences of 9,216 tokens a group ({cap * 9216:,} tokens)" in n for n in notes
    )
    assert not any("the KV pool holds" in n for n in free_notes)
    assert capped.tpot_s < free.tpot_s  # a smaller running batch decodes faster
    assert capped.ttft_s > free.ttft_s  # and the rest wait for a slot


def test_sglang_runs_deepseek_v4_at_its_own_256_requests():
    """SGLang's DeepSeek-V4 default (deepseek_v4_hook.py apply_deepseek_v4_defaults): a run that sets no
    --max-running-requests runs 256 a server, whatever its client sends; a pool above that changes nothing."""
    from k3plan.speed.serving import served_of

    m, b = _model()
    assert not m.setup.stack.dp_attention
    run, notes = served_of(m, b, pool_sequences=None)
    assert any(n.startswith("256 running requests a group (SGLang's DeepSeek-V4 default") for n in notes)
    assert run.result.mean_decode_seqs <= 256
    roomy, _ = served_of(m, b, pool_sequences=1024)
    assert (roomy.tpot_s, roomy.ttft_s) == (run.tpot_s, run.ttft_s)


def test_a_pool_above_the_concurrency_changes_nothing():
    from k3plan.speed.serving import served_of

    m, b = _model()
    free, _ = served_of(m, b, pool_sequences=None)
    roomy, notes = served_of(m, b, pool_sequences=10 * b.workload.concurrency)
    assert not any("the KV pool holds" in n for n in notes)
    assert (roomy.tpot_s, roomy.ttft_s) == (free.tpot_s, free.ttft_s)


def _sim(**kw):
    from k3plan.speed.scheduler import StepCoefficients, simulate

    step = StepCoefficients(base_s=5e-3, per_decode_seq_s=2e-5, per_prefill_token_s=1.5e-5, source="test")
    return simulate(step_time=step, isl=2048, osl=256, token_budget=4096, concurrency=64, prompts=192, **kw)


def test_a_pool_of_whole_requests_is_the_sequence_cap_at_fixed_lengths():
    """At the nominal lengths every request holds ISL + OSL tokens: a pool of N of them admits N at a time, the very
    figures of --max-num-seqs N (POOL_RULE generalises the cap, it does not move the fixed-length cases)."""
    for rule in (False, True):
        seqs = _sim(max_num_seqs=24, prefill_first=rule)
        pool = _sim(pool_tokens=24 * (2048 + 256), prefill_first=rule)
        assert (pool.ttft_s, pool.tpot_s, pool.output_tokens_per_s) == (
            seqs.ttft_s,
            seqs.tpot_s,
            seqs.output_tokens_per_s,
        )
        assert pool.total_tokens_per_s == pytest.approx(pool.output_tokens_per_s * (2048 + 256) / 256)


def test_shorter_requests_share_the_pool_among_more():
    """The client's random lengths (range ratio 0: ISL over [1, 2048], OSL over [1, 256]) hold half the tokens a request
    on average: the same pool runs about twice the requests that a cap in whole-length sequences would."""
    seqs = _sim(max_num_seqs=24, range_ratio=0.0)
    pool = _sim(pool_tokens=24 * (2048 + 256), range_ratio=0.0)
    free = _sim(range_ratio=0.0)
    assert seqs.mean_decode_seqs < pool.mean_decode_seqs < free.mean_decode_seqs
    assert seqs.output_tokens_per_s < pool.output_tokens_per_s
    assert pool.ttft_s < seqs.ttft_s  # fewer wait for a slot


def test_a_request_larger_than_the_pool_is_refused():
    with pytest.raises(K3PlanError, match="does not fit the KV pool"):
        _sim(pool_tokens=2048)
