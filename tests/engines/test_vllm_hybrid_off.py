"""vLLM's --disable-hybrid-kv-cache-manager and the native CPU KV offload's switch, as k3plan reads them
(k3plan/engines/vllm/serve.py read_hybrid_off, read_offload_env), and the "GPU KV cache size" line by release
(k3plan/engines/vllm/memory.py TOKENS_BY_CONCURRENCY_FROM)."""

from __future__ import annotations

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.engines.vllm.memory import Figure, vllm_kv_pool
from k3plan.errors import K3PlanError

V4 = "vllm serve deepseek-ai/DeepSeek-V4-Pro --enable-expert-parallel --data-parallel-size 8 --block-size 256"


def test_v4_with_the_manager_off_is_priced_where_the_conversion_was_read():
    q = parse_serve(f"{V4} --disable-hybrid-kv-cache-manager", platform="gpu", release=(0, 20, 0))
    assert q.hybrid_kv_off and any("--disable-hybrid-kv-cache-manager" in c for c in q.caveats)
    with pytest.raises(K3PlanError, match="0.20.0-0.26.0") as err:
        parse_serve(f"{V4} --disable-hybrid-kv-cache-manager", platform="gpu", release=(0, 28, 0))
    assert "\n" not in str(err.value)


def test_the_manager_on_and_a_uniform_model_change_nothing():
    on = parse_serve(f"{V4} --no-disable-hybrid-kv-cache-manager", platform="gpu", release=(0, 20, 0))
    assert not on.hybrid_kv_off and "--no-disable-hybrid-kv-cache-manager" in on.ignored
    r1 = parse_serve(
        "vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8 --disable-hybrid-kv-cache-manager",
        platform="gpu",
        release=(0, 20, 0),
    )
    assert not r1.hybrid_kv_off and "--disable-hybrid-kv-cache-manager" in r1.ignored


def test_kda_with_the_manager_off_is_the_engine_s_error():
    with pytest.raises(K3PlanError, match="failed to convert the KV cache specs to one unified type"):
        parse_serve(
            "vllm serve moonshotai/Kimi-K3 -tp 8 --enable-expert-parallel --disable-hybrid-kv-cache-manager",
            platform="gpu",
            release=(0, 25, 0),
        )


def test_the_simple_offload_switch_is_listed_with_the_offload_as_a_caveat():
    cmd = f"VLLM_USE_SIMPLE_KV_OFFLOAD=1 {V4} --kv-offloading-size 2200 --disable-hybrid-kv-cache-manager"
    q = parse_serve(cmd, platform="gpu", release=(0, 20, 0))
    assert "VLLM_USE_SIMPLE_KV_OFFLOAD=1" in q.ignored and "--kv-offloading-size" in q.ignored
    assert any("SimpleCPUOffloadConnector" in c for c in q.caveats)
    with pytest.raises(K3PlanError, match="kv-offloading-size"):
        parse_serve(f"{V4} --kv-offloading-size 2200", platform="gpu", release=(0, 34, 0))


def _pool(*, by_concurrency: bool):
    """A hybrid pool of 1 attention + 3 state groups (Kimi-K3's shape) at 1,048,576 tokens in 1,472-token blocks."""
    return vllm_kv_pool(
        engine="vllm",
        utilization=0.9,
        visible_bytes=100 * 2**30,
        weights_bytes=50 * 2**30,
        activation_bytes=Figure(0, "t"),
        non_torch_bytes=Figure(0, "t"),
        visible_source="t",
        page_bytes=847_872,
        block_tokens=1472,
        block_source="t",
        n_attention=24,
        n_state=69,
        max_model_len=1_048_576,
        worker_source="t",
        tokens_by_concurrency=by_concurrency,
    )


def test_the_logged_tokens_follow_the_release_s_form():
    """vllm 0.20.0 wheel _report_kv_cache_config: num_blocks // len(groups) x min block; from the 0.20.1 wheel
    int(max_concurrency x max_model_len)."""
    old, new = _pool(by_concurrency=False), _pool(by_concurrency=True)
    blocks = old.num_blocks.value
    assert old.kv_pool_tokens.value == blocks // 4 * 1472
    per_request = -(-1_048_576 // 1472) + 3
    assert new.kv_pool_tokens.value == int(blocks / per_request * 1_048_576)


def test_before_0_21_the_native_offload_needs_the_manager_off_or_the_simple_connector():
    """vllm 0.20.0 wheel: the HMA rules run before the offload's kv_transfer_config exists, and OffloadingConnector is
    not SupportsHMA (it is from 0.21.0); SimpleCPUOffloadConnector is."""
    with pytest.raises(K3PlanError, match="does not support HMA"):
        parse_serve(f"{V4} --kv-offloading-size 2200", platform="gpu", release=(0, 20, 0))
    ok = parse_serve(f"VLLM_USE_SIMPLE_KV_OFFLOAD=1 {V4} --kv-offloading-size 2200", platform="gpu", release=(0, 20, 0))
    assert "--kv-offloading-size" in ok.ignored
    later = parse_serve(f"{V4} --kv-offloading-size 2200", platform="gpu", release=(0, 26, 0))
    assert "--kv-offloading-size" in later.ignored
