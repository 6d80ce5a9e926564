"""vLLM's DeepSeek-V4 KV groups (k3plan.engines.vllm.dsv4_pages) against figures the engine's own people logged.

Each expected number below is copied from the public thread named beside it, never computed by the code under test.
"""

from __future__ import annotations

import pytest

from k3plan.engines.vllm.dsv4_pages import dsv4_pages
from k3plan.models.loader import load_model


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash").spec.dsv4


@pytest.fixture(scope="module")
def pro():
    return load_model("deepseek-v4-pro").spec.dsv4


def test_flash_has_vllm_s_five_groups_and_tuple_bytes(flash):
    """vllm-project/vllm#52495 (comment of 2026-08-24, a startup dump of DeepSeek-V4-Flash, fp8_ds_mla, block 256):
    'num_groups=5, layer_tuple_bytes=47808'; #51163: the groups' block sizes are 256 (compressed), 64 (window),
    8 and 4 (the C128 and C4 compressor states)."""
    p = dsv4_pages(flash, block_tokens=256)
    assert len(p.groups) == 5
    assert p.layer_tuple_bytes == 47808
    assert sorted({g.block_tokens for g in p.groups}) == [4, 8, 64, 256]


def test_pro_block_matches_the_packed_layout_s_logged_stride(pro):
    """vllm-project/vllm#48993 (description): DeepSeek-V4-Pro DEP8 on GB200, FlashMLA fp8_ds_mla, the baseline
    'physical block stride ... 1,473,408' bytes (before that PR's dense packing)."""
    assert dsv4_pages(pro, block_tokens=256).block_bytes == 1473408


def test_windowed_groups_charge_the_in_flight_tokens_at_their_block(flash):
    """vllm-project/vllm#52495 (description, H20, block 256, 16,384 tokens in flight): the compressor-state groups
    charge 'cdiv(16384, 4) = 4099 pages' and 'cdiv(16384, 8) = 2065 pages' a request."""
    p = dsv4_pages(flash, block_tokens=256)
    got = {
        g.block_tokens: g.pages_per_request(max_model_len=1_048_576, max_num_batched_tokens=16384)
        for g in p.groups
        if g.window
    }
    assert got[4] == 4099 and got[8] == 2065


def test_the_compressed_group_holds_the_context_in_whole_blocks(flash):
    p = dsv4_pages(flash, block_tokens=256)
    (full,) = [g for g in p.groups if not g.window]
    assert full.pages_per_request(max_model_len=1_048_576, max_num_batched_tokens=8192) == 1_048_576 // 256


def test_auto_fit_takes_the_longest_length_whose_request_fits(flash):
    """--max-model-len auto on V4 (vLLM _estimate_max_model_len_from_groups): the longest length whose blocks, at
    the start check's bytes a block, fit the pool -- the inverse of the check, one token short failing."""
    from k3plan.engines.vllm.memory import dsv4_longest_fit

    p = dsv4_pages(flash, block_tokens=256)
    need = p.blocks_per_request(max_model_len=300_000, max_num_batched_tokens=8192) * p.check_block_bytes
    assert dsv4_longest_fit(p, available=need, max_model_len=1_048_576, chunk=8192) >= 300_000
    assert dsv4_longest_fit(p, available=need - 1, max_model_len=1_048_576, chunk=8192) < 300_000
    assert dsv4_longest_fit(p, available=10**15, max_model_len=1_048_576, chunk=8192) == 1_048_576


def test_a_refused_start_s_one_request_and_its_longest_length(flash):
    """yhfgyyf/vllm-deepseek-v4-sm89#54 (2026-08-07, an SM89 fork of upstream vLLM, 4x 48 GB RTX 4090, TP 4,
    DeepSeek-V4-Flash, fp8_ds_mla, --block-size 256, --max-model-len 131072, --max-num-seqs 16, no
    --max-num-batched-tokens: vLLM's default 2,048 for a device under 70 GiB, engines/vllm/serve.py): 'To serve at
    least one request with the model's max seq len (131072), (1.34 GiB KV cache is needed, which is larger than the
    available KV cache memory (0.3 GiB). Based on the available memory, the estimated maximum model length is 720.'
    The log rounds to 0.01 GiB: 0.3 is 0.295-0.305 GiB, whose longest lengths are 720-744."""
    from k3plan.engines.vllm.memory import dsv4_longest_fit
    from k3plan.units import GiB

    p = dsv4_pages(flash, block_tokens=256)
    need = p.blocks_per_request(max_model_len=131072, max_num_batched_tokens=2048) * p.check_block_bytes
    assert round(need / GiB, 2) == 1.34
    lo = dsv4_longest_fit(p, available=int(0.295 * GiB), max_model_len=131072, chunk=2048)
    hi = dsv4_longest_fit(p, available=int(0.305 * GiB) - 1, max_model_len=131072, chunk=2048)
    assert lo <= 720 <= hi
    # the default chunk decides it: at the 8,192 tokens of a >= 70 GiB device the log's figure is not reproduced
    big = p.blocks_per_request(max_model_len=131072, max_num_batched_tokens=8192) * p.check_block_bytes
    assert round(big / GiB, 2) != 1.34


def test_the_llm_class_s_larger_default_chunk_in_a_refused_start(flash):
    """vllm-project/vllm#44376 (comment of 2026-06-03, vLLM v0.22, 2x GH200 96 GB, DeepSeek-V4-Flash through the
    Python API: LLM(tensor_parallel_size=2, enable_expert_parallel=True, max_model_len=30_000, kv_cache_dtype='fp8',
    block_size=256, gpu_memory_utilization=0.95), no max_num_batched_tokens): 'To serve at least one request with
    the model's max seq len (30000), (6.66 GiB KV cache is needed, which is larger than the available KV cache memory
    (5.44 GiB). Based on the available memory, the estimated maximum model length is 13528.' LLM() is
    UsageContext.LLM_CLASS, whose default on a device of >= 70 GiB is 16,384 batched tokens, twice `vllm serve`'s
    (vllm/engine/arg_utils.py EngineArgs._set_default_args, read in yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2); the
    windowed groups charge them a request. 5.44 is 5.435-5.445 GiB as logged."""
    from k3plan.engines.vllm.memory import dsv4_longest_fit
    from k3plan.units import GiB

    p = dsv4_pages(flash, block_tokens=256)
    need = p.blocks_per_request(max_model_len=30000, max_num_batched_tokens=16384) * p.check_block_bytes
    assert round(need / GiB, 2) == 6.66
    lo = dsv4_longest_fit(p, available=int(5.435 * GiB), max_model_len=30000, chunk=16384)
    hi = dsv4_longest_fit(p, available=int(5.445 * GiB) - 1, max_model_len=30000, chunk=16384)
    assert lo <= 13528 <= hi


def test_the_v4_profile_run_workspace_is_the_larger_reservation_of_one_buffer():
    """engines/vllm/dsv4_workspace.py at DeepSeek-V4-Flash, 912,128 tokens, 8,192-token chunks (vllm#51041's point):
    the CSA indexer's gather (40 x 912,128 // 4 keys of 128 fp8 + 4 B) outweighs FlashMLA's bf16 prefill
    reservation (4 x (228,032 + 128 + 8,192) x 512 x 2 B); the buffer holds the larger, not the sum."""
    from k3plan.engines.vllm.dsv4_workspace import dsv4_profile_workspace
    from k3plan.models.loader import load_model

    d = load_model("deepseek-v4-flash").spec.dsv4
    ws, logits, how = dsv4_profile_workspace(d, max_model_len=912_128, max_num_batched_tokens=8192)
    t = 40 * 912_128 // 4
    assert ws == -(-t * 128 // 256) * 256 + -(-t * 4 // 256) * 256 + 2**20
    assert ws > 4 * (228_032 + 128 + 8192) * 512 * 2 and logits == 512 * 2**20
    short, _, _ = dsv4_profile_workspace(d, max_model_len=121_344, max_num_batched_tokens=8192)
    assert short < ws / 6 and "e18fe932" in how  # sized by max_model_len


def test_the_v4_workspace_is_in_the_activation_on_cuda_only(cli):
    import json

    cmd = "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 4 --kv-cache-dtype fp8 --block-size 256"
    nv = json.loads(cli("fit", "-H", "nvidia-h200", "-t", "1x4", "--serve", cmd, "--json").stdout)["engine"]
    amd = json.loads(cli("fit", "-H", "amd-mi355x", "-t", "4", "--serve", cmd, "--json").stdout)["engine"]
    assert "profile-run workspace" in nv["sources"]["activation"]
    assert "profile-run workspace" not in amd["sources"]["activation"]  # ROCm's V4 attention reserves its own
