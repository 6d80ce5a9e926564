"""A serving benchmark's run through the scheduler (issue 46 item 4): worked by hand, and the properties its
figures must hold (hypothesis, small): TPOT non-decreasing in batch and context, TTFT non-decreasing in prompt
length, output tokens/s non-decreasing in batch up to the memory limit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3plan.speed.scheduler import StepCoefficients, simulate


def _step(*, base=0.01, a=0.001, b=1e-5):
    return StepCoefficients(base_s=base, per_decode_seq_s=a, per_prefill_token_s=b, source="test")


def test_prompts_sent_together_queue_behind_each_other_by_hand():
    """4 prompts of 100 tokens sent at once, a budget of 100, OSL 2, T = 1 s + 0.1 s a decode, vLLM's rule:
    step 1: R1 100 (first token, t 1); step 2: R1 decodes (done), R2 99 (t 2.1); step 3: R2 1 (first), R3 99
    (t 3.1); step 4: R2 decodes, R3 1 (first), R4 98 (t 4.2); step 5: R3 decodes, R4 2 (first, t 5.3).
    TTFTs 1, 3.1, 4.2, 5.3: each waits for the ones sent with it; mean 3.4, median 3.65."""
    r = simulate(step_time=lambda d, p: 1.0 + 0.1 * d, isl=100, osl=2, token_budget=100, concurrency=4, prompts=4)
    assert r.ttft_s == pytest.approx((1 + 3.1 + 4.2 + 5.3) / 4)
    assert r.ttft_median_s == pytest.approx((3.1 + 4.2) / 2)
    assert r.requests_measured == 4


def test_sglang_rule_prefills_everyone_before_anyone_decodes():
    """The same run under SGLang's rule: four prefill-only steps (t 1, 2, 3, 4), then one decode step of all
    four (t 5.4): TTFTs 1-4, every TPOT ends at 5.4; the second wave (prompts 5-8) arrives together at 5.4
    and queues the same way."""
    r = simulate(
        step_time=lambda d, p: 1.0 + 0.1 * d,
        isl=100,
        osl=2,
        token_budget=100,
        concurrency=4,
        prompts=8,
        prefill_first=True,
    )
    assert r.ttft_s == pytest.approx(2.5)  # 1, 2, 3, 4 in both waves
    assert r.request_latency_s == pytest.approx(5.4)


def test_one_request_is_one_prompt_s_prefill_and_the_decode_step():
    r = simulate(step_time=_step(), isl=1000, osl=10, token_budget=512, concurrency=1, prompts=3)
    assert r.ttft_s == pytest.approx(0.01 + 512e-5 + 0.01 + 488e-5)  # two chunks, no decode riding along
    assert r.tpot_s == pytest.approx(0.011)


RULES = st.booleans()


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 12), extra=st.integers(1, 8), isl=st.integers(16, 400), rule=RULES)
def test_tpot_and_throughput_do_not_fall_with_batch(n, extra, isl, rule):
    """More requests in flight (no memory limit: every one fits): TPOT does not fall, output tokens/s do not."""
    kw = dict(step_time=_step(), isl=isl, osl=16, token_budget=512, prefill_first=rule)
    lo = simulate(concurrency=n, prompts=4 * n, **kw)
    hi = simulate(concurrency=n + extra, prompts=4 * (n + extra), **kw)
    assert hi.tpot_s >= lo.tpot_s * (1 - 1e-9)
    assert hi.output_tokens_per_s >= lo.output_tokens_per_s * (1 - 1e-9)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 8), isl=st.integers(16, 400), more=st.integers(1, 400), rule=RULES)
def test_ttft_does_not_fall_with_the_prompt(n, isl, more, rule):
    kw = dict(step_time=_step(), osl=8, token_budget=256, concurrency=n, prompts=3 * n, prefill_first=rule)
    assert simulate(isl=isl + more, **kw).ttft_s >= simulate(isl=isl, **kw).ttft_s * (1 - 1e-9)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 8), ctx=st.floats(0.001, 0.02), more=st.floats(0.0, 0.02), rule=RULES)
def test_tpot_does_not_fall_with_the_context(n, ctx, more, rule):
    """A longer context makes each decode slower (the model's a grows with the KV read): TPOT does not fall."""
    kw = dict(isl=64, osl=8, token_budget=256, concurrency=n, prompts=3 * n, prefill_first=rule)
    lo = simulate(step_time=_step(a=ctx), **kw)
    hi = simulate(step_time=_step(a=ctx + more), **kw)
    assert hi.tpot_s >= lo.tpot_s * (1 - 1e-9)


def test_max_num_seqs_caps_the_throughput():
    """Up to the memory limit (max_num_seqs sequences a step) output tokens/s rise with the batch; past it the
    extra requests wait and the rate stays."""
    kw = dict(step_time=_step(), isl=64, osl=32, token_budget=512, max_num_seqs=8)
    rates = [simulate(concurrency=c, prompts=4 * c, **kw).output_tokens_per_s for c in (2, 4, 8)]
    assert rates == sorted(rates)
    capped = simulate(concurrency=16, prompts=64, **kw).output_tokens_per_s
    assert capped == pytest.approx(rates[-1], rel=0.1)
