"""vLLM 0.34.0's start as its wheel (PyPI) sizes it: the extensible KV cache's measured pool and its two start checks
(engines/vllm/extensible.py), gated on fit --engine-version 0.34.0; 0.33.0 keeps the estimate-based pool."""

from __future__ import annotations

import json
import math

import pytest

from k3plan.engines.vllm import extensible as ext
from k3plan.engines.vllm.memory import Figure, vllm_kv_pool
from k3plan.units import GiB

R1 = "vllm serve deepseek-ai/DeepSeek-R1-0528 --tensor-parallel-size 8 --max-model-len 32768"


def _engine(cli, serve: str, version: str, hw: str = "nvidia-h200") -> dict:
    r = cli("fit", "-H", hw, "-t", "8", "--serve", serve, "--engine-version", version, "--json")
    assert r.exit_code in (0, 1), r.output
    d = json.loads(r.stdout)
    return d.get("engine") or d


def test_the_constants_are_the_wheels():
    """vllm 0.34.0 wheel (PyPI): vllm/v1/worker/extensible_kv_cache.py KV_CACHE_MARGIN_FLOOR_BYTES = (3 if ROCm else 1)
    << 30, KV_CACHE_MARGIN_FRACTION = 0.75, KV_CACHE_NON_TORCH_RESERVE_BYTES = (2 if ROCm else 1) << 29;
    vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE 64 (16 in 0.33.0), resolved_gpu_memory_utilization 1.0 under
    the extensible cache and DEFAULT_GPU_MEMORY_UTILIZATION 0.92 without."""
    assert ext.MARGIN_FLOOR_BYTES == {"cuda": GiB, "rocm": 3 * GiB}
    assert ext.MARGIN_FRACTION == 0.75
    assert ext.NON_TORCH_RESERVE_BYTES == {"cuda": GiB // 2, "rocm": GiB}
    assert (ext.DEFAULT_BLOCK_SIZE, ext.DEFAULT_BLOCK_SIZE_BEFORE) == (64, 16)
    assert (ext.DEFAULT_UTILIZATION, ext.DEFAULT_UTILIZATION_ESTIMATE) == (1.0, 0.92)
    assert ext.EXTENSIBLE_FROM == (0, 34, 0)
    assert (ext.platform_of("amd"), ext.platform_of("nvidia")) == ("rocm", "cuda")


def test_measure_kv_cache_bytes_term_for_term():
    """measure_kv_cache_bytes: non_kv_used = init_free - free - committed, headroom = free + committed, margin =
    max(floor, int(0.75 x peak)), min(requested - non_kv_used, headroom - margin) - max(peak, growth), at least 0."""
    init_free, free, committed = 80 * GiB, 30 * GiB, 2 * GiB
    peak = 4 * GiB
    non_kv = init_free - free - committed
    headroom = free + committed
    margin = max(GiB, int(peak * 0.75))
    # a budget of the whole device: the headroom less the margin binds
    got = ext.measure_kv_cache_bytes(
        init_free_memory=init_free,
        free_memory=free,
        committed_bytes=committed,
        requested_memory=81 * GiB,
        transient_peak_bytes=peak,
    )
    assert got == min(81 * GiB - non_kv, headroom - margin) - peak == headroom - margin - peak
    # an explicit budget under it binds instead, the margin not taken from it
    got = ext.measure_kv_cache_bytes(
        init_free_memory=init_free,
        free_memory=free,
        committed_bytes=committed,
        requested_memory=60 * GiB,
        transient_peak_bytes=peak,
    )
    assert got == 60 * GiB - non_kv - peak
    # torch's reservation growth kept instead of the peak where larger; ROCm's 3 GiB floor; never below 0
    assert (
        ext.measure_kv_cache_bytes(
            init_free_memory=init_free,
            free_memory=free,
            committed_bytes=committed,
            requested_memory=81 * GiB,
            transient_peak_bytes=peak,
            torch_reserve_growth_bytes=5 * GiB,
        )
        == headroom - margin - 5 * GiB
    )
    assert ext.margin_bytes(GiB, platform="rocm") == 3 * GiB and ext.margin_bytes(8 * GiB) == 6 * GiB
    assert (
        ext.measure_kv_cache_bytes(
            init_free_memory=init_free, free_memory=GiB, committed_bytes=0, requested_memory=81 * GiB
        )
        == 0
    )


def _pool(**kw):
    base = dict(
        engine="vllm",
        utilization=1.0,
        visible_bytes=100 * GiB,
        weights_bytes=60 * GiB,
        activation_bytes=Figure(2 * GiB, "peak"),
        non_torch_bytes=Figure(3 * GiB, "graphs"),
        visible_source="test",
        page_bytes=2**20,
        block_tokens=64,
        block_source="test",
        n_attention=1,
        n_state=0,
        max_model_len=64 * 1024,
        worker_source="test",
        extensible_platform="cuda",
    )
    base.update(kw)
    return vllm_kv_pool(**base)


def test_the_pool_and_both_start_checks():
    """The capacity (requested - weights - peak, no graph estimate) is checked before warmup, the measured blocks
    (less the null block) after: a length between them passes the first and fails the second, with the after-warmup
    hint and the place it is raised."""
    v, w, g, t = 100 * GiB, 60 * GiB, 3 * GiB, 2 * GiB
    s = _pool()
    measured = min(v - (w + g), v - (w + g) - ext.margin_bytes(t)) - t
    assert s.kv_pool_bytes.value == measured and s.num_blocks.value == measured // 2**20 and s.starts
    capacity = math.ceil(v * 1.0) - w - t
    # a request of exactly capacity - the null block fits the first check, not the measured one
    tokens = (capacity // 2**20 - 1) * 64
    s = _pool(max_model_len=tokens)
    assert not s.starts and s.raised_at == ext.MEASURED_CHECK_AT
    assert "CUDA graphs and warmup" in s.message and "already takes all device memory" in s.message
    # one block longer fails before warmup, on the capacity
    s = _pool(max_model_len=tokens + 64)
    assert not s.starts and s.raised_at == ext.CAPACITY_CHECK_AT and "the model and its activations;" in s.message
    # under an explicit utilization the hint names it; nothing left: 'No available memory'
    s = _pool(utilization=0.5)
    assert not s.starts and "No available memory for the cache blocks" in s.message and "=0.5;" in s.message


def test_0_34_against_0_33_the_same_command(cli):
    """DeepSeek-R1 at TP 8 on an H200, no --gpu-memory-utilization: 0.34.0's pool is the device's visible bytes less
    the weights, the profile peak, the graphs and the margin (max(1 GiB, 0.75 x peak)); 0.33.0's (as k3plan reads its
    stack: int(0.92 x visible), its default from 0.20.0, less the same, no margin): larger by visible -
    int(0.92 x visible) - the margin, the same weights and peak; the block 16 at 0.33.0 (FLASH_ATTN_MLA keeps the
    default 16), 64 at 0.34.0 (its default)."""
    old, new = _engine(cli, R1, "0.33.0"), _engine(cli, R1, "0.34.0")
    assert old["weights_bytes"] == new["weights_bytes"]
    # the same bytes held beside the weights; 0.34.0 counts the MoE workspace the profile run leaves allocated as
    # resident (its measurement after warmup), not in the transient peak it keeps free (engines/vllm/moe_workspace.py)
    assert old["activation_bytes"] + old["non_torch_bytes"] == new["activation_bytes"] + new["non_torch_bytes"]
    assert new["activation_bytes"] < old["activation_bytes"]
    # the block: FLASH_ATTN_MLA's preferred at each release's CacheConfig.DEFAULT_BLOCK_SIZE (engines/vllm/mla_block.py)
    assert (old["block_tokens"], new["block_tokens"]) == (16, 64)
    v = round(139.80 * GiB)  # the H200's visible bytes k3plan reads (engines/vllm/memory.py ENGINE_VISIBLE_HBM)
    margin = ext.margin_bytes(new["activation_bytes"])
    assert new["kv_pool_bytes"] - old["kv_pool_bytes"] == v - int(v * 0.92) - margin > 0
    assert new["starts"] and "extensible KV cache" in new["sources"]["kv_pool"]
    assert "0.34.0" in new["unpriced"] and "0.34.0" not in old["unpriced"]
    # an explicit 0.9 under 0.34.0: the requested bound (0.9 x visible, rounded up) binds, not the margin
    pinned = _engine(cli, R1 + " --gpu-memory-utilization 0.9", "0.34.0")
    old9 = _engine(cli, R1 + " --gpu-memory-utilization 0.9", "0.33.0")
    assert pinned["kv_pool_bytes"] == old9["kv_pool_bytes"] + math.ceil(v * 0.9) - int(v * 0.9)


def test_a_context_that_does_not_fit_at_0_34(cli):
    """R1's full 163,840-token context under --gpu-memory-utilization 0.6: the capacity check refuses it before warmup,
    in 0.34.0's words; 0.33.0's check refuses it in its own."""
    cmd = R1.replace("32768", "163840") + " --gpu-memory-utilization 0.6"
    new, old = _engine(cli, cmd, "0.34.0"), _engine(cli, cmd, "0.33.0")
    assert not new["starts"] and not old["starts"]
    assert new["raised_at"] == ext.CAPACITY_CHECK_AT and "model's max seq len (163840)" in new["message"]
    assert "`gpu_memory_utilization`=0.6" in new["message"]


@pytest.mark.parametrize("flag", ["--kv-cache-memory-bytes 20000000000"])
def test_what_turns_the_cache_off_and_is_priced_as_before(cli, flag):
    """--kv-cache-memory-bytes turns the extensible cache off (VllmConfig._resolve_extensible_kv_cache) and the pool
    is the bytes given, as in 0.33.0."""
    new = _engine(cli, f"{R1} {flag}", "0.34.0")
    assert new["kv_pool_bytes"] == 20_000_000_000 and "0.34.0" not in new["unpriced"]


def test_the_64_token_default_leaves_the_blocks_k3plan_prices():
    """AttentionBackend.get_preferred_block_size (the default where supported, else the smallest) over the 0.34.0
    wheel's kernel blocks: FlashMLA [64], FlashInfer MLA [32, 64] (32 under 0.33.0's 16 default, 64 now), CUTLASS MLA
    [128], DeepSeek-V4.1's sparse MLA [128] on SM100 / [64] on SM90 (engines/vllm/dsv4_pages.py V41_DEFAULT_BLOCK /
    V41_DEFAULT_BLOCK_SM90); a hybrid MLA model aligns to max(kernel, block, 128), so K3's block is unmoved."""
    from k3plan.engines.vllm.dsv4_pages import V41_DEFAULT_BLOCK, V41_DEFAULT_BLOCK_SM90

    for default in (ext.DEFAULT_BLOCK_SIZE_BEFORE, ext.DEFAULT_BLOCK_SIZE):
        assert ext.preferred_block(default, (64,)) == 64
        assert ext.preferred_block(default, (128,)) == 128 == V41_DEFAULT_BLOCK
        assert ext.preferred_block(default, (64,)) == V41_DEFAULT_BLOCK_SM90
        assert ext.hybrid_mla_alignment(default, 16) == 128
    assert ext.preferred_block(16, (32, 64)) == 32 and ext.preferred_block(64, (32, 64)) == 64
    assert (
        ext.preferred_block(16, (-16,)) == 16 and ext.preferred_block(64, (-16,)) == 64
    )  # FlashAttention MultipleOf(16)


def test_rocm_keeps_the_3_gib_floor(cli):
    """On an MI355X (ROCm) the margin's floor is 3 GiB (KV_CACHE_MARGIN_FLOOR_BYTES): 0.34.0's pool is the visible
    bytes less the weights, graphs, margin and peak, larger than 0.33.0's int(0.92 x visible) less the same by
    visible - int(0.92 x visible) - the margin."""
    cmd = "vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8 --max-model-len 32768"
    old, new = _engine(cli, cmd, "0.33.0", "amd-mi355x"), _engine(cli, cmd, "0.34.0", "amd-mi355x")
    margin = ext.margin_bytes(new["activation_bytes"], platform="rocm")
    assert margin >= 3 * GiB
    v = new["kv_pool_bytes"] + new["weights_bytes"] + new["non_torch_bytes"] + margin + new["activation_bytes"]
    # 0.34.0 holds the MoE workspace resident and keeps the larger of the sampler's tensors and the forward's other
    # temporaries (k3plan's, smaller than the workspace here, so whole) free: more than 0.33.0's single peak by this;
    # since session 49 the forward's MLA term is the profile run's own tensor (engines/vllm/mla_workspace.py: 65,536
    # rows x 16 heads x 256 x 2 B), larger than the budget's 32,768-token context term (x 320 values) it replaces
    mla_growth = (65_536 * 16 * 256 - 32_768 * 16 * 320) * 2
    moved = new["activation_bytes"] + new["non_torch_bytes"] - old["activation_bytes"]
    assert 0 <= moved < 0.1 * GiB + mla_growth
    assert new["kv_pool_bytes"] - old["kv_pool_bytes"] == v - int(v * 0.92) - margin - moved


def test_auto_fit_leaves_the_null_block():
    """--max-model-len auto under the extensible cache: the length is fitted again after warmup on (blocks - 1) x a
    block (finalize_extensible_kv_cache), so the fitted request passes the measured check."""
    s = _pool(max_model_len=1 << 30, auto_max_model_len=True)
    blocks = s.num_blocks.value
    assert s.starts and s.max_model_len == (blocks - 1) * 64
