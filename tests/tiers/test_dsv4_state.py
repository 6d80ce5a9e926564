"""DeepSeek-V4's parked-session options (k3plan/tiers/dsv4_state.py): blocks persist, the rest is a choice."""

from __future__ import annotations

import pytest

from k3plan.models import load_model
from k3plan.step import dsv4_cache
from k3plan.tiers.dsv4_state import parked_options, replay_tokens

M = 1 << 20


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash").spec


def test_replay_is_bounded_by_the_window_and_the_tails(flash):
    assert replay_tokens(flash, M) == 128  # a block boundary: the window alone
    assert replay_tokens(flash, M + 100) == 128  # the HCA tail (100) fits in the window's 128
    assert replay_tokens(flash, 6) == 6  # a short session: all of it
    assert replay_tokens(flash, 3) == 3


def test_options_order_bytes_against_replay(flash):
    store, checkpoint, replay = parked_options(flash, M + 100)
    classical = dsv4_cache.classical_bytes(flash, M + 100)
    assert store.stored_bytes == classical + dsv4_cache.state_bytes(flash) and store.replay_tokens == 0
    assert replay.stored_bytes == classical and replay.replay_tokens == 128
    assert replay.stored_bytes < checkpoint.stored_bytes < store.stored_bytes
    assert checkpoint.replay_tokens == 100
    # at 1M the state is under 0.4% of what a parked Flash session stores
    assert dsv4_cache.state_bytes(flash) / store.stored_bytes < 0.004
