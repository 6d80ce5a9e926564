"""roofline.comm.comm_cost builds its CommCost (and each LinkComm) with model_construct, skipping validation on
fit's path: what it builds must be what validation would make of the same fields, type for type."""

from __future__ import annotations

import pytest

from k3plan.roofline.comm import CommCost, comm_cost
from k3plan.setup import make_setup

POINTS = [
    dict(hardware="tpu-v7x", topology="2x2x4", tp=32),  # one slice: one link
    dict(hardware="tpu-v7x", topology="2*2x2x4", tp=32),  # ICI and DCN
    dict(hardware="nvidia-h200", topology="2x8", tp=8, ep=16, stack="vllm"),  # NVLink and InfiniBand
    dict(hardware="nvidia-b200", topology="2x8", tp=8, ep=8, pp=2, stack="sglang"),  # a pipeline send
]


def _types(m) -> list:
    return [(k, type(getattr(m, k))) for k in type(m).model_fields]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p['hardware']}-{p['topology']}")
def test_constructed_comm_cost_equals_the_validated_one(point):
    c = comm_cost(make_setup(**point), tokens=32)
    v = CommCost.model_validate(c.model_dump())
    assert v == c
    assert _types(v) == _types(c)
    assert len(c.links) == len(v.links) >= 1
    for a, b in zip(c.links, v.links):
        assert a == b and _types(a) == _types(b)
    with pytest.raises(Exception):  # still frozen
        c.calls_per_step = 0  # type: ignore[misc]
