"""Golden figures per term, from arithmetic written out by hand (K3 facts: k3-facts.md §1-§3, the
torchtpu-vllm stack (was vllm-tpu): bf16 activations and KV, f32 recurrent / bf16 conv state, hybrid paging
aligned to 64 tokens, 10% reserve that the temporaries run in, experts by local all-reduce, the logits
all-gathered by vLLM's LogitsProcessor). Never from the code under test.

Point: tpu-v7x 2x4x4 (32 chips, 64 devices), tp 8, ep 64, dp 8; context 131,072; batch 64; chunk 8,192.
"""

from __future__ import annotations

import math

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.roofline.bounds import Efficiency, decode_bound
from k3plan.setup import make_setup

CONTEXT, BATCH, CHUNK = 131072, 64, 8192


@pytest.fixture(scope="module")
def setup():
    return make_setup(hardware="tpu-v7x", topology="2x4x4", tp=8, stack="torchtpu-vllm")


@pytest.fixture(scope="module")
def result(setup):
    # the analytic terms, by hand: shipped evidence off (no calibration matches 2x4x4 TP8; the shipped temp
    # model would count its band's upper end, tests/evidence/test_temp_model.py)
    return fit(setup, Workload(context_tokens=CONTEXT, batch=BATCH, prefill_chunk_tokens=CHUNK), evidence=False)


def test_split(setup):
    assert (setup.parallel.tp, setup.parallel.ep, setup.parallel.dp) == (8, 64, 8)


def test_kv_and_state_per_device(result):
    # MLA latent 512 + 64 rope dims, each padded to 128 lanes by tpu-inference (the vllm-tpu stack's
    # kv_cache.layout): 512 + 128 = 640 values x 2 B, whole on every TP rank
    kv_layer = 640 * 2
    # KDA state a layer: 96 heads x 128 x 128 f32 + conv 3 x 12288 x (4 - 1) bf16, split 8 ways by heads
    state_layer = (96 * 128 * 128 * 4 + 3 * 12288 * 3 * 2) // 8
    assert state_layer == 814_080
    # the torch_tpu plugin's own 16-token page, the KDA state apart in unpadded slots of 72 layer pages (3 KDA
    # groups of 23 over 24 layer regions: engines/torchtpu_vllm/stack.yaml paging and state)
    block = 16
    seqs = 64 // 8  # sequences split over the 8 DP groups
    kv = seqs * 24 * (131_072 // block) * block * kv_layer  # 131,072 tokens -> 8,192 whole blocks, 24 MLA layers
    state = seqs * 72 * state_layer
    d = result.per_device
    assert d.sequences == 8
    assert d.kv_bytes == kv == 32_212_254_720
    assert d.state_bytes == state == 468_910_080
    assert d.kv_bytes_per_token == 24 * 1280
    assert result.cache_layout.block_tokens == block


def test_temp_prefill(result):
    h = 96 // 8  # MLA and KDA heads a TP rank
    local = math.ceil(896 / 64)  # experts a device
    rows = math.ceil(8192 * 16 * local / 896)  # token-expert pairs a device: 2,048
    want = {
        "residual stream (2 live copies)": 2 * 8192 * 7168 * 2,
        "KDA q/k/v/gate projections": 5 * 8192 * h * 128 * 2,
        "KDA chunk states (f32)": (8192 // 64) * h * 128 * 128 * 4,
        "MLA up-projected K/V over the context": 131072 * h * (128 + 64 + 128) * 2,
        "router logits and top-k (f32)": 8192 * (896 * 4 + 16 * 8),
        "expert inputs, gate/up and outputs": rows * (2 * 3584 + 2 * 3072) * 2,
        "combine buffer (f32, before the all-reduce / all-to-all)": 8192 * 7168 * 4,
        "one layer's local experts dequantized": local * 3 * 3584 * 3072 * 2,  # mxfp4 experts, bf16 compute
    }
    assert rows == 2048
    # typed entries (budget.result.TermBytes) in the order the JSON lists them, each under its own name
    assert [(t.name, t.bytes) for t in result.temp.prefill_terms] == list(want.items())
    assert result.temp.prefill_bytes == sum(want.values())


def test_temp_decode(result):
    b, h, local = 64 // 8, 96 // 8, 14
    want = {
        "residual stream": 2 * b * 7168 * 2,
        "absorbed MLA scores (f32)": b * h * 131072 * 4,
        "logits (f32)": b * (163840 // 8) * 4,
        "KDA state update copy (f32)": b * h * 128 * 128 * 4,
        "router logits and top-k (f32)": b * (896 * 4 + 16 * 8),
        "expert inputs, gate/up and outputs": math.ceil(b * 16 * local / 896) * (2 * 3584 + 2 * 3072) * 2,
        "combine buffer (f32, before the all-reduce / all-to-all)": b * 7168 * 4,
        "one layer's local experts dequantized": local * 3 * 3584 * 3072 * 2,
    }
    assert [(t.name, t.bytes) for t in result.temp.decode_terms] == list(want.items())
    # the budget takes the larger graph (k3-facts.md §6), never the sum
    assert result.per_device.temp_bytes == max(result.temp.prefill_bytes, result.temp.decode_bytes)


def test_reserve_and_free(setup, result):
    usable = setup.hardware.usable_bytes_per_device  # an input (hardware spec), not a formula
    d = result.per_device
    # the plugin sizes its pool as 0.92 x HBM (vLLM v0.29.0's default, which it pins) - what is resident after the
    # profile run: the temporaries run in the 8% left (kowalski-4831/vllm-torchtpu
    # TPUWorker.determine_available_memory), so that is what is counted
    assert d.reserve_bytes == max(int(0.08 * usable) - d.temp_bytes, 0)
    assert d.free_bytes == usable - (d.weights_bytes + d.kv_bytes + d.state_bytes + d.temp_bytes + d.reserve_bytes)


def test_decode_collectives_and_attention(setup):
    d = decode_bound(setup, batch=BATCH, context_tokens=CONTEXT, eff=Efficiency())
    c = d.comm
    assert c.op == "all-reduce"
    assert c.attention_calls_per_step == 93  # one TP all-reduce a layer
    assert c.expert_calls_per_step == 2 * 92  # two EP all-reduces a MoE layer (layers 2..93): latent, then hidden
    dpc = 2  # tpu-v7x: two TensorCores (devices) a chip
    # torchtpu-vllm pads each DP group's 8 tokens to its compiled 16 (Stack.token_buckets), which the collectives
    # carry: 16 rows a DP group, 128 over the 8 groups
    attention = 93 * dpc * 2 * (8 - 1) / 8 * 16 * 7168 * 2  # ring over TP on a DP group's 16 padded rows
    # ring over EP on the whole (padded) batch: hidden state and routed latent (7,168 + 3,584), in two calls
    experts = 92 * dpc * 2 * (64 - 1) / 64 * 128 * (7168 + 3584) * 2
    # the embedding's and the 1 dense layer's all-reduce over TP, as attention's; vLLM's LogitsProcessor
    # all-gathers the LM head's [8 rows, vocab / 8] bf16 once (each device sends 7 shards): the real rows
    edges = 2 * dpc * 2 * (8 - 1) / 8 * 16 * 7168 * 2 + dpc * (8 - 1) * (64 // 8) * (163840 // 8) * 2
    assert c.calls_per_step == 93 + 2 * 92 + 2 + 1
    assert c.bytes_per_chip_per_step == pytest.approx(attention + experts + edges, rel=1e-12)
    # absorbed MLA 2 x 2 x heads x kv_lora x context a layer a token, KDA 3 x 2 x heads x d^2 a layer,
    # heads split 8 ways, 8 sequences a device
    attn = 8 * (2 * 2 * 24 * 96 * 512 * 131072 + 3 * 2 * 69 * 96 * 128 * 128) / 8
    assert d.flops_per_device.attention == pytest.approx(attn, rel=1e-12)
    # bytes: KV read = 8 sequences x 131,072 tokens x 24 layers x 1,280 B (the padded entry); state read + written
    assert d.bytes_per_device.kv == 8 * 131072 * 24 * 1280
    assert d.bytes_per_device.state == 2 * 8 * 69 * 814_080  # a step reads and writes the 69 layers' slots
