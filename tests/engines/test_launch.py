"""Launch commands: exact strings for two configurations, every flag cited, bad combinations
refused in one line, the atomic write."""

from __future__ import annotations

import shlex

import pytest

from k3plan.engines.launch import (
    FLAG_SOURCES,
    LaunchConfig,
    engine_for_stack,
    jax_params,
    launch_text,
    sglang_command,
    vllm_command,
    write_launch,
)
from k3plan.engines.stack import list_stacks
from k3plan.errors import K3PlanError
from k3plan.structs import fields

B200 = {
    "hardware": "nvidia-b200",
    "platform": "gpu",
    "stack": "sglang",
    "engine": "sglang",
    "model_path": "moonshotai/Kimi-K3",
    "tp": 8,
    "dp": 8,
    "ep": 64,
    "hosts": 8,
    "max_model_len": 131072,
    "max_num_batched_tokens": 8192,
    "max_num_seqs": 256,
    "kv_dtype": "fp8",
    "memory_fraction": 0.88,
    "dp_attention": True,
}
V7X = {
    "hardware": "tpu-v7x",
    "platform": "tpu",
    "stack": "torchtpu-vllm",
    "engine": "vllm",
    "model_path": "moonshotai/Kimi-K3",
    "tp": 32,
    "ep": 32,
    "hosts": 4,
    "max_model_len": 131072,
    "max_num_batched_tokens": 8192,
    "max_num_seqs": 64,
    "kv_dtype": "bf16",
    "memory_fraction": 0.9,
}


def test_sglang_dp_attention_command():
    # DP attention: --tp-size counts all 64 GPUs, 8 attention groups, experts over all 64, dispatched by
    # DeepEP's all-to-all (SGLang's own moe_a2a_backend default is none: the all-reduce MoE), the LM head over the
    # attention-TP group as the stack prices it (--enable-dp-lm-head; SGLang's default splits it over all 64)
    assert sglang_command(LaunchConfig(**B200)) == (
        "python -m sglang.launch_server --model-path moonshotai/Kimi-K3 --tp-size 64 --dp-size 8 --ep-size 64 "
        "--pp-size 1 --enable-dp-attention --moe-a2a-backend deepep --enable-dp-lm-head --context-length 131072 "
        "--chunked-prefill-size 8192 "
        "--max-running-requests 256 --kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.88 "
        '--nnodes 8 --node-rank "$NODE_RANK" --dist-init-addr "$HEAD_ADDR:5000" --trust-remote-code'
    )


def test_torchtpu_vllm_command():
    # the plugin's K3 CI flags close the line: the vision tower not loaded (k3plan prices the text model), each
    # rank streaming only its experts' bytes (configs/kimi-k3-tp32-ep.sh)
    assert vllm_command(LaunchConfig(**V7X)) == (
        "vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 32 --pipeline-parallel-size 1 "
        "--data-parallel-size 1 --enable-expert-parallel --max-model-len 131072 --max-num-batched-tokens 8192 "
        "--max-num-seqs 64 --enable-chunked-prefill --kv-cache-dtype bfloat16 --gpu-memory-utilization 0.90 "
        "--distributed-executor-backend ray --trust-remote-code --language-model-only --enable-ep-weight-filter"
    )


def test_jax_params():
    p = jax_params(LaunchConfig(**{**V7X, "engine": "jax", "stack": "jax-native", "kv_dtype": "fp32"}))
    # 64 sequences over 32 TP devices -> 2 a device; MaxText holds the KV cache in its activation dtype
    assert p.ici_tensor_parallelism == 32 and p.ici_expert_parallelism == 1
    assert p.per_device_batch_size == 2 and p.max_target_length == 131072 and p.dtype == "float32"
    assert list(fields(p)) == [k for k in FLAG_SOURCES["jax"] if k != "model_name"]  # every key cited


@pytest.mark.parametrize(
    "cfg, build, engine",
    [
        (B200, sglang_command, "sglang"),
        (V7X, vllm_command, "vllm"),
        ({**B200, "dp_attention": False, "ep": 8, "hosts": 1}, sglang_command, "sglang"),
    ],
)
def test_every_flag_is_cited(cfg, build, engine):
    from k3plan.engines.flags import ci_serve_flags

    cited = {**FLAG_SOURCES[engine], **ci_serve_flags(cfg["stack"])}
    flags = [t for t in shlex.split(build(LaunchConfig(**cfg))) if t.startswith("--")]
    assert flags and all(f in cited for f in flags)
    repo, path, cls = FLAG_SOURCES[engine][flags[0]]
    assert repo and path.endswith((".py", ".yml", ".yaml")) and cls


def test_launch_text_names_sources():
    text = launch_text(LaunchConfig(**B200))
    assert "sgl-project/sglang: python/sglang/srt/server_args.py (ServerArgs)" in text
    assert text.splitlines()[2].startswith("# k3plan launch: nvidia-b200, stack sglang, TP8 EP64 DP8 PP1")


@pytest.mark.parametrize(
    "cfg, build, says",
    [
        ({**V7X, "kv_dtype": "fp32"}, vllm_command, "not a tpu-inference"),
        ({**V7X, "kv_dtype": "fp8_ds_mla"}, vllm_command, "not a tpu-inference"),  # vLLM's CUDA layout
        ({**B200, "kv_dtype": "fp8_ds_mla"}, sglang_command, "not a SGLang"),
        ({**V7X, "engine": "sglang"}, sglang_command, "SGLang serves on GPUs"),
        ({**V7X, "dp": 2, "ep": 32}, vllm_command, "cannot be expressed"),
        ({**B200, "dp_attention": False}, sglang_command, "needs DP attention"),
        ({**V7X, "engine": "jax", "kv_dtype": "fp8_ds_mla"}, jax_params, "not a MaxText"),
        ({**V7X, "engine": "jax", "kv_dtype": "fp8"}, jax_params, "not a MaxText"),
    ],
)
def test_combinations_an_engine_cannot_run_are_refused(cfg, build, says):
    with pytest.raises(K3PlanError, match=says) as err:
        build(LaunchConfig(**cfg))
    assert "\n" not in str(err.value)


def test_ep_must_be_a_rank_count():
    with pytest.raises(ValueError, match="ep=3"):
        LaunchConfig(**{**V7X, "ep": 3})


def test_every_bundled_stack_has_an_engine():
    assert all(engine_for_stack(s) in ("vllm", "sglang", "jax") for s in list_stacks())
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
    from k3plan.engines.stack import load_stack
    from k3plan.plan.deployment import engine_options

    st = load_stack("tpu-inference:mla_transpose_kv_cache=1")
    opts = engine_options(st)
    # the option changed comes first, then the others at the value priced (their defaults)
    assert [(f, v) for f, v, _ in opts][0] == ("MLA_TRANSPOSE_KV_CACHE", "1")
    assert ("MODEL_IMPL_TYPE", "flax_nnx") in [(f, v) for f, v, _ in opts]
    text = launch_text(LaunchConfig(**{**V7X, "stack": st.label, "engine_options": opts}))
    cmd = next(ln for ln in text.splitlines() if "vllm serve" in ln)
    assert cmd.startswith("MLA_TRANSPOSE_KV_CACHE=1 ")  # environment, not flags
    src = st.options["mla_transpose_kv_cache"].source
    assert f"#   {src.repo}: {src.file} ({src.symbol})" in text
    # the reserve, the KV dtype (written from the plan's numbers) and vLLM's EP switch (from the split) add
    # nothing; the other options are written at the value priced, a default too (the next test)
    assert [f for f, _, _ in engine_options(load_stack("vllm:gpu_memory_utilization=0.8+kv_cache_dtype=fp8"))] == [
        "--all2all-backend"
    ]
    assert [f for f, _, _ in engine_options(load_stack("vllm:enable_expert_parallel=true"))] == ["--all2all-backend"]


@pytest.mark.parametrize(
    ("stack", "hardware", "written"),
    [
        # torchtpu-vllm (the plugin over vLLM's model code) needs no environment: a plain vllm serve
        ("torchtpu-vllm", "tpu-v7x", "vllm serve "),
        # SGLang's moe_a2a_backend defaults to none (the all-reduce MoE, shared experts TP-split); sglang prices DeepEP
        ("sglang", "nvidia-b200", " --moe-a2a-backend deepep "),
        # on a GPU dp-attention launches SGLang with the sglang stack's flags, as it prices them (Stack.bind)
        (
            "dp-attention",
            "nvidia-b200",
            " --moe-a2a-backend deepep --moe-runner-backend auto --mamba-radix-cache-strategy no_buffer ",
        ),
        ("vllm", "nvidia-b200", " --all2all-backend allgather_reducescatter "),
    ],
)
def test_the_launch_runs_the_configuration_priced_not_the_engine_s_defaults(cli, tmp_path, stack, hardware, written):
    """plan --emit launch for a bundled stack at its defaults: `vllm serve kimi-k3 ...` left out MODEL_IMPL_TYPE=vllm
    and `sglang.launch_server` --moe-a2a-backend deepep (engine_options wrote only options changed away from the
    stack's defaults), so the engines ran their own defaults, not what plan priced; dp-attention on a GPU was a vLLM
    command without an all-to-all backend (vLLM's default is allgather_reducescatter)."""
    out = tmp_path / "launch.sh"
    r = cli("plan", "-H", hardware, "--stacks", stack, "--emit", "launch", out)
    assert r.exit_code == 0, r.output
    cmd = next(
        ln for ln in out.read_text().splitlines() if not ln.startswith("#") and ("serve" in ln or "launch_server" in ln)
    )
    assert written in cmd, cmd


def test_dp_attention_on_a_gpu_sizes_sglang_s_mamba_pool_as_priced(cli, tmp_path):
    """dp-attention on a GPU runs SGLang, and its stack prices KDA state slots (state.slots_per_request 1): the
    launch left out --max-mamba-cache-size (launch_for asked engine_for_stack without the platform, got vLLM),
    so SGLang sized its mamba pool by its default 0.9/1.9 split, not as planned. B200 2x8 TP8 DP1 at the
    default 8 sequences: ceil(8 / 1) x 3 slots x dp 1 = 24 -- 3, SGLang's own slots a running request with the radix
    cache on (sglang.yaml state, which dp-attention takes on GPUs: Stack.bind); the 1 slot it priced before, vLLM's,
    wrote 8, and the engine, which caps its running requests at the size // 3, would have run 2."""
    out = tmp_path / "launch.sh"
    r = cli(
        "plan",
        "-H",
        "nvidia-b200",
        "--stacks",
        "dp-attention",
        "--context",
        "131072",
        "--concurrency",
        "8",
        "--emit",
        "launch",
        out,
    )
    assert r.exit_code == 0, r.output
    cmd = next(ln for ln in out.read_text().splitlines() if "launch_server" in ln)
    assert " --dp-size 1 " in cmd and " --max-running-requests 8 " in cmd, cmd
    assert " --max-mamba-cache-size 24 " in cmd, cmd


def test_jax_batch_is_the_batch_priced_under_one_sequence_a_device():
    """MaxText's global batch is per_device_batch_size x devices (a fraction allowed; maxengine.py: int(
    per_device_batch_size * mesh.size)): a pick on a 2x4x4 v7x slice (TP64, 64 devices) at 8 sequences wrote
    per_device_batch_size 1 (max(1, 8 // 64)), a 64-sequence batch, 8x the KV priced; 8 / 64 = 0.125. 64 over
    TP32 stays the int 2."""
    cfg = {**V7X, "engine": "jax", "stack": "jax-native", "kv_dtype": "fp32"}
    p = jax_params(LaunchConfig(**{**cfg, "tp": 64, "ep": 64, "max_num_seqs": 8}))
    assert p.per_device_batch_size == 0.125 and p.per_device_batch_size * 64 == 8
    assert " per_device_batch_size=0.125 " in launch_text(
        LaunchConfig(**{**cfg, "tp": 64, "ep": 64, "max_num_seqs": 8})
    )
    assert " per_device_batch_size=2 " in launch_text(LaunchConfig(**cfg))
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


# --- the MaxText launch: a mesh MaxText builds, experts as priced, splits it cannot run refused -------------------
JAX = {**V7X, "stack": "jax-native", "engine": "jax", "kv_dtype": "fp32", "model_path": "kimi-k3", "expert_width": 3072}


def _maxtext_keys(text: str) -> dict[str, str]:
    cmd = next(ln for ln in text.splitlines() if "maxengine_server" in ln and not ln.startswith("#"))
    return dict(t.split("=", 1) for t in shlex.split(cmd)[4:] if "=" in t)


def _product(keys: dict[str, str], prefix: str) -> int:
    n = 1
    for k, v in keys.items():
        n *= int(v) if k.startswith(prefix) and k.endswith("_parallelism") else 1
    return n


@pytest.mark.parametrize(
    ("cfg", "slices", "per_slice"),
    [
        ({**JAX, "tp": 32, "ep": 32, "hosts": 4}, 1, 32),  # the default pick: 2x2x4, 16 chips, 32 devices
        ({**JAX, "tp": 64, "ep": 64, "hosts": 8, "slices": 2}, 2, 32),  # 2*2x2x4: two 32-device slices over DCN
    ],
)
def test_maxtext_mesh_multiplies_into_the_devices_of_a_slice_and_the_slices(cfg, slices, per_slice):
    """MaxText multiplies the ici_* axes into the devices of a slice and the dcn_* into the slices, and asserts
    both (maxtext_utils.create_device_mesh -> max_utils.fill_unspecified_mesh_axes). The file wrote ici_tensor
    32 x ici_expert 32 = 1,024 on 32 devices (TP16 EP64 DP4: 4,096 on 64) and dcn_data 1 on any number of slices,
    so a two-slice pick ran as one. base.yml's -1 axes (ici_fsdp, dcn_data) are written, so nothing is filled."""
    keys = _maxtext_keys(launch_text(LaunchConfig(**cfg)))
    assert _product(keys, "ici_") == per_slice and _product(keys, "dcn_") == slices
    assert keys["ici_fsdp_parallelism"] == "1" and keys["dcn_data_parallelism"] == "1"
    # experts as priced: MaxText splits the expert dimension over its expert axis only ('exp' -> expert) and each
    # expert's FFN width over tensor (mlp_moe -> tensor): expert x tensor shards = the ep priced, 1/ep a device
    expert = int(keys["ici_expert_parallelism"]) * int(keys["dcn_expert_parallelism"])
    tensor = int(keys["ici_tensor_parallelism"]) * int(keys["dcn_tensor_parallelism"])
    assert expert * tensor == cfg["ep"] and expert == 1 and 3072 % tensor == 0


def test_maxtext_launch_is_a_script_that_names_the_model_or_asks_for_its_config(tmp_path):
    """The file was key: value lines with no command; now the JetStream server's command, a bash script. MaxText
    ships no kimi-k3 (configs/types.py ModelName): the script stops before running without a config file."""
    import subprocess

    path = tmp_path / "run.sh"
    path.write_text(launch_text(LaunchConfig(**JAX)))
    assert path.read_text().splitlines()[:2] == ["#!/usr/bin/env bash", "set -euo pipefail"]
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    r = subprocess.run(["bash", str(path)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode != 0 and "set MAXTEXT_CONFIG to a MaxText config file" in r.stderr, r.stderr
    k2 = launch_text(LaunchConfig(**{**JAX, "model_path": "kimi-k2", "expert_width": 2048}))
    assert " model_name=kimi-k2-1t " in k2 and "MAXTEXT_CONFIG:?" not in k2


@pytest.mark.parametrize(
    ("cfg", "says"),
    [
        ({**JAX, "tp": 16, "dp": 4, "ep": 64}, "dp 4 cannot be expressed"),  # the QA's 4,096-device mesh
        ({**JAX, "tp": 16, "dp": 4, "ep": 16}, "dp 4 cannot be expressed"),
        ({**JAX, "tp": 16, "ep": 16, "pp": 2, "slices": 2}, "pp 2 cannot be expressed"),
        ({**JAX, "tp": 7, "ep": 7}, "tp 7 does not divide the experts' FFN width 3072"),
    ],
)
def test_a_split_maxtext_cannot_run_as_priced_is_refused(cfg, says):
    with pytest.raises(K3PlanError, match=says) as err:
        launch_text(LaunchConfig(**cfg))
    assert "\n" not in str(err.value)


def test_plan_emit_launch_refuses_a_dp_pick_in_one_line(cli, tmp_path):
    """plan's pick at 524,288 tokens x 4 was 4x4x4 TP32 EP128 DP4 on jax-native: the file said ici_tensor 32 x
    ici_expert 128 x ici_data 4 = 16,384 on 128 devices (since issue 50 jax-native's f32 scores over 524K do not
    fit, so asked at 131,072, where the pick is 2x4x4 TP16 EP64 DP4). MaxText would hold all 4 DP groups' KV on every device.
    Issue 48: such a row is no recommendation (reason launch, exit 1: nothing passes); ranked anyway under
    --include-unlaunchable, its launch is still refused in one line (exit 2)."""
    out = tmp_path / "run.sh"
    args = ("plan", "-H", "tpu-v7x", "--stacks", "jax-native", "--context", "131072", "--concurrency", "4")
    r = cli(*args, "--emit", "launch", out)
    assert r.exit_code == 1 and "cannot launch" in r.output and "dp 4 cannot be expressed" in r.output, r.output
    assert not out.exists()
    r = cli(*args, "--include-unlaunchable", "--emit", "launch", out)
    assert r.exit_code == 2 and "dp 4 cannot be expressed" in r.stderr and not out.exists(), r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_launch_for_passes_the_topology_s_slices():
    """launch_for gave the launch topology.hosts only; a 2*2x2x4 pick (2 slices) ran as one slice."""
    from types import SimpleNamespace

    from k3plan.engines.stack import load_stack
    from k3plan.hardware.loader import load_hardware
    from k3plan.hardware.topology import parse_topology
    from k3plan.models.loader import load_model
    from k3plan.plan.deployment import launch_for

    hw = load_hardware("tpu-v7x")
    pick = SimpleNamespace(tp=64, ep=64, dp=1, pp=1, chunk_tokens=8192, kv_dtype="fp32")
    launch = launch_for(
        pick=pick,
        hw=hw,
        stack=load_stack("jax-native"),
        topology=parse_topology(hw, "2*2x2x4"),
        model=load_model("kimi-k3"),
        context=131072,
        max_num_seqs=2,
    )
    assert launch.config is not None and launch.config.slices == 2 and launch.text is not None
    keys = _maxtext_keys(launch.text)
    assert keys["ici_tensor_parallelism"] == "32" and keys["dcn_tensor_parallelism"] == "2"


@pytest.mark.parametrize(
    ("cfg", "longest", "chunk"),
    [
        # the default pick: 131,072 - 1 generated = 131,071, in whole 8,192 chunks: 15 x 8,192 = 122,880
        ({**JAX, "max_model_len": 131072, "max_num_batched_tokens": 8192}, 122880, 8192),
        # --isl 100,000 --osl 2,048 in 102,048 tokens: 100,000 = 12 x 8,192 + 1,696 -> 98,304
        ({**JAX, "max_model_len": 102048, "max_output_tokens": 2048, "max_num_batched_tokens": 8192}, 98304, 8192),
        # a prompt under one chunk: JetStream prefills it whole (orchestrator: true_length >= prefill_chunk_size)
        ({**JAX, "max_model_len": 4500, "max_output_tokens": 500, "max_num_batched_tokens": 8192}, 4000, 8192),
    ],
)
def test_maxtext_accepts_the_priced_prompt_and_prefills_it_in_the_priced_chunk(cfg, longest, chunk):
    """max_prefill_predict_length was the chunk (8,192): JetStream keeps the last max_prefill_predict_length tokens
    of a prompt (orchestrator._process_prefill_content -> token_utils.pad_tokens), so the 131,072-token row's
    100k prompt lost 92k tokens. Now the prompt the context leaves, chunked by MaxText's use_chunked_prefill."""
    keys = _maxtext_keys(launch_text(LaunchConfig(**cfg)))
    assert keys["max_prefill_predict_length"] == str(longest)
    assert keys["use_chunked_prefill"] == "true" and keys["prefill_chunk_size"] == str(chunk)
    # MaxText's KV cache: a prefill part + a non-empty autoregressive part (kvcache.py); a whole number of chunks
    # of a prompt of a chunk or more fits the prefill part (kv_cache_chunked_prefill's assert)
    assert longest < int(keys["max_target_length"]) == cfg["max_model_len"]
    assert longest < chunk or longest % chunk == 0


def test_maxtext_refuses_a_context_that_leaves_no_prompt():
    with pytest.raises(K3PlanError, match="leaves no prompt after 500 generated"):
        launch_text(LaunchConfig(**{**JAX, "max_model_len": 500, "max_output_tokens": 500}))


def test_plan_launch_takes_the_osl_off_the_context(cli, tmp_path):
    out = tmp_path / "run.sh"
    r = cli(
        "plan", "-H", "tpu-v7x", "--stacks", "jax-native", "--isl", "100000", "--osl", "2048", "--emit", "launch", out
    )
    assert r.exit_code == 0, r.output
    keys = _maxtext_keys(out.read_text())
    chunk = int(keys["prefill_chunk_size"])
    assert keys["max_target_length"] == "102048"
    assert int(keys["max_prefill_predict_length"]) == 100000 // chunk * chunk


# --- issue 48 item 3: every launch line k3plan prints names the checkpoint by its Hugging Face id and reads back
# through fit --serve (k3plan/engines/serve.py) as the configuration priced

HF_ID = r"[A-Za-z0-9][\w.-]*/[\w.-]+"
# (stack, hardware, topology, splits to try in order: (tp, ep, dp)); the first the engine can express is written
LAUNCHERS = [
    ("torchtpu-vllm", "tpu-v7x", "2x2x4", [(32, 32, 1), (8, 32, 4)]),
    ("jax-native", "tpu-v7x", "2x2x4", [(32, 32, 1), (16, 16, 1)]),
    ("vllm", "nvidia-b200", "2x8", [(16, 16, 1), (8, 16, 2)]),
    ("sglang", "nvidia-b200", "2x8", [(16, 16, 1), (8, 8, 2)]),
    ("dp-attention", "nvidia-b200", "2x8", [(2, 16, 8), (1, 16, 16)]),
    # tpu-inference's DP attention: --tensor-parallel-size of every device, the split in --additional-config
    ("tpu-inference", "tpu-v7x", "2x2x4", [(4, 4, 8), (32, 32, 1)]),
]


def _launch(model: str, stack: str, hardware: str, topology: str, splits):
    from types import SimpleNamespace

    from k3plan.engines.stack import load_stack
    from k3plan.hardware.loader import load_hardware
    from k3plan.hardware.topology import parse_topology
    from k3plan.models.loader import load_model
    from k3plan.plan.deployment import launch_for

    hw = load_hardware(hardware)
    st = load_stack(stack).bind(hw)  # as plan's space binds it (dp-attention on a GPU is SGLang's)
    errors = []
    for tp, ep, dp in splits:
        pick = SimpleNamespace(tp=tp, ep=ep, dp=dp, pp=1, chunk_tokens=8192, kv_dtype=st.kv_cache.dtype)
        launch = launch_for(
            pick=pick,
            hw=hw,
            stack=st,
            topology=parse_topology(hw, topology),
            model=load_model(model),
            context=131072,
            max_num_seqs=16,
        )
        if launch.text is not None:
            return pick, launch
        errors.append(launch.error)
    raise AssertionError(f"{model} {stack} on {hardware}: no split launches: {errors}")


def _command(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln and not ln.startswith(("#", ":", "set ")))


def test_every_bundled_model_has_a_hugging_face_id():
    """A model bundled later (deepseek-v4.1-flash: its provenance.json names the repository) gets an id too, or this
    fails: a launch line would fall back to the config's folder."""
    import re

    from k3plan.models import bundled_models
    from k3plan.models.hub import bundled_of, hf_id

    for m in bundled_models():
        repo = hf_id(m)
        assert repo is not None and re.fullmatch(HF_ID, repo), m
        assert bundled_of(repo) == bundled_of(repo.lower()) == m


@pytest.mark.parametrize(
    "model", ["kimi-k3", "kimi-k2", "kimi-linear-48b-a3b", "deepseek-v3", "deepseek-v4-flash", "deepseek-v4.1-flash"]
)
@pytest.mark.parametrize(("stack", "hardware", "topology", "splits"), LAUNCHERS, ids=[x[0] for x in LAUNCHERS])
def test_every_launch_line_names_the_checkpoint_the_engine_resolves(model, stack, hardware, topology, splits):
    """`vllm serve kimi-k3`: the bundled name is no repository, so the engine could not find the checkpoint. Every
    line names it by its Hugging Face id (k3plan.models.hub), org/name; MaxText's, by its model_name or config."""
    from k3plan.models.hub import hf_id

    _, launch = _launch(model, stack, hardware, topology, splits)
    cmd = _command(launch.text)
    if launch.config.engine == "jax":
        from k3plan.engines.flags import MAXTEXT_MODEL_NAMES

        assert (
            (f"model_name={MAXTEXT_MODEL_NAMES[model]} " in cmd)
            if model in MAXTEXT_MODEL_NAMES
            else ('"$MAXTEXT_CONFIG"' in cmd)
        ), cmd
        return
    argv = shlex.split(cmd)
    name = argv[argv.index("--model-path") + 1] if "--model-path" in argv else argv[argv.index("serve") + 1]
    assert name == hf_id(model)
    import re

    assert re.fullmatch(HF_ID, name), name


# every engine flag the lines write is one the reader reads (issue 48: --all2all-backend, --enable-dp-attention,
# --mamba-scheduler-strategy, --max-mamba-cache-size and the multi-host flags were refused: each family's
# engines/<engine>/serve.py launch_flags reads them as the engines define them). MaxText's JetStream line is no
# serve command fit --serve reads, nor tpu-inference's (its DP attention's split is --additional-config's sharding
# strategy, and the reader takes vllm serve on a TPU as the torch_tpu plugin's)
READ_BACK = [x for x in LAUNCHERS if x[0] not in ("jax-native", "tpu-inference")]


@pytest.mark.parametrize(
    "model", ["kimi-k3", "kimi-k2", "kimi-linear-48b-a3b", "deepseek-v3", "deepseek-v4-pro", "deepseek-v4.1-flash"]
)
@pytest.mark.parametrize(("stack", "hardware", "topology", "splits"), READ_BACK, ids=[x[0] for x in READ_BACK])
def test_every_launch_line_reads_back_through_serve_as_priced(model, stack, hardware, topology, splits):
    """The printed vllm serve / sglang.launch_server line, read by fit --serve's reader, is the configuration the
    plan priced: the model, the split, the context, the chunk, the sequences and the KV dtype. (MaxText's JetStream
    line is no serve command fit --serve reads; tpu-inference's --additional-config sharding strategy is not read
    by it either: test below.)"""
    from k3plan.engines.serve import parse_serve

    pick, launch = _launch(model, stack, hardware, topology, splits)
    cfg = launch.config
    q = parse_serve(_command(launch.text), platform=cfg.platform)
    assert q.model == model
    assert (q.tp, q.dp, q.pp) == (cfg.tp, cfg.dp, 1)
    assert q.stack == {"dp-attention": "dp-attention", "sglang": "sglang"}.get(stack, q.stack)
    if cfg.engine == "vllm":
        assert q.ep == cfg.tp * cfg.dp  # --enable-expert-parallel: the experts over every TP x DP rank
    else:
        assert q.ep == cfg.ep
    # the chunk priced: a DP group's (SGLang's DP attention divides --chunked-prefill-size by dp_size)
    assert (q.context, q.chunk, q.batch) == (cfg.max_model_len, pick.chunk_tokens, cfg.max_num_seqs)
    assert q.kv_dtype == cfg.kv_dtype
    # the LM head as priced: the dp-attention stack holds it over the attention-TP group, which SGLang does only with
    # --enable-dp-lm-head (the line writes it at dp > 1), so the reader sets no whole-TP head; Kimi-Linear's SGLang
    # model passes no use_attn_tp_group (kimi_linear.py), its head over the whole TP group either way: the plan holds
    # more of it than the engine does there
    assert q.lm_head_whole_tp is None or (model == "kimi-linear-48b-a3b" and cfg.dp > 1)


@pytest.mark.parametrize(("stack", "hardware", "topology", "splits"), READ_BACK, ids=[x[0] for x in READ_BACK])
def test_k3_s_launch_lines_pass_fit_serve(cli, stack, hardware, topology, splits):
    """fit --serve on each engine's K3 line answers the start check (0 starts, 1 refuses), never a usage error (2)."""
    _, launch = _launch("kimi-k3", stack, hardware, topology, splits)
    r = cli("fit", "-H", hardware, "-t", topology, "--serve", _command(launch.text))
    assert r.exit_code in (0, 1), r.output


# --- session 52: DeepSeek-V4 / V4.1 on SGLang. DeepseekV4ForCausalLM asserts --kv-cache-dtype in [fp8_e4m3, bfloat16]
# as given, with no hook rewriting bf16 first (sglang 0.5.14 wheel arg_groups/deepseek_v4_hook.py
# apply_deepseek_v4_defaults, 0.5.15-0.5.23 arg_groups/overrides.py _deepseek_v4_kv_cache_dtype; V4.1's config is
# mapped to the class, configs/deepseek_v41.py normalize_deepseek_v41_config): the line wrote 'bf16', which SGLang
# refuses ('bf16 is not supported for DeepseekV4ForCausalLM') and fit --serve refused with it (exit 2). Each printed
# line now starts under fit --serve, and fit --serve of it prices what fit without --serve priced, to the byte
V4_LINES = [
    ("deepseek-v4-flash", "sglang", (8, 8, 1)),
    ("deepseek-v4-flash", "dp-attention", (1, 8, 8)),
    ("deepseek-v4.1-flash", "sglang", (8, 8, 1)),
    # attention TP 1 on SM100 with FP8 KV: 0.5.23's flashmla_mega (its extra RoPE tables and V4.1 layouts)
    ("deepseek-v4.1-flash", "dp-attention", (1, 8, 8)),
]


@pytest.mark.parametrize("kv", ["fp8", "bf16"])
@pytest.mark.parametrize(("model", "stack", "split"), V4_LINES, ids=[f"{m}-{s}" for m, s, _ in V4_LINES])
def test_a_v4_launch_line_starts_under_serve_and_prices_what_fit_priced(cli, model, stack, split, kv):
    import json
    from types import SimpleNamespace

    from k3plan.engines.serve import parse_serve
    from k3plan.engines.stack import load_stack
    from k3plan.hardware.loader import load_hardware
    from k3plan.hardware.topology import parse_topology
    from k3plan.models.loader import load_model
    from k3plan.plan.deployment import launch_for

    hw, m = load_hardware("nvidia-b200"), load_model(model)
    st = load_stack(stack).bind(hw).for_model(m).with_kv_dtype(kv)  # as plan's space holds a row's variant
    tp, ep, dp = split
    pick = SimpleNamespace(tp=tp, ep=ep, dp=dp, pp=1, chunk_tokens=8192, kv_dtype=kv)
    launch = launch_for(
        pick=pick, hw=hw, stack=st, topology=parse_topology(hw, "8"), model=m, context=131072, max_num_seqs=16
    )
    assert launch.text is not None, launch.error
    cmd = _command(launch.text)
    flag = shlex.split(cmd)[shlex.split(cmd).index("--kv-cache-dtype") + 1]
    assert flag == {"fp8": "fp8_e4m3", "bf16": "bfloat16"}[kv]
    assert parse_serve(cmd, platform="gpu").kv_dtype == kv
    served = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", cmd, "--json")
    assert served.exit_code in (0, 1), served.output  # the engine's verdict, never a refusal of the line (2)
    plain = cli(
        "fit", "-H", "nvidia-b200", "-t", "8", "-m", model, "--stack", stack, "--tp", str(tp), "--dp", str(dp),
        "--ep", str(ep), "--context", "131072", "--chunk", "8192", "--kv-dtype", kv, "--json",
    )  # fmt: skip
    assert plain.exit_code in (0, 1, 3), plain.output
    a, b = json.loads(plain.stdout), json.loads(served.stdout)
    # one accounting: the weights with what SGLang holds beside the model's tensors (engines/sglang/memory.py
    # sglang_loaded_extras: the RoPE tables, V4.1's bf16 wo_a), the KV, the reserve, the sequences
    assert a["per_device"] == b["per_device"]
    assert a["weights_by_role"] == b["weights_by_role"] and b["weights_by_role"]["rope_tables"] > 0
    assert a["capacity"]["max_sequences"] == b["capacity"]["max_sequences"]
