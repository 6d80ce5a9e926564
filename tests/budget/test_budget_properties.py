"""Property tests of the fit (hypothesis): the terms sum to the usable HBM; per-device weights x
devices cover the runtime weights; capacity never falls when HBM grows; more context never means
more sequences; the verdict agrees with the capacity."""

from __future__ import annotations

import dataclasses

from fit_helpers import GiB, cached_setup, run_fit
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from k3plan.structs import replace

# (model, hardware, topology, tp, ep, stack): every stack, TPUs and GPUs, TP/EP/DP splits, fallbacks.
CONFIGS = [
    ("kimi-k3", "tpu-v7x", "2x2x4", 32, None, "vllm-tpu"),
    ("kimi-k3", "tpu-v7x", "2x2x2", 16, None, "vllm-tpu"),
    ("kimi-k3", "tpu-v7x", "2x2x4", 8, None, "vllm-tpu"),
    ("kimi-k3", "tpu-v7x", "2x2x4", 8, 8, "vllm-tpu"),
    ("kimi-k3", "tpu-v7x", "2x4x4", 64, None, "vllm-tpu"),  # 96 heads over 64: fallbacks
    ("kimi-k3", "tpu-v7x", "2x2x4", 32, None, "jax-native"),
    ("kimi-k3", "tpu-v7x", "2x2x4", None, None, "dp-attention"),
    ("kimi-k3", "nvidia-b200", "2x8", None, None, "sglang"),
    ("kimi-k3", "nvidia-b200", "2x8", None, None, "dp-attention"),
    ("deepseek-v3", "nvidia-h200", "8", None, None, "vllm-tpu"),
    ("kimi-linear-48b-a3b", "tpu-v6e", "2x4", None, None, "vllm-tpu"),
]

configs = st.sampled_from(CONFIGS)
contexts = st.integers(1, 2_000_000)
batches = st.integers(1, 512)
chunks = st.one_of(st.none(), st.integers(1, 65536))
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make(cfg, **kw):
    model, hw, topo, tp, ep, stack = cfg
    return cached_setup(model=model, hardware=hw, topology=topo, tp=tp, ep=ep, stack=stack, **kw)


def with_usable(s, usable: int):
    hw = replace(
        s.hardware, usable_bytes_per_device=usable, hbm_bytes_per_device=max(usable, s.hardware.hbm_bytes_per_device)
    )
    return dataclasses.replace(s, hardware=hw)


@FAST
@given(configs, contexts, batches, chunks, st.sampled_from([None, "fp8", "fp8_ds_mla", "fp32"]))
@example(("kimi-k3", "tpu-v7x", "2x2x4", 32, None, "jax-native"), 1, 1, 53249, None)  # chunk refused, HBM free
def test_terms_sum_to_usable(cfg, context, batch, chunk, kv_dtype):
    r = run_fit(make(cfg, kv_dtype=kv_dtype), context=context, batch=batch, chunk=chunk)
    d = r.per_device
    assert (
        d.weights_bytes + d.kv_bytes + d.state_bytes + d.temp_bytes + d.reserve_bytes + d.free_bytes
    ) == r.hardware.usable_bytes_per_device
    assert min(d.weights_bytes, d.kv_bytes, d.state_bytes, d.temp_bytes, d.reserve_bytes) >= 0
    # a graph the calibration refuses (a measured OOM at or above this size) fits nowhere, whatever is free
    refused = bool(r.temp.prefill_refused or r.temp.decode_refused)
    assert r.fits == (d.free_bytes >= 0 and not refused)
    assert 0 <= d.replicated_weights_bytes <= d.weights_bytes


@settings(max_examples=len(CONFIGS) * 2, deadline=None)
@given(configs)
def test_weights_times_devices_cover_the_runtime_weights(cfg):
    r = run_fit(make(cfg))
    devices = r.hardware.devices
    assert r.per_device.weights_bytes * devices >= r.model.runtime_weight_bytes
    assert sum(e.bytes for e in r.weights_by_role) == r.per_device.weights_bytes


@FAST
@given(configs, contexts, batches, st.integers(16 * GiB, 400 * GiB), st.integers(0, 200 * GiB))
def test_capacity_never_falls_when_hbm_grows(cfg, context, batch, usable, more):
    s = make(cfg)
    small = run_fit(with_usable(s, usable), context=context, batch=batch)
    big = run_fit(with_usable(s, usable + more), context=context, batch=batch)
    assert big.capacity.max_context_tokens >= small.capacity.max_context_tokens
    assert big.capacity.max_sequences >= small.capacity.max_sequences
    assert big.per_device.free_bytes >= small.per_device.free_bytes - 1  # reserve is int(fraction x usable)
    assert big.fits or not small.fits


@FAST
@given(configs, contexts, st.integers(1, 1_000_000), batches)
def test_max_sequences_never_rises_with_context(cfg, context, more, batch):
    s = make(cfg)
    short = run_fit(s, context=context, batch=batch)
    long = run_fit(s, context=context + more, batch=batch)
    assert long.capacity.max_sequences <= short.capacity.max_sequences


@FAST
@given(configs, contexts, batches, chunks)
def test_verdict_agrees_with_capacity(cfg, context, batch, chunk):
    """It fits exactly when nothing falls back to replication (the one verdict fit and plan share,
    k3plan.step.verdict), the batch is within max_sequences and (batch 1) the context within max_context."""
    r = run_fit(make(cfg), context=context, batch=batch, chunk=chunk)
    divides = not r.replicated
    assert r.fits == (divides and r.capacity.max_sequences >= batch)
    if batch == 1:
        assert r.fits == (divides and context <= r.capacity.memory_context_tokens)  # memory, not the model max
