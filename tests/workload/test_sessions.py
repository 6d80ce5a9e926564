"""Multi-turn sessions: context growth with carried reasoning, worked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k3plan.errors import K3PlanError
from k3plan.structs import replace
from k3plan.workload.sessions import Session, session_growth, turns_that_fit

# S = 2,000 system, U = 500 user, A = 700 answer, R = 4,000 reasoning, T = 300 tool tokens a turn
K3_LIKE = Session(
    turns=8,
    system_prompt_tokens=2000,
    user_tokens_per_turn=500,
    answer_tokens_per_turn=700,
    reasoning_tokens_per_turn=4000,
    tool_tokens_per_turn=300,
)


def test_carried_reasoning_by_hand():
    g = session_growth(K3_LIKE)
    # carried a turn C = 500 + 700 + 300 + 4000 = 5,500
    # prompt at turn t = 2000 + (t-1) 5500 + 500: 2,500, 8,000, 13,500
    assert g.prompt_tokens[:3] == (2500, 8000, 13500)
    # peak at turn t = 2000 + t 5500 (the turn's own reasoning included): 7,500, 13,000, ... 46,000 at turn 8
    assert g.peak_context_tokens == (7500, 13000, 18500, 24000, 29500, 35000, 40500, 46000)
    # visible = 2000 + t (500 + 700): 2000 + 9600 = 11,600 at turn 8; 46,000 / 11,600 = 3.966
    assert g.visible_context_tokens[-1] == 11600
    assert g.growth_over_visible == pytest.approx(46000 / 11600)


def test_dropped_reasoning_by_hand():
    g = session_growth(replace(K3_LIKE, carry_reasoning=False))
    # C = 500 + 700 + 300 = 1,500; peak at t = 2000 + (t-1) 1500 + 1500 + 4000: 7,500 then +1,500 a turn
    assert g.peak_context_tokens[:3] == (7500, 9000, 10500)
    assert g.peak_context_tokens[-1] == 2000 + 7 * 1500 + 5500  # 18,000


def test_turn_that_stops_fitting_by_hand():
    # max 30,000: peaks 7,500 ... 29,500 (turn 5) fit, 35,000 (turn 6) does not
    g = session_growth(K3_LIKE, max_context_tokens=30000)
    assert g.turns_fitting == 5 and g.first_turn_not_fitting == 6
    assert turns_that_fit(K3_LIKE, max_context_tokens=30000) == 5  # 1 + (30000 - 7500) // 5500 = 1 + 4
    # exactly on the edge: 29,500 fits
    assert session_growth(K3_LIKE, max_context_tokens=29500).first_turn_not_fitting == 6
    assert session_growth(K3_LIKE, max_context_tokens=29499).first_turn_not_fitting == 5
    # everything fits: no failing turn; the first turn alone too big: turn 1
    assert session_growth(K3_LIKE, max_context_tokens=10**6).first_turn_not_fitting is None
    assert session_growth(K3_LIKE, max_context_tokens=7499).first_turn_not_fitting == 1
    assert turns_that_fit(K3_LIKE, max_context_tokens=7499) == 0


@given(
    turns=st.integers(1, 40),
    s=st.integers(0, 5000),
    u=st.integers(0, 3000),
    a=st.integers(0, 3000),
    r=st.integers(0, 20000),
    t=st.integers(0, 2000),
    carry=st.booleans(),
    cap=st.integers(1, 400_000),
)
def test_closed_form_agrees_with_the_columns(turns, s, u, a, r, t, carry, cap):
    sess = Session(
        turns=turns,
        system_prompt_tokens=s,
        user_tokens_per_turn=u,
        answer_tokens_per_turn=a,
        reasoning_tokens_per_turn=r,
        tool_tokens_per_turn=t,
        carry_reasoning=carry,
    )
    g = session_growth(sess, max_context_tokens=cap)
    assert g.turns_fitting == min(turns, turns_that_fit(sess, max_context_tokens=cap))
    assert all(b >= a_ for a_, b in zip(g.peak_context_tokens, g.peak_context_tokens[1:]))  # never shrinks


def test_bad_input():
    with pytest.raises(ValueError, match="turns 0: expected a positive integer"):
        Session(turns=0, user_tokens_per_turn=1, answer_tokens_per_turn=1)
    with pytest.raises(ValueError, match="user_tokens_per_turn -1: expected a non-negative integer"):
        Session(turns=2, user_tokens_per_turn=-1, answer_tokens_per_turn=1)
    with pytest.raises(K3PlanError, match="max context 0"):
        session_growth(K3_LIKE, max_context_tokens=0)
