"""plan's per-configuration input columns are typed frozen containers with named fields (issue 10
item 3): the space (SpaceCols), the hardware figures (HardwareCols), the weights (WeightCols) and each
pipeline stage (StageCols). Expected values from the inputs (specs, K3's 24 MLA + 69 KDA layers,
k3-facts.md §1), not from the code under test."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from k3plan.engines.stack import load_stack
from k3plan.hardware import load_hardware
from k3plan.models import load_model
from k3plan.plan.evaluate import HardwareCols, StageCols, WeightCols, evaluate, static_columns
from k3plan.plan.space import SpaceCols, build_space
from k3plan.roofline.bounds import Efficiency


@pytest.fixture(scope="module")
def small():
    hw = load_hardware("tpu-v7x")
    space = build_space(hardware=[hw], stacks=[load_stack("vllm-tpu")], kv_dtypes=[None], chunks=[4096, 8192],
                        max_chips=32, stacks_given=True)  # fmt: skip
    model = load_model("kimi-k3")
    return hw, space, model, static_columns(space=space, model=model, eff=Efficiency())


def _frozen(cols, field):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cols, field, np.zeros(0))
    assert not hasattr(cols, "__dict__")


def test_space_columns_are_named_fields(small):
    hw, space, _, _ = small
    c = space.cols
    assert isinstance(c, SpaceCols)
    _frozen(c, "tp")
    n = space.size
    assert n > 0 and all(getattr(c, f.name).shape == (n,) for f in dataclasses.fields(c))
    devices = np.array([t.devices for t in space.topologies])[c.topo]
    assert np.all(c.pp * c.tp * c.dp == devices)
    assert np.all(np.where(c.ep_all, c.ep == c.tp * c.dp, c.ep == c.tp))
    assert set(c.chunk.tolist()) == {4096, 8192} and np.all(c.hw == 0)


def test_hardware_weight_and_stage_columns_are_named_fields(small):
    hw, space, _, (hw_cols, _, weights, _, stages) = small
    c = space.cols
    assert isinstance(hw_cols, HardwareCols) and isinstance(weights, WeightCols)
    assert all(isinstance(s, StageCols) for s in stages)
    _frozen(hw_cols, "usable")
    _frozen(weights, "weights_bytes")
    assert np.all(hw_cols.usable == hw.usable_bytes_per_device)  # one hardware: its spec's figure everywhere
    assert np.all(hw_cols.chips == np.array([t.chips for t in space.topologies])[c.topo])
    one = c.pp == 1
    assert one.any()
    # with pp 1 the one stage is the whole model: K3's 24 MLA and 69 KDA layers, layers [0, 93)
    s0 = stages[0]
    assert np.all(s0.valid)
    assert np.all(s0.n_mla[one] == 24) and np.all(s0.n_kda[one] == 69)
    assert np.all(s0.start[one] == 0) and np.all(s0.end[one] == 93)
    assert np.array_equal(s0.weights_bytes[one], weights.weights_bytes[one])


def test_evaluate_table_keeps_every_input_column_under_its_name(small):
    _, space, model, static = small
    cols = evaluate(space=space, model=model, context=131072, batch=8, eff=Efficiency(), static=static).cols
    hw_cols, _, weights, _, _ = static
    for container in (space.cols, hw_cols):
        for f in dataclasses.fields(container):
            assert getattr(cols, f.name) is getattr(container, f.name), f.name
    # the weights become the binding stage's; dense and expert sums stay the whole path's
    for name in ("dense_bytes", "expert_bytes", "dense_params", "expert_params", "fallbacks"):
        assert getattr(cols, name) is getattr(weights, name)
