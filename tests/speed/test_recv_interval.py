"""The term recv-interval: SGLang's --scheduler-recv-interval N (sgl-project/sglang@70310f05
scheduler_recv_skipper.py SchedulerRecvSkipper.handle: a counter of the last batch's weight, decode 1, prefill 1,000,
takes requests in on reaching N), in the scheduler (speed.scheduler.RECV_RULE) and read from a run's flags."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.speed.scheduler import RECV_RULE, StepCoefficients, simulate

ONE_SECOND = StepCoefficients(base_s=1.0, per_decode_seq_s=0.0, per_prefill_token_s=0.0, source="test")
RUN = dict(step_time=ONE_SECOND, isl=16, osl=300, token_budget=4096, concurrency=8, prompts=400, range_ratio=0.5)


def test_an_interval_of_one_is_every_step():
    assert simulate(**RUN, recv_interval=1).ttft_s == pytest.approx(simulate(**RUN).ttft_s)


@pytest.mark.parametrize("n", [5, 11, 30])
def test_an_arrival_waits_half_an_interval_on_average(n):
    """Arrivals land at any point of the counter's cycle (requests of the client's lengths finish apart): the mean
    wait is (N - 1) / 2 decode steps, less for the first wave (sent to an idle engine, taken in at once: 8 of 400)."""
    extra = simulate(**RUN, recv_interval=n).ttft_s - simulate(**RUN).ttft_s
    assert extra == pytest.approx((n - 1) / 2 * (1 - 8 / 400), rel=0.1)
    assert simulate(**RUN, recv_interval=n).tpot_s == pytest.approx(1.0)  # a wait for intake is not a decode step


def test_an_idle_engine_takes_a_request_in_at_once():
    """One request at a time: each arrives to an idle engine (the idle loop counts 1 an iteration, no step)."""
    kw = dict(step_time=ONE_SECOND, isl=16, osl=300, token_budget=4096, concurrency=1, prompts=5)
    assert simulate(**kw, recv_interval=30).ttft_s == pytest.approx(simulate(**kw).ttft_s)


def test_the_interval_is_a_closed_loop_s():
    with pytest.raises(K3PlanError, match="recv interval"):
        simulate(step_time=ONE_SECOND, isl=16, osl=8, token_budget=64, request_rate_per_s=0.5, recv_interval=10)
    assert "scheduler-recv-interval" in RECV_RULE


def test_the_b200_curve_polls_as_its_script_sets():
    """InferenceX's B200 runs set --scheduler-recv-interval 30 from concurrency 16 at TP 8, else 10; priced only
    with the term on, and only for SGLang (the rule is SGLang's)."""
    from k3plan.app.score import Models
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.speed.serving import served_of
    from k3plan.speed.terms import default_terms

    b = next(b for b in load_benchmarks() if b.path.endswith("deepseek-v3-sglang-b200-tp8-isl1024-osl1024-c64.yaml"))
    assert b.flags.scheduler_recv_interval == 30
    m, _, why = Models().of(b, frozenset(default_terms()))
    assert m is not None, why
    on, _ = served_of(m, b, recv_interval=True)
    off, _ = served_of(m, b, recv_interval=False)
    assert "every 30 decode steps" in on.label and "every 30" not in off.label
    assert on.ttft_s > off.ttft_s and on.tpot_s == pytest.approx(off.tpot_s, rel=0.05)
