"""SGLang's pool rules that changed between 0.5.15 and 0.5.23, each followed from the release it changed in
(engines/sglang/releases.py; fit --engine-version): the state pool's padding slot (0.5.17) and a multimodal model's
reservation (0.5.18), read in the sglang wheels (PyPI)."""

from __future__ import annotations

import json

import pytest

# NVIDIA Dynamo's Kimi-K3 SGLang recipe (ai-dynamo/dynamo recipes/kimi-k3/sglang/), as
# tests/engines/test_serve_list_flags.py reads it
DYNAMO_SGLANG_K3 = (
    "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K3 --trust-remote-code --tp-size 16 --ep-size 16 "
    "--context-length 1048576 --max-running-requests 64 --mem-fraction-static 0.88 --chunked-prefill-size 8192 "
    "--page-size 64 --moe-runner-backend deep_gemm --moe-a2a-backend megamoe --kv-cache-dtype fp8_e4m3"
)


def _engine(cli, cmd: str, release: str, hardware: str = "nvidia-gb200-nvl72", gpus: int = 16) -> dict:
    r = cli("fit", "-H", hardware, "-t", gpus, "--serve", cmd, "--engine-version", release, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["engine"]


def _slots(eng: dict) -> tuple[int, int]:
    src = eng["sources"]["kv_pool"]
    slots = int(src.split(" state pool ")[1].split(" B (")[1].split(" slots x ")[0].replace(",", ""))
    slot = int(src.split(" slots x ")[1].split(" B a request")[0].replace(",", ""))
    return slots, slot


def test_the_state_pool_holds_a_padding_slot_from_0_5_17(cli):
    """sglang 0.5.17's _handle_max_mamba_cache charges (max_mamba_cache_size + 1) slots and solves the memory-ratio
    path for them; 0.5.16's charges max_mamba_cache_size: a given size costs one slot more, the ratio path's budget
    holds one request slot fewer."""
    for cmd in (DYNAMO_SGLANG_K3 + " --max-mamba-cache-size 192", DYNAMO_SGLANG_K3 + " --disable-radix-cache"):
        old, new = (_engine(cli, cmd, r) for r in ("0.5.16", "0.5.17"))
        (n_old, slot), (n_new, _) = _slots(old), _slots(new)
        assert n_old == n_new and new["kv_pool_bytes"] == old["kv_pool_bytes"] - slot
        assert "padding slot" in new["sources"]["kv_pool"] and "padding slot" not in old["sources"]["kv_pool"]
    old, new = (_engine(cli, DYNAMO_SGLANG_K3, r) for r in ("0.5.16", "0.5.17"))
    (n_old, slot), (n_new, _) = _slots(old), _slots(new)
    assert n_new == n_old - 1 and new["kv_pool_bytes"] == old["kv_pool_bytes"]  # (K - 1 + 1) slots: the same bytes


def test_a_multimodal_model_s_reservation_from_0_5_18(cli):
    """sglang 0.5.18's _profile_available_bytes leaves mm_runtime_reservation_gb out of the KV budget for a model it
    counts multimodal (SGLANG_VLM_CACHE_SIZE_MB, 100 MiB by default): Kimi-K2.5's pool is that much smaller than
    0.5.17's; Kimi-K3's (not multimodal to SGLang) is not."""
    k25 = "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --trust-remote-code"
    old, new = (_engine(cli, k25, r, "amd-mi355x", 8) for r in ("0.5.17", "0.5.18"))
    assert new["kv_pool_bytes"] == old["kv_pool_bytes"] - 100 * 2**20
    assert "the multimodal reservation 104,857,600 B" in new["sources"]["kv_pool"]
    k3 = [_engine(cli, DYNAMO_SGLANG_K3, r)["kv_pool_bytes"] for r in ("0.5.17", "0.5.18")]
    assert k3[0] == k3[1]


V4_PRO = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --tp 8 --max-running-requests 12"


def test_deepseek_v4_s_pool_from_0_5_21_pages_its_c4_rings_and_its_kv(cli):
    """sglang 0.5.21's DSV4PoolConfigurator (the same in 0.5.22 and 0.5.23): the c4 compressor rings are addressed by
    the engine's page (ring_sizes[4] / page_size: 8 / 256; 0.5.15-0.5.20 sized them by the 128-token window,
    sgl-project/sglang#40337), and each entry costs its bytes in the V4 paged layout (kernels/ops/attention/dsv4/
    kv_layout.py: 576 data + 8 scale bytes a token, a page's bytes padded to whole 576-B rows): 256 tokens of 584 B
    take 260 rows (585 B a token), a 64-token c4 page 65 rows (585 B), a 2-token c128 page 3 rows (864 B)."""
    from k3plan.engines.sglang.dsv4_pool import form_for_release, sglang_dsv4_pool
    from k3plan.models.loader import load_model

    assert [form_for_release((0, 5, p)) for p in (15, 20, 21, 23)] == ["0.5.15", "0.5.15", "0.5.21", "0.5.21"]
    d = load_model("deepseek-v4-pro").spec.dsv4
    old, new = (sglang_dsv4_pool(d, swa_ratio=0.1, form=f) for f in ("0.5.15", "0.5.21"))
    n, n4, n128 = 61, 30, 31  # V4-Pro's target layers, its ratio-4 and ratio-128 layers (config.compress_ratios)
    states = 2 * 2 * 512 * 4 + 2 * 2 * 128 * 4  # a c4 row of the attention and the indexer compressor states, f32
    ring = -0.1 * 8 / 128 * states * n4 + 0.1 * 8 / 256 * states * n4
    pages = 0.1 * (585 - 584) * n + (585 - 584) / 4 * n4 + (864 - 584) / 128 * n128
    assert new.bytes_per_full_token == pytest.approx(old.bytes_per_full_token + ring + pages, abs=1e-9)
    assert new.fixed_bytes == old.fixed_bytes  # the c128 states as 0.5.15's
    a, b = (_engine(cli, V4_PRO + " --mem-fraction-static 0.9", r, "nvidia-b300", 8) for r in ("0.5.20", "0.5.21"))
    assert a["kv_pool_bytes"] == b["kv_pool_bytes"] and b["kv_pool_tokens"] > a["kv_pool_tokens"]
    assert "256-token engine page" in b["sources"]["kv_pool_tokens"]


def test_deepseek_v4_s_window_pool_below_one_request_is_refused_from_0_5_20(cli):
    """sglang 0.5.20's validate_swa_pool_size: a ratio-mode sliding-window pool of at most window + page tokens
    (128 + 256) cannot admit a request, and the engine refuses to start; 0.5.19 started it."""
    tiny = V4_PRO + " --mem-fraction-static 0.9 --swa-full-tokens-ratio 0.00001"
    a, b = (_engine(cli, tiny, r, "nvidia-b300", 8) for r in ("0.5.19", "0.5.20"))
    assert a["starts"] and not b["starts"]
    assert b["message"].startswith("ValueError: SWA pool (256 tokens) cannot hold even one request")
    assert "validate_swa_pool_size" in b["raised_at"]


def test_deepseek_v4_1_is_refused_before_the_release_that_serves_it():
    """SGLang's deepseek_v41 config (configs/deepseek_v41.py) and the V4.1 model paths first ship in the 0.5.21 wheel;
    0.5.20's names deepseek_v41 nowhere, so a V4.1 command read as 0.5.20 cannot start."""
    from k3plan.engines.release import parse_release
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    cmd = "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 4"
    kw = dict(platform="gpu", device_gib=139.8, device_name="nvidia-h200")
    assert parse_serve(cmd, release=parse_release("0.5.21"), **kw).tp == 4
    assert parse_serve(cmd, **kw).tp == 4  # no release named: the code each rule cites
    with pytest.raises(K3PlanError, match=r"SGLang serves DeepSeek-V4.1 from 0.5.21 .* --engine-version 0.5.21"):
        parse_serve(cmd, release=parse_release("0.5.20"), **kw)


R1 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8"


def _sglang_fraction(gpu_bytes: int, *, chunk: int, tp: int, decode_bs: int, prefill: bool = False) -> float:
    """SGLang's derived mem_fraction_static (sglang 0.5.15-0.5.23 wheels, handle_gpu_memory_settings and
    reserve_for_graph_mb) without DP attention or DeepEP, in MiB: 512 + max(chunk, 2048) x 1.5 + tp / 8 x 1024 +
    decode max_bs x 2, + 1.5 x 1024 where an MLA model's prefill graph is captured (``prefill``: DeepSeek-R1's
    breakable graph from 0.5.18, engines/sglang/prefill_graph.py), at least 10 GiB above a 60 GiB GPU."""
    mib = gpu_bytes / 2**20
    graph = 1.5 * 1024 if prefill else 0.0
    reserved = max(512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + decode_bs * 2 + graph, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def test_the_derived_fraction_reserves_the_decode_graphs_the_command_sets(cli):
    """The decode graphs' max batch SGLang's derived fraction reserves 2 MiB a batch for is the command's where it sets
    one (--cuda-graph-max-bs-decode; the largest of --cuda-graph-bs), in every release read; from 0.5.22 a default
    one is capped at --max-running-requests (memory_hook.py: decode_max_bs_is_default), 0.5.21 keeps the GPU class's
    512 (an H200 at TP 8)."""
    from k3plan.hardware import load_hardware

    gpu = load_hardware("nvidia-h200").usable_bytes_per_device

    def frac(extra: str, release: str) -> str:
        return _engine(cli, R1 + extra, release, "nvidia-h200", 8)["sources"]["kv_pool"].split(" x ")[0]

    for extra, release, bs in (
        ("", "0.5.22", 512),
        (" --cuda-graph-max-bs-decode 10", "0.5.15", 10),
        (" --cuda-graph-bs 1 2 4 10", "0.5.19", 10),
        (" --max-running-requests 12", "0.5.21", 512),
        (" --max-running-requests 12", "0.5.22", 12),
        (" --max-running-requests 12 --cuda-graph-max-bs-decode 100", "0.5.23", 100),
    ):
        # DeepSeek-R1 (MLA): its breakable prefill graph is on from 0.5.18 (0.5.15-0.5.17 leave an MLA model's off)
        on = tuple(int(x) for x in release.split(".")) >= (0, 5, 18)
        want = _sglang_fraction(gpu, chunk=8192, tp=8, decode_bs=bs, prefill=on)
        assert frac(extra, release) == f"int({want}", (extra, release)
    given = _engine(cli, R1 + " --mem-fraction-static 0.85 --cuda-graph-max-bs-decode 10", "0.5.23", "nvidia-h200", 8)
    assert "--cuda-graph-max-bs-decode" in given["serve"]["ignored"]  # the fraction given: the graphs change nothing


def test_deepseek_v4_1_s_window_cap_is_a_worker_s_under_dp_attention(cli):
    """compute_swa_request_cap and _resolve_swa_prefix_tails size DeepSeek-V4.1's sliding-window pool for a worker's
    requests, max_running_requests // attn_dp_size (sglang 0.5.21-0.5.23 wheels, pool_configurator.py): 64 over 4
    attention-DP groups is 16 a worker (and the chunk a DP rank's, 4,096 // 4)."""
    cmd = "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --max-running-requests 64 --chunked-prefill-size 4096"
    plain = _engine(cli, cmd + " --tp 4", "0.5.23", "nvidia-b200", 4)["sources"]["kv_pool_tokens"]
    dp = _engine(cli, cmd + " --tp 4 --dp 4 --enable-dp-attention", "0.5.23", "nvidia-b200", 4)
    assert ") x 64 requests + 2 x 4,096" in plain and ") x 16 requests + 2 x 1,024" in dp["sources"]["kv_pool_tokens"]


def test_deepseek_v4_1_s_vision_tower_is_built_as_its_release_builds_it(cli):
    """SGLang's DeepseekV4ForCausalLM builds DeepSeek-V4.1's ViT and aligner (sglang 0.5.21-0.5.23 wheels, models/
    deepseek_v4.py), so the model is multimodal to it (configs/model_config.py has_dsv41_vision: the 100 MiB
    reservation) while its config keeps no vision_config (configs/deepseek_v41.py pops it: no fraction cut); from
    0.5.22 --language-model-only drops the tower, 0.5.21 builds it all the same. With the tower SGLang refuses an
    all-to-all (0.5.21: any; from 0.5.22: all but MegaMoE on CUDA)."""
    from k3plan.models.loader import load_model

    tower = sum(t.nbytes for t in load_model("deepseek-v4.1-flash").inventory.of_kind("vision"))
    cmd = "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 4 --mem-fraction-static 0.95"
    with_tower, without = (_engine(cli, cmd + x, "0.5.23", "nvidia-h200", 4) for x in ("", " --language-model-only"))
    assert with_tower["weights_bytes"] - without["weights_bytes"] == tower > 0
    assert "the multimodal reservation 104,857,600 B" in with_tower["sources"]["kv_pool"]
    assert "multimodal reservation" not in without["sources"]["kv_pool"]
    old = _engine(cli, cmd + " --language-model-only", "0.5.21", "nvidia-h200", 4)
    assert old["weights_bytes"] == with_tower["weights_bytes"] and "--language-model-only" in old["serve"]["ignored"]
    a2a = " --moe-a2a-backend megamoe --ep-size 4"
    _engine(cli, cmd + a2a, "0.5.23", "nvidia-h200", 4)  # MegaMoE on CUDA with the tower: read (exit 0 or 1)
    for release, extra, says in (
        ("0.5.21", a2a, "V4.1 vision currently supports TP/EP/DP without CP, PP or MoE A2A"),
        ("0.5.23", " --moe-a2a-backend deepep --ep-size 4", "MoE A2A requires CUDA MegaMoE"),
    ):
        r = cli("fit", "-H", "nvidia-h200", "-t", 4, "--serve", cmd + extra, "--engine-version", release)
        assert r.exit_code == 2 and says in r.output, r.output


def test_a_plain_fit_of_deepseek_v4_1_says_sglang_refuses_its_tower_under_deepep(cli):
    """fit without --serve prices DeepSeek-V4.1 as its language model alone (k3plan's launch line writes
    --language-model-only); under the sglang stack's DeepEP default SGLang, told nothing, builds the tower and refuses
    the all-to-all with it (the test above), so the fit says so -- a warning, as fit warns of what else the engine does
    not run as priced (Stack.refusals), the tower's bytes not counted -- and says nothing where SGLang starts with the
    tower (--moe-a2a-backend none or megamoe on CUDA) or under --serve (the command's reading refuses or prices it)."""
    from k3plan.models.loader import load_model

    tower = sum(t.nbytes for t in load_model("deepseek-v4.1-flash").inventory.of_kind("vision"))
    args = ("fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-b200", "-t", "8", "--context", "131072", "--json")
    said = {}
    for stack in ("sglang", "sglang:moe_a2a_backend=none", "sglang:moe_a2a_backend=megamoe", "dp-attention"):
        out = json.loads(cli(*args, "--stack", stack).stdout)
        said[stack] = [w for w in out["warnings"] if "vision tower" in w]
        assert out["per_device"]["weights_bytes"] > 0
    for stack in ("sglang", "dp-attention"):  # the stacks' DeepEP default
        (w,) = said[stack]
        assert "MoE A2A requires CUDA MegaMoE" in w and "--moe-a2a-backend deepep" in w
        assert "priced as --language-model-only" in w and f"{tower / 2**30:.2f} GiB not counted" in w
    assert said["sglang:moe_a2a_backend=none"] == said["sglang:moe_a2a_backend=megamoe"] == []
    serve = "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 8 --language-model-only"
    out = json.loads(cli("fit", "-H", "nvidia-b200", "--serve", serve, "--json").stdout)
    assert not [w for w in out["warnings"] if "vision tower" in w]
    # another model on the same stack: nothing said
    v4 = cli("fit", "-m", "deepseek-v4-flash", "-H", "nvidia-b200", "-t", "8", "-s", "sglang", "--json")
    out = json.loads(v4.stdout)
    assert not [w for w in out["warnings"] if "vision tower" in w]


def test_deepseek_v4_1_s_pool_by_release():
    """DeepSeek-V4.1's pool in the wheels (pool_configurator.py DSV4PoolConfigurator): 0.5.21 and 0.5.22 page the
    window's slots in the V4 layout (256 tokens of 584 B in rows of 576: 585 B) and hold the ratio-2 layers'
    pending-pair state a request slot ((slots x 2 + 2 + 1) rows, whole pairs, of 2 x 512 f32); 0.5.23 pages the
    ratio-1 / 2 latents too (585 B), and under flashmla_mega (SM100, attention TP 1, FP8 KV) stores the window in the
    V41 layout (512 + 16 B in rows of 512: 528 B) and the latents in V41_FP4 (256 + 32 B in rows of 256: 288 B)
    (kernels/ops/attention/dsv4/kv_layout.py). A release named none keeps the main-branch read its public log
    reproduces (1,630 B: 652 B a ratio-1 source, 652 / 2 a ratio-2 one)."""
    from k3plan.engines.sglang.dsv4_pool import sglang_dsv41_pool, v41_form_for_release
    from k3plan.models.loader import load_model

    assert [v41_form_for_release(r) for r in (None, (0, 5, 21), (0, 5, 22), (0, 5, 23))] == [
        "main",
        "0.5.21",
        "0.5.21",
        "0.5.23",
    ]
    d = load_model("deepseek-v4.1-flash").spec.dsv4
    sources = [d.compress_ratios[i] for i in d.csa2.kv_source_layer_ids if d.compress_ratios[i] in (1, 2)]
    n1, n2, layers = sources.count(1), sources.count(2), len(d.compress_ratios)
    kw = dict(chunk=4096, max_running_requests=64, swa_ratio=0.1)
    pools = {f: sglang_dsv41_pool(d, form=f, **kw) for f in ("main", "0.5.21", "0.5.23")} | {
        "mega": sglang_dsv41_pool(d, form="0.5.23", v41_layout=True, **kw)
    }
    index = 64 + 4  # the fp4 index key of a 128-wide head
    for form, window, latent in (("main", 584, 584), ("0.5.21", 585, 584), ("0.5.23", 585, 585), ("mega", 528, 288)):
        low = (latent + index) * n1 + (latent + index) / 2 * n2
        assert pools[form].bytes_per_full_token == pytest.approx(0.1 * window * layers + low), form
    pair = -(-(65 * 2 + 2 + 1) // 2) * 2 * 2 * 512 * 4 * n2
    assert [pools[f].fixed_bytes for f in ("main", "0.5.21", "0.5.23")] == [0, pair, pair]
    assert sglang_dsv41_pool(d, form="0.5.21", v41_layout=True, **kw) == pools["0.5.21"]  # no mega before 0.5.23


def test_deepseek_v4_1_s_v41_layouts_where_0_5_23_runs_flashmla_mega(cli):
    """0.5.23 resolves --dsv4-attn-backend auto to flashmla_mega for V4.1 on SM100 with attention TP 1 and FP8 KV
    (arg_groups/deepseek_v4_hook.py _default_dsv4_attention_backend), which forces the V4.1 layouts: an attention-TP-1
    command on B300 prices them, the same on H200 or at TP 2 the V4 layout."""
    cmd = (
        "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --max-running-requests 8 --mem-fraction-static 0.92"
    )

    def said(hardware: str, tp: int, release: str) -> str:
        return _engine(cli, f"{cmd} --tp {tp}", release, hardware, tp)["sources"]["kv_pool_tokens"]

    assert "(528 B a window token, 288 / 288 B" in said("nvidia-b300", 1, "0.5.23")
    for hardware, tp, release in (
        ("nvidia-h200", 1, "0.5.23"),
        ("nvidia-b300", 2, "0.5.23"),
        ("nvidia-b300", 1, "0.5.22"),
    ):
        assert "(585 B a window token" in said(hardware, tp, release), (hardware, tp, release)


def test_speculative_algorithms_added_after_0_5_15_are_known_from_their_release():
    """SpeculativeAlgorithm gains DSPARK in 0.5.16, UNO in 0.5.20 and PP_SPEC_RELAY in 0.5.21 (speculative/
    spec_info.py of those wheels): from_string takes them from then on and an earlier release refuses the name as
    unknown. UNO is refused as not priced; DSPARK is read (engines/sglang/spec.py DSPARK_HOOK), and refused once the
    checkpoint shows no bundled DSpark draft, as SGLang refuses it then (_handle_dspark)."""
    from k3plan.engines.release import parse_release
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    kw = dict(platform="gpu", device_gib=139.8, device_name="nvidia-h200")
    for algo, first, before in (("DSPARK", "0.5.16", "0.5.15"), ("UNO", "0.5.20", "0.5.19")):
        cmd = f"{R1} --speculative-algorithm {algo}"
        for release, says in ((first, "not priced"), (None, "not priced"), (before, "Unknown speculative algorithm")):
            at = None if release is None else parse_release(release)
            if algo == "DSPARK" and release != before:
                assert parse_serve(cmd, release=at, **kw).speculative.algorithm == "DSPARK"
                continue
            with pytest.raises(K3PlanError, match=says):
                parse_serve(cmd, release=at, **kw)


def test_dspark_on_a_checkpoint_without_dspark_stages_is_refused_as_sglang_refuses_it(cli):
    """DSPARK on DeepSeek-R1 (no dspark_* config keys, no --speculative-draft-model-path): SGLang raises 'DSpark dense
    speculative decoding requires setting --speculative-draft-model-path' (sglang 0.5.21 wheel, arg_groups/
    speculative_hook.py _handle_dspark); k3plan refuses it in one line."""
    r = cli("fit", "-H", "nvidia-h200", "--serve", f"{R1} --speculative-algorithm DSPARK", "--engine-version", "0.5.21")
    assert r.exit_code == 2 and "requires setting --speculative-draft-model-path" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_attn_dp_size_is_dp_attention_s_new_spelling():
    """sglang 0.5.22's --attn-dp-size N (alias --attention-data-parallel-size) is what --dp-size N
    --enable-dp-attention resolves to (arg_groups/parallel_hook.py handle_deprecated_dp_attention); beside --dp-size
    replicas it is refused (not priced); 0.5.21's parser has no such option."""
    from k3plan.engines.release import parse_release
    from k3plan.engines.serve import parse_serve
    from k3plan.errors import K3PlanError

    v4 = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8"
    kw = dict(platform="gpu", device_gib=178.4, device_name="nvidia-b200", release=parse_release("0.5.23"))
    old = parse_serve(v4 + " --dp 8 --enable-dp-attention", **kw)
    for flag in ("--attn-dp-size", "--attention-data-parallel-size"):
        new = parse_serve(f"{v4} {flag} 8", **kw)
        assert (
            (new.stack, new.tp, new.dp, new.chunk)
            == (old.stack, old.tp, old.dp, old.chunk)
            == ("dp-attention", 1, 8, 2048)
        )
    with pytest.raises(K3PlanError, match="--attn-dp-size 8 with --dp-size 2"):
        parse_serve(v4 + " --attn-dp-size 8 --dp 2", **kw)
    with pytest.raises(K3PlanError, match="--attn-dp-size: sglang 0.5.21.s parser has no such option"):
        parse_serve(v4 + " --attn-dp-size 8", **{**kw, "release": parse_release("0.5.21")})


def test_the_derived_fraction_leaves_out_decode_graphs_switched_off(cli):
    """--disable-cuda-graph (and --disable-decode-cuda-graph, --cuda-graph-backend-decode disabled) sets the decode
    graphs' backend DISABLED (server_args.py _parse_cuda_graph_config), and reserve_for_graph_mb counts no decode
    batch then: the derived fraction reserves for none (sglang 0.5.15-0.5.23 wheels)."""
    from k3plan.hardware import load_hardware

    gpu = load_hardware("nvidia-h200").usable_bytes_per_device
    for extra, release, prefill in (
        (" --disable-cuda-graph", "0.5.15", False),
        # the decode phase alone: DeepSeek-R1's breakable prefill graph stays on in 0.5.23 (engines/sglang/prefill_graph.py)
        (" --disable-decode-cuda-graph", "0.5.23", True),
        (" --cuda-graph-backend-decode disabled", "0.5.23", True),
    ):
        expect = f"int({_sglang_fraction(gpu, chunk=8192, tp=8, decode_bs=0, prefill=prefill)}"
        assert _engine(cli, R1 + extra, release, "nvidia-h200", 8)["sources"]["kv_pool"].split(" x ")[0] == expect
    on = _engine(cli, R1 + " --disable-cuda-graph --cuda-graph-backend-decode full", "0.5.23", "nvidia-h200", 8)
    assert on["sources"]["kv_pool"].split(" x ")[0] == f"int({_sglang_fraction(gpu, chunk=8192, tp=8, decode_bs=512)}"
    given = _engine(cli, R1 + " --mem-fraction-static 0.85 --disable-decode-cuda-graph", "0.5.23", "nvidia-h200", 8)
    assert "--disable-decode-cuda-graph" in given["serve"]["ignored"]


def test_a_gpu_command_that_names_no_release_is_read_as_the_newest_read_and_says_so(cli):
    """engines/sglang/releases.py NEWEST_RELEASE (0.5.23): without --engine-version a GPU SGLang command -- plain or
    under DP attention -- is read as the newest release k3plan read, priced as that release (the same figures as
    --engine-version 0.5.23) and the answer names it, as a vLLM command is read as vLLM's; fit without --serve charges
    the same release's DeepSeek-V4 pool form, so fit with and without --serve read one release."""
    from k3plan.engines.registry import engine_rules
    from k3plan.engines.release import release_text
    from k3plan.engines.serve import parse_serve
    from k3plan.engines.sglang.releases import NEWEST_RELEASE

    assert engine_rules("sglang").newest_release_read == engine_rules("dp-attention").newest_release_read
    assert NEWEST_RELEASE == (0, 5, 23)
    v4 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --context-length 131072"
    for cmd in (v4, v4 + " --dp 4 --enable-dp-attention"):
        q = parse_serve(cmd, platform="gpu", device_gib=139.8, device_name="nvidia-h200")
        assert q.release == NEWEST_RELEASE and q.release_default
        plain = cli("fit", "-H", "nvidia-h200", "--serve", cmd, "--json")
        named = cli(
            "fit", "-H", "nvidia-h200", "--serve", cmd, "--engine-version", release_text(NEWEST_RELEASE), "--json"
        )
        got, want = (json.loads(r.stdout)["engine"] for r in (plain, named))
        assert got["kv_pool_tokens"] == want["kv_pool_tokens"] and got["kv_pool_bytes"] == want["kv_pool_bytes"]
        said = " ".join(cli("fit", "-H", "nvidia-h200", "--serve", cmd).output.split())
        assert "read as sglang 0.5.23, the newest release k3plan read (fit --engine-version X reads the command" in said
    budget = json.loads(cli("fit", "-m", "deepseek-v4-flash", "-H", "nvidia-h200", "-t", "4", "-s", "sglang",
                            "--json").stdout)  # fmt: skip
    assert "sglang 0.5.23: the 0.5.21 form" in budget["provenance"]["kv"]


def test_moe_a2a_backend_is_refused_where_sglang_s_parser_lacks_it(cli):
    """--moe-a2a-backend: first registered in the 0.4.10.post2 wheel's server_args.py (choices ["deepep"] beside
    --enable-deepep-moe), not in 0.4.10's or 0.4.10.post1's (engines/sglang/server_flags.py, read from the wheels): a
    command of those with it is refused in one line naming the flag and the release, as SGLang's argparse stops at
    it; 0.4.10.post2 takes it, and refuses a backend outside its choices ('invalid choice')."""
    cmd = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --moe-a2a-backend deepep"
    for release in ("0.4.10", "0.4.10.post1"):
        old = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", release)
        assert old.exit_code == 2 and len(old.output.strip().splitlines()) == 1, old.output
        assert f"--moe-a2a-backend: sglang {release}'s parser has no such option" in old.output
        assert "registered in sglang 0.4.10.post2-0.5.23" in old.output
    for release in ("0.4.10.post2", "0.5.2"):
        assert cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", release).exit_code in (
            0,
            1,
        )
    none = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd.replace("deepep", "none"), "--engine-version",
               "0.4.10.post2")  # fmt: skip
    assert none.exit_code == 2 and "invalid choice: 'none' (choose from deepep)" in none.output


def _read(cmd: str, release: str):
    from k3plan.engines.release import parse_post, parse_release
    from k3plan.engines.serve import parse_serve

    return parse_serve(
        cmd,
        platform="gpu",
        device_gib=139.8,
        device_name="nvidia-h200",
        release=parse_release(release),
        release_post=parse_post(release),
    )


def test_an_alias_is_taken_where_its_release_registers_it():
    """--ep: an alias of --ep-size first registered in the 0.4.10 wheel's server_args.py ('--ep-size', '--ep',
    '--expert-parallel-size'); 0.4.9's parser has --expert-parallel-size beside --ep-size (from 0.4.0.post1) but no
    --ep, and its argparse reads --ep as an ambiguous prefix of --ep-size, --ep-num-redundant-experts,
    --ep-dispatch-algorithm and --eplb-* (engines/sglang/server_flags.py, read from the wheels)."""
    from k3plan.errors import K3PlanError

    cmd = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 {} 8"
    assert _read(cmd.format("--ep"), "0.4.10").ep == 8
    assert _read(cmd.format("--expert-parallel-size"), "0.4.9").ep == 8
    with pytest.raises(K3PlanError, match=r"ambiguous option: --ep could match --ep-dispatch-algorithm, .*--ep-size"):
        _read(cmd.format("--ep"), "0.4.9")


def test_a_flag_of_a_later_release_is_refused_in_one_line_naming_it_and_the_release(cli):
    """--language-model-only: first registered in the 0.5.18 wheel (engines/sglang/server_flags.py); a 0.5.17 command
    with it stops at argparse's 'unrecognized arguments', said in one line with the releases that take it. A vLLM
    spelling no SGLang release registers says SGLang's."""
    cmd = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --language-model-only"
    old = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", "0.5.17")
    assert old.exit_code == 2 and len(old.output.strip().splitlines()) == 1, old.output
    assert "--language-model-only: sglang 0.5.17's parser has no such option" in old.output
    assert "registered in sglang 0.5.18-0.5.23" in old.output
    assert cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", "0.5.18").exit_code in (0, 1)
    vllm = cli(
        "fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd.replace("--language-model-only", "--max-num-seqs 8")
    )
    assert vllm.exit_code == 2 and "SGLang's is --max-running-requests" in vllm.output
    # a post-release not read is read as the newest read before it, and says so
    late = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", "0.5.17.post3")
    assert late.exit_code == 2 and "sglang 0.5.17.post3 (read as 0.5.17, the newest read before it)" in late.output


def test_every_logged_sglang_case_s_release_has_its_own_parser_read():
    """The release each SGLang case (tests/engines/cases) and public command names is one whose wheel the option
    table was read from (engines/sglang/server_flags.py RELEASES), post-releases included: its flags are checked
    against its own parser, not a neighbour's."""
    from pathlib import Path

    import yaml

    from k3plan.engines.sglang.server_flags import RELEASES

    here = Path(__file__).parent
    named = {
        str(c["engine_version"])
        for c in (yaml.safe_load(p.read_text()) for p in sorted((here / "cases").glob("sglang-*.yaml")))
        if "engine_version" in c
    }
    named |= {
        str(c["engine_version"])
        for c in yaml.safe_load((here / "public_commands.yaml").read_text())
        if "engine_version" in c and "sglang" in c["command"]
    }
    assert {"0.4.2", "0.4.6.post2", "0.4.8.post1", "0.5.8", "0.5.12"} <= named
    assert named <= set(RELEASES), sorted(named - set(RELEASES))


def test_a_switch_takes_no_value_and_a_list_takes_several_as_the_release_s_parser_does():
    """engines/sglang/server_flags.py KINDS, read from the wheels: --enable-dp-attention is a store_true switch in
    every release that registers it (argparse stops at a value given to it: 'ignored explicit argument' for
    --flag=value, the value left over as 'unrecognized arguments' otherwise); --cuda-graph-bs takes nargs "+" (its
    values up to the next flag)."""
    from k3plan.errors import K3PlanError

    cmd = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 "
    for given, said in (("--enable-dp-attention=true", "ignored explicit argument 'true'"),
                        ("--enable-dp-attention true", "unrecognized arguments: true")):  # fmt: skip
        with pytest.raises(K3PlanError, match=f"--enable-dp-attention is a switch in sglang 0.5.12's parser.*{said}"):
            _read(cmd + given, "0.5.12")
    q = _read(cmd + "--enable-dp-attention --cuda-graph-bs 8 16 32 --mem-fraction-static 0.8", "0.5.12")
    assert (q.tp, q.dp, q.stack) == (1, 8, "dp-attention")


# the long options (--help aside) the real parser of each release registers, counted from the parser each wheel builds
# (sglang 0.5.2-0.5.18 wheels, PyPI: sglang/srt/server_args.py ServerArgs.add_cli_args on an argparse.ArgumentParser,
# built by benchmarks/sglang_server_flags_check.py with the sglang modules whose import raises under its stubs stood in
# for, session 50); the table (written from the source by benchmarks/sglang_server_flags.py) agrees option by option
REAL_PARSER_OPTIONS = {
    "0.5.2": 218,
    "0.5.3": 254,
    "0.5.3.post1": 257,
    "0.5.3.post2": 271,
    "0.5.3.post3": 271,
    "0.5.4": 281,
    "0.5.4.post1": 274,
    "0.5.4.post2": 277,
    "0.5.4.post3": 280,
    "0.5.5": 281,
    "0.5.5.post1": 281,
    "0.5.5.post2": 281,
    "0.5.5.post3": 287,
    "0.5.6": 296,
    "0.5.6.post1": 298,
    "0.5.6.post2": 300,
    "0.5.7": 321,
    "0.5.8": 336,
    "0.5.8.post1": 336,
    "0.5.9": 341,
    "0.5.10": 365,
    "0.5.10.post1": 365,
    "0.5.11": 387,
    "0.5.12": 402,
    "0.5.12.post1": 402,
    "0.5.13": 419,
    "0.5.13.post1": 419,
    "0.5.14": 433,
    "0.5.15": 451,
    "0.5.15.post1": 451,
    "0.5.16": 476,
    "0.5.17": 491,
    "0.5.18": 506,
}


@pytest.mark.parametrize("version", sorted(REAL_PARSER_OPTIONS))
def test_the_option_table_of_0_5_2_to_0_5_18_is_the_real_parser_s(version):
    """The releases whose parsers did not build under the stubs until session 50: the table holds as many options as
    each real parser, and the real parser's kinds where the source reader could have erred -- DeprecatedAliasStoreAction
    (0.5.13 on; nargs None: one value) and nargs '?' (--hybrid-kvcache-ratio 0.5.2-0.5.7, --model-checksum 0.5.9 on:
    one value or none, read as a value)."""
    from k3plan.engines.release import parse_post, parse_release
    from k3plan.engines.sglang.serve import option_kind, release_options

    opts = release_options(parse_release(version.split(".post")[0]), parse_post(version))[0] - {"--help"}
    assert len(opts) == REAL_PARSER_OPTIONS[version]
    if version in ("0.5.15", "0.5.18"):
        assert option_kind("--cuda-graph-max-bs", version) == "value"  # a DeprecatedAliasStoreAction alias there
    if version == "0.5.5":
        assert option_kind("--hybrid-kvcache-ratio", version) == "value"
