"""The vLLM recipes' own commands read through --serve, never refused for a setting k3plan does not know (issue 47
item 2). Each command is the recipe site's composition of vllm-project/recipes@8959cf6 models/moonshotai/Kimi-K3.yaml
(base_args, the hardware_overrides of its Blackwell / Hopper / AMD profiles, the text_only, tool_calling and
reasoning features) and models/moonshotai/Kimi-K2.6.yaml (its amd override); the pd_cluster environment is
DeepSeek-V4-Pro.yaml's. A setting with a memory effect k3plan does not follow is read and named under the answer's
caveats; decode context parallelism is priced in the start check (the pool holds N x the tokens, as the
Kimi-K2-Thinking recipe's TP8+DCP8 start logs)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import CAVEAT_ENV, IGNORED_ENV, parse_serve
from k3plan.errors import K3PlanError

TOOLS = "--language-model-only --enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"
K3_BLACKWELL = (
    "VLLM_ALLREDUCE_USE_FLASHINFER=1 VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_USE_V2_MODEL_RUNNER=1 "
    "VLLM_USE_RUST_FRONTEND=1 vllm serve moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 "
    "--tensor-parallel-size 8 --load-format fastsafetensors --no-enable-flashinfer-autotune --max-model-len 1048576 "
    "--kv-cache-dtype fp8 --attention-config "
    '\'{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}\' --enable-prefix-caching ' + TOOLS
)
K3_HOPPER = (
    "VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_USE_V2_MODEL_RUNNER=1 VLLM_USE_RUST_FRONTEND=1 "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True vllm serve moonshotai/Kimi-K3 --trust-remote-code "
    "--gpu-memory-utilization 0.97 --tensor-parallel-size 16 --max-num-seqs 5 --max-model-len 32768 "
    "--moe-backend marlin --disable-custom-all-reduce --no-enable-flashinfer-autotune --max-num-batched-tokens 4096 "
    "--attention-backend FLASHMLA " + TOOLS
)
K3_AMD = (
    "VLLM_ROCM_USE_AITER=1 SAFETENSORS_FAST_GPU=1 VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4=1 AITER_BF16_FP8_MOE_BOUND=0 "
    "VLLM_USE_BREAKABLE_CUDAGRAPH=0 vllm serve moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 "
    "--tensor-parallel-size 8 --load-format auto --mm-encoder-tp-mode data --max-num-seqs 128 "
    "--max-num-batched-tokens 4096 --compilation-config "
    '\'{"cudagraph_mode":"FULL_DECODE_ONLY","custom_ops":["+fused_rms_norm_gated"]}\' ' + TOOLS
)
K26_AMD = (
    "VLLM_ROCM_USE_AITER=1 VLLM_ROCM_QUICK_REDUCE_QUANTIZATION=INT4 vllm serve moonshotai/Kimi-K2.6 "
    "--trust-remote-code --tensor-parallel-size 8 --language-model-only"
)
PD_ENV = "VLLM_USE_NCCL_SYMM_MEM=1 NCCL_CUMEM_ENABLE=1 NCCL_MNNVL_ENABLE=1 NCCL_NVLS_ENABLE=1 "


@pytest.mark.parametrize(
    ("hardware", "command", "caveat"),
    [
        ("nvidia-b300", K3_BLACKWELL, "VLLM_USE_V2_MODEL_RUNNER"),
        ("nvidia-h200", K3_HOPPER, "VLLM_USE_V2_MODEL_RUNNER"),
        ("amd-mi355x", K3_AMD, None),
        ("amd-mi355x", K26_AMD, None),
        ("nvidia-gb200-nvl72", PD_ENV + "vllm serve moonshotai/Kimi-K2.6 -tp 16 --language-model-only", "NCCL_SYMM"),
    ],
    ids=["k3-blackwell", "k3-hopper", "k3-amd", "k2.6-amd", "pd-env"],
)
def test_a_vllm_recipe_s_command_starts_with_its_settings_read(cli, hardware, command, caveat):
    got = cli("fit", "-H", hardware, "--serve", command, "--json")
    assert got.exit_code == 0, got.stdout
    out = json.loads(got.stdout)
    assert out["engine"]["starts"] and out["engine"]["kv_pool_tokens"] > 0
    serve = out["engine"]["serve"]
    # the harmless ones listed with their values, the ones with an unpriced effect named under the caveats
    env = dict(a.split("=", 1) for a in command.split(" vllm serve ")[0].split())
    listed = {name for name in env if name in IGNORED_ENV}
    assert {i.split("=", 1)[0] for i in serve["ignored"] if "=" in i} >= listed
    named = [c for c in serve["caveats"] if caveat and caveat in c]
    assert bool(named) == bool(caveat)


def test_the_caveat_follows_the_switch_s_value():
    on = parse_serve("VLLM_USE_V2_MODEL_RUNNER=1 vllm serve moonshotai/Kimi-K3 -tp 8", platform="gpu")
    off = parse_serve("VLLM_USE_V2_MODEL_RUNNER=0 vllm serve moonshotai/Kimi-K3 -tp 8", platform="gpu")
    assert any(c.startswith("VLLM_USE_V2_MODEL_RUNNER=1: ") for c in on.caveats)
    assert not any("V2" in c for c in off.caveats) and "VLLM_USE_V2_MODEL_RUNNER=0" in off.ignored
    assert set(CAVEAT_ENV).isdisjoint(IGNORED_ENV)


K2T = (
    "vllm serve moonshotai/Kimi-K2-Thinking --tensor-parallel-size 8 {} --enable-auto-tool-choice --tool-call-parser "
    "kimi_k2 --reasoning-parser kimi_k2 --trust-remote-code"
)


def test_decode_context_parallelism_holds_the_tokens_the_engine_logs(cli):
    # the Kimi-K2-Thinking recipe's two start logs (vllm-project/recipes@0d218d1e moonshotai/Kimi-K2-Think.md), TP8 and
    # TP8+DCP8: "Available KV cache memory: 46.80 GiB" both; "GPU KV cache size: 715,072 tokens" and 5,721,088 after
    # "Multiplying the GPU KV cache size by the dcp_world_size 8." The pool's bytes k3plan holds 6.42 GiB over the log
    # (tests/engines/cases/vllm-recipes115-kimi-k2-thinking-h200-tp8.yaml, a strict xfail); DCP's rule is the ratio
    tp8, dcp8 = (
        json.loads(cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", K2T.format(extra), "--json").stdout)["engine"]
        for extra in ("", "--decode-context-parallel-size 8 --dcp-comm-backend a2a")
    )
    assert tp8["kv_pool_bytes"] == dcp8["kv_pool_bytes"]  # 46.80 GiB either way in the log
    logged = 5_721_088 / 715_072
    got = dcp8["kv_pool_tokens"] / tp8["kv_pool_tokens"]
    assert got == 8 and abs(got / logged - 1) < 0.001
    assert dcp8["max_concurrency"] == pytest.approx(8 * tp8["max_concurrency"], rel=0.01)
    assert "DCP 8" in dcp8["sources"]["kv_pool_tokens"]


def test_decode_context_parallelism_is_read_where_its_rule_is_known():
    q = parse_serve(K2T.format("-dcp 8"), platform="gpu")
    assert q.dcp == 8 and any(c.startswith("--decode-context-parallel-size 8: ") for c in q.caveats)
    one = parse_serve(K2T.format("-dcp 1 --dcp-comm-backend a2a"), platform="gpu")
    assert (one.dcp, "--dcp-comm-backend" in one.ignored) == (1, True)
    with pytest.raises(K3PlanError, match="does not divide --tensor-parallel-size 8"):
        parse_serve(K2T.format("-dcp 3"), platform="gpu")
    with pytest.raises(K3PlanError, match="on a TPU"):
        parse_serve(K2T.format("-dcp 8"), platform="tpu")


def test_decode_context_parallelism_over_deepseek_v4_s_groups_is_refused(cli):
    got = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 -dcp 2")
    assert got.exit_code == 2 and "DCP not support sliding window" in got.output


def test_sleep_mode_is_read_with_a_caveat():
    q = parse_serve("vllm serve moonshotai/Kimi-K2-Thinking -tp 8 --enable-sleep-mode", platform="gpu")
    assert any(c.startswith("--enable-sleep-mode: ") for c in q.caveats)
    assert not parse_serve(
        "vllm serve moonshotai/Kimi-K2-Thinking -tp 8 --no-enable-sleep-mode", platform="gpu"
    ).caveats


def test_sglang_builds_a_multimodal_model_s_tower_with_it(cli):
    # SGLang's own Kimi-K2.5 launch line (sgl-project/sglang docs/basic_usage/kimi_k2_5.md): the tower and projector
    # are built whatever the flags (engines/sglang/__init__.py cites kimi_k25.py), so they take pool a text-only
    # checkpoint of the same language model (Kimi-K2-Thinking) keeps
    line = "python3 -m sglang.launch_server --model-path {} --tp 8 --trust-remote-code --tool-call-parser kimi_k2"
    k25 = json.loads(
        cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", line.format("moonshotai/Kimi-K2.5"), "--json").stdout
    )
    text = json.loads(
        cli(
            "fit", "-H", "nvidia-h200", "-t", "8", "--serve", line.format("moonshotai/Kimi-K2-Thinking"), "--json"
        ).stdout
    )
    from k3plan.models.loader import load_model

    tower = sum(t.nbytes for t in load_model("kimi-k2.6").inventory.of_kind("vision"))
    assert tower > 0
    # whole on every GPU, in the budget's weights and so in the engine's (one figure)
    assert k25["weights_by_role"]["vision"] == tower and "vision_tower" not in text["weights_by_role"]
    assert k25["engine"]["weights_bytes"] == k25["per_device"]["weights_bytes"]
    assert k25["engine"]["kv_pool_tokens"] < text["engine"]["kv_pool_tokens"]
    assert "vision tower" in k25["provenance"]["weights"]


@pytest.mark.parametrize(
    "flags",
    [
        # SemiAnalysisAI/InferenceX@843c6254 benchmarks/single_node/fixed_seq_len/dsr1_fp4_b200.sh's scheduling and
        # kernel flags, agentic/dsv4_fp4_b200_sglang_mtp.sh's host-side ones
        "--enable-flashinfer-allreduce-fusion --scheduler-recv-interval 10 --schedule-conservativeness 3.33 "
        "--disable-piecewise-cuda-graph",
        "--enable-dp-attention-local-control-broadcast --watchdog-timeout 1800 --enable-cache-report "
        "--allow-auto-truncate --incremental-streaming-output --enable-mixed-chunk --enable-two-batch-overlap",
    ],
)
def test_inferencex_s_sglang_scheduling_and_host_flags_are_read_as_harmless(flags):
    given = {f for f in flags.split() if f.startswith("--")}
    cmd = f"python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --tp 8 {flags}"
    # read as 0.5.19, a release whose parser registers them all: --disable-piecewise-cuda-graph is in 0.5.10-0.5.19
    # only (engines/sglang/server_flags.py), so 0.5.23, the default, stops at it
    release = (0, 5, 19)
    # with --mem-fraction-static given nothing here moves the pool
    assert given <= set(parse_serve(cmd + " --mem-fraction-static 0.85", platform="gpu", release=release).ignored)
    # without it, the prefill-graph switches feed the fraction SGLang derives (engines/sglang/prefill_graph.py): read
    q = parse_serve(cmd, platform="gpu", release=release)
    reads = {"--disable-piecewise-cuda-graph", "--enable-two-batch-overlap"}
    assert given - reads <= set(q.ignored) and not (given & reads & set(q.ignored))
    assert q.prefill_backend == ("disabled" if "--disable-piecewise-cuda-graph" in given else None)
    assert ("two_batch_overlap" in q.prefill_conditions) == ("--enable-two-batch-overlap" in given)


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (
            "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --tp 8 --moe-a2a-backend deepep "
            "--deepep-config c.json",
            "DeepEP",
        ),
        ("vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8 --prefill-context-parallel-size 2", "prefill context parallel"),
    ],
)
def test_a_nightly_flag_with_an_unpriced_memory_effect_is_refused_with_what_it_does(command, what):
    with pytest.raises(K3PlanError, match=what):
        parse_serve(command, platform="gpu")


def test_a_checkpoint_k3plan_cannot_price_is_named_before_any_flag():
    with pytest.raises(K3PlanError, match="'nvidia/DeepSeek-R1-0528-NVFP4-v2' is not a checkpoint k3plan can price"):
        parse_serve("vllm serve nvidia/DeepSeek-R1-0528-NVFP4-v2 -tp 8 --some-new-flag", platform="gpu")


@pytest.mark.parametrize(
    ("checkpoint", "bundle"),
    [("DeepSeek-V4-Flash-0731", "deepseek-v4-flash-0731"), ("DeepSeek-V4-Pro-0813", "deepseek-v4-pro-0813")],
)
def test_the_recipe_s_default_dspark_lines_read_the_bundled_module(checkpoint, bundle):
    # the vLLM recipes' DeepSeek-V4-Flash (0731) and -Pro (0813) default variants with their default spec mode, dspark
    # (vllm-project/recipes@8959cf6 models/deepseek-ai/DeepSeek-V4-{Flash,Pro}.yaml): both are bundled with their
    # dspark_* keys and DSpark stages (models/bundled/deepseek-v4-flash-0731, deepseek-v4-pro-0813), so the line is
    # read, not refused
    line = (
        f"vllm serve deepseek-ai/{checkpoint} --trust-remote-code --kv-cache-dtype fp8 --block-size 256 "
        "--tensor-parallel-size 8 --speculative-config "
        '\'{"method":"dspark","num_speculative_tokens":7,"draft_sample_method":"probabilistic"}\''
    )
    q = parse_serve(line, platform="gpu")
    assert q.model == bundle
    assert q.speculative is not None and q.speculative.method == "dspark"


def test_sglang_s_kimi_k3_class_builds_the_language_model_alone(cli):
    # SGLang's kimi_k3.py unwraps text_config and skips vision_tower.* (engines/sglang/__init__.py): no tower bytes
    line = "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K3 --tp-size 16 --context-length 131072"
    out = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "2x8", "--serve", line, "--json").stdout)
    assert out["engine"]["weights_bytes"] == out["per_device"]["weights_bytes"]
    assert "vision tower" not in out["engine"]["sources"]["weights"]
