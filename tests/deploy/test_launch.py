"""Launch commands: exact strings for two configurations, every flag cited, bad combinations
refused in one line, the atomic write."""

from __future__ import annotations

import shlex

import pytest
from pydantic import ValidationError

from k3plan.deploy.launch import (
    ENGINE_FOR_STACK,
    FLAG_SOURCES,
    LaunchConfig,
    engine_for_stack,
    jax_params,
    launch_text,
    sglang_command,
    vllm_command,
    write_launch,
)
from k3plan.errors import K3PlanError
from k3plan.sharding.stack import list_stacks

B200 = {"hardware": "nvidia-b200", "platform": "gpu", "stack": "sglang", "engine": "sglang", "model_path": "moonshotai/Kimi-K3",
            "tp": 8, "dp": 8, "ep": 64, "hosts": 8, "max_model_len": 131072, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
            "kv_dtype": "fp8", "memory_fraction": 0.88, "dp_attention": True}
V7X = {"hardware": "tpu-v7x", "platform": "tpu", "stack": "vllm-tpu", "engine": "vllm", "model_path": "moonshotai/Kimi-K3",
           "tp": 32, "ep": 32, "hosts": 4, "max_model_len": 131072, "max_num_batched_tokens": 8192, "max_num_seqs": 64,
           "kv_dtype": "bf16", "memory_fraction": 0.9}


def test_sglang_dp_attention_command():
    # DP attention: --tp-size counts all 64 GPUs, 8 attention groups, experts over all 64, dispatched by
    # DeepEP's all-to-all (SGLang's own moe_a2a_backend default is none: the all-reduce MoE)
    assert sglang_command(LaunchConfig(**B200)) == (
        "python -m sglang.launch_server --model-path moonshotai/Kimi-K3 --tp-size 64 --dp-size 8 --ep-size 64 "
        "--pp-size 1 --enable-dp-attention --moe-a2a-backend deepep --context-length 131072 --chunked-prefill-size 8192 "
        "--max-running-requests 256 --kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.88 "
        "--nnodes 8 --node-rank \"$NODE_RANK\" --dist-init-addr \"$HEAD_ADDR:5000\" --trust-remote-code")


def test_vllm_tpu_command():
    assert vllm_command(LaunchConfig(**V7X)) == (
        "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --pipeline-parallel-size 1 "
        "--data-parallel-size 1 --enable-expert-parallel --max-model-len 131072 --max-num-batched-tokens 8192 "
        "--max-num-seqs 64 --enable-chunked-prefill --kv-cache-dtype bfloat16 --gpu-memory-utilization 0.90 "
        "--distributed-executor-backend ray --trust-remote-code")


def test_jax_params():
    p = jax_params(LaunchConfig(**{**V7X, "engine": "jax", "stack": "jax-native", "kv_dtype": "fp32"}))
    # 64 sequences over 32 TP x 1 DP devices -> 2 a device
    assert p.ici_tensor_parallelism == 32 and p.ici_expert_parallelism == 32
    assert p.per_device_batch_size == 2 and p.max_target_length == 131072 and p.kv_cache_dtype == "fp32"
    assert list(type(p).model_fields) == list(FLAG_SOURCES["jax"])  # every parameter cited, in the same order


@pytest.mark.parametrize("cfg, build, engine", [(B200, sglang_command, "sglang"), (V7X, vllm_command, "vllm"),
                                                 ({**B200, "dp_attention": False, "ep": 8, "hosts": 1},
                                                  sglang_command, "sglang")])
def test_every_flag_is_cited(cfg, build, engine):
    flags = [t for t in shlex.split(build(LaunchConfig(**cfg))) if t.startswith("--")]
    assert flags and all(f in FLAG_SOURCES[engine] for f in flags)
    repo, path, cls = FLAG_SOURCES[engine][flags[0]]
    assert repo and path.endswith((".py", ".yml", ".yaml")) and cls


def test_launch_text_names_sources():
    text = launch_text(LaunchConfig(**B200))
    assert "sgl-project/sglang: python/sglang/srt/server_args.py (ServerArgs)" in text
    assert text.splitlines()[2].startswith("# k3plan launch: nvidia-b200, stack sglang, TP8 EP64 DP8 PP1")


@pytest.mark.parametrize("cfg, build, says", [
    ({**V7X, "kv_dtype": "fp32"}, vllm_command, "not a vLLM"),
    ({**B200, "kv_dtype": "fp8_ds_mla"}, sglang_command, "not a SGLang"),
    ({**V7X, "engine": "sglang"}, sglang_command, "SGLang serves on GPUs"),
    ({**V7X, "dp": 2, "ep": 32}, vllm_command, "cannot be expressed"),
    ({**B200, "dp_attention": False}, sglang_command, "needs DP attention"),
    ({**V7X, "engine": "jax", "kv_dtype": "fp8_ds_mla"}, jax_params, "vLLM layout"),
])
def test_combinations_an_engine_cannot_run_are_refused(cfg, build, says):
    with pytest.raises(K3PlanError, match=says) as err:
        build(LaunchConfig(**cfg))
    assert "\n" not in str(err.value)


def test_ep_must_be_a_rank_count():
    with pytest.raises(ValidationError, match="ep=3"):
        LaunchConfig(**{**V7X, "ep": 3})


def test_every_bundled_stack_has_an_engine():
    assert set(list_stacks()) <= set(ENGINE_FOR_STACK)
    assert engine_for_stack("dp-attention") == "vllm" and engine_for_stack("jax-native") == "jax"
    # dp-attention prices SGLang's --enable-dp-attention with DeepEP on GPUs; tpu-inference on TPUs
    assert engine_for_stack("dp-attention", "gpu") == "sglang" and engine_for_stack("dp-attention", "tpu") == "vllm"
    with pytest.raises(K3PlanError, match="no engine known for stack 'trtllm'"):
        engine_for_stack("trtllm")


def test_write_launch_is_atomic(tmp_path):
    out = write_launch(tmp_path / "launch.sh", LaunchConfig(**V7X))
    assert out.read_text() == launch_text(LaunchConfig(**V7X))
    write_launch(out, LaunchConfig(**B200))  # replaces, leaves no temp file behind
    assert [p.name for p in tmp_path.iterdir()] == ["launch.sh"] and "sglang" in out.read_text()
    with pytest.raises(K3PlanError, match="does not exist"):
        write_launch(tmp_path / "missing" / "launch.sh", LaunchConfig(**V7X))


def test_stack_options_away_from_their_defaults_become_flags_or_environment():
    from k3plan.plan.deployment import engine_options
    from k3plan.sharding.stack import load_stack

    st = load_stack("vllm-tpu:model_impl=flax_nnx")
    opts = engine_options(st)
    # the option changed comes first, then the others at the value priced (MLA_TRANSPOSE_KV_CACHE: its default)
    assert [(f, v) for f, v, _ in opts] == [("MODEL_IMPL_TYPE", "flax_nnx"), ("MLA_TRANSPOSE_KV_CACHE", "0")]
    text = launch_text(LaunchConfig(**{**V7X, "stack": st.label, "engine_options": opts}))
    cmd = next(ln for ln in text.splitlines() if "vllm serve" in ln)
    assert cmd.startswith("MODEL_IMPL_TYPE=flax_nnx MLA_TRANSPOSE_KV_CACHE=0 vllm serve ")  # environment, not flags
    src = st.options["model_impl"].source
    assert f"#   {src.repo}: {src.file} ({src.symbol})" in text
    # the reserve, the KV dtype (written from the plan's numbers) and vLLM's EP switch (from the split) add
    # nothing; the other options are written at the value priced, a default too (the next test)
    assert [f for f, _, _ in engine_options(load_stack("vllm:gpu_memory_utilization=0.8+kv_cache_dtype=fp8"))] == [
        "--all2all-backend"]
    assert [f for f, _, _ in engine_options(load_stack("vllm:enable_expert_parallel=true"))] == ["--all2all-backend"]


@pytest.mark.parametrize(("stack", "hardware", "written"), [
    # tpu-inference resolves MODEL_IMPL_TYPE to its flax_nnx model when unset (model_loader.get_model), which
    # replicates KDA; vllm-tpu prices vLLM's model code, and the MLA cache entry tpu-inference pads to 640 values
    ("vllm-tpu", "tpu-v7x", "MODEL_IMPL_TYPE=vllm MLA_TRANSPOSE_KV_CACHE=0 vllm serve "),
    # SGLang's moe_a2a_backend defaults to none (the all-reduce MoE, shared experts TP-split); sglang prices DeepEP
    ("sglang", "nvidia-b200", " --moe-a2a-backend deepep "),
    ("dp-attention", "nvidia-b200", " --enable-dp-attention --moe-a2a-backend deepep "),
    ("vllm", "nvidia-b200", " --all2all-backend allgather_reducescatter "),
])
def test_the_launch_runs_the_configuration_priced_not_the_engine_s_defaults(cli, tmp_path, stack, hardware, written):
    """plan --emit launch for a bundled stack at its defaults: `vllm serve kimi-k3 ...` left out MODEL_IMPL_TYPE=vllm
    and `sglang.launch_server` --moe-a2a-backend deepep (engine_options wrote only options changed away from the
    stack's defaults), so the engines ran their own defaults, not what plan priced; dp-attention on a GPU was a vLLM
    command without an all-to-all backend (vLLM's default is allgather_reducescatter)."""
    out = tmp_path / "launch.sh"
    r = cli("plan", "-H", hardware, "--stacks", stack, "--emit", "launch", out)
    assert r.exit_code == 0, r.output
    cmd = next(ln for ln in out.read_text().splitlines() if "serve" in ln or "launch_server" in ln)
    assert written in cmd, cmd


def test_dp_attention_on_a_gpu_sizes_sglang_s_mamba_pool_as_priced(cli, tmp_path):
    """dp-attention on a GPU runs SGLang, and its stack prices KDA state slots (state.slots_per_request 1): the
    launch left out --max-mamba-cache-size (launch_for asked engine_for_stack without the platform, got vLLM),
    so SGLang sized its mamba pool by its default 0.9/1.9 split, not as planned. B200 2x8 TP8 DP1 at the
    default 8 sequences: ceil(8 / 1) x 1 slot x dp 1 = 8."""
    out = tmp_path / "launch.sh"
    r = cli("plan", "-H", "nvidia-b200", "--stacks", "dp-attention", "--context", "131072", "--concurrency", "8",
            "--emit", "launch", out)
    assert r.exit_code == 0, r.output
    cmd = next(ln for ln in out.read_text().splitlines() if "launch_server" in ln)
    assert " --dp-size 1 " in cmd and " --max-running-requests 8 " in cmd, cmd
    assert " --max-mamba-cache-size 8 " in cmd, cmd


def test_jax_batch_is_the_batch_priced_under_one_sequence_a_device():
    """MaxText's global batch is per_device_batch_size x devices (a fraction allowed): the plan's pick on a
    2x4x4 v7x slice (TP16 DP4, 64 devices) at 8 sequences wrote per_device_batch_size 1 (max(1, 8 // 64)),
    a 64-sequence batch, 8x the KV priced; 8 / 64 = 0.125. 64 over TP32 stays the int 2."""
    cfg = {**V7X, "engine": "jax", "stack": "jax-native", "kv_dtype": "fp32"}
    p = jax_params(LaunchConfig(**{**cfg, "tp": 16, "dp": 4, "ep": 64, "max_num_seqs": 8}))
    assert p.per_device_batch_size == 0.125 and p.per_device_batch_size * 64 == 8
    assert "per_device_batch_size: 0.125" in launch_text(LaunchConfig(**{**cfg, "tp": 16, "dp": 4, "ep": 64, "max_num_seqs": 8}))
    assert "per_device_batch_size: 2\n" in launch_text(LaunchConfig(**cfg))
    assert jax_params(LaunchConfig(**{**cfg, "max_num_seqs": 48})).per_device_batch_size == 1.5


@pytest.mark.parametrize("cfg", [B200, V7X])
def test_launch_file_is_a_bash_script_that_stops_without_its_host_rank(cfg, tmp_path):
    """--emit launch run.sh wrote comments and one command: no shebang, no `set -euo pipefail`, and a multi-host
    SGLang command with $NODE_RANK / $HEAD_ADDR unquoted and unchecked, so a host without them launched with
    `--node-rank  --dist-init-addr :5000` (an empty rank). Now: a bash script, the variables checked first."""
    import subprocess

    text = launch_text(LaunchConfig(**cfg))
    assert text.splitlines()[:2] == ["#!/usr/bin/env bash", "set -euo pipefail"]
    path = tmp_path / "run.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    if cfg is B200:  # 8 hosts: each sets its rank; without it the script stops before the launch, saying why
        r = subprocess.run(["bash", str(path)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
        assert r.returncode != 0 and "set NODE_RANK to the rank of this host, 0 .. 7" in r.stderr, r.stderr
        assert ' --node-rank "$NODE_RANK" --dist-init-addr "$HEAD_ADDR:5000" ' in text
