"""vLLM's DeepSeek-V4.1 KV layout on CUDA, from its code (k3plan.engines.vllm.dsv4_pages dsv41_pages, V41_SOURCES):
the packed records and pages, the groups, what a block costs and what a request holds. k3plan had priced V4.1 on vLLM
with the generic hybrid rule (64-token blocks, the release's FP4 formats, 920 B a token, no windows in the pool):
about 4x the tokens vLLM reports for the same pool."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.vllm.dsv4_pages import dsv41_pages
from k3plan.engines.vllm.releases import default_in_flight
from k3plan.models.loader import load_model

MAX_LEN = 1_048_576


@pytest.fixture(scope="module")
def d():
    return load_model("deepseek-v4.1-flash").spec.dsv4


def test_sm100_pages_groups_and_block(d):
    """SM100: the MXFP8 record (512 + 16 B), 512-B pages; the four KV sources' compressed caches and index keys
    (132 B: fp8 + an f32 scale a 128) in 128-entry pages; 40 windows of 32 tokens; the three ratio-2 rings."""
    p = dsv41_pages(d, block_tokens=128, sm100=True)
    assert (p.record_bytes, p.index_entry_bytes) == (528, 132)
    assert p.groups[0].pages == (128 * 528,) * 4 + (128 * 132,) * 4  # 67,584 and 16,896: whole multiples of 512
    assert p.num_layer_tuples == 4 and p.layer_tuple_bytes == 84_480 and p.block_bytes == 4 * 84_480
    names = [g.name for g in p.groups]
    assert names.count("ring[0]") == 1 and sum(n.startswith("window") for n in names) == 10  # 40 windows / 4
    # a request at 1M tokens: the ratio-1 source's 8,192 pages, each window group cdiv(127 + 8,192, 32) + 1, a ring
    assert p.blocks_per_request(max_model_len=MAX_LEN, max_num_batched_tokens=8192) == 8192 + 10 * 261 + 1
    # DSpark's three window-only layers: 43 windows in 11 groups
    assert (
        sum(g.name.startswith("window") for g in dsv41_pages(d, block_tokens=128, sm100=True, draft_layers=3).groups)
        == 11
    )


def test_hopper_keeps_v4_s_record_and_576_b_pages(d):
    p = dsv41_pages(d, block_tokens=128, sm100=False)
    assert p.record_bytes == 584  # 448 fp8 NoPE + 64 bf16 RoPE + 7 UE8M0 scales + a pad byte
    assert sorted(set(p.groups[0].pages)) == [30 * 576, 130 * 576]  # 16,896 and 74,752 rounded up to 576
    # the windowed pages (32 x 584 rounded up, 19,008 B) are padded up to the nearest compressed-group page
    assert set(p.groups[1].pages) == {130 * 576}


def test_mxfp4_index_keys_and_the_nvfp4_record(d):
    p = dsv41_pages(d, block_tokens=128, sm100=True, fp4_indexer=True, nvfp4=True)
    assert (p.record_bytes, p.index_entry_bytes) == (288, 68)  # NVFP4 compressed record; MXFP4 keys (64 + 4 B)
    assert sorted(set(p.groups[0].pages)) == [128 * 68, 128 * 288]


def test_the_inferencex_b200_tp2_log_lies_inside_the_layout_s_range(d):
    """SemiAnalysisAI/InferenceX#3310 quotes its B200 TP2 DeepSeek-V4.1-Flash run (c1 server log of run 35480787586,
    DSpark 5 tokens, max_model_len 1,048,576): 21.5 GiB of KV holding 6.18M tokens. The run's max_num_batched_tokens
    is not quoted (InferenceX's TP2 arms cap it at 4,096; upstream's default is 8,192 or 16,384): the logged tokens
    lie between the layout's figures at 16,384 and 4,096 (5.16M and 7.42M; 6.47M at 8,192, +4.8%). The generic rule
    k3plan used before gave about 4x the tokens for the same pool."""
    p = dsv41_pages(d, block_tokens=128, sm100=True, draft_layers=3, num_speculative_tokens=5)
    blocks = int(21.5 * 2**30) // p.block_bytes

    def tokens(chunk: int) -> int:
        return int(blocks / p.blocks_per_request(max_model_len=MAX_LEN, max_num_batched_tokens=chunk) * MAX_LEN)

    assert tokens(16_384) < 6_180_000 < tokens(4096)


def test_the_profile_run_reserves_the_ratio_1_index_source_s_key_gather(d):
    """V4.1's index sources include ratio-1 layers (20, 24, ...): the indexer's profile-run K gather is
    40 x max_model_len keys of 128 fp8 + 4 B (MXFP4: 64 + 4), about 5.2 GiB at 1M tokens, in the shared workspace."""
    from k3plan.engines.vllm.dsv4_workspace import dsv41_profile_workspace

    t = 40 * MAX_LEN  # // ratio 1
    ws, logits, how = dsv41_profile_workspace(d, max_model_len=MAX_LEN, fp4_indexer=False)
    assert ws == t * 128 + t * 4 + 2**20 and logits == 512 * 2**20
    fp4, _, _ = dsv41_profile_workspace(d, max_model_len=MAX_LEN, fp4_indexer=True)
    assert fp4 == t * 64 + t * 4 + 2**20
    assert "ratio 1" in how and "deepseek_v41/attention.py @02ee13be" in how


def test_a_fit_without_serve_counts_the_sequences_vllm_s_planner_holds(cli):
    """k3plan's budget prices V4.1 on vLLM as vLLM's planner charges a request (its records, its window pages holding
    the chunk in flight: step/dsv4_cache.engine_charge), so the budget's count is the engine's: before, the release
    formats (890 B a token) held 763 sequences at 131,072 tokens on 8 H200 where the engine holds 69.7."""
    r = cli("fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-h200", "-t", "8", "-s", "vllm", "--json")
    out = json.loads(r.stdout)
    budget, engine = out["capacity"]["max_sequences"], out["engine"]["max_concurrency"]
    assert engine <= budget <= 1.05 * engine  # whole sequences against the engine's fraction
    assert out["provenance"]["kv"].startswith("engine: vllm's own charge")
    assert "warning: engine" not in " ".join(cli("fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-h200", "-t", "8",
                                                 "-s", "vllm").output.split())  # fmt: skip


def test_the_budget_s_count_does_not_stand_alone_where_the_engine_holds_far_fewer(cli):
    """Where the stack's engine, sizing its own pool, holds under 3/4 of the budget's sequences, fit says so: the
    engine's count and why (app.fit.engine_gap_warning). No bundled configuration trips it since V4.1 on vLLM reads
    the engine's charge; the rule is held on a fit's own result against an engine holding a tenth of it, and where
    the two agree (DeepSeek-V3 on H200: the budget's 5, the engine's 5.23) no line is added."""
    from k3plan.app.fit import FitQuestion, answer, engine_gap_warning

    a = answer(FitQuestion(setup_options={"model": "deepseek-v3", "hardware": "nvidia-h200", "topology": "8",
                                          "stack": "vllm", "tp": None, "ep": None, "dp": None}, context=131072, batch=1,
                           chunk=None))  # fmt: skip
    assert a.engine is not None and engine_gap_warning(a.result, a.engine) is None
    short = {**a.engine, "max_concurrency": a.result.capacity.max_sequences / 10}
    line = engine_gap_warning(a.result, short)
    assert line is not None and line.startswith("engine (vllm): k3plan's budget holds")


def test_the_nvfp4_record_is_read_on_sm100_and_refused_elsewhere(cli):
    """--kv-cache-dtype nvfp4_ds_mla (vLLM's V4.1 compressed cache in NVFP4, 288 B an entry): more tokens on B200,
    vLLM's own ValueError on H200, and one line for a model without V4.1's layout."""
    base = "vllm serve deepseek-ai/DeepSeek-V4.1-Flash -tp 8 --language-model-only --kv-cache-dtype "
    fp8, fp4 = (
        json.loads(cli("fit", "-H", "nvidia-b200", "--serve", base + k, "--json").stdout)["engine"]
        for k in ("fp8", "nvfp4_ds_mla")
    )
    # packed (0.33.0, the newest read): a block 212,256 B at fp8, 136,224 at nvfp4 (1.56x), but nvfp4's narrower anchor
    # cuts the windows into more groups, so a request holds more blocks: 1.44x the tokens (1.5x and more until the
    # 0.30.0-0.33.0 packing was read, dsv4_pages.V41_PACKED_SOURCE)
    assert fp4["kv_pool_bytes"] == fp8["kv_pool_bytes"] and fp4["kv_pool_tokens"] > 1.4 * fp8["kv_pool_tokens"]
    assert "KV-source records of 288 B" in fp4["sources"]["num_blocks"]
    r = cli("fit", "-H", "nvidia-h200", "--serve", base + "nvfp4_ds_mla")
    assert r.exit_code == 1 and "FlashMLA decodes only on SM100" in r.output
    r = cli(
        "fit",
        "-H",
        "nvidia-b200",
        "--serve",
        "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 --kv-cache-dtype nvfp4_ds_mla",
    )
    assert r.exit_code == 2 and "has no such layout" in r.output


def test_plan_s_pick_holds_the_engine_s_count(cli):
    """plan's recommended row is fit's configuration, priced with its engine's own sizing: for V4.1 on vLLM the
    budget's count is the engine's, so no line is added (before: 463 sequences against the engine's 42 at TP 4), and
    none for K3 (README's plan)."""
    r = cli("plan", "-m", "deepseek-v4.1-flash", "-H", "nvidia-h200", "--stacks", "vllm", "--context", "131072")
    assert r.exit_code == 0 and "the recommended row's engine" not in " ".join(r.output.split())
    pick = json.loads(
        cli("plan", "-m", "deepseek-v4.1-flash", "-H", "nvidia-h200", "--stacks", "vllm", "--context", "131072",
            "--json").stdout
    )["ranked"][0]  # fmt: skip
    f = json.loads(
        cli("fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-h200", "-t", pick["topology"], "--tp", str(pick["tp"]),
            "--ep", str(pick["ep"]), "-s", "vllm", "--json").stdout
    )  # fmt: skip
    engine = f["engine"]["max_concurrency"]
    assert pick["max_sequences"] == f["capacity"]["max_sequences"] and engine <= pick["max_sequences"] <= 1.05 * engine
    r = cli("plan", "-H", "nvidia-h200", "--context", "131072")
    assert r.exit_code == 0 and "the recommended row's engine" not in " ".join(r.output.split())


def test_on_rocm_v41_is_charged_as_vllm_s_planner_lays_it_out_and_elsewhere_unread_is_said(cli):
    """vLLM's ROCm V4.1 attention keeps DeepseekV4Attention's cache specs (V41_ROCM_SOURCE) and a 9x capability, so the
    non-SM100 record and the family-90 block of 64 tokens: one sequence on 2 MI355X costs what vLLM's planner charges
    it (blocks a request x a block's bytes), where the budget held 1,032 sequences at 131,072 tokens on the model's own
    formats. Where no engine accounting was read (torchtpu-vllm on a TPU) the budget says so, never silently."""
    r = cli("fit", "-m", "deepseek-v4.1-flash", "-H", "amd-mi355x", "-t", "2", "-s", "vllm", "--json")
    out = json.loads(r.stdout)
    dev, d = out["per_device"], load_model("deepseek-v4.1-flash").spec.dsv4
    from k3plan.engines.vllm.releases import NEWEST_RELEASE

    # a question without a release reads vLLM's newest (engines/vllm/releases.py): its packed groups (0.30.0 on,
    # dsv4_pages.V41_PACKED_SOURCE), its windowed groups holding pages for two batches in flight under the default
    # async scheduling
    pages = dsv41_pages(d, block_tokens=64, sm100=False, release=NEWEST_RELEASE)
    in_flight = out["workload"]["prefill_chunk_tokens"] * default_in_flight()
    assert default_in_flight() == 2
    charge = pages.blocks_per_request(max_model_len=131_072, max_num_batched_tokens=in_flight)
    assert dev["kv_bytes"] + dev["state_bytes"] == charge * pages.block_bytes
    # the engine's concurrency on the packed groups 200.02 (99.63 on main's planner reading, before
    # V41_PACKED_SOURCE), a fifth of the 1,032 the model's own formats held; the budget's whole sequences 201 (its
    # room is not the engine's pool: the budget's temporaries are not the engine's profiled activations)
    assert "was not read" not in r.output and out["engine"]["max_concurrency"] < 1032 / 4
    tpu = " ".join(cli("fit", "-m", "deepseek-v4.1-flash", "-H", "tpu-v7x", "-t", "2x2x2").output.split())
    assert "the engine's own pool accounting for V4.1 here was not read" in tpu


def test_the_0_30_to_0_34_releases_pack_v41_s_caches_generically(d):
    """vLLM 0.30.0 .. 0.34.0 (the PyPI wheels; V41_PACKED_SOURCE): no V4 planner; a KV source's compressed cache and
    index keys are MLAAttentionSpecs of --block-size tokens with tokens_per_state = its ratio, so a ratio-2 page holds
    block // 2 records (Hopper, block 64: 32 x 584 = 18,688 -> 19,008 B, index 32 x 132 -> 4,608; ratio 1: 37,440 and
    8,640); kv_cache_utils._get_packed_kv_cache_groups keeps the unbalanced compressed bucket whole (116,928 B, the
    anchor), cuts the 40 windows (19,008 B) into cdiv(40, 116,928 // 19,008 = 6) = 7 groups and the three rings
    (8 rows x 1,024 f32, unpadded: 32,768 B) into one; a block costs the largest group's pages, 116,928 B."""
    from k3plan.engines.vllm.dsv4_pages import v41_packed

    assert not v41_packed(None) and not v41_packed((0, 29, 0))
    assert v41_packed((0, 30, 0)) and v41_packed((0, 33, 0)) and v41_packed((0, 34, 0))
    p = dsv41_pages(d, block_tokens=64, sm100=False, release=(0, 31, 0))
    assert p.groups[0].pages == (19_008, 19_008, 19_008, 37_440, 4_608, 4_608, 4_608, 8_640)  # sources 2, 8, 14, 20
    assert p.groups[0].block_tokens == 64  # a request holds cdiv(max_model_len, 64) pages of every source
    windows = [g for g in p.groups if g.name.startswith("window")]
    assert [len(g.pages) for g in windows] == [6, 6, 6, 6, 6, 5, 5]
    assert [g.pages for g in p.groups if g.ring] == [(32_768,) * 3]
    assert p.block_bytes == p.check_block_bytes == p.check_reserve_bytes == 116_928
    # 262,144 tokens, two batches of 8,192 in flight: 4,096 + 7 x (cdiv(127 + 16,384, 32) + 1) + 1 ring
    assert p.blocks_per_request(max_model_len=262_144, max_num_batched_tokens=16_384) == 4096 + 7 * 517 + 1
    assert dsv41_pages(d, block_tokens=64, sm100=False, release=(0, 30, 0)).groups == p.groups
    # 0.33.0 and 0.34.0 group alike (v1/core/kv_cache_planning.py, DefaultKVCacheConfigBuilder): on Hopper the same block
    for rel in ((0, 33, 0), (0, 34, 0)):
        q = dsv41_pages(d, block_tokens=64, sm100=False, release=rel)
        assert q.groups == p.groups and q.block_bytes == p.block_bytes == 116_928
    # SM100 from 0.33.0: the block rounded up to lcm(528, 528) (V41_STRIDE_SOURCE); not before
    sm100 = dsv41_pages(d, block_tokens=128, sm100=True, release=(0, 33, 0))
    assert sm100.block_bytes % 528 == 0 and sm100.block_bytes - max(sum(g.pages) for g in sm100.groups) < 528
    assert dsv41_pages(d, block_tokens=128, sm100=True, release=(0, 32, 0)).block_bytes == 211_968


@pytest.mark.parametrize(
    ("pool_gib", "logged"),
    [
        # tant2tls/Deepseek-serving@34d45df0 docs/model-setup.md (vLLM 0.31.1rc1.dev50, 8 x H100, TP 8, 262,144 tokens,
        # 8,192 batched): "Available KV cache memory: 29.14 GiB", "GPU KV cache size: 9,092,347 tokens"
        (29.14, 9_092_347),
        # tant2tls/Deepseek-serving@ae9b27e2 reports/v41-vs-0731 server log (vLLM 0.30.1rc1.dev223, the same command
        # with prefix caching on): 29.42 GiB, 9,179,728 tokens
        (29.42, 9_179_728),
    ],
)
def test_the_packed_groups_give_the_h100_logs_tokens_for_their_pools(d, pool_gib, logged):
    """The packed groups reproduce both H100 logs' token counts from their logged pools (quoted to 0.01 GiB: within
    0.1%); main's planner reading gives 0.53 of them."""
    p = dsv41_pages(d, block_tokens=64, sm100=False, release=(0, 31, 0))
    blocks = int(pool_gib * 2**30) // p.block_bytes
    per_request = p.blocks_per_request(max_model_len=262_144, max_num_batched_tokens=2 * 8192)
    assert int(blocks / per_request * 262_144) == pytest.approx(logged, rel=1e-3)
