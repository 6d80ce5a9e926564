"""fit --serve (issue 34): a serve command read as the engine would run it (k3plan.engines.serve)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

NIGHTLY = (
    "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --enable-expert-parallel --max-model-len 9216 "
    "--max-num-batched-tokens 512 --max-num-seqs 1 --gpu-memory-utilization 0.7 --kv-cache-dtype auto "
    "--trust-remote-code --enable-ep-weight-filter --language-model-only"
)


def test_vllm_serve_on_a_tpu_is_torchtpu_vllm_and_on_a_gpu_vllm():
    tpu = parse_serve(NIGHTLY, platform="tpu")
    assert (tpu.stack, tpu.model, tpu.tp, tpu.ep, tpu.dp) == ("torchtpu-vllm", "kimi-k3", 32, 32, 1)
    assert (tpu.context, tpu.chunk, tpu.batch, tpu.kv_dtype) == (9216, 512, 1, None)
    assert tpu.stack_ref == "torchtpu-vllm:gpu_memory_utilization=0.7"
    assert tpu.ignored == ("--trust-remote-code", "--enable-ep-weight-filter", "--language-model-only")
    assert parse_serve(NIGHTLY, platform="gpu").stack == "vllm"


@pytest.mark.parametrize(
    ("hf", "model"),
    [
        ("moonshotai/Kimi-K3", "kimi-k3"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
        ("moonshotai/Kimi-K2-Instruct-0905", "kimi-k2"),
        ("moonshotai/Kimi-K2-Thinking", "kimi-k2-thinking"),  # its own bundle: INT4 experts, no vision tower
        ("MOONSHOTAI/kimi-k2-thinking", "kimi-k2-thinking"),
        ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4-flash"),
        ("kimi-k3", "kimi-k3"),  # plan's launch lines name the bundled model
    ],
)
def test_hugging_face_ids_map_to_bundled_models(hf, model):
    assert parse_serve(f"vllm serve {hf} --enable-expert-parallel", platform="gpu").model == model


def test_sglang_launch_server_reads_its_own_flags():
    q = parse_serve(
        "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K3 --tp-size 16 --context-length 65536 "
        "--chunked-prefill-size 4096 --max-running-requests 8 --mem-fraction-static 0.85 --trust-remote-code",
        platform="gpu",
    )
    assert (q.stack, q.tp, q.context, q.chunk, q.batch) == ("sglang", 16, 65536, 4096, 8)
    # SGLang's default all-to-all backend is none (the sglang stack prices DeepEP unless told)
    assert q.stack_options == {"mem_fraction_static": "0.85", "moe_a2a_backend": "none"}
    deepep = parse_serve(
        "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K3 --moe-a2a-backend deepep", platform="gpu"
    )
    assert deepep.stack_options == {"moe_a2a_backend": "deepep"}


@pytest.mark.parametrize(
    ("cmd", "says"),
    [
        ("vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32", "without --enable-expert-parallel"),
        ("vllm serve moonshotai/Kimi-K3 --enable-expert-parallel --speculative-config {}", "speculative"),
        ("vllm serve moonshotai/Kimi-K3 --enable-expert-parallel --frobnicate 3", "--frobnicate"),
        ("vllm serve meta-llama/Llama-3-8B --enable-expert-parallel", "not a checkpoint k3plan can price"),
        ("vllm serve moonshotai/Kimi-K3 --enable-expert-parallel --max-model-len lots", "whole number"),
        ("trtllm-serve moonshotai/Kimi-K3", "expected 'vllm serve MODEL"),
        ("vllm serve moonshotai/Kimi-K3 --enable-expert-parallel --kv-cache-dtype int3", "--kv-cache-dtype"),
    ],
)
def test_a_flag_k3plan_cannot_honour_is_refused_in_one_line(cmd, says):
    with pytest.raises(K3PlanError, match=says) as err:
        parse_serve(cmd, platform="tpu")
    assert "\n" not in str(err.value)


def test_the_nightly_fits_through_serve_with_its_engine_figures(cli):
    r = cli("fit", "-t", "2x2x4", "--serve", NIGHTLY, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["fits"] is True and d["stack"] == "torchtpu-vllm:gpu_memory_utilization=0.7"
    eng = d["engine"]
    assert eng["starts"] is True and eng["serve"]["ignored"][0] == "--trust-remote-code"
    # int(0.7 x usable) - weights: the whole pool. The plugin's per-layer layout (kv_cache_manager.py
    # _maybe_set_compact_mamba_num_blocks_override @15e5264a): each of 24 layer regions holds 3 state groups x
    # (max_num_seqs 1 + 1) unpadded KDA slots of 203,520 B (96 heads / 32 x 128 x 128 x 4 B + the conv state), the
    # rest 16-token MLA blocks of 16 x 1,280 B; vLLM logs num_blocks // 4 groups x 16 tokens
    usable, weights = d["hardware"]["usable_bytes_per_device"], d["per_device"]["weights_bytes"]
    assert eng["kv_pool_bytes"] == int(usable * 0.7) - weights
    assert d["cache_layout"]["state_bytes_per_layer_unpadded"] == 203_520 and eng["block_tokens"] == 16
    assert eng["num_blocks"] == (eng["kv_pool_bytes"] // 24 - 3 * 2 * 203_520) // (16 * 1280)
    assert eng["kv_pool_tokens"] == eng["num_blocks"] // 4 * 16
    assert eng["max_concurrency"] == round(eng["num_blocks"] / (9216 // 16 + 3), 2)


def test_serve_refuses_a_split_given_beside_it(cli):
    r = cli("fit", "-t", "2x2x4", "--tp", "16", "--serve", NIGHTLY)
    assert r.exit_code == 2 and "--serve sets the split" in r.output


def test_plan_s_launch_line_round_trips_through_serve(cli, tmp_path):
    out = tmp_path / "launch.sh"
    r = cli("plan", "-H", "tpu-v7x", "--stacks", "torchtpu-vllm", "--emit", "launch", out, "--json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)["recommended"]
    line = next(ln for ln in out.read_text().splitlines() if ln.startswith("vllm serve "))
    f = cli("fit", "-H", row["hardware"], "-t", row["topology"], "--serve", line, "--json")
    assert f.exit_code == 0, f.output
    d = json.loads(f.stdout)
    assert (d["parallel"]["tp"], d["parallel"]["ep"], d["parallel"]["dp"]) == (row["tp"], row["ep"], row["dp"])
    for key in ("weights_bytes", "kv_bytes", "state_bytes", "kv_bytes_per_token", "temp_bytes", "reserve_bytes"):
        assert d["per_device"][key] == row["per_device"][key], key


def test_vllm_s_short_flags_are_read():
    q = parse_serve(
        "vllm serve moonshotai/Kimi-K3 -tp 32 --enable-expert-parallel --max-model-len=9216", platform="tpu"
    )
    assert (q.tp, q.context) == (32, 9216)


def test_vllm_without_expert_parallel_on_a_gpu_is_priced_with_its_padding(cli):
    """vllm#51124: K3 at TP 32 without EP on H100 80GB ran out of memory loading the experts. The padded shards are in
    the budget's weights too (Stack.expert_pad), so the budget and the engine's sizing hold one weights figure; with
    expert parallelism (#51131) nothing is padded."""
    cmd = "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --moe-backend marlin"
    q = parse_serve(cmd, platform="gpu")
    assert (q.expert_parallel, q.ep, q.moe_backend) == (False, 32, "marlin")
    r = cli("fit", "-H", "nvidia-h100-sxm", "-t", "4x8", "--serve", cmd, "--json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    eng = d["engine"]
    # no --language-model-only: the vision tower too, whole on every device, in the budget's weights as the engine's
    vision = 447_358_976 * 2
    assert eng["weights_bytes"] == d["per_device"]["weights_bytes"] and d["weights_by_role"]["vision"] == vision
    assert eng["starts"] is False and "CUDA out of memory while loading the weights" in eng["message"]
    assert "3,072 / 32 padded to 256 a shard" in d["provenance"]["weights"]
    with_ep = cli("fit", "-H", "nvidia-h100-sxm", "-t", "4x8", "--serve", cmd + " --enable-expert-parallel", "--json")
    e = json.loads(with_ep.stdout)
    assert e["engine"]["weights_bytes"] == e["per_device"]["weights_bytes"]  # #51131: no padding
    assert "padded" not in e["provenance"]["weights"]

    def experts(out: dict) -> int:
        return out["weights_by_role"]["expert"]

    # 3,072 / 32 = 96 a shard padded to 256: the experts x 8/3 (each tensor's share rounded up), the rest as with EP
    assert experts(d) == pytest.approx(experts(e) * 256 / 96, abs=1_000)
    rest = d["per_device"]["weights_bytes"] - experts(d)
    assert rest == e["per_device"]["weights_bytes"] - experts(e)


def test_without_language_model_only_vllm_loads_the_vision_tower(cli):
    """K3 is image-text-to-text: without --language-model-only vLLM builds the vision tower too (447,358,976 bf16
    params, k3-facts.md §2), whole on every device: the budget's weights hold it as the engine's do, and the pool
    is smaller by it."""
    with_flag = json.loads(cli("fit", "-t", "2x2x4", "--serve", NIGHTLY, "--json").stdout)["engine"]
    without = json.loads(
        cli("fit", "-t", "2x2x4", "--serve", NIGHTLY.replace(" --language-model-only", ""), "--json").stdout
    )
    eng = without["engine"]
    assert eng["weights_bytes"] - with_flag["weights_bytes"] == 447_358_976 * 2
    assert with_flag["kv_pool_bytes"] - eng["kv_pool_bytes"] == 447_358_976 * 2
    assert "the vision tower" in eng["sources"]["weights"] and "the vision tower" in without["provenance"]["weights"]


K26 = "vllm serve moonshotai/Kimi-K2.6 --tensor-parallel-size 8 --max-model-len 8192"


@pytest.mark.parametrize(
    ("limits", "release", "tower"),
    [
        ("", "0.20.0", True),
        # a modality not given counts 999 (config/multimodal.py get_limit_per_prompt): image and video at 0 leave the
        # tower K2.5's class builds for "vision_chunk"
        (""" --limit-mm-per-prompt '{"image":0,"video":0}'""", "0.20.0", True),
        (""" --limit-mm-per-prompt '{"image":0,"vision_chunk":0,"video":0}'""", "0.20.0", False),
        (" --limit-mm-per-prompt vision_chunk=0", "0.16.0", False),
        (""" --limit-mm-per-prompt '{"vision_chunk":{"count":0}}'""", "0.16.0", False),
        (""" --limit-mm-per-prompt '{"vision_chunk":1}'""", "0.20.0", True),
        # 0.15.1's KimiK25ForConditionalGeneration builds the tower whatever the limits
        (""" --limit-mm-per-prompt '{"vision_chunk":0}'""", "0.15.1", True),
    ],
)
def test_vllm_skips_kimi_k2_6_s_tower_only_where_its_modality_is_limited_to_zero(cli, limits, release, tower):
    """vLLM from 0.16.0 builds KimiK25ForConditionalGeneration's vision tower under _mark_tower_model(...,
    "vision_chunk"): no weights where --limit-mm-per-prompt sets vision_chunk to 0 (Engine.tower_off_by_limits)."""
    out = json.loads(
        cli(
            "fit", "-H", "nvidia-h200", "-t", "8", "--serve", K26 + limits, "--engine-version", release, "--json"
        ).stdout
    )
    assert ("the vision tower" in out["engine"]["sources"]["weights"]) is tower
    assert (out["weights_by_role"].get("vision", 0) > 0) is tower


def test_a_limit_mm_per_prompt_neither_form_reads_is_one_line(cli):
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", K26 + " --limit-mm-per-prompt '{bad'")
    assert r.exit_code == 2 and "--limit-mm-per-prompt '{bad': expected JSON" in r.output
    assert "Traceback" not in r.output


def test_the_readme_s_serve_example_says_what_fit_prints(cli):
    """The README's torchtpu-vllm --serve example: its comment's pool and tokens are what the command prints."""
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text().splitlines()
    i = next(n for n, ln in enumerate(readme) if ln.startswith("# torchtpu-vllm (vllm serve on a TPU)"))
    m = re.search(r"KV pool ([\d.]+) GiB a device, \"GPU KV cache size: ([\d,]+) tokens\"", readme[i])
    assert m, readme[i]
    args = shlex.split(readme[i + 1])
    assert args[:2] == ["k3plan", "fit"]
    r = cli(*args[1:], "--json")
    assert r.exit_code == 0, r.output
    eng = json.loads(r.stdout)["engine"]
    assert f"{eng['kv_pool_bytes'] / 2**30:.2f}" == m[1] and f"{eng['kv_pool_tokens']:,}" == m[2]


def test_a_block_size_the_mla_record_did_not_time_is_a_caveat_not_ignored():
    """torchtpu-vllm's MLA kernel is priced at the plugin's 16-token default page (engines.flags
    TORCHTPU_DEFAULT_BLOCK, probe mla-engine): another --block-size with a bf16 cache is said, not called harmless."""
    from k3plan.engines.serve import parse_serve

    base = "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --enable-expert-parallel --max-num-seqs 1"
    other = parse_serve(f"{base} --block-size 256", platform="tpu")
    assert "--block-size" not in other.ignored and "--block-size 256" in other.caveats[0]
    same = parse_serve(f"{base} --block-size 16", platform="tpu")
    assert "--block-size" in same.ignored and same.caveats == ()
    fp8 = parse_serve(f"{base} --block-size 256 --kv-cache-dtype fp8", platform="tpu")
    assert fp8.caveats == ()  # an fp8 cache takes no MLA term: nothing to be high


# --- one verdict (issue 47): the engine's start check is the first line, the JSON's fits and the exit code ---

NO_EP = "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --moe-backend marlin"
SGLANG_1M = "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K3 --tp-size 16 --context-length 1048576"


def test_the_readme_s_oom_example_has_one_verdict_the_engine_s(cli):
    """The README's vllm#51124 example: k3plan's budget fits (EP over the TP group), the engine runs out of memory
    loading its padded expert shards. fits, the first line and the exit code all say the engine's verdict."""
    r = cli("fit", "-H", "nvidia-h100-sxm", "-t", "4x8", "--serve", NO_EP, "--json")
    d = json.loads(r.stdout)
    assert d["fits"] is d["engine"]["starts"] is False and r.exit_code == 1
    assert d["reason_code"] == "weights" and "CUDA out of memory while loading the weights" in d["reason"]
    assert "Mxfp4MoEMethod.create_weights" in d["engine"]["raised_at"]
    assert d["workload"]["context_tokens"] == 1_048_576  # no --max-model-len: the model's own maximum
    at_128k = json.loads(
        cli("fit", "-H", "nvidia-h100-sxm", "-t", "4x8", "--serve", NO_EP + " --max-model-len 128K", "--json").stdout
    )
    # k3plan's own budget, beside, holds the padded shards too: it does not fit either (one weights figure)
    assert at_128k["fits"] is False and at_128k["engine"]["budget"]["fits"] is False
    assert at_128k["per_device"]["weights_bytes"] == at_128k["engine"]["weights_bytes"]  # the tower in both
    t = cli("fit", "-H", "nvidia-h100-sxm", "-t", "4x8", "--serve", NO_EP)
    assert t.exit_code == 1
    lines = t.stdout.splitlines()
    assert lines[0].startswith("WON'T START: torch.OutOfMemoryError"), lines[0]
    assert "ep=32" not in t.stdout and "ep=none (experts TP-split" in t.stdout  # no expert parallelism asked


def test_a_command_that_starts_says_its_pool_first_and_why_the_counts_differ(cli):
    r = cli("fit", "-t", "2x2x4", "--serve", NIGHTLY)
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert first.startswith("STARTS: KV pool 27,024 tokens (3.12 GiB), max concurrency 11.67 at 9,216 tokens"), first
    second = " ".join(r.stdout.split())
    assert "k3plan's own budget (the table below, not the engine's rule):" in second
    assert "FITS" not in second.replace("STARTS", "")  # one verdict an output (issue 48): the margin, not a verdict
    # both counts shown: one line says why they differ
    assert "sequences: k3plan's budget holds 11 at 9,216 tokens, the engine 11.67" in " ".join(r.stdout.split())


K2_THINKING_32K = (
    "vllm serve moonshotai/Kimi-K2-Thinking --tensor-parallel-size 8 --trust-remote-code --max-model-len 32768 "
    "--max-num-batched-tokens 4096 --max-num-seqs 1 --gpu-memory-utilization 0.95 --enforce-eager"
)


def test_a_start_on_an_upper_bound_of_the_pool_says_so_with_its_margin(cli):
    """A verdict never rests silently on a lower bound: GPU vLLM's non-torch memory is not priced, so its pool is an
    upper bound and a STARTS says what its check leaves out and by how much it clears it. The jwt625 32k start on
    eight H100s (tests/engines/cases, a strict xfail: vLLM refused it) clears k3plan's check by the pool less one
    32,768-token request of K2's 70,272 B a token (61 layers x 576 bf16 values); the torch_tpu plugin's worker reads
    the device's whole view, so its STARTS has nothing to add."""
    r = cli("fit", "-H", "nvidia-h100-sxm", "-t", "8", "--serve", K2_THINKING_32K, "--json")
    eng = json.loads(r.stdout)["engine"]
    assert eng["starts"] and eng["check_margin_bytes"] == eng["kv_pool_bytes"] - 32_768 * 70_272
    assert eng["unpriced"].startswith("vLLM's non-torch memory")
    text = cli("fit", "-H", "nvidia-h100-sxm", "-t", "8", "--serve", K2_THINKING_32K).stdout
    margin = f"{eng['check_margin_bytes'] / 2**30:.2f} GiB over the start check, which does not price vLLM's non-torch"
    assert margin in " ".join(text.split()[:40])
    tpu = json.loads(cli("fit", "-t", "2x2x4", "--serve", NIGHTLY, "--json").stdout)["engine"]
    assert tpu["starts"] and "unpriced" not in tpu
    # SGLang reads its free memory after the load (the CUDA context and NCCL in it): its smallest pool that starts
    # holds 7 tokens (engines/sglang/memory.py SGLANG_MIN_POOL_TOKENS), here DeepSeek-V3's 70,272 B each
    sg = json.loads(
        cli(
            "fit", "-H", "nvidia-h200", "-t", "8", "--serve",
            "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8", "--json",
        ).stdout
    )["engine"]  # fmt: skip
    assert sg["starts"] and sg["unpriced"].startswith("SGLang's non-torch memory")
    assert sg["check_margin_bytes"] == sg["kv_pool_bytes"] - 7 * 70_272


def test_sglang_starts_whenever_its_pool_holds_tokens_and_refuses_only_an_empty_pool(cli):
    """SGLang's start rule is its own (engines.sglang.memory): a --context-length longer than the pool is not a
    refusal (TpModelWorker caps max_req_len at the pool); a pool of no memory is: for K3's hybrid model the state
    pool's sizing raises first (KVCacheConfigurator._handle_max_mamba_cache: no slot at all)."""
    r = cli("fit", "-H", "nvidia-b200", "-t", "2x8", "--serve", SGLANG_1M + " --mem-fraction-static 0.6", "--json")
    d = json.loads(r.stdout)
    eng = d["engine"]
    assert r.exit_code == 0 and d["fits"] is eng["starts"] is True
    assert 0 < eng["kv_pool_tokens"] < 1_048_576 and "SGLang starts and truncates" in eng["message"]
    assert eng["budget"]["fits"] is False  # k3plan's budget at one 1M sequence: not the engine's rule
    low = cli("fit", "-H", "nvidia-b200", "-t", "2x8", "--serve", SGLANG_1M + " --mem-fraction-static 0.5")
    assert low.exit_code == 1
    assert low.stdout.startswith(
        "WON'T START: RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("-t", "2x2x4", "--serve", NIGHTLY),
        ("-H", "nvidia-h100-sxm", "-t", "4x8", "--serve", NO_EP),
        ("-H", "nvidia-b200", "-t", "2x8", "--serve", SGLANG_1M + " --mem-fraction-static 0.6"),
        ("-H", "nvidia-b200", "-t", "2x8", "--serve", SGLANG_1M + " --mem-fraction-static 0.5"),
    ],
)
def test_fits_is_the_engine_s_verdict_and_so_is_the_exit_code(cli, args):
    r = cli("fit", *args, "--json")
    d = json.loads(r.stdout)
    assert d["fits"] is d["engine"]["starts"] and r.exit_code == (0 if d["fits"] else 1)


# --- defaults as the engine has them (issue 47 item 2) ---

BARE = "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --enable-expert-parallel"


def test_a_command_without_max_model_len_runs_at_the_model_s_maximum(cli):
    """vLLM derives max_model_len from the model (max_position_embeddings: 1,048,576 for K3), not k3plan's
    131,072; so does SGLang's context_len."""
    d = json.loads(cli("fit", "-t", "2x2x4", "--serve", BARE, "--json").stdout)
    assert d["workload"]["context_tokens"] == 1_048_576
    sg = json.loads(
        cli(
            "fit",
            "-H",
            "nvidia-b200",
            "-t",
            "2x8",
            "--serve",
            SGLANG_1M.replace(" --context-length 1048576", ""),
            "--json",
        ).stdout
    )
    assert sg["workload"]["context_tokens"] == 1_048_576


@pytest.mark.parametrize(
    ("platform", "gib", "name", "seqs", "chunk"),
    [
        ("gpu", 79.6, "nvidia-h100-sxm", 1024, 8192),  # >= 70 GiB, not an A100
        ("gpu", 79.6, "nvidia-a100-80gb", 256, 2048),  # the A100 exception (vLLM PR #17885)
        ("gpu", 47.5, "nvidia-l40s", 256, 2048),
        ("tpu", 94.7, "tpu-v7x", 256, 2048),  # the plugin's get_device_total_memory raises: device_memory 0
    ],
)
def test_vllm_s_own_batch_defaults(platform, gib, name, seqs, chunk):
    """vllm/engine/arg_utils.py EngineArgs._set_default_args @99d7eb5d (OPENAI_API_SERVER), not 1 sequence."""
    q = parse_serve(BARE, platform=platform, device_gib=gib, device_name=name)
    assert (q.batch, q.chunk) == (seqs, chunk)
    assert "vLLM's default max_num_seqs" in q.batch_source and "_set_default_args" in q.chunk_source
    small = parse_serve(BARE + " --max-num-batched-tokens 512", platform=platform, device_gib=gib, device_name=name)
    assert small.batch == min(seqs, 512)


@pytest.mark.parametrize(("gib", "chunk"), [(79.6, 8192), (139.8, 8192), (178.4, 16384), (39.4, 4096)])
def test_sglang_s_chunk_default_follows_the_gpu_s_memory(gib, chunk):
    q = parse_serve(SGLANG_1M, platform="gpu", device_gib=gib)
    assert q.chunk == chunk and "handle_gpu_memory_settings" in q.chunk_source
    assert q.max_running_requests is None and q.batch == 0  # SGLang's own default, not 1


# --- flags read as the engine reads them (issue 47 item 3) ---


@pytest.mark.parametrize(
    ("cmd", "context"),
    [
        (BARE + " --max-model-len=9216", 9216),
        (BARE + " --max-model-len 128k", 128_000),  # vLLM's human_readable_int: k = 10^3
        (BARE + " --max-model-len 128K", 131_072),  # K = 2^10
        (BARE + " --max-model-len 25.6k", 25_600),
        (BARE + " --max-model-len 1M", 1_048_576),
    ],
)
def test_max_model_len_is_read_as_vllm_s_human_readable_int(cmd, context):
    assert parse_serve(cmd, platform="tpu").context == context


def test_the_shapes_a_command_comes_in():
    base = parse_serve(BARE + " --max-model-len 9216", platform="tpu")
    env = parse_serve("MOE_REQUANTIZE_WEIGHT_DTYPE=fp8 HF_TOKEN=x " + BARE + " --max-model-len 9216", platform="tpu")
    assert (env.tp, env.context, env.env["MOE_REQUANTIZE_WEIGHT_DTYPE"]) == (32, 9216, "fp8")
    assert "MOE_REQUANTIZE_WEIGHT_DTYPE=fp8" in env.ignored
    assert "HF_TOKEN=***" in env.ignored  # a credential's value is never echoed (serve_values.shown_env)
    wrapped = parse_serve(
        "vllm serve moonshotai/Kimi-K3 \\\n  --tensor-parallel-size 32 \\\n  --enable-expert-parallel \\\n  --max-model-len 9216",
        platform="tpu",
    )
    assert (wrapped.tp, wrapped.context) == (base.tp, base.context)
    by_flag = parse_serve("vllm serve --model moonshotai/Kimi-K3 -tp=32 --enable-expert-parallel", platform="tpu")
    assert (by_flag.model, by_flag.tp) == ("kimi-k3", 32)
    no_ep = parse_serve("vllm serve moonshotai/Kimi-K3 -tp 32 --no-enable-expert-parallel", platform="gpu")
    assert no_ep.expert_parallel is False and no_ep.ep == 32
    both = parse_serve(
        "vllm serve moonshotai/Kimi-K3 -tp 32 --enable-expert-parallel --no-enable-expert-parallel", platform="gpu"
    )
    assert both.expert_parallel is False  # argparse: the last one wins
    auto = parse_serve(BARE + " --max-model-len auto", platform="tpu")
    assert auto.context_auto and auto.context is None


def test_recipe_flags_with_no_memory_effect_are_listed_not_refused():
    """Flags the engines' own multi-node and disaggregation recipes pass (vLLM's docs, torchtpu-vllm's configs)."""
    q = parse_serve(
        BARE + " --disable-custom-all-reduce --nnodes 4 --node-rank 0 --headless --kv-transfer-config "
        '\'{"kv_connector":"TPUConnector"}\' --quantization deepseek_v4_fp8',
        platform="tpu",
    )
    for flag in ("--disable-custom-all-reduce", "--nnodes", "--node-rank", "--headless", "--kv-transfer-config"):
        assert flag in q.ignored


def test_num_gpu_blocks_override_sets_the_pool(cli):
    """vllm/v1/core/kv_cache_utils.py may_override_num_blocks: the block count the pool gets, after the memory
    checks (so it does not rescue a command whose memory holds no pool)."""
    cmd = NIGHTLY + " --num-gpu-blocks-override 100"
    eng = json.loads(cli("fit", "-t", "2x2x4", "--serve", cmd, "--json").stdout)["engine"]
    assert eng["num_blocks"] == 100 and eng["kv_pool_tokens"] == 100 // 4 * 16
    assert "num_gpu_blocks_override" in eng["sources"]["num_blocks"]


def test_max_model_len_auto_fits_the_length_to_the_pool(cli):
    r = cli(
        "fit",
        "-t",
        "2x2x4",
        "--serve",
        BARE + " --gpu-memory-utilization 0.7 --language-model-only --max-num-seqs 1 --max-model-len auto",
        "--json",
    )
    d = json.loads(r.stdout)
    eng = d["engine"]
    assert r.exit_code == 0 and d["fits"] is True and eng["starts"] is True
    assert eng["message"].startswith("Auto-fit max_model_len: reduced from 1048576 to ")
    assert 0 < eng["max_model_len"] < 1_048_576 and eng["max_concurrency"] >= 1


@pytest.mark.parametrize(
    ("cmd", "says"),
    [
        (BARE + " --block-size 0", "--block-size '0': expected a positive number"),
        (BARE + " --block-size -5", "--block-size"),
        (BARE + " --block-size abc", "--block-size 'abc': expected a whole number"),
        (BARE + " --max-model-len=", "--max-model-len= is empty"),
        (BARE + " --max-num-seqs 1" + "0" * 30, "--max-num-seqs"),
        (BARE + " --max-model-len 1.5K", "decimals are not allowed"),
        (BARE + " --gpu-memory-utilization 1.5", "expected a number in (0, 1]"),
        (BARE + " --served-model-name 'k3", "cannot split the command"),
        (BARE + " --max-model-len 9216\x1b[A", "control character"),
        ("trtllm-serve moonshotai/Kimi-K3 --tp_size 32", "'trtllm-serve' is not an engine k3plan reads"),
        ("FROBNICATE=1 " + BARE, "environment variable FROBNICATE"),
        ("vllm serve moonshotai/Kimi-K3 -tp 32 --no-enable-expert-parallel", "--no-enable-expert-parallel"),
        ("vllm serve moonshotai/Kimi-K3 --enable-expert-parallel --quantization awq", "--quantization 'awq'"),
    ],
)
def test_input_k3plan_cannot_read_is_one_line_exit_2(cli, cmd, says):
    with pytest.raises(K3PlanError) as err:
        parse_serve(cmd, platform="tpu")
    assert says in str(err.value) and "\n" not in str(err.value)
    r = cli("fit", "-t", "2x2x4", "--serve", cmd)
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_an_unquoted_serve_command_gets_a_hint_to_quote_it(cli):
    r = cli("fit", "-t", "2x2x4", "--serve", "vllm", "serve", "moonshotai/Kimi-K3", "--tensor-parallel-size", "32")
    assert r.exit_code == 2 and "quote the serve command: --serve 'vllm serve moonshotai/Kimi-K3 ...'" in r.output


# --- model ids resolve exactly (issue 48 item 1) ---


@pytest.mark.parametrize(
    ("hf", "says"),
    [
        ("moonshotai/Kimi-Dev-72B", "bundles no config for that checkpoint"),
        ("someone/Kimi-K2-Instruct-AWQ", "AWQ conversion"),
        ("someone/DeepSeek-V3-GPTQ-Int4", "GPTQ conversion"),
    ],
)
def test_a_checkpoint_k3plan_cannot_price_is_refused_by_name(cli, hf, says):
    """A checkpoint k3plan does not bundle (Kimi-Dev-72B, a dense model) is not read as a Kimi one by its org or a
    prefix (Kimi-K2-Thinking has its own bundle now: tests/models/test_kimi_k2_thinking.py); a quantized conversion
    is not priced as the original's bytes."""
    with pytest.raises(K3PlanError, match=says) as err:
        parse_serve(f"vllm serve {hf} --enable-expert-parallel", platform="gpu")
    assert hf in str(err.value)
    r = cli("fit", "-H", "nvidia-h200", "-t", "1x8", "--serve", f"vllm serve {hf} -tp 8 --enable-expert-parallel")
    assert r.exit_code == 2


def test_torchtpu_vllm_s_page_is_its_own_16_tokens_and_its_state_slots_compact(cli):
    """The CEO's decision (issue 48 item 5), the plugin's code: a 16-token page (cache_config.block_size;
    TpuPlatform.update_block_size_for_backend grows it only under the unified pool), the KDA state in max_num_seqs +
    1 unpadded slots a layer apart from the pages (kv_cache_manager.py _maybe_set_compact_mamba_num_blocks_override
    @15e5264a); memory and speed read the same page (engines.flags.TORCHTPU_DEFAULT_BLOCK)."""
    from k3plan.engines.flags import TORCHTPU_DEFAULT_BLOCK

    d = json.loads(cli("fit", "-t", "2x2x4", "--serve", NIGHTLY, "--json").stdout)
    lay = d["cache_layout"]
    assert lay["block_tokens"] == TORCHTPU_DEFAULT_BLOCK == 16 and lay["paging"] == "separate"
    assert lay["state_bytes_per_layer"] == lay["state_bytes_per_layer_unpadded"]  # not padded to a page
    # the default max_num_seqs (256, vLLM's _set_default_args on an OOT platform) at --gpu-memory-utilization 0.7:
    # 256 + 1 slots x 72 KDA layer pages x 203,520 B = 3.5 GiB, more than the 3.12 GiB budget: the plugin refuses
    r = cli("fit", "-t", "2x2x4", "--serve", NIGHTLY.replace(" --max-num-seqs 1", ""), "--json")
    bad = json.loads(r.stdout)
    assert r.exit_code == 1 and bad["fits"] is False
    assert bad["engine"]["message"].startswith("ValueError: Compact-mamba KV sizing does not fit")
    assert "_maybe_set_compact_mamba_num_blocks_override" in bad["engine"]["raised_at"]
    # a command's --block-size is the engine's page
    agentx = json.loads(cli("fit", "-t", "2x2x4", "--serve", NIGHTLY + " --block-size 256", "--json").stdout)
    assert agentx["engine"]["block_tokens"] == 256


@pytest.mark.parametrize("hf", ["moonshotai/Kimi-K2.5", "moonshotai/Kimi-K2.6", "MOONSHOTAI/kimi-k2.6"])
def test_kimi_k2_5_and_k2_6_read_as_the_int4_bundle_never_k2_s_fp8(hf):
    """Kimi-K2.5 and K2.6 share one checkpoint layout (INT4 group-32 experts, a MoonViT tower: the bundled kimi-k2.6,
    models/bundled/kimi-k2.6/provenance.json); neither is read as kimi-k2 (fp8, 1.5x the expert bytes)."""
    from k3plan.engines.serve import model_of

    assert model_of(hf) == "kimi-k2.6"
    assert model_of("moonshotai/Kimi-K2-Instruct") == "kimi-k2"


def test_a_refused_checkpoint_names_every_id_serve_accepts():
    """The refusal's list is what --serve reads: every id it names resolves, and every bundle's own Hugging Face id
    is in it (the bundles that resolve through their provenance.json, DeepSeek-V4.1-Flash and Kimi-K2-Thinking
    among them, were once left out of the list)."""
    import re

    from k3plan.engines.serve import model_of
    from k3plan.errors import K3PlanError
    from k3plan.models.hub import hf_id
    from k3plan.models.loader import bundled_models

    with pytest.raises(K3PlanError) as err:
        model_of("Qwen/Qwen3-235B-A22B")
    listed = re.search(r"expected one of (.*) or a bundled", str(err.value))
    assert listed
    ids = listed.group(1).split(", ")
    for repo in ids:
        assert model_of(repo) in bundled_models()
    own = {i.lower() for i in map(hf_id, bundled_models()) if i}
    assert own <= set(ids) and {"deepseek-ai/deepseek-v4.1-flash", "moonshotai/kimi-k2-thinking"} <= own


@pytest.mark.parametrize(
    "cmd",
    [
        # moonshotai/Kimi-K2.6 docs/deploy_guidance.md, as a K2.6 bring-up log quotes it (models/bundled/kimi-k2.6/
        # provenance.json, source 2), the model path written as the Hub id
        "vllm serve moonshotai/Kimi-K2.6 -tp 8 --mm-encoder-tp-mode data --trust-remote-code --tool-call-parser kimi_k2 "
        "--reasoning-parser kimi_k2",
        "sglang serve --model-path moonshotai/Kimi-K2.6 --tp 8 --trust-remote-code --tool-call-parser kimi_k2 "
        "--reasoning-parser kimi_k2",
    ],
)
def test_kimi_k2_6_deploy_guidance_commands_read(cli, cmd):
    """The model card's own launch lines are never refused for an unknown flag (issue 47 item 2)."""
    r = cli("fit", "-H", "nvidia-h200", "-t", "1x8", "--serve", cmd, "--json")
    assert r.exit_code in (0, 1), r.output
    assert json.loads(r.stdout)["engine"]["engine"] in ("vllm", "sglang")


def test_max_model_len_auto_only_where_vllm_s_parser_takes_it(cli):
    """--max-model-len auto: human_readable_int_or_auto from the 0.14.x wheels; 0.11.0-0.13.0 parse an integer and
    refuse 'auto', so k3plan does (one line, exit 2)."""
    cmd = "vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --max-model-len auto"
    old = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", "0.13.0")
    assert old.exit_code == 2 and "parses --max-model-len as an integer" in old.output
    new = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", "0.14.1", "--json")
    assert new.exit_code in (0, 1) and json.loads(new.stdout)["engine"]["starts"] is True
