"""The step's collective, pipeline and decode results and plan's output table are frozen typed results
with named fields (issue 10 item 3), at one point (fit: numbers) and over columns (plan: one entry a
configuration). Expected figures by hand from K3's config (docs/k3-facts.md: hidden 7168, 93 layers of
which 92 MoE, 896 experts top-8 with a 3,584-wide routed latent), never from the code under test."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from k3plan.engines.stack import load_stack
from k3plan.hardware import load_hardware
from k3plan.models import load_model
from k3plan.plan.evaluate import evaluate
from k3plan.plan.space import build_space
from k3plan.plan.table import Evaluated, StepColumns
from k3plan.roofline.bounds import Efficiency
from k3plan.step.comm import CommTerms, comm_terms, comm_time
from k3plan.step.decode import BINDING, DecodeTerms, decode_terms
from k3plan.step.p2p import P2PTerms, p2p_terms, p2p_time

HIDDEN = 7168


@pytest.fixture(scope="module")
def k3():
    return load_model("kimi-k3").spec


def _frozen(result, field):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(result, field, 0)
    assert not hasattr(result, "__dict__")  # slots: no stray keys either


def test_p2p_terms_typed_at_a_point_and_over_columns(k3):
    # pp 2, 4 tokens of a DP group, bf16, 2 sends (hidden_states + residual), TP 8, 2 devices a chip:
    # a boundary is 2 x 4 x 7,168 x 2 B; a device sends 1/8 of it, a chip twice that, over 1 boundary
    p = p2p_terms(k3, pp=2, tokens=4, act=2, tp=8, sends=2, devices_per_chip=2)
    assert isinstance(p, P2PTerms)
    _frozen(p, "calls")
    assert (p.calls, p.bytes_per_boundary, p.bytes_per_chip) == (1, 114_688, 28_672.0)
    assert p2p_time(p, latency_s=1e-5, bw_bytes_per_s=1e9) == pytest.approx(1e-5 + 28_672 / 1e9, rel=1e-15)
    one = p2p_terms(k3, pp=1, tokens=4, act=2, tp=8)
    assert (one.calls, one.bytes_per_chip) == (0, 0.0)  # no pipeline: no sends
    cols = p2p_terms(k3, pp=np.array([1, 2, 4]), tokens=np.array([4, 4, 4]), act=2, tp=np.array([8, 8, 8]))
    assert cols.calls.tolist() == [0, 1, 3]  # pp - 1 boundaries
    assert cols.bytes_per_chip.tolist() == [0.0, 114_688 / 8, 3 * 114_688 / 8]


def test_comm_terms_typed_at_a_point(k3):
    # vllm-tpu at TP = EP = 32, one token: 93 attention all-reduces + 92 expert all-reduces + the embedding's and
    # the dense MLP's all-reduce + the argmax's 2 all-gathers (tests/step/test_ops.py has the per-op golden)
    c = comm_terms(k3, all_to_all=False, act=2, dispatch=1, tp=32, dp=1, ep=32, devices_per_chip=2, chips=16,
                   tokens=1, logits_all_gather=False)  # fmt: skip
    assert isinstance(c, CommTerms)
    _frozen(c, "calls")
    assert (c.calls, c.expert_calls) == (93 + 92 + 1 + 1 + 2, 92)
    assert c.bytes_per_token_per_layer == (HIDDEN + 3584) * 2  # the all-reduce's hidden state + routed latent, bf16
    assert c.calls == sum(o.count * o.calls for o in c.ops)
    # the all-to-all pattern: dispatch + combine of the expert input (fp8), k = 8 experts a token
    a2a = comm_terms(k3, all_to_all=True, act=2, dispatch=1, tp=32, dp=1, ep=32, devices_per_chip=2, chips=16,
                     tokens=1, logits_all_gather=False)  # fmt: skip
    assert (a2a.expert_calls, a2a.bytes_per_token_per_layer) == (2 * 92, 2 * 8 * HIDDEN * 1)
    t = comm_time(c, latency_s=1e-6, bw_bytes_per_s=1e11, scale_out_latency_s=2e-5, scale_out_bw_bytes_per_s=5e10)
    # one scale-up domain (no domain_devices): nothing on the scale-out link
    assert (c.scale_out_calls, c.scale_out_bytes_per_chip) == (0, 0)
    assert (t.latency_s, t.bandwidth_s, t.scale_out_s) == (c.calls * 1e-6, c.bytes_per_chip / 1e11, 0)


def test_decode_terms_typed_and_the_times_follow_from_the_named_terms(k3):
    kw = dict(dense_bytes=10**9, expert_bytes=8 * 10**9, dense_params=5 * 10**8, expert_params=4 * 10**9,
              kv_bytes_per_token=24 * 1152, state_bytes_per_sequence=69 * 814_080, ep=8, batch=4,
              context=8192, hbm_bw=4e12, flops=2e15, bw_efficiency=0.9, mfu=0.3, comm_s=1e-4)  # fmt: skip
    d = decode_terms(k3, tp=8, dp=1, **kw)
    assert isinstance(d, DecodeTerms)
    _frozen(d, "step_s")
    # weights read once; KV: 4 sequences x 8,192 tokens x 24 x 1,152 B; state read and written: 2 x 4 x a sequence's
    assert d.weights_bytes == 10**9
    assert d.kv_bytes == 4 * 8192 * 24 * 1152
    assert d.state_bytes == 2 * 4 * 69 * 814_080
    assert d.memory_s == (d.weights_bytes + d.experts_bytes + d.kv_bytes + d.state_bytes) / (4e12 * 0.9)
    assert d.compute_s == (d.linear_flops + d.attention_flops) / (2e15 * 0.3)
    assert d.step_s == max(d.memory_s, d.compute_s) + 1e-4
    assert BINDING[d.binding] == ("memory" if d.memory_s >= d.compute_s else "compute")
    # over columns: each field one entry a configuration, equal to the point's
    cols = decode_terms(k3, tp=np.array([8, 8]), dp=np.array([1, 1]), **kw)
    assert cols.step_s.shape == (2,) and cols.kv_bytes.tolist() == [d.kv_bytes] * 2
    assert cols.step_s.tolist() == [d.step_s] * 2 and cols.binding.tolist() == [d.binding] * 2


@pytest.fixture(scope="module")
def small():
    space = build_space(hardware=[load_hardware("tpu-v7x")], stacks=[load_stack("vllm-tpu")], kv_dtypes=[None],
                        chunks=[8192], max_chips=32, stacks_given=True)  # fmt: skip
    return space, evaluate(space=space, model=load_model("kimi-k3"), context=131072, batch=8, eff=Efficiency())


def test_evaluate_returns_a_typed_table(small):
    space, ev = small
    assert isinstance(ev, Evaluated) and isinstance(ev.cols, StepColumns)
    cols = ev.cols
    _frozen(cols, "tpot_s")
    assert all(getattr(cols, f.name).shape == (space.size,) for f in dataclasses.fields(cols))
    # the derived columns follow from the named ones (batch 8)
    np.testing.assert_array_equal(cols.temp_bytes, np.maximum(cols.prefill_temp_bytes, cols.decode_temp_bytes))
    np.testing.assert_array_equal(cols.tokens_per_s_per_chip, 8 / cols.tpot_s / cols.chips)
    np.testing.assert_array_equal(cols.tpot_s, np.maximum(cols.memory_s, cols.compute_s) + cols.comm_s)
    assert np.all(cols.pipeline_s == 0) and np.all(cols.binding_stage == 0)  # vllm-tpu on one slice: pp 1


def test_priced_sets_the_price_and_the_cost_and_nothing_else(small):
    _, ev = small
    price = np.full(ev.cols.chips.shape, 2.5)
    p = ev.cols.priced(price)
    assert p.price is price
    np.testing.assert_array_equal(p.cost_per_hour, 2.5 * ev.cols.chips)
    for f in dataclasses.fields(StepColumns):
        if f.name not in ("price", "cost_per_hour"):
            assert getattr(p, f.name) is getattr(ev.cols, f.name), f.name
