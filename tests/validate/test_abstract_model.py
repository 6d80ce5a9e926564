"""The abstract params: checkpoint shapes, runtime dtypes, shardings from the plan; the stacked
scan axis is never sharded (k3-facts.md §6). No compile here: cheap."""

from __future__ import annotations

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.setup import make_setup
from k3plan.step.structure import layer_plan


@pytest.fixture(scope="module")
def k48():
    import jax

    from k3plan.validate import abstract_model as am

    setup = make_setup(model="kimi-linear-48b-a3b", topology="2x2x1", tp=8)
    spec = setup.model.spec
    lp = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    ab, inputs = am.build(setup, jax.devices("cpu")[:8], lp, stage="decode", batch=4, tokens=1, capacity=256)
    return setup, lp, ab


def test_stacked_axis_is_replicated_and_sized_by_blocks(k48):
    import jax

    setup, lp, ab = k48
    assert lp.n_blocks >= 5
    for block in ab.params["blocks"]:
        for leaf in jax.tree.leaves(block):
            assert leaf.shape[0] == lp.n_blocks
            assert leaf.sharding.spec[0] is None


def test_abstract_weights_equal_the_budget(k48):
    setup, _, ab = k48
    budget = fit(setup, Workload(context_tokens=256, batch=4, prefill_chunk_tokens=256))
    assert ab.weights_bytes() == budget.per_device.weights_bytes


def test_mxfp4_experts_are_two_uint8_arrays(tiny_setup):
    import jax
    import jax.numpy as jnp

    from k3plan.validate import abstract_model as am

    spec = tiny_setup.model.spec
    lp = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    ab, _ = am.build(tiny_setup, jax.devices("cpu")[:8], lp, stage="prefill", batch=1, tokens=64, capacity=256)
    w1 = ab.params["prefix"][1]["block_sparse_moe.experts.{e}.w1.weight"]
    assert set(w1) == {"packed", "scale"}
    assert w1["packed"].dtype == jnp.uint8 and w1["packed"].shape == (16, 64, 64)  # [E, out, in/2]
    assert w1["scale"].shape == (16, 64, 4)  # [E, out, in/32]
    assert w1["packed"].sharding.shard_shape(w1["packed"].shape)[0] == 2  # 16 experts over 8 devices


def test_kimi_linear_48b_compiles_truncated():
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    setup = make_setup(model="kimi-linear-48b-a3b", topology="2x2x1", tp=8)
    target = parse_target("cpu")
    prepare_target(target, setup)
    jobs = plan_jobs(setup=setup, stage="decode", tokens=[64], batch=2, context=128)
    out = validate(setup=setup, target=target, jobs=jobs, layers=4)
    (r,) = out.results
    assert out.layers == 4 and r.unexplained_bytes == 0
    assert next(t for t in r.terms if t.name == "weights").delta_bytes == 0
