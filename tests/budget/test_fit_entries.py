"""Issue 10 item 3: a fit's weights by role and its temp terms are tuples of typed entries
(budget.result.RoleBytes / TermBytes), dumped as the {name: bytes} mapping the JSON has always had."""

from __future__ import annotations

import json

import pytest

from k3plan.budget.fit import check_workload, fit
from k3plan.setup import make_setup
from k3plan.step.terms import RoleBytes, TermBytes, term_map
from k3plan.structs import dump

VOCAB, HIDDEN = 163_840, 7_168  # docs/k3-facts.md: untied embedding and lm_head, bf16


@pytest.fixture(scope="module")
def result():
    w = check_workload(context_tokens=131072, batch=1, prefill_chunk_tokens=None)
    return fit(make_setup(topology="2x4x4", tp=32), w)


def test_roles_carry_their_own_bytes(result):
    by = {e.role: e.bytes for e in result.weights_by_role}
    # the embedding and the lm_head, each vocab x hidden x 2 B, split over TP=32 (vllm-tpu shards both)
    assert by["embed"] == by["lm_head"] == VOCAB * HIDDEN * 2 // 32 == 73_400_320
    assert by["expert"] == max(by.values())  # the routed experts dominate a device's weights
    assert sum(by.values()) == result.per_device.weights_bytes


def test_the_json_is_the_mapping_in_the_same_order(result):
    d = json.loads(json.dumps(dump(result)))
    assert list(d["weights_by_role"].items()) == [(e.role, e.bytes) for e in result.weights_by_role]
    for stage in ("prefill", "decode"):
        terms = getattr(result.temp, f"{stage}_terms")
        assert list(d["temp"][f"{stage}_terms"].items()) == [(t.name, t.bytes) for t in terms]
        assert sum(t.bytes for t in terms) > 0
    assert term_map([TermBytes(name="a", bytes=1), TermBytes(name="b", bytes=2)]) == {"a": 1, "b": 2}


def test_a_role_outside_the_inventorys_is_refused():
    with pytest.raises(ValueError, match="experts"):
        RoleBytes(role="experts", bytes=1)  # the inventory's role is "expert"
