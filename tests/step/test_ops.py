"""The step as a list of ops (k3plan/step/ops.py): golden per-op numbers for K3 from arithmetic written
out here (k3-facts: 96 MLA/KDA heads, q_lora 1536, kv_lora 512, rope 64, nope/v 128, hidden 7168, 896
experts top-16, expert_in 3584 x 3072, 24 MLA + 69 KDA layers, 92 MoE + 1 dense MLP), and a property
test that the op sums equal the step terms as they were written by hand before the ops existed."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3plan.engines.stack import load_stack
from k3plan.models import load_model
from k3plan.roofline.bounds import Efficiency, decode_bound
from k3plan.setup import make_setup
from k3plan.step.collective import Collective, ring_bytes_per_chip
from k3plan.step.comm import comm_terms
from k3plan.step.decode import decode_terms
from k3plan.step.opcost import OpCost
from k3plan.step.ops import (
    by_category,
    collective_ops,
    decode_ops,
    prefill_ops,
    tensor_groups,
    to_op_costs,
    weight_groups_of_setup,
)
from k3plan.step.weights import mesh_weight_groups, mesh_weights, tensor_classes
from k3plan.step.work import (
    attention_decode_flops_per_token,
    attention_prefill_flops_per_token,
)
from k3plan.structs import replace

CONTEXT = 131072


@pytest.fixture(scope="module")
def setup():
    return make_setup(hardware="tpu-v7x", topology="2x2x4", tp=32, stack="vllm-tpu")  # 32 devices: tp 32, dp 1


@pytest.fixture(scope="module")
def bound(setup):
    return decode_bound(setup, batch=1, context_tokens=CONTEXT, eff=Efficiency())


@pytest.fixture(scope="module")
def ops(setup):
    from k3plan.step.cache import cache_layout

    lay = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel)
    return {
        op.name: op
        for op in decode_ops(
            setup.model.spec,
            weights=weight_groups_of_setup(setup),
            kv_bytes_per_token=lay.kv_bytes_per_token,
            state_bytes_per_sequence=lay.state_bytes_per_slot,
            tp=32,
            seqs=1,
            ep_tokens=1,
            touched=896 * (1 - (1 - 16 / 896)),
            context=CONTEXT,
        )
    }


def test_the_op_list_covers_the_inventory(setup, ops):
    text = setup.model.inventory.text
    weight_ops = [o for o in ops.values() if o.tensor is not None]
    assert sum(o.count for o in weight_ops) == len(text) - 1  # every tensor once but the embedding (a gather)
    by_kind = {}
    for o in ops.values():
        by_kind[(o.layer_kind, o.kind)] = by_kind.get((o.layer_kind, o.kind), 0) + 1
    # MLA layer: q_a, q_b, kv_a, kv_b, g, o projections + absorbed attention
    assert by_kind[("mla", "matmul")] == 6 and by_kind[("mla", "attention")] == 1
    # KDA layer: q/k/v/g/o, f_a, f_b, b projections, 3 short convolutions, the recurrence
    assert by_kind[("kda", "matmul")] == 8 and by_kind[("kda", "conv")] == 3 and by_kind[("kda", "kda_decode")] == 1
    # MoE layer: router, latent down/up, shared gate/up/down; routed w1, w2, w3
    assert by_kind[("moe", "matmul")] == 6 and by_kind[("moe", "grouped_matmul")] == 3
    assert by_kind[("dense", "matmul")] == 3 and by_kind[("global", "matmul")] == 1  # dense MLP; lm_head


def test_golden_q_b_proj(ops):
    q = ops["mla.self_attn.q_b_proj"]
    # [96 heads x (128 nope + 64 rope), q_lora 1536] bf16, heads split 32 ways; one token: 2 FLOPs a MAC
    assert q.count == 24 and q.kind == "matmul"
    assert q.bytes_read == 96 * 192 * 1536 * 2 / 32 == 1_769_472
    assert q.flops == 2 * 1 * 96 * 192 * 1536 / 32 == 1_769_472


def test_golden_experts_and_attention(ops):
    w1 = ops["moe.block_sparse_moe.experts.w1"]
    # torchtpu-vllm holds MXFP4 as 4 bits + one fp32 scale per 32 values (its W4AN MXFP4 method widens the
    # E8M0 scales at load) = 20/32 B a param; 896 x 3072 x 3584 over 32 devices
    params = 896 * 3072 * 3584 // 32
    assert w1.count == 92 and w1.params == params == 308_281_344
    # one token touches k = 16 of 896 experts
    assert w1.bytes_read == pytest.approx(params * 20 / 32 * 16 / 896, rel=1e-12)
    assert w1.flops == pytest.approx(2 * 16 / 896 * params, rel=1e-12)
    mla = ops["mla.absorbed_attention"]
    # latent + rope, each padded to 128 lanes (the MLA v2 entry, torchtpu-vllm kv_cache.layout), bf16, whole a rank
    assert mla.count == 24 and mla.bytes_read == CONTEXT * (512 + 128) * 2
    assert mla.flops == 2 * 2 * 96 * 512 * CONTEXT / 32
    kda = ops["kda.recurrence"]
    # state 96 x 128 x 128 f32 + conv 3 x 12288 x 3 bf16 over 32 = 203,520 B, the plugin's unpadded slot (its
    # per-layer layout keeps the state apart from the 16-token pages: engines/torchtpu_vllm/stack.yaml paging)
    assert (96 * 128 * 128 * 4 + 3 * 12288 * 3 * 2) // 32 == 203_520
    assert kda.count == 69 and kda.bytes_read == kda.bytes_written == 203_520
    assert kda.flops == 3 * 2 * 96 * 128 * 128 / 32


def test_golden_collectives_are_what_roofline_prints(setup, bound, cli):
    ops = collective_ops(
        setup.model.spec,
        all_to_all=False,
        act=2,
        dispatch=1,
        tp=32,
        dp=1,
        ep=32,
        devices_per_chip=2,
        chips=16,
        tokens=1,
        logits_all_gather=True,
        latent_calls=2,
    )
    calls = {o.name: o.count * o.calls for o in ops}
    # torchtpu-vllm: one attention all-reduce a layer (93 layers, TP 32) + two expert all-reduces a MoE layer (92:
    # the routed latent before its norm, then the shared expert's output -- vLLM's MoERunner, issue 38)
    # + the embedding's all-reduce + the 1 dense layer's down_proj all-reduce + vLLM's LogitsProcessor
    # all-gather of the LM head's [1, vocab / 32]
    assert calls == {
        "attention.all_reduce": 93,
        "embed.all_reduce": 1,
        "dense_mlp.all_reduce": 1,
        "logits.gather": 1,
        "moe.dispatch": 0,
        "moe.combine": 0,
        "moe.all_gather": 0,
        "moe.reduce_scatter": 0,
        "moe.all_reduce": 2 * 92,
    }
    assert {o.collective for o in ops if o.calls} == {Collective.ALL_REDUCE, Collective.ALL_GATHER}
    assert bound.comm.calls_per_step == 93 + 2 * 92 + 1 + 1 + 1 == 280 and bound.comm.expert_calls_per_step == 184
    # at 8K context: 2x2x4 torchtpu-vllm (was vllm-tpu) no longer holds a 128K sequence beside its compiled temps, and
    # the collectives a decode step makes do not depend on the context
    r = cli("roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--verbose")
    assert r.exit_code == 0, r.output
    assert "280 calls (184 all-reduce)" in r.stdout
    # torchtpu-vllm pads the step's 1 token to its compiled 16 (Stack.token_buckets: tpu_platform.py
    # _get_token_paddings, min 16): 16 rows' hidden state, 7,168 x 2 B, ring all-reduced over 32 devices, 2
    # devices a chip; the MoE's two calls carry the routed latent (3,584 x 2 B) and the hidden state apart
    wire = 16 * 2 * 2 * 31 / 32 * 7168 * 2
    moe_wire = 16 * 2 * 2 * 31 / 32 * (7168 + 3584) * 2
    assert wire == 16 * 55_552 and moe_wire == 16 * 83_328
    # the logits: 1 call of the one real token's [vocab / 32] bf16 (sampled at the real rows), ring all-gathered (each device sends 31 shards), 2 devices
    # a chip
    logits = 2 * 31 * (163840 // 32) * 2
    assert logits == 634_880
    assert bound.comm.bytes_per_chip_per_step == pytest.approx(95 * wire + 92 * moe_wire + logits, rel=1e-12)


def test_decode_terms_are_sums_over_the_ops(bound, ops):
    b = by_category(list(ops.values()), "bytes")
    assert dict(bound.bytes_per_device.items()) == pytest.approx(b, rel=1e-12)
    f = by_category(list(ops.values()), "flops", key="flops_category")
    assert dict(bound.flops_per_device.items()) == pytest.approx(f, rel=1e-12)


def test_to_op_costs(ops, setup):
    coll = collective_ops(
        setup.model.spec,
        all_to_all=False,
        act=2,
        dispatch=1,
        tp=32,
        dp=1,
        ep=32,
        devices_per_chip=2,
        chips=16,
        tokens=1,
        logits_all_gather=False,
    )
    costs = to_op_costs(list(ops.values()) + coll)
    assert all(isinstance(c, OpCost) for c in costs)
    assert len(costs) == len(ops) + 5  # the two all-to-all ops an all-reduce stack does not issue are left out
    q = next(c for c in costs if c.name == "mla.self_attn.q_b_proj")
    # one token x 1,536 (q_lora, the input) x 18,432 / 32 = 576 outputs a device
    assert (q.kind, q.m, q.n, q.k, q.count, q.bytes) == ("matmul", 1, 576, 1536, 24, 1_769_472)
    ar = next(c for c in costs if c.name == "moe.all_reduce")
    # one token's hidden state and routed latent, bf16: (7,168 + 3,584) x 2
    assert (ar.collective, ar.calls, ar.count, ar.group, ar.message_bytes) == ("all-reduce", 1, 92, 32, 21504)
    emb = next(c for c in costs if c.name == "embed.all_reduce")  # one token's 7,168 x bf16 hidden state
    assert (emb.collective, emb.calls, emb.count, emb.group, emb.message_bytes) == ("all-reduce", 1, 1, 32, 14336)
    lg = next(c for c in costs if c.name == "logits.gather")  # a token's max (f32) and its index (s32)
    assert (lg.collective, lg.calls, lg.count, lg.group, lg.message_bytes) == ("all-gather", 2, 1, 32, 4)


def test_expected_time_of_the_collectives_has_the_roofline_comm_time_as_its_ceiling(setup, bound):
    from k3plan.speed.expected import expected_time
    from k3plan.speed.peaks import Peaks

    coll = collective_ops(
        setup.model.spec,
        all_to_all=False,
        act=2,
        dispatch=1,
        tp=32,
        dp=1,
        ep=32,
        devices_per_chip=2,
        chips=16,
        tokens=16,
        sequences=1,
        logits_all_gather=True,  # 16: padded
        latent_calls=2,
    )  # torchtpu-vllm: the latent and the hidden output reduced apart
    t = expected_time(to_op_costs(coll), peaks=Peaks.from_hardware(setup.hardware), curves=None)
    assert t.by_kind.collectives.ceiling_s == pytest.approx(bound.comm.time_s, rel=1e-9)


def test_prefill_chunk_over_the_whole_prompt_is_the_roofline_per_token_work():
    model = load_model("kimi-k3")
    spec, prompt = model.spec, 8192
    one = np.array([1])
    groups = mesh_weight_groups(
        inventory=model.inventory, stack=load_stack("torchtpu-vllm"), tp=one, dp=one, ep_all=np.array([False])
    )
    ops = prefill_ops(
        spec,
        weights=groups,
        kv_bytes_per_token=24 * 1152,
        state_bytes_per_sequence=69 * 7,
        tp=1,
        chunk=prompt,
        ep_tokens=prompt,
        touched=896.0,
        context=prompt,
    )
    f = by_category(ops, "flops", key="flops_category")
    assert float(f["linear"][0]) / prompt == pytest.approx(2 * model.inventory.active_params, abs=2)
    assert f["attention"] == pytest.approx(attention_prefill_flops_per_token(spec, prompt) * prompt, rel=1e-12)


# -- property: the op sums equal the hand-written step terms (as they were before the ops) ------------

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@functools.cache
def k3():
    return load_model("kimi-k3")


def reference_decode(
    spec, *, dense_bytes, expert_bytes, dense_params, expert_params, kv, state, tp, dp, ep, batch, context
):
    """decode_terms as written per family before the op list (issue 10's first helper)."""
    moe = spec.moe
    seqs = -(-batch // dp)
    ep_tokens = np.minimum(batch, seqs * np.maximum(1, ep // tp))
    touched = moe.num_experts * (1 - (1 - moe.top_k / moe.num_experts) ** ep_tokens)
    nbytes = {
        "weights": dense_bytes,
        "experts": expert_bytes * touched / moe.num_experts,
        "kv": seqs * context * kv,
        "state": 2 * seqs * state,
    }
    split = np.where(spec.mla.heads % tp == 0, tp, 1)
    nflops = {
        "linear": 2 * moe.top_k / moe.num_experts * ep_tokens * expert_params + 2 * seqs * dense_params,
        "attention": seqs * attention_decode_flops_per_token(spec, context) / split,
    }
    return nbytes, nflops


def reference_comm(spec, *, a2a, act, dispatch, tp, dp, ep, dpc, chips, tokens, gather):
    moe = spec.moe
    # attention o_proj (93 layers) + the embedding + the dense layer's down_proj: all-reduces over TP
    att_calls = np.where(tp > 1, spec.num_layers, 0)
    hidden = -(-tokens // dp) * spec.hidden_size * act
    att_bytes = att_calls * ring_bytes_per_chip(tp, hidden, dpc)
    edge_calls = np.where(tp > 1, 1 + 1, 0)
    edge_bytes = edge_calls * ring_bytes_per_chip(tp, hidden, dpc)
    # logits: all-gather of a DP group's [tokens, vocab / TP] (1 call), or the argmax's 2 calls of 4 B a token;
    # ring all-gather: a device sends tp - 1 shards
    shard = np.where(gather, -(-tokens // dp) * -(-spec.vocab_size // tp) * act, -(-tokens // dp) * 4)
    logit_calls = np.where(tp > 1, np.where(gather, 1, 2), 0)
    logit_bytes = logit_calls * dpc * (tp - 1) * shard
    exp_calls = np.where(a2a, 2 * spec.n_moe, np.where(ep > 1, spec.n_moe, 0))
    # the MoE all-reduce: a token's hidden state and (K3's LatentMoE) its routed latent, one call
    exp_bytes = np.where(
        a2a,
        tokens * 2 * moe.top_k * moe.expert_in * dispatch * spec.n_moe / chips,
        spec.n_moe * ring_bytes_per_chip(ep, tokens * (spec.hidden_size + 3584) * act, dpc),
    )
    return att_calls + edge_calls + logit_calls + exp_calls, att_bytes + edge_bytes + logit_bytes + exp_bytes


splits = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), st.sampled_from([1, 2, 4, 8]), st.booleans(), st.booleans()),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(
    splits=splits,
    batch=st.integers(1, 512),
    context=st.integers(1, 1 << 20),
    stack=st.sampled_from(["vllm-tpu", "sglang", "jax-native"]),
)
def test_op_sums_equal_the_step_terms(splits, batch, context, stack):
    model, s = k3(), load_stack(stack)
    spec = model.spec
    tp = np.array([x[0] for x in splits])
    dp = np.array([x[1] for x in splits])
    ep_all = np.array([x[2] for x in splits])
    a2a = np.array([x[3] for x in splits])
    ep = np.where(ep_all, tp * dp, tp)
    mw = mesh_weights(classes=tensor_classes(model.inventory), stack=s, tp=tp, dp=dp, ep_all=ep_all)
    groups = mesh_weight_groups(inventory=model.inventory, stack=s, tp=tp, dp=dp, ep_all=ep_all)
    kv, state = 24 * 1152, 69 * 814_080
    common = {
        "kv_bytes_per_token": kv,
        "state_bytes_per_sequence": state,
        "tp": tp,
        "dp": dp,
        "ep": ep,
        "batch": batch,
        "context": context,
        "hbm_bw": 1e12,
        "flops": 1e15,
        "bw_efficiency": 1.0,
        "mfu": 0.3,
        "comm_s": 0.0,
    }
    sums = {
        "dense_bytes": mw.dense_bytes,
        "expert_bytes": mw.expert_bytes,
        "dense_params": mw.dense_params,
        "expert_params": mw.expert_params,
    }
    by_group = decode_terms(spec, **sums, **common, weights=groups)  # one op a tensor group
    by_sum = decode_terms(spec, **sums, **common)  # plan's columns: one op a sum
    want_b, want_f = reference_decode(
        spec, **sums, kv=kv, state=state, tp=tp, dp=dp, ep=ep, batch=batch, context=context
    )
    for got in (by_group, by_sum):
        for k in want_b:
            np.testing.assert_allclose(getattr(got, f"{k}_bytes"), want_b[k], rtol=1e-12)
        for k in want_f:
            np.testing.assert_allclose(getattr(got, f"{k}_flops"), want_f[k], rtol=1e-12)
    gather = np.array([s.logits.gather == "all_gather"] * len(splits))
    c = comm_terms(
        spec,
        all_to_all=a2a,
        act=2,
        dispatch=1,
        tp=tp,
        dp=dp,
        ep=ep,
        devices_per_chip=2,
        chips=np.maximum(tp * dp // 2, 1),
        tokens=batch,
        logits_all_gather=gather,
    )
    calls, nbytes = reference_comm(
        spec,
        a2a=a2a,
        act=2,
        dispatch=1,
        tp=tp,
        dp=dp,
        ep=ep,
        dpc=2,
        chips=np.maximum(tp * dp // 2, 1),
        tokens=batch,
        gather=gather,
    )
    np.testing.assert_array_equal(c.calls, calls)
    np.testing.assert_allclose(c.bytes_per_chip, nbytes, rtol=1e-12)


def test_tensor_groups_refine_the_classes():
    inv = k3().inventory
    assert sum(n for _, _, n in tensor_groups(inv)) == len(inv.text) == sum(c.count for c in tensor_classes(inv))


def test_kda_recurrence_splits_by_its_own_heads():
    """KDA heads 64, MLA heads 96 at TP 64: the KDA state splits 64 ways, MLA attention stays whole."""
    spec = k3().spec
    spec = replace(spec, kda=replace(spec.kda, heads=64))
    ops = {
        o.name: o
        for o in decode_ops(
            spec,
            weights=[],
            kv_bytes_per_token=24 * 1152,
            state_bytes_per_sequence=69 * 1000,
            tp=64,
            seqs=1,
            ep_tokens=1,
            touched=16.0,
            context=1000,
        )
    }
    assert ops["kda.recurrence"].flops == 3 * 2 * 64 * 128 * 128 / 64
    assert ops["mla.absorbed_attention"].flops == 2 * 2 * 96 * 512 * 1000  # 96 % 64 != 0: every rank all heads
