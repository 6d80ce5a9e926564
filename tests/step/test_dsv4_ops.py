"""DeepSeek-V4's step ops (k3plan/step/dsv4_ops.py) against the cache's own figures (step/dsv4_cache)."""

from __future__ import annotations

import pytest

from k3plan.models import load_model
from k3plan.step import dsv4_cache, dsv4_ops
from k3plan.step.ops import by_category, decode_ops, weight_groups
from k3plan.step.work import attention_decode_flops_per_token, attention_linear_crossover_tokens

M = 1 << 20


@pytest.fixture(scope="module", params=["deepseek-v4-flash", "deepseek-v4-pro"])
def model(request):
    return load_model(request.param)


def test_decode_reads_what_dsv4_cache_says(model):
    spec = model.spec
    ops = dsv4_ops.decode_ops(spec, seqs=3, context=M, tp=1)
    kv = sum(op.count * op.bytes_read for op in ops if op.category == "kv")
    assert kv == 3 * dsv4_cache.decode_read(spec, M).total
    names = {op.name for op in ops}
    assert {"dsv4.indexer", "dsv4.csa_attention", "dsv4.hca_attention", "dsv4.mhc", "dsv4.hash_route"} <= names


def test_decode_flops_match_the_roofline_formula(model):
    spec = model.spec
    ops = dsv4_ops.decode_ops(spec, seqs=1, context=M, tp=1)
    flops = sum(op.count * op.flops for op in ops if op.flops_category == "attention")
    assert flops == pytest.approx(attention_decode_flops_per_token(spec, M))


def test_prefill_one_chunk_is_the_mean_position(model):
    """Below 4 x top-k every term is linear in the position: one chunk of the whole prompt = its mean."""
    spec = model.spec
    prompt = 2048
    ops = dsv4_ops.prefill_ops(spec, chunk=prompt, context=prompt, tp=1)
    flops = sum(op.count * op.flops for op in ops if op.flops_category == "attention")
    assert flops == pytest.approx(prompt * dsv4_ops.attention_flops_at(spec, (prompt + 1) / 2))


def test_tid2eid_is_a_gather_not_a_matmul(model):
    from k3plan.engines.stack import load_stack

    groups = weight_groups(model.inventory, load_stack("vllm"))
    ops = decode_ops(
        model.spec,
        weights=groups,
        kv_bytes_per_token=0,
        state_bytes_per_sequence=0,
        tp=1,
        seqs=1,
        ep_tokens=1,
        touched=model.spec.moe.top_k,
        context=4096,
    )
    assert not any("tid2eid" in op.name for op in ops)
    hash_op = next(op for op in ops if op.name == "dsv4.hash_route")
    assert hash_op.count == 3 and hash_op.bytes_read == model.spec.moe.top_k * 8
    assert "mla.absorbed_attention" not in {op.name for op in ops}
    assert by_category(ops, "bytes")["kv"] == dsv4_cache.decode_read(model.spec, 4096).total


def test_attention_overtakes_linear_far_later_than_mla(model):
    spec, inv = model.spec, model.inventory
    x = attention_linear_crossover_tokens(spec, inv.active_params)
    v3 = load_model("deepseek-v3")
    assert x is not None and x > 20 * attention_linear_crossover_tokens(v3.spec, v3.inventory.active_params)
