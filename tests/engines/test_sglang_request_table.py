"""SGLang's request table (engines/sglang/memory.py REQ_TABLE_SOURCE): ReqToTokenPool's int32 (size, context_len + 4)
tensor, allocated with the KV pool out of the 1 - mem_fraction_static share, in the releases read (0.4.2-0.5.8); what
separates a log's "Load weight end. avail mem" less the pool from its "Memory pool end. avail mem"."""

from __future__ import annotations

from k3plan.engines.sglang.memory import sglang_kv_pool, sglang_request_table
from k3plan.units import GiB


def test_the_default_size_and_the_extra_row_by_release():
    # sgl-project/sglang#4161 (sglang 0.4.3, R1 at TP 16, no --max-running-requests): its log's
    # "max_total_num_tokens=201681 ... max_running_requests=2049, context_len=163840" -- min(max(int(201,681 /
    # 163,840 x 512), 2048), 4096) = 2,048 requests + 1 row (0.4.3 wheel, ModelRunner.init_memory_pool)
    got = sglang_request_table(release=(0, 4, 3), max_running_requests=None, profiled_tokens=201_681, context_len=163_840)
    assert got is not None and got[0] == 2_049 * 163_844 * 4
    # 0.4.5 with --max-running-requests 48 (sglang-5372's command): 49 rows of 65,536 + 4
    got = sglang_request_table(release=(0, 4, 5), max_running_requests=48, profiled_tokens=172_158, context_len=65_536)
    assert got is not None and got[0] == 49 * 65_540 * 4
    # 0.5.8 (model_runner_kv_cache_mixin.py: size = max_num_reqs): Kimi-K2.5's 2,454,421 tokens at 262,144 -> 4,096
    got = sglang_request_table(release=(0, 5, 8), max_running_requests=None, profiled_tokens=2_454_421, context_len=262_144)
    assert got is not None and got[0] == 4_096 * 262_148 * 4
    # not read: the configurator era and a command read at no release
    assert sglang_request_table(release=(0, 5, 15), max_running_requests=None, profiled_tokens=1, context_len=8) is None
    assert sglang_request_table(release=None, max_running_requests=None, profiled_tokens=1, context_len=8) is None


def test_a_share_below_the_request_table_does_not_start():
    # 1 GiB of share (0.99 of 100 GiB) against 4,097 x 163,844 x 4 B = 2.50 GiB of table: the torch OOM after the pool
    kw = dict(
        visible_bytes=100 * GiB,
        visible_source="test",
        weights_bytes=10 * GiB,
        state_pool_bytes=0,
        state_source="",
        kv_bytes_per_token=70_272,
        max_model_len=163_840,
        max_running_requests=None,
        release=(0, 4, 5),
    )
    tight = sglang_kv_pool(mem_fraction_static=0.99, **kw)
    assert not tight.starts and "request table (ReqToTokenPool)" in tight.message
    loose = sglang_kv_pool(mem_fraction_static=0.9, **kw)
    assert loose.starts and loose.free_after_pool_bytes is not None
    # 0.9: 80 GiB of pool, 1,222,329 tokens -> int(1,222,329 / 163,840 x 512) = 3,819 requests + 1 row; the start
    # clears its check by the share less the table (the pool's own margin is far larger)
    table = 3_820 * 163_844 * 4
    assert loose.check_margin_bytes == (100 * GiB - int(0.9 * 100 * GiB)) - table
