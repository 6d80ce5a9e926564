"""resolve() works out one ShardSpec per distinct tensor (role, kind, shapes, axes) and shares it
across layers; every tensor must still get exactly what the rules give it alone, and every
fallback must name its own tensor."""

from __future__ import annotations

import pytest

from k3plan.setup import make_setup
from k3plan.sharding.resolve import rules_for, spec_from_rules


@pytest.mark.parametrize(
    "hardware, topology, tp, stack",
    [
        ("tpu-v7x", "2x2x4", 32, "vllm-tpu"),  # heads divide
        ("tpu-v7x", "4x4x4", 64, "vllm-tpu"),  # 96 heads over tp=64: fallbacks in every layer
        ("nvidia-b200", "8", 8, "sglang"),
    ],
)
def test_each_tensor_gets_what_the_rules_give_it_alone(hardware, topology, tp, stack):
    s = make_setup(hardware=hardware, topology=topology, tp=tp, stack=stack)
    sh = s.stack.sharding
    expected_fallbacks = []
    for t in s.model.inventory.text:
        spec, fb = spec_from_rules(t, rules_for(t, sh.rules, sh.role_overrides), s.plan.mesh)
        assert s.plan.specs[t.name] == spec, t.name
        expected_fallbacks.extend(fb)
    assert list(s.plan.fallbacks) == expected_fallbacks
    if tp == 64:  # the case exists: fallbacks, one per layer's tensor, each naming its own tensor
        names = [f.tensor for f in s.plan.fallbacks]
        assert len(names) > 10 and len(set(names)) == len(names)
