"""Issue 10 item 3: a decode bound's bytes and FLOPs a device are typed (roofline.terms.StepBytes /
StepFlops), each term under its own name: the KV term grows with the context and nothing else does,
the routed experts' term with the batch, and the JSON keeps its key order."""

from __future__ import annotations

import pytest
from roofline_helpers import eff, setup

from k3plan.roofline.bounds import decode_bound
from k3plan.roofline.terms import StepBytes, StepFlops
from k3plan.structs import dump, fields


def test_fields_in_the_json_order():
    assert fields(StepBytes) == ("weights", "experts", "kv", "state")
    assert fields(StepFlops) == ("linear", "attention")


def test_each_term_moves_with_its_own_cause():
    s = setup()
    short = decode_bound(s, batch=1, context_tokens=4096, eff=eff())
    long = decode_bound(s, batch=1, context_tokens=8192, eff=eff())
    wide = decode_bound(s, batch=64, context_tokens=4096, eff=eff())
    a, b = short.bytes_per_device, long.bytes_per_device
    # twice the context: twice the KV read; weights, experts and the recurrent state do not move
    assert b.kv == pytest.approx(2 * a.kv, rel=1e-12) and a.kv > 0
    assert (b.weights, b.experts, b.state) == (a.weights, a.experts, a.state)
    # a larger batch touches more routed experts; the dense weights stay
    assert wide.bytes_per_device.experts > a.experts and wide.bytes_per_device.weights == a.weights
    # attention FLOPs grow with the context, linear ones do not
    assert long.flops_per_device.attention > short.flops_per_device.attention
    assert long.flops_per_device.linear == short.flops_per_device.linear
    assert a.total() == a.weights + a.experts + a.kv + a.state
    assert list(dump(short)["bytes_per_device"]) == ["weights", "experts", "kv", "state"]
