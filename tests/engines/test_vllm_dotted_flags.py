"""vLLM's dotted config flags, --attention-config and --max-cudagraph-capture-size as `vllm serve` reads them
(issue 47 item 2: a recipe's flag is read, never refused for being unknown; k3plan.engines.vllm.attention_config).

The commands are the engines' own: the vLLM recipes' DeepSeek-V4-Flash DGX Station line (vllm-project/recipes#493,
merged 2026-05-28) and vLLM's own gsm8k server config for V4 (tests/evals/gsm8k/configs/moe-refactor/
DeepSeek-V4-Flash-deepgemm-mega-moe.yaml, read in yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

RECIPE_493 = (
    "vllm serve deepseek-ai/DeepSeek-V4-Flash --host 0.0.0.0 --port 8888 --tensor-parallel-size 1 "
    "--pipeline-parallel-size 1 --kv-cache-dtype fp8 --trust-remote-code --block-size 256 --enable-prefix-caching "
    "--gpu-memory-utilization 0.92 "
    '--compilation-config \'{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}\' '
    "--attention_config.use_fp4_indexer_cache True --tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 "
    "--enable-auto-tool-choice --reasoning-parser deepseek_v4 --no-disable-hybrid-kv-cache-manager "
    "--disable-uvicorn-access-log --max-cudagraph-capture-size 128 --prefix-cache-retention-interval auto "
    '--speculative-config \'{"method":"mtp","num_speculative_tokens":3,"rejection_sample_method":"strict"}\''
)
GSM8K_V4 = (
    "vllm serve deepseek-ai/DeepSeek-V4-Flash --trust-remote-code --kv-cache-dtype fp8 --block-size 256 "
    "--enable-expert-parallel --tensor-parallel-size 2 --attention_config.use_fp4_indexer_cache=True "
    "--moe-backend deep_gemm_mega_moe --tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 "
    "--enable-auto-tool-choice --reasoning-parser deepseek_v4 --speculative_config.method=mtp "
    "--speculative_config.num_speculative_tokens=2"
)

# ai-dynamo/dynamo@591f1a21 recipes/deepseek-v4-pro/vllm/agg/deploy.yaml, its 'Upstream reference command' (8 GPUs,
# TP 8 + EP, on a Blackwell image: the FP4 indexer cache)
DYNAMO_V4_PRO = (
    "vllm serve deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --kv-cache-dtype fp8 --block-size 256 "
    "--enable-expert-parallel --tensor-parallel-size 8 "
    '--compilation-config \'{"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}\' '
    "--attention_config.use_fp4_indexer_cache=True --tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 "
    "--enable-auto-tool-choice --reasoning-parser deepseek_v4"
)


def _q(cmd: str):
    return parse_serve(cmd, platform="gpu", device_gib=178.0, device_name="nvidia-b200")


@pytest.mark.parametrize("cmd", [RECIPE_493, GSM8K_V4, DYNAMO_V4_PRO])
def test_the_engines_own_v4_lines_read(cmd):
    q = _q(cmd)
    assert q.attention == {"use_fp4_indexer_cache": "True"}  # vLLM's dotted value: not JSON, kept as text
    assert "--attention-config" not in q.ignored  # read: the FP4 indexer cache is a start check off sm_10x
    kernels = _q("vllm serve moonshotai/Kimi-K2-Instruct -tp 8 --attention-config.backend FLASHINFER_MLA")
    assert kernels.attention == {"backend": "FLASHINFER_MLA"} and "--attention-config" in kernels.ignored


def test_dotted_flags_are_their_json_flag():
    """FlexibleArgumentParser.parse_args: --X.a V / --X.a=V merge into one JSON object for --X."""
    dotted = _q(GSM8K_V4).speculative
    as_json = _q(
        GSM8K_V4.replace(
            "--speculative_config.method=mtp --speculative_config.num_speculative_tokens=2",
            '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 2}\'',
        )
    ).speculative
    assert dotted == as_json and dotted is not None
    base = "vllm serve moonshotai/Kimi-K2-Instruct -tp 8"
    assert (
        _q(base + " --compilation-config.cudagraph_mode PIECEWISE").compilation
        == _q(base + ' --compilation-config \'{"cudagraph_mode": "PIECEWISE"}\'').compilation
    )


def test_max_cudagraph_capture_size_is_the_compilation_config_s():
    base = "vllm serve moonshotai/Kimi-K2-Instruct -tp 8"
    flag = _q(base + " --max-cudagraph-capture-size 128").compilation
    assert flag == _q(base + " --compilation-config '{\"max_cudagraph_capture_size\": 128}'").compilation
    assert flag.max_capture_size == 128
    with pytest.raises(K3PlanError, match="mutually exclusive"):  # vLLM's EngineArgs refuses both
        _q(base + " --max-cudagraph-capture-size 128 --compilation-config '{\"max_cudagraph_capture_size\": 64}'")


@pytest.mark.parametrize(
    ("tail", "says"),
    [
        ("--attention-config.bogus 1", "not a field of vLLM's AttentionConfig"),
        ("--attention-config '[1]'", "expected a JSON object"),
        ("--compilation-config.cudagraph_mode", "takes a value"),
    ],
)
def test_what_vllm_would_refuse_is_one_line(tail, says):
    with pytest.raises(K3PlanError, match=says):
        _q("vllm serve moonshotai/Kimi-K2-Instruct -tp 8 " + tail)


def test_the_fp4_indexer_cache_starts_only_on_blackwell_datacenter_gpus(cli):
    """DeepSeek-V4's indexer cache keeps its fp8 size with the flag (DeepseekV4Indexer.__init__), so the pool is the
    same; off the sm_10x family the indexer's metadata builder asserts, so the engine does not start."""
    v4 = "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 --kv-cache-dtype fp8 --block-size 256"
    flag = " --attention_config.use_fp4_indexer_cache True"
    b200 = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", v4 + flag, "--json").stdout)
    plain = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", v4, "--json").stdout)
    assert b200["fits"] is True and b200["engine"]["kv_pool_bytes"] == plain["engine"]["kv_pool_bytes"]
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", v4 + flag, "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 1 and d["fits"] is False and d["reason_code"] == "launch"
    assert "requires Blackwell datacenter GPUs" in d["reason"] and "indexer.py" in d["engine"]["raised_at"]
    text = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", v4 + flag)
    assert text.stdout.startswith("WON'T START: AssertionError: use_fp4_indexer_cache requires Blackwell")
    # a model with no sparse indexer never builds that builder: the flag changes nothing
    k2 = "vllm serve moonshotai/Kimi-K2-Instruct -tp 8 --max-model-len 8192"
    with_flag = json.loads(cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", k2 + flag, "--json").stdout)
    without = json.loads(cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", k2, "--json").stdout)
    assert with_flag["fits"] == without["fits"] and with_flag["engine"]["message"] == without["engine"]["message"]


# flags of vllm-project/recipes@8959cf6 that were refused as unknown before (strategies/multi_node_dep.yaml's vllm_args
# and env, models/deepseek-ai/DeepSeek-V4-Flash.yaml's reasoning feature and its DGX Spark drafter override's key)
@pytest.mark.parametrize(
    "tail",
    [
        "--enable-expert-parallel --data-parallel-hybrid-lb -dp 8",
        "--enable-expert-parallel -dp 8 -dph",
        "--enable-expert-parallel -dp 8 --data-parallel-external-lb --data-parallel-backend ray",
        '--reasoning-config \'{"reasoning_parser":"deepseek_v4","reasoning_start_str":"","reasoning_end_str":""}\'',
        '--speculative-config \'{"method":"mtp","num_speculative_tokens":1,"attention_backend":"FLASHMLA_SPARSE"}\'',
        "--prefix-cache-retention-interval auto",
    ],
)
def test_the_recipes_flags_are_read(tail):
    q = parse_serve(
        "GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 vllm serve deepseek-ai/DeepSeek-V4-Flash --trust-remote-code "
        "--kv-cache-dtype fp8 --block-size 256 " + tail,
        platform="gpu",
        device_gib=140.0,
        device_name="nvidia-h200",
    )
    assert q.model == "deepseek-v4-flash"


def test_the_upstream_v4_pro_command_starts_on_b200(cli):
    r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", DYNAMO_V4_PRO)
    assert r.exit_code == 0 and r.stdout.startswith("STARTS: KV pool"), r.stdout[:300]


def test_a_config_file_is_read_before_the_command_s_own_flags(tmp_path, monkeypatch):
    """vLLM's --config FILE.yaml (FlexibleArgumentParser._pull_args_from_config / load_config_file): keys are flags,
    a true bool a switch (false left out), a mapping JSON, and the command's own flags win over the file's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.yaml").write_text(
        "tensor-parallel-size: 8\nmax-model-len: 8192\nmax-num-seqs: 64\nenable-expert-parallel: false\n"
        "trust-remote-code: true\ncompilation-config:\n  cudagraph_mode: PIECEWISE\n"
    )
    q = _q("vllm serve moonshotai/Kimi-K2-Instruct --config serve.yaml --max-num-seqs 32")
    assert (q.tp, q.context, q.batch, q.expert_parallel) == (8, 8192, 32, False)  # the command's 32 wins
    piecewise = _q("vllm serve moonshotai/Kimi-K2-Instruct -tp 8 --compilation-config.cudagraph_mode PIECEWISE")
    assert q.compilation == piecewise.compilation
    for cmd, says in [
        ("--config missing.yaml", "no such file"),
        ("--config serve.json", "yaml / yml file only"),
        ("--config serve.yaml --config serve.yaml", "more than one --config"),
        ("--config", "takes a file"),
    ]:
        with pytest.raises(K3PlanError, match=says):
            _q("vllm serve moonshotai/Kimi-K2-Instruct " + cmd)


# NVIDIA Dynamo's DeepSeek-V4.1-Flash vLLM recipe (ai-dynamo/dynamo@a28690c6 recipes/deepseek-v4.1-flash/vllm/agg-b200/
# kustomize/base/deploy.yaml), its vLLM flags; its DSpark drafter is added in the test that reads it whole
DYNAMO_V41 = (
    "vllm serve deepseek-ai/DeepSeek-V4.1-Flash --served-model-name deepseek-ai/DeepSeek-V4.1-Flash "
    "--tokenizer-mode deepseek_v41 --tensor-parallel-size 4 --enable-expert-parallel --moe-backend deep_gemm_mega_moe "
    """--enable-ep-weight-filter --enable-eplb --eplb-config '{"communicator":"torch_gloo"}' --numa-bind """
    "--language-model-only --reasoning-parser deepseek_v41 "
    """--kv-events-config '{"publisher":"zmq","topic":"kv-events","endpoint":"tcp://*:5557"}' """
    "--max-cudagraph-capture-size 512 --prefix-cache-retention-interval 1024 "
    """--attention-config '{"indexer_kv_dtype":"mxfp4"}'"""
)


def test_the_v41_recipe_reads_with_its_indexer_format_a_caveat_and_eplb_without_redundancy():
    q = _q(DYNAMO_V41)
    assert q.model == "deepseek-v4.1-flash" and {"--enable-eplb", "--eplb-config", "--numa-bind"} <= set(q.ignored)
    assert "--attention-config" not in q.ignored
    assert any(c.startswith("--attention-config indexer_kv_dtype mxfp4") for c in q.caveats)
    assert q.eplb == (0, 1000)  # EPLB on, no copies, vLLM's default window (engines/vllm/eplb.py)
    # redundant copies are read here; fit refuses them under MegaMoE (tests/engines/test_vllm_eplb.py)
    assert _q(DYNAMO_V41 + """ --eplb-config '{"num_redundant_experts": 32}'""").eplb == (32, 1000)


def test_the_fp4_indexer_assertion_is_vllm_s_cuda_indexer_s_not_the_tpu_plugin_s(cli):
    # the torch_tpu plugin builds its own attention: the CUDA indexer builder that asserts is never built there
    cmd = "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 16 --enable-expert-parallel --attention_config.use_fp4_indexer_cache True"
    r = cli("fit", "-t", "2x2x2", "--serve", cmd)
    assert r.exit_code == 0 and r.stdout.startswith("STARTS"), r.stdout[:200]


def test_the_v41_recipe_reads_whole_with_its_dspark_drafter_and_mxfp4_index_keys(cli):
    """The recipe's own --speculative-config (DSpark, 3 tokens, adaptive verification off) now reads; its MXFP4
    indexer cache is priced in vLLM's V4.1 layout (68-B index keys, engines/vllm/dsv4_pages.py)."""
    spec = (
        """ --speculative-config '{"method":"dspark","num_speculative_tokens":3,"draft_sample_method":"probabilistic","""
        """"rejection_sample_method":"block","enable_adaptive_verification":false}'"""
    )
    r = cli("fit", "-H", "nvidia-b200", "--serve", DYNAMO_V41 + spec, "--json")
    assert r.exit_code == 0, r.output
    eng = json.loads(r.stdout)["engine"]
    assert eng["starts"] and "index keys of 68 B" in eng["sources"]["num_blocks"]
    assert "DSpark stages" in eng["sources"]["weights"]


# kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/run_benchmarks.sh start_vllm_server @f84ad69c: with
# CAPTURE_PROFILE=1 (configs/deepseek-v4-flash-dp8-ep-profile.sh @a8d20b0f; the DeepSeek-V4 configs @23701f8e default
# it to 1) the nightly harness adds these to every server
PROFILED = (
    "CAPTURE_PROFILE=1 VLLM_TORCH_PROFILER_DIR=/r/profile vllm serve deepseek-ai/DeepSeek-V4-Flash "
    "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel --kv-cache-dtype fp8 "
    "--max-model-len 9216 --max-num-batched-tokens 1024 --max-num-seqs 256 --gpu-memory-utilization 0.9 "
    "--profiler-config.profiler torch --profiler-config.torch_profiler_dir /r/profile "
    "--profiler-config.ignore_frontend true"
)


def test_the_nightly_harness_s_profiler_flags_are_listed_not_refused(cli):
    """vLLM's ProfilerConfig (vllm/config/profiler.py, 0.29.0 wheel) says which profiler a /start_profile call runs
    and where its trace goes: nothing held before the pool is sized, so the pool is the unprofiled command's."""
    plain = PROFILED.split(" --profiler-config.profiler")[0].replace(
        "CAPTURE_PROFILE=1 VLLM_TORCH_PROFILER_DIR=/r/profile ", ""
    )
    runs = [cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", c, "--json") for c in (PROFILED, plain)]
    assert all(r.exit_code == 0 for r in runs), runs[0].output
    a, b = (json.loads(r.stdout)["engine"] for r in runs)
    assert a["kv_pool_bytes"] == b["kv_pool_bytes"] and a["weights_bytes"] == b["weights_bytes"]
    assert (
        "--profiler-config" in a["serve"]["ignored"] and "VLLM_TORCH_PROFILER_DIR=/r/profile" in a["serve"]["ignored"]
    )
