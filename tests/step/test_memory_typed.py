"""The step's memory functions return frozen typed results with named terms (issue 10 item 3), at one
point (fit: ints) and over columns (plan: one entry a configuration). Expected figures by hand
(K3: tests/step/test_golden.py's facts; DeepSeek-V3: its config.json), never from the code under test."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from k3plan.models import load_model
from k3plan.step.memory import BudgetTerms, CacheTerms, budget_terms, cache_terms
from k3plan.step.stages import bind
from k3plan.step.temporaries import DecodeTemp, PrefillTemp, TempTerm, decode_temp_terms, prefill_temp_terms

# K3 vllm-tpu: bf16 KV of 576 values a token a MLA layer, whole on every TP rank; KDA state a layer
# 96 heads x 128 x 128 f32 + conv 3 x 12288 x (4 - 1) bf16, split by heads; hybrid paging aligned to 64
KV_LAYER = 576 * 2
STATE_LAYER = 96 * 128 * 128 * 4 + 3 * 12288 * 3 * 2  # 6,512,640


@pytest.fixture(scope="module")
def k3():
    return load_model("kimi-k3").spec


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3").spec


def _cache(spec, tp):
    return cache_terms(
        spec,
        kv_layer=KV_LAYER,
        replicate_across_tp=True,
        state_layer=STATE_LAYER,
        shard_state_by_heads=True,
        align_tokens=64,
        hybrid_paging=True,
        tp=tp,
    )


def _frozen(result, field):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(result, field, 0)
    assert not hasattr(result, "__dict__")  # slots: no stray keys either


def test_cache_terms_typed_at_a_point(k3):
    c = _cache(k3, 8)
    assert isinstance(c, CacheTerms)
    state = STATE_LAYER // 8
    block = 64 * math.ceil(state / (64 * KV_LAYER))  # 64 x ceil(814,080 / 73,728) = 768
    assert (state, block) == (814_080, 768)
    assert c.kv_bytes_per_token_layer == KV_LAYER
    assert c.state_bytes_per_layer_unpadded == state
    assert c.block_tokens == block
    assert c.page_bytes == block * KV_LAYER == 884_736
    assert c.state_bytes_per_layer == 884_736  # padded up to the page
    assert c.hybrid is True
    _frozen(c, "block_tokens")


def test_cache_terms_over_columns(k3):
    c = _cache(k3, np.array([8, 16]))
    # tp 16: 6,512,640 / 16 = 407,040 a layer; 64 x ceil(407,040 / 73,728) = 384 tokens; page 442,368
    assert isinstance(c.block_tokens, np.ndarray)
    assert c.block_tokens.tolist() == [768, 384]
    assert c.state_bytes_per_layer_unpadded.tolist() == [814_080, 407_040]
    assert c.state_bytes_per_layer.tolist() == [884_736, 384 * KV_LAYER]
    _frozen(c, "page_bytes")


def test_prefill_temp_named_terms(k3):
    t = prefill_temp_terms(k3, act=2, quantized=True, tp=8, ep=64, chunk=8192, context=131072)
    assert isinstance(t, PrefillTemp)
    h, local = 96 // 8, math.ceil(896 / 64)
    assert t.residual_bytes == 2 * 8192 * 7168 * 2
    assert t.kda_projection_bytes == 5 * 8192 * h * 128 * 2
    assert t.kda_chunk_state_bytes == (8192 // 64) * h * 128 * 128 * 4
    assert t.mla_kv_bytes == 131072 * h * (128 + 64 + 128) * 2
    assert t.router_bytes == 8192 * (896 * 4 + 16 * 8)
    assert t.expert_io_bytes == math.ceil(8192 * 16 * local / 896) * (2 * 3584 + 2 * 3072) * 2
    assert t.combine_bytes == 8192 * 7168 * 4
    assert t.dequantized_experts_bytes == local * 3 * 3584 * 3072 * 2
    # the labelled view: every field in order under the label fit prints and its JSON lists
    terms = t.labelled()
    assert all(isinstance(x, TempTerm) for x in terms)
    assert [x.label for x in terms][:4] == [
        "residual stream (2 live copies)",
        "KDA q/k/v/gate projections",
        "KDA chunk states (f32)",
        "MLA up-projected K/V over the context",
    ]
    assert [x.bytes for x in terms] == [getattr(t, f.name) for f in dataclasses.fields(t)]
    assert t.total_bytes == sum(getattr(t, f.name) for f in dataclasses.fields(t))
    _frozen(t, "residual_bytes")


def test_decode_temp_without_kda_leaves_the_kda_buffer_out(dsv3):
    # DeepSeek-V3: no KDA layers; 128 MLA heads over tp 8, 256 experts over ep 8 (32 a device), top 8;
    # 16 sequences over dp 2 = 8 a group; not quantized: no dequantized copy
    t = decode_temp_terms(dsv3, act=2, quantized=False, tp=8, ep=8, dp=2, batch=16, context=4096)
    assert isinstance(t, DecodeTemp)
    b = 16 // 2
    assert t.kda_state_copy_bytes is None
    assert t.residual_bytes == 2 * b * 7168 * 2
    assert t.mla_scores_bytes == b * (128 // 8) * 4096 * 4
    assert t.logits_bytes == b * (129280 // 8) * 4
    assert t.expert_io_bytes == math.ceil(b * 8 * 32 / 256) * (2 * 7168 + 2 * 2048) * 2
    assert t.dequantized_experts_bytes == 0
    labels = [x.label for x in t.labelled()]
    assert "KDA state update copy (f32)" not in labels and len(labels) == 7
    want = 2 * b * 7168 * 2 + b * 16 * 4096 * 4 + b * 16160 * 4 + b * (256 * 4 + 8 * 8)
    want += 8 * (2 * 7168 + 2 * 2048) * 2 + b * 7168 * 4
    assert t.total_bytes == want


def test_temp_terms_over_columns_total_each_entry(k3):
    t = prefill_temp_terms(k3, act=2, quantized=False, tp=np.array([8, 96]), ep=64, chunk=1024, context=4096)
    # tp 96: one MLA and KDA head a rank
    mla = [4096 * h * 320 * 2 for h in (12, 1)]
    assert t.mla_kv_bytes.tolist() == mla
    assert isinstance(t.total_bytes, np.ndarray) and t.total_bytes.shape == (2,)
    assert (t.total_bytes[0] - t.total_bytes[1]) == (mla[0] - mla[1]) + 5 * 1024 * 11 * 128 * 2 + (
        1024 // 64
    ) * 11 * 128 * 128 * 4


def _budget(k3, cache, **kw):
    args = dict(
        usable=1_000_000,
        reserve_fraction=0.1,
        split_across_dp=True,
        dp=2,
        weights=500_000,
        temp=50_000,
        cache=cache,
        context=100,
        batch=8,
        n_mla=2,
        n_kda=3,
    )
    return budget_terms(k3, **{**args, **kw})


SMALL = CacheTerms(
    kv_bytes_per_token_layer=100,
    state_bytes_per_layer=1000,
    state_bytes_per_layer_unpadded=1000,
    block_tokens=16,
    page_bytes=1600,
    hybrid=False,
)


def test_budget_terms_typed_by_hand(k3):
    b = _budget(k3, SMALL)
    assert isinstance(b, BudgetTerms)
    kv_seq = 2 * math.ceil(100 / 16) * 16 * 100  # 2 MLA layers x 7 blocks of 16 tokens x 100 B = 22,400
    state_seq = 3 * 1000
    room = 1_000_000 - (500_000 + 50_000 + 100_000)  # reserve 10% of usable
    assert b.weights_bytes == 500_000 and b.reserve_bytes == 100_000
    assert b.sequences == 4  # 8 over 2 DP groups
    assert (b.kv_bytes, b.state_bytes) == (4 * 22_400, 4 * 3000)
    assert b.sequence_bytes == kv_seq + state_seq == 25_400
    assert b.room_bytes == room == 350_000
    assert b.free_bytes == 350_000 - 4 * 25_400
    assert b.max_sequences == (350_000 // 25_400) * 2 == 26
    assert (b.kv_bytes_per_token, b.state_bytes_per_sequence) == (200, 3000)
    assert b.stage == 0
    _frozen(b, "free_bytes")
    # the temporaries out of the reserve (SGLang's static fraction): 100,000 - 50,000 of reserve left
    r = _budget(k3, SMALL, temp_in_reserve=True)
    assert r.reserve_bytes == 50_000 and r.room_bytes == 1_000_000 - (500_000 + 50_000 + 50_000)


def test_bind_takes_the_tightest_stage_typed(k3):
    loose = _budget(k3, SMALL, weights=400_000, n_mla=1, n_kda=1)
    tight = _budget(k3, SMALL, weights=600_000, n_mla=1, n_kda=1)
    b = bind([loose, tight])
    assert isinstance(b, BudgetTerms) and b.stage == 1
    assert b.weights_bytes == 600_000 and b.free_bytes == tight.free_bytes
    # over columns: the second configuration's first stage is the tighter one
    cols = [
        _budget(k3, SMALL, weights=np.array([400_000, 600_000]), usable=np.array([1_000_000, 1_000_000])),
        _budget(k3, SMALL, weights=np.array([600_000, 400_000]), usable=np.array([1_000_000, 1_000_000])),
    ]
    bc = bind(cols)
    assert bc.stage.tolist() == [1, 0]
    assert bc.weights_bytes.tolist() == [600_000, 600_000]
