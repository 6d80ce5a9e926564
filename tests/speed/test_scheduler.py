"""The scheduler model on cases worked by hand, and its closed form against its simulation."""

from __future__ import annotations

import math

import pytest

from k3plan.errors import K3PlanError
from k3plan.speed.scheduler import StepCoefficients, simulate, steady_state


def test_constant_step_one_sequence():
    """ISL 10,000 in a 4,096-token budget: ceil(10000 / 4096) = 3 prefill steps, the last one
    samples the first token; OSL 5 needs 4 more steps. At 1 s a step: TTFT 3 s, TPOT 1 s,
    latency 7 s, 5 tokens in 7 s."""
    sim = simulate(step_time=lambda d, p: 1.0, isl=10_000, osl=5, token_budget=4096, concurrency=1)
    assert sim.ttft_s == pytest.approx(3.0)
    assert sim.tpot_s == pytest.approx(1.0)
    assert sim.request_latency_s == pytest.approx(7.0)
    assert sim.output_tokens_per_s == pytest.approx(5 / 7)
    closed = steady_state(
        step=StepCoefficients(base_s=1.0, per_decode_seq_s=0, per_prefill_token_s=0, source="t"),
        isl=10_000,
        osl=5,
        token_budget=4096,
        concurrency=1,
    )
    assert closed.ttft_s == pytest.approx(3.0) and closed.tpot_s == pytest.approx(1.0)
    assert closed.request_latency_s == pytest.approx(7.0)


def test_running_first_then_waiting_by_hand():
    """T = 1 + 0.1 d + 0.01 p; ISL 6, OSL 3, budget 4; requests arrive at t = 0, 1, 2, ...
    step 1 (t 0):    R1 prefill 4                          d0 p4 1.04 -> t 1.04
    step 2:          R1 prefill 2 (first token), R2 2      d0 p4 1.04 -> t 2.08   R1 TTFT 2.08
    step 3:          R1 decode, R2 prefill 3 (budget out)  d1 p3 1.13 -> t 3.21
    step 4:          R1 decode (done), R2 1 (first), R3 2  d1 p3 1.13 -> t 4.34   R1 4.34; R2 TTFT 3.34
    step 5:          R2 decode, R3 prefill 3               d1 p3 1.13 -> t 5.47
    step 6:          R2 decode (done), R3 1, R4 2          d1 p3 1.13 -> t 6.60   R2 latency 5.60
    mean TTFT (2.08 + 3.34) / 2 = 2.71; mean latency (4.34 + 5.60) / 2 = 4.97; TPOT (4.97 - 2.71) / 2 = 1.13
    """
    sim = simulate(
        step_time=lambda d, p: 1 + 0.1 * d + 0.01 * p,
        isl=6,
        osl=3,
        token_budget=4,
        request_rate_per_s=1.0,
        warmup_requests=0,
        measure_requests=2,
    )
    assert sim.ttft_s == pytest.approx(2.71)
    assert sim.request_latency_s == pytest.approx(4.97)
    assert sim.tpot_s == pytest.approx(1.13)
    assert sim.output_tokens_per_s == pytest.approx(3.0)  # 1 request/s x 3 tokens


@pytest.mark.parametrize("concurrency,isl,osl,budget", [(8, 512, 64, 256), (16, 2048, 32, 1024)])
def test_closed_form_agrees_with_the_simulation(concurrency, isl, osl, budget):
    step = StepCoefficients(base_s=0.02, per_decode_seq_s=1e-4, per_prefill_token_s=4e-5, source="test")
    sim = simulate(step_time=step, isl=isl, osl=osl, token_budget=budget, concurrency=concurrency)
    closed = steady_state(step=step, isl=isl, osl=osl, token_budget=budget, concurrency=concurrency)
    for field in ("tpot_s", "request_latency_s", "output_tokens_per_s"):
        assert getattr(closed, field) == pytest.approx(getattr(sim, field), rel=0.06), field
    assert any("vLLM V1" in a for a in closed.assumptions)


def test_open_loop_closed_form():
    """Linear T, rate lambda: T = base / (1 - lambda (a (OSL - 1) + b ISL)).
    base 0.02, a 1e-4, b 4e-5, ISL 1000, OSL 101, lambda 5/s: 5 (0.01 + 0.04) = 0.25 -> T = 0.02 / 0.75."""
    step = StepCoefficients(base_s=0.02, per_decode_seq_s=1e-4, per_prefill_token_s=4e-5, source="test")
    r = steady_state(step=step, isl=1000, osl=101, token_budget=2048, request_rate_per_s=5.0, chips=4)
    assert r.tpot_s == pytest.approx(0.02 / 0.75)
    assert r.output_tokens_per_s == pytest.approx(5 * 101)
    assert r.output_tokens_per_s_per_chip == pytest.approx(5 * 101 / 4)
    assert math.isfinite(r.ttft_s) and r.ttft_s > r.tpot_s


def test_bad_load_is_refused():
    step = StepCoefficients(base_s=0.02, per_decode_seq_s=1e-4, per_prefill_token_s=4e-5, source="test")
    with pytest.raises(K3PlanError, match="not both"):
        steady_state(step=step, isl=10, osl=10, token_budget=64, concurrency=2, request_rate_per_s=1.0)
    with pytest.raises(K3PlanError, match="beyond what the step time sustains"):
        steady_state(step=step, isl=1000, osl=101, token_budget=2048, request_rate_per_s=50.0)
    with pytest.raises(K3PlanError, match="exceeds the token budget"):
        simulate(step_time=step, isl=10, osl=10, token_budget=4, concurrency=8)
