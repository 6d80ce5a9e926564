"""Speculative decoding: expected tokens a verify step and the per-step / drafted / accepted rates."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.workload.specdecode import SpecDecode, parse_spec_decode, spec_decode_speed


def test_one_rate_closed_form():
    s = SpecDecode(draft_tokens=3, acceptance=(0.8,))
    # 0.8 + 0.64 + 0.512 = 1.952 accepted; + 1 = 2.952 = (1 - 0.8^4) / (1 - 0.8) = 0.5904 / 0.2
    assert s.expected_accepted_tokens == pytest.approx(1.952)
    assert s.expected_tokens_per_step == pytest.approx(2.952)
    assert s.expected_tokens_per_step == pytest.approx((1 - 0.8**4) / 0.2)
    assert s.forward_tokens_per_step == 4


def test_per_position_rates():
    s = parse_spec_decode(spec_tokens=3, acceptance="0.9,0.5,0.2")
    # 0.9 + 0.45 + 0.09 = 1.44 accepted, 2.44 a step
    assert s.expected_accepted_tokens == pytest.approx(1.44)
    assert s.expected_tokens_per_step == pytest.approx(2.44)
    # a rejected first position stops the chain: nothing after it counts
    assert SpecDecode(draft_tokens=3, acceptance=(0.0, 1.0, 1.0)).expected_tokens_per_step == 1.0
    assert SpecDecode(draft_tokens=4, acceptance=(1.0,)).expected_tokens_per_step == 5.0


def test_speed_by_hand():
    s = SpecDecode(draft_tokens=3, acceptance=(0.8,))
    v = spec_decode_speed(spec=s, batch=4, verify_step_s=0.010, draft_s_per_token=0.001, baseline_step_s=0.009)
    # step = 10 ms verify + 3 x 1 ms draft = 13 ms
    assert v.step_s == pytest.approx(0.013)
    # forward 4 x 4 = 16 tokens, 12 more than a plain step; drafted 12; accepted 4 x 1.952 = 7.808; emitted 11.808
    assert (v.forward_tokens_per_step, v.extra_forward_tokens_per_step, v.drafted_tokens_per_step) == (16, 12, 12)
    assert v.accepted_tokens_per_step == pytest.approx(7.808)
    assert v.emitted_tokens_per_s == pytest.approx(11.808 / 0.013)  # 908.3
    assert v.drafted_tokens_per_s == pytest.approx(12 / 0.013)
    assert v.accepted_tokens_per_s == pytest.approx(7.808 / 0.013)
    assert v.s_per_emitted_token == pytest.approx(0.013 / 2.952)  # 4.40 ms a token a sequence
    assert v.acceptance_fraction == pytest.approx(1.952 / 3)
    # plain decode: 1 token a 9 ms step; here 2.952 tokens a 13 ms step: 2.952 x 9 / 13 = 2.0437
    assert v.speedup == pytest.approx(2.952 * 9 / 13)


def test_bad_input():
    with pytest.raises(K3PlanError, match="2 rates for --spec-tokens 3"):
        parse_spec_decode(spec_tokens=3, acceptance="0.9,0.8")
    with pytest.raises(K3PlanError, match=r"\[0, 1\]"):
        parse_spec_decode(spec_tokens=2, acceptance="1.2")
    with pytest.raises(K3PlanError, match="--acceptance"):
        parse_spec_decode(spec_tokens=2, acceptance="high")
    with pytest.raises(K3PlanError, match="--spec-tokens 0"):
        parse_spec_decode(spec_tokens=0, acceptance="0.5")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        SpecDecode(draft_tokens=2, acceptance=(float("nan"),))
    with pytest.raises(K3PlanError, match="verify step"):
        spec_decode_speed(spec=SpecDecode(draft_tokens=1, acceptance=(0.5,)), batch=1, verify_step_s=0)
