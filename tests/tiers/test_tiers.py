"""Memory tiers: the spec block, sessions a tier holds, restore vs recompute, prefix cache, offload."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware
from k3plan.hardware.schema import MemoryTiersFile
from k3plan.setup import make_setup
from k3plan.specfile import convert
from k3plan.tiers.model import Tier, memory_tiers, offload_tier
from k3plan.tiers.sessions import (
    offload_cost,
    prefix_cache_ttft,
    restore_s,
    session_tiers,
    stored_session_bytes,
    suspended_sessions,
)


def test_spec_blocks_parse_with_sources():
    v7x = {t.name: t for t in memory_tiers(load_hardware("tpu-v7x"))}
    assert set(v7x) == {"host_dram", "remote"}  # the 4-chip VM lists no local SSD
    assert v7x["host_dram"].size_bytes_per_host == 960 * 10**9
    assert v7x["remote"].size_bytes_per_host is None
    assert v7x["remote"].bw_bytes_per_s_per_host == 400e9 / 8  # 100 Gb/s a chip x 4 chips, in bytes
    for name in ("nvidia-h200", "nvidia-b200"):
        tiers = {t.name: t for t in memory_tiers(load_hardware(name))}
        assert tiers["host_dram"].size_bytes_per_host == 2 * 10**12
        assert tiers["local_ssd"].size_bytes_per_host == 8 * 3_840_000_000_000
        assert tiers["host_dram"].bw_bytes_per_s_per_host == 512e9  # 8 GPUs x 64 GB/s
        assert all(t.source for t in tiers.values())
    assert memory_tiers(load_hardware("amd-mi300x")) == ()  # no block: no tiers, not a guess


def test_schema_is_strict():
    with pytest.raises(K3PlanError, match="unknown key 'host_ram'"):
        convert(MemoryTiersFile, {"host_ram": {"bw_to_hbm_per_host": {"value": "1GB/s", "source": "x"}}}, "hw")
    with pytest.raises(K3PlanError, match="host_dram.bw_to_hbm_per_host.source: must not be empty"):
        convert(MemoryTiersFile, {"host_dram": {"bw_to_hbm_per_host": {"value": "1GB/s", "source": " "}}}, "hw")


def test_offload_choice():
    hw = load_hardware("tpu-v7x")
    assert offload_tier(hw, "host").name == "host_dram"
    with pytest.raises(K3PlanError, match="no local_ssd tier"):
        offload_tier(hw, "ssd")
    with pytest.raises(K3PlanError, match="expected one of host, ssd, remote"):
        offload_tier(hw, "tape")


def test_k3_on_v7x_2x2x4_by_hand():
    s = make_setup(topology="2x2x4", tp=32)  # vllm-tpu: bf16 KV, f32 recurrent + bf16 conv state
    # stored: 24 MLA layers x 640 values (tpu-inference pads 512 + 64 to 512 + 128) x 2 B = 30,720 B a token
    #   x 131,072 = 4,026,531,840 + state 69 KDA layers x (96x128x128 x 4 B + 3x3x12288 x 2 B) = 69 x 6,512,640
    #   = 449,372,160
    stored = stored_session_bytes(spec=s.model.spec, stack=s.stack, context_tokens=131072)
    assert stored == 30720 * 131072 + 69 * (96 * 128 * 128 * 4 + 9 * 12288 * 2) == 4_475_904_000
    rows = {r.tier: r for r in session_tiers(s, context_tokens=131072, prefill_s_per_token=1e-5)}
    # host DRAM: 960 GB x 4 hosts = 3.84e12 B / 4,475,904,000 = 857.9 -> 857 sessions
    assert rows["host_dram"].sessions_held == 857
    # per device (the plugin's 16-token pages and unpadded state slots, latent whole on every TP rank): KV 24 x
    # 131,072 x 1,280 B = 4,026,531,840; state 72 layer pages (3 KDA groups of 23 over 24 regions) x 203,520 =
    # 14,653,440; 8 devices a host x 4,041,185,280 = 32,329,482,240 B / 256e9 B/s = 0.12629 s
    assert rows["host_dram"].restore_s == pytest.approx(8 * (4_026_531_840 + 14_653_440) / 256e9)
    assert rows["remote"].sessions_held is None
    assert rows["remote"].restore_s == pytest.approx(8 * 4_041_185_280 / 50e9)  # 0.6466 s
    assert rows["host_dram"].recompute_s == pytest.approx(1.31072)  # 131,072 tokens x 10 us


def test_restore_with_latency():
    t = Tier(name="local_ssd", size_bytes_per_host=10**12, bw_bytes_per_s_per_host=50e9, latency_s=1e-4, source="x")
    # 2 GB a device x 4 devices a host = 8 GB / 50 GB/s = 0.16 s + 0.1 ms
    assert restore_s(t, bytes_per_device=2 * 10**9, devices_per_host=4) == pytest.approx(0.1601)
    rows = suspended_sessions(
        tiers=(t,),
        hosts=2,
        devices_per_host=4,
        stored_bytes_per_session=3 * 10**9,
        hbm_bytes_per_session_per_device=2 * 10**9,
        context_tokens=1000,
    )
    assert rows[0].capacity_bytes == 2 * 10**12 and rows[0].sessions_held == 666  # 2e12 / 3e9 = 666.7


def test_prefix_cache_by_hand():
    # 10,000-token prompt, 60% cached in HBM, 20 us a token of prefill: cold 0.2 s, warm 4,000 x 20 us = 0.08 s
    e = prefix_cache_ttft(prompt_tokens=10000, hit_rate=0.6, prefill_s_per_token=20e-6)
    assert e.cached_tokens == 6000
    assert (e.ttft_cold_s, e.ttft_s, e.saved_s) == pytest.approx((0.2, 0.08, 0.12))
    # the cached part comes from host DRAM at 2 us a token: + 6,000 x 2 us = 0.012 s
    assert prefix_cache_ttft(
        prompt_tokens=10000, hit_rate=0.6, prefill_s_per_token=20e-6, load_s_per_token=2e-6
    ).saved_s == pytest.approx(0.108)
    with pytest.raises(K3PlanError, match="hit rate 1.5"):
        prefix_cache_ttft(prompt_tokens=10, hit_rate=1.5, prefill_s_per_token=1e-5)


def test_offload_cost_by_hand():
    t = Tier(name="host_dram", size_bytes_per_host=960 * 10**9, bw_bytes_per_s_per_host=256e9, source="x")
    c = offload_cost(
        tier=t,
        hosts=4,
        devices_per_host=8,
        stored_bytes_per_session=4 * 10**9,
        hbm_bytes_per_session_per_device=3 * 10**9,
        context_tokens=100000,
        prefill_s_per_token=20e-6,
    )
    # restore 8 x 3e9 / 256e9 = 0.09375 s; recompute 100,000 x 20 us = 2 s: offload is cheaper
    assert c.ttft_added_s == pytest.approx(0.09375) and c.recompute_s == pytest.approx(2.0)
    assert c.cheaper_than_recompute is True
    assert c.hbm_freed_bytes_per_device == 3 * 10**9 and c.sessions_held == 960  # 3.84e12 / 4e9
