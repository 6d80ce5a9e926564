"""Serve commands with list flags (argparse nargs="+") and SGLang's pool cap, read as the engines read them (issue 47
item 2). The SGLang line is an SGLang developer's V4.1-Flash launch script (BBuf/how-to-optim-algorithm-in-cuda,
large-language-model/sglang/assets/deepseek-v41-kernel-journey/random-dspark/launch-tp4.sh, without its DSpark flags,
which k3plan refuses by name)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

SGLANG_V41 = (
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash "
    "--served-model-name deepseek-ai/DeepSeek-V4.1-Flash --tp 4 --ep-size 1 --trust-remote-code "
    "--moe-a2a-backend none --moe-runner-backend flashinfer_mxfp4 --mem-fraction-static 0.80 "
    "--max-total-tokens 33554432 --chunked-prefill-size 4096 --cuda-graph-bs-decode 1 2 4 8 16 32 64 "
    "--max-running-requests 128 --skip-server-warmup --reasoning-parser deepseek-v41 --random-seed 42 "
    "--decode-log-interval 10 --host 127.0.0.1 --port 30021"
)
K2 = "vllm serve moonshotai/Kimi-K2-Instruct -tp 8 --max-model-len 8192"


def _gpu(cmd: str):
    return parse_serve(cmd, platform="gpu", device_gib=178.0, device_name="nvidia-b200")


def test_sglang_s_list_flags_and_its_no_ep_default_read():
    q = _gpu(SGLANG_V41)
    assert (q.model, q.stack, q.tp, q.ep, q.max_total_tokens) == ("deepseek-v4.1-flash", "sglang", 4, None, 33554432)
    assert "--cuda-graph-bs-decode" in q.ignored  # CUDA graphs live outside mem_fraction_static's pool
    # a runner whose holding of DeepSeek-V4's FP4 experts was read is the stack's option (stack.yaml moe_runner_backend)
    assert q.stack_options["moe_runner_backend"] == "flashinfer_mxfp4"


def test_sglang_s_max_total_tokens_caps_the_pool(cli):
    # 8 GPUs: on 4 at 0.8 SGLang's V4.1 sliding-window pool (cap mode, 256 requests) leaves no room for a full pool
    base = (
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 8 --mem-fraction-static 0.8"
    )
    free = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", base, "--json").stdout)["engine"]
    assert free["starts"] and free["kv_pool_tokens"] > 0
    cap = free["kv_pool_tokens"] // 3
    got = json.loads(
        cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", f"{base} --max-total-tokens {cap}", "--json").stdout
    )["engine"]
    assert got["kv_pool_tokens"] == cap // 256 * 256 and got["kv_pool_bytes"] < free["kv_pool_bytes"]  # V4 pages: 256
    above = json.loads(
        cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", f"{base} --max-total-tokens {2**31 - 1}", "--json").stdout
    )["engine"]
    assert above["kv_pool_tokens"] == free["kv_pool_tokens"]  # a cap above the pool changes nothing


def test_vllm_s_capture_sizes_list_is_the_compilation_config_s():
    listed = _gpu(K2 + " --cudagraph-capture-sizes 1 2 4 8").compilation
    assert listed == _gpu(K2 + " --compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 4, 8]}'").compilation
    assert listed.capture_sizes == (1, 2, 4, 8)
    with pytest.raises(K3PlanError, match="mutually exclusive"):
        _gpu(K2 + " --cudagraph-capture-sizes 1 2 --compilation-config '{\"cudagraph_capture_sizes\": [4]}'")
    with pytest.raises(K3PlanError, match="whole numbers"):
        _gpu(K2 + " --cudagraph-capture-sizes one two")


# NVIDIA Dynamo's SGLang Kimi-K3 recipe (ai-dynamo/dynamo@79707e04 recipes/kimi-k3/sglang/agg-gb200-agentic/deploy.yaml,
# its worker.yaml as flags), without the three it sets that change the pool in ways k3plan does not price
DYNAMO_SGLANG_K3 = (
    "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K3 --served-model-name moonshotai/Kimi-K3 "
    "--trust-remote-code --tp-size 16 --ep-size 16 --context-length 1048576 --max-running-requests 64 "
    "--mem-fraction-static 0.88 --chunked-prefill-size 8192 --max-prefill-tokens 8192 --page-size 64 "
    "--schedule-policy fcfs --weight-loader-prefetch-checkpoints --mm-attention-backend triton_attn "
    "--moe-runner-backend deep_gemm --moe-a2a-backend megamoe --enable-nccl-nvls --enable-hierarchical-cache "
    "--hicache-size 100 --kv-cache-dtype fp8_e4m3 --enable-metrics"
)


def test_sglang_s_page_size_rounds_the_pool_to_whole_pages(cli):
    got = json.loads(cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "16", "--serve", DYNAMO_SGLANG_K3, "--json").stdout)
    eng = got["engine"]
    assert got["fits"] is True and eng["block_tokens"] == 64 and eng["kv_pool_tokens"] % 64 == 0
    one = DYNAMO_SGLANG_K3.replace("--page-size 64", "--page-size 1")
    ones = json.loads(cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "16", "--serve", one, "--json").stdout)["engine"]
    assert ones["kv_pool_tokens"] - 64 < eng["kv_pool_tokens"] <= ones["kv_pool_tokens"]


@pytest.mark.parametrize("release", [None, "0.5.16"], ids=["newest-read", "0.5.16"])
def test_sglang_sizes_k3_s_state_pool_by_its_own_rule(cli, release):
    """KVCacheConfigurator._handle_max_mamba_cache (sgl-project/sglang@5435ebae): without --max-mamba-cache-size the
    state pool takes mamba_full_memory_ratio r / (1 + r) of what the fraction leaves after the weights (r 0.9 by
    default), in whole slots of a request's state; the KV pool the rest; resolve_max_num_reqs caps the running
    requests at the slots // 3 (the radix cache on). A command naming no release is read as 0.5.23 (engines/sglang/
    releases.py NEWEST_RELEASE), whose pool allocates a padding slot beside the request slots and solves the ratio
    for them ((K + 1) x slot within the budget: sglang 0.5.17 and 0.5.23 wheels, mem_cache/kv_cache_configurator.py
    KVCacheConfigurator._handle_max_mamba_cache, releases.py MAMBA_PAD_SOURCE); 0.5.16 charges the K slots alone."""
    at = () if release is None else ("--engine-version", release)
    pad = 1 if release is None else 0

    def engine(extra: str = "") -> dict:
        r = cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "16", "--serve", DYNAMO_SGLANG_K3 + extra, "--json", *at)
        assert r.exit_code in (0, 1), r.output
        return json.loads(r.stdout)["engine"]

    base, same, hicache = (
        engine(),
        engine(" --mamba-full-memory-ratio 0.9"),
        engine(" --mamba-full-memory-ratio 7.21"),
    )
    assert base["kv_pool_tokens"] == same["kv_pool_tokens"]
    rest = base["kv_pool_bytes"] + int(
        base["sources"]["kv_pool"].split(" state pool ")[1].split(" B")[0].replace(",", "")
    )
    slot = int(base["sources"]["kv_pool"].split(" slots x ")[1].split(" B a request")[0].replace(",", ""))
    for eng, r in ((base, 0.9), (hicache, 7.21)):
        slots = int((rest * r / (1 + r) - pad * slot) // slot)
        assert f"{slots:,} slots x {slot:,} B a request" in eng["sources"]["kv_pool"]
        assert ("1 padding slot" in eng["sources"]["kv_pool"]) is bool(pad)
        assert eng["kv_pool_bytes"] == rest - (slots + pad) * slot
        assert f"max_running_requests={min(64, slots // 3):,} (the state pool's {slots:,} slots // 3" in eng["message"]
    assert hicache["kv_pool_tokens"] < base["kv_pool_tokens"]  # 7.21: most of the memory to the state
    # the slots as given (the launch line's --max-mamba-cache-size); --disable-radix-cache: one slot a request, the
    # running requests' own; the padding slot beside them from 0.5.17
    given = engine(" --max-mamba-cache-size 192")
    assert given["kv_pool_bytes"] == rest - (192 + pad) * slot and "max_running_requests=64 (" in given["message"]
    off = engine(" --disable-radix-cache")
    assert off["kv_pool_bytes"] == rest - (64 + pad) * slot and "64 slots // 1 a request" in off["message"]
    with pytest.raises(K3PlanError, match="--mamba-full-memory-ratio '0': expected a positive number"):
        _gpu(DYNAMO_SGLANG_K3 + " --mamba-full-memory-ratio 0")


def test_sglang_s_decode_context_parallelism_widens_the_allocator_not_the_rank_s_pool(cli):
    """--dcp-size N (SGLang's cookbook runs Kimi-K3 at TP8 DCP8): each rank's pool is sized as without DCP (an MLA
    token's cell has no DCP term, pool_configurator.py@6fde4f6f), the allocator holds N x its tokens in pages of N x
    --page-size (kv_cache_builder.py@00fe477f; test_dsv31_dcp8_gsm8k.py@bebe28c3: max_total_num_tokens 'multiplied by
    dcp_world_size'); the KDA state pool is a rank's as without it."""
    one, dcp = (
        json.loads(cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "16", "--serve", DYNAMO_SGLANG_K3 + x, "--json").stdout)
        for x in ("", " --dcp-size 16")
    )
    a, b = one["engine"], dcp["engine"]
    assert a["kv_pool_bytes"] == b["kv_pool_bytes"] and one["per_device"] == dcp["per_device"]
    assert (b["kv_pool_tokens"], b["block_tokens"]) == (16 * a["kv_pool_tokens"], 16 * 64)
    assert b["num_blocks"] == a["num_blocks"]  # the same pages a rank, each 1/16 of a logical page
    assert b["max_concurrency"] == pytest.approx(16 * a["max_concurrency"], abs=0.16)  # each rounded to 0.01
    assert "DCP 16" in b["sources"]["kv_pool_tokens"] and "00fe477f" in b["sources"]["block_tokens"]
    assert any(c.startswith("--dcp-size 16: ") for c in dcp["engine"]["serve"]["caveats"])
    # --max-total-tokens caps a rank's count (in whole pages of 64) before the allocator widens it
    cmd = DYNAMO_SGLANG_K3 + " --dcp-size 16 --max-total-tokens 100000"
    cap = json.loads(cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "16", "--serve", cmd, "--json").stdout)["engine"]
    assert (
        cap["kv_pool_tokens"] == 16 * (100000 // 64 * 64) and "--max-total-tokens 99,968 x" in cap["sources"]["kv_pool"]
    )


@pytest.mark.parametrize(
    ("extra", "platform", "says"),
    [
        (" --dcp-size 3", "gpu", "does not divide --tp-size 16"),
        (" --dcp-size 8 --enable-dp-attention --dp-size 2", "gpu", "with --enable-dp-attention"),
        (" --dcp-size 8", "tpu", "on a TPU"),
        (" --dcp-size 0", "gpu", "--dcp-size"),
    ],
)
def test_sglang_s_decode_context_parallelism_is_refused_where_its_rule_was_not_read(extra, platform, says):
    with pytest.raises(K3PlanError, match=says):
        parse_serve(DYNAMO_SGLANG_K3 + extra, platform=platform, device_gib=178.0, device_name="nvidia-b200")


def test_sglang_s_decode_context_parallelism_over_deepseek_v4_s_sub_pools_is_refused(cli):
    got = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", SGLANG_V41.replace("--tp 4", "--tp 8 --dcp-size 2"))
    assert got.exit_code == 2 and "--dcp-size 2 with" in got.output and "sub-pools" in got.output


def test_sglang_reads_a_config_file_under_the_command_s_own_flags(tmp_path, monkeypatch):
    """SGLang's --config FILE.yaml ('CLI arguments will override config file values': the server-arguments docs):
    NVIDIA Dynamo's Kimi-K3 worker.yaml, as that recipe's ConfigMap holds it, without its DSpark drafter and mamba
    memory ratio (refused by name) and its decode context parallelism (priced: the test above)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "worker.yaml").write_text(
        "model-path: moonshotai/Kimi-K3\nserved-model-name: moonshotai/Kimi-K3\ntrust-remote-code: true\n"
        "tp-size: 16\nep-size: 16\ncontext-length: 1048576\nmax-running-requests: 64\nmem-fraction-static: 0.88\n"
        "chunked-prefill-size: 8192\nmax-prefill-tokens: 8192\npage-size: 64\nschedule-policy: fcfs\n"
        "weight-loader-prefetch-checkpoints: true\nmoe-runner-backend: deep_gemm\nmoe-a2a-backend: megamoe\n"
        "enable-nccl-nvls: true\nenable-hierarchical-cache: true\nhicache-size: 100\nkv-cache-dtype: fp8_e4m3\n"
        "enable-metrics: true\n"
    )
    q = _gpu("python3 -m sglang.launch_server --config worker.yaml --mem-fraction-static 0.85")
    assert (q.model, q.tp, q.context, q.page_size, q.stack_options["mem_fraction_static"]) == (
        "kimi-k3",
        16,
        1048576,
        64,
        "0.85",  # the command's own flag over the file's 0.88
    )
    assert _gpu("python3 -m sglang.launch_server --config=worker.yaml").stack_options["mem_fraction_static"] == "0.88"
