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


@pytest.mark.parametrize("release", [(0, 27, 0), (0, 29, 0), (0, 31, 0)])
def test_from_0_27_the_windowed_pages_are_not_padded_and_a_block_is_the_largest_group(pro, release):
    """vLLM 0.27.0 ('The packed block planner overlays groups, so their page sizes do not need to match'): the
    windowed pages keep their own sizes, and a block costs the largest group's pages summed (0.27.0
    _get_packed_kv_cache_layout, 0.29.0 _get_kv_cache_bytes_per_block); before, each windowed page was padded to a
    compressed-group page size."""
    old = dsv4_pages(pro, block_tokens=256)
    new = dsv4_pages(pro, block_tokens=256, release=release)
    comp = set(new.groups[0].pages)
    windowed = {p for g in new.groups[1:] for p in g.pages}
    assert windowed - comp  # some windowed page (a compressor state's) is smaller than any compressed page it'd take
    assert {p for g in old.groups[1:] for p in g.pages} <= set(old.groups[0].pages)
    assert new.block_bytes == max(sum(g.pages) for g in new.groups) < old.block_bytes
    # the check: the tuple count x the compressed page sizes to 0.28.0, the pool's block and one null block after
    if release >= (0, 29, 0):
        assert new.check_block_bytes == new.check_reserve_bytes == new.block_bytes
    else:
        assert new.check_block_bytes == old.check_block_bytes and new.check_reserve_bytes == 0


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


# Refused V4-Flash starts that print the start check's arithmetic: (max_model_len, max_num_batched_tokens, the GiB
# needed for one request, the available GiB as logged (rounded to 0.01), the longest length the engine says fits).
# Copied from the threads named in the ids:
# - yhfgyyf/vllm-deepseek-v4-sm89#54 (2026-08-07, an SM89 fork of upstream vLLM, 4x 48 GB RTX 4090, TP 4, fp8_ds_mla,
#   --block-size 256, --max-model-len 131072, no --max-num-batched-tokens: `vllm serve`'s default below 70 GiB, 2,048,
#   engines/vllm/serve.py): '(1.34 GiB KV cache is needed, which is larger than the available KV cache memory
#   (0.3 GiB). Based on the available memory, the estimated maximum model length is 720.'
# - vllm-project/vllm#44376 (comment of 2026-06-03, vLLM v0.22, 2x GH200 96 GB, the Python API: LLM(tensor_parallel_size
#   =2, enable_expert_parallel=True, max_model_len=30_000, kv_cache_dtype='fp8', block_size=256), no
#   max_num_batched_tokens): '(6.66 GiB KV cache is needed, ... (5.44 GiB). ... the estimated maximum model length is
#   13528.' LLM() is UsageContext.LLM_CLASS, whose default on a device of >= 70 GiB is 16,384 batched tokens, twice
#   `vllm serve`'s (vllm/engine/arg_utils.py EngineArgs._set_default_args, read in
#   yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2); the windowed groups charge them a request.
REFUSED_STARTS = {
    "sm89-fork#54-4090-tp4": (131072, 2048, 1.34, 0.3, 720),
    "vllm#44376-gh200-llm-class": (30000, 16384, 6.66, 5.44, 13528),
}


@pytest.mark.parametrize("case", sorted(REFUSED_STARTS))
def test_a_refused_start_s_one_request_and_its_longest_length(flash, case):
    from k3plan.engines.vllm.memory import dsv4_longest_fit
    from k3plan.units import GiB

    max_model_len, chunk, need_gib, available_gib, longest = REFUSED_STARTS[case]
    p = dsv4_pages(flash, block_tokens=256)
    need = p.blocks_per_request(max_model_len=max_model_len, max_num_batched_tokens=chunk) * p.check_block_bytes
    assert round(need / GiB, 2) == need_gib
    # the log's GiB are rounded to 0.01: the longest length lies between those of the interval's ends
    lo = dsv4_longest_fit(p, available=int((available_gib - 0.005) * GiB), max_model_len=max_model_len, chunk=chunk)
    hi = dsv4_longest_fit(p, available=int((available_gib + 0.005) * GiB) - 1, max_model_len=max_model_len, chunk=chunk)
    assert lo <= longest <= hi
    # the default chunk decides it: at the other entry point's default the log's figure is not reproduced
    other = 8192 if chunk != 8192 else 2048
    assert round(p.blocks_per_request(max_model_len=max_model_len, max_num_batched_tokens=other) * p.check_block_bytes
                 / GiB, 2) != need_gib  # fmt: skip


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


def test_the_v4_workspace_is_in_the_activation_and_rocm_adds_gfx9_s_decode_logits(cli):
    """ROCm's V4 keeps the CUDA reservations and adds, on gfx942 / gfx950, the indexer's [tokens, L / 4] float32
    decode logits (engines/vllm/dsv4_workspace.py dsv4_rocm_profile_workspace; session 41's trace of the 0.28.0
    wheel): 8 GiB at 8,192 tokens and the 1M default length, above the CUDA reservations' 1.29 GiB."""
    import json

    cmd = (
        "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 4 --kv-cache-dtype fp8 --block-size 256 "
        "--max-num-batched-tokens 8192"  # the MI355X's own default is 16,384 from 0.28.0
    )
    at = ("--engine-version", "0.28.0")
    nv = json.loads(cli("fit", "-H", "nvidia-h200", "-t", "1x4", "--serve", cmd, *at, "--json").stdout)["engine"]
    amd = json.loads(cli("fit", "-H", "amd-mi355x", "-t", "4", "--serve", cmd, *at, "--json").stdout)["engine"]
    assert "profile-run workspace" in nv["sources"]["activation"]
    assert "workspace on ROCm 8.00 GiB" in amd["sources"]["activation"]
    assert amd["activation_bytes"] > nv["activation_bytes"] + 6 * 2**30
    # from 0.30.0 the decode logits' rows are bounded by max_num_seqs x (1 + k) (_max_decode_logits_rows): 1,024 at
    # vLLM's default max_num_seqs on this GPU, 1 GiB (tests/engines/test_vllm_dsv41_rocm_workspace.py)
    now = json.loads(cli("fit", "-H", "amd-mi355x", "-t", "4", "--serve", cmd, "--json").stdout)["engine"]
    assert "workspace on ROCm 1.03 GiB" in now["sources"]["activation"]


def test_the_budget_s_v4_request_is_the_engine_s_charge_at_the_command_s_block(cli):
    """DeepSeek-V4 on vLLM: the budget charges a request what the engine's pool does (engines/vllm/dsv4_pages.py
    v4_request_charge, at the command's --block-size and the release's groups: Stack.engine_block / engine_release),
    so its sequences follow the engine's concurrency as the block grows, within one sequence of it (the budget's
    temporaries are its analytic lower bound, the engine's its profile run's peak: at vLLM's 0.92 default the budget
    may hold a fraction of a sequence more, which the headline does not use: the engine's count is the answer's)."""
    import json

    def counts(extra: str) -> tuple[int, float]:
        cmd = f"vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 --kv-cache-dtype fp8 {extra}"
        e = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", cmd, "--json").stdout)["engine"]
        return e["budget"]["max_sequences"], e["max_concurrency"]

    (b256, e256), (b512, e512) = counts("--block-size 256"), counts("--block-size 512")
    assert abs(b256 - e256) < 1 and abs(b512 - e512) < 1
    assert b512 < b256 and e512 < e256


@pytest.mark.parametrize(("context", "logged"), [(131_072, 9.52), (262_144, 8.30)])
def test_before_0_27_vllm_reports_a_request_s_bytes_over_the_first_group_s_page(flash, context, logged):
    """uv-xiao/pto-cu's vLLM 0.23.0 starts of V4-Flash on two H200s (tests/engines/cases/vllm-ptocu-*): over the logged
    32.08 GiB pool, 0.23.0's get_max_concurrency_for_kv_cache_config (the same in the 0.25.0 and 0.26.0 wheels) divides
    the blocks by the groups' bytes a request over the first group's page, so the smaller state pages count for less;
    from 0.27.0 each group's pages count whole (REPORT_SOURCES)."""
    old = dsv4_pages(flash, block_tokens=256, release=(0, 23, 0))
    for pool in (32.075, 32.0849):  # every pool the log's 32.08 can stand for
        blocks = int(pool * 2**30) // old.block_bytes
        assert (
            round(blocks / old.reported_blocks_per_request(max_model_len=context, max_num_batched_tokens=8192), 2)
            == logged
        )
    assert old.reported_blocks_per_request(max_model_len=context, max_num_batched_tokens=8192) < old.blocks_per_request(
        max_model_len=context, max_num_batched_tokens=8192
    )
    new = dsv4_pages(flash, block_tokens=256, release=(0, 27, 0))
    assert new.reported_blocks_per_request(
        max_model_len=context, max_num_batched_tokens=8192
    ) == new.blocks_per_request(max_model_len=context, max_num_batched_tokens=8192)


def test_with_the_hybrid_manager_off_every_v4_cache_is_a_full_page_in_one_group(pro):
    """InferenceX's DeepSeek-V4-Pro CPU-offload arm on B300 (vLLM 0.20.0, --disable-hybrid-kv-cache-manager, block 256,
    1,000,000 tokens; SemiAnalysisAI/InferenceX@1a7c16c9, the commit that dropped it, quotes the start check): '442.99
    GiB KV cache is needed ... available KV cache memory (104.74 GiB) ... estimated maximum model length is 236288'."""
    from k3plan.engines.vllm.dsv4_pages import dsv4_unified_pages
    from k3plan.units import GiB

    p = dsv4_unified_pages(pro, block_tokens=256)
    assert len(p.groups) == 1 and p.groups[0].block_tokens == 256
    need = p.blocks_per_request(max_model_len=1_000_000, max_num_batched_tokens=8192) * p.check_block_bytes
    assert f"{need / GiB:.2f}" == "442.99"
    blocks = int(104.74 * GiB) // p.block_bytes  # the check's estimate: whole blocks of 256 tokens in the memory
    assert blocks * 256 == 236288
