"""fit --serve reads tpu-inference's own ``vllm serve`` (issue 47 item 2; k3plan/engines/tpu_inference/serve.py): a TPU
command whose --additional-config holds a sharding_strategy is tpu-inference's, priced on its stack; each priced
setting moves its figure, the no-effect ones are listed, the rest refused in one line (exit 2)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.serve import parse_serve

GiB = 2**30
SHARDING = '\'{"compilation_sizes": [768], "sharding": {"sharding_strategy": {"enable_dp_attention": true}}}\''
ENV = (
    "VLLM_USE_V1=1 MODEL_IMPL_TYPE=vllm NEW_MODEL_DESIGN=1 TPU_BACKEND_TYPE=jax VLLM_MLA_DISABLE=0 "
    "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 "
)
FLAGS = (
    "vllm serve deepseek-ai/DeepSeek-R1 --seed 42 --max-num-seqs 96 --max-num-batched-tokens 1024 "
    "--tensor-parallel-size 8 --max-model-len 9216 --kv-cache-dtype fp8 --gpu-memory-utilization 0.95 "
    "--enable-expert-parallel --no-enable-prefix-caching --async-scheduling --additional-config " + SHARDING
)
# tpu-inference's daily DeepSeek-R1 benchmark on a v7x-8 (tests/engines/cases/tpu-inference-deepseek-r1-v7x8-*.yaml)
DAILY = ENV + FLAGS


def _fit(cli, cmd: str):
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_the_daily_r1_benchmark_reads_as_tpu_inference_and_starts(cli):
    d = _fit(cli, DAILY)
    eng = d["engine"]
    assert d["fits"] is True and eng["starts"] is True and eng["engine"] == "tpu-inference"
    assert eng["serve"]["stack"] == (
        "tpu-inference:gpu_memory_utilization=0.95,model_impl=vllm,moe_requantize_weight_dtype=fp4"
    )
    assert round(eng["weights_bytes"] / GiB, 2) == 53.41  # the experts requantized to fp4 in 512-blocks
    assert round(eng["kv_pool_bytes"] / GiB, 2) == 36.60
    assert eng["kv_pool_tokens"] == 1_006_592  # 61 MLA layers x 640 B a token (fp8)
    assert eng["serve"]["max_num_seqs"] == 96 and eng["max_model_len"] == 9216
    for name in (
        "--additional-config compilation_sizes",
        "--enable-expert-parallel",
        "--seed",
        "--async-scheduling",
        "--no-enable-prefix-caching",
        "VLLM_MLA_DISABLE=0",
        "TPU_BACKEND_TYPE=jax",
        "VLLM_USE_V1=1",
    ):
        assert name in eng["serve"]["ignored"], name
    # the priced variables, and NEW_MODEL_DESIGN the MLA models require, are not listed as ignored
    assert not [
        x for x in eng["serve"]["ignored"] if x.startswith(("MODEL_IMPL_TYPE", "MOE_REQUANTIZE", "NEW_MODEL_DESIGN"))
    ]


def test_the_split_is_attention_tp1_over_dp_with_the_experts_over_every_device():
    q = parse_serve(DAILY, platform="tpu")
    assert (q.stack, q.tp, q.dp, q.ep, q.pp) == ("tpu-inference", 1, 8, 8, 1)
    assert (q.chunk, q.batch, q.context, q.kv_dtype) == (1024, 96, 9216, "fp8")
    assert "DP rank" in q.batch_source and "768 in all" in q.batch_source
    q4 = parse_serve(DAILY.replace("--tensor-parallel-size 8", "--tensor-parallel-size 4"), platform="tpu")
    assert (q4.tp, q4.dp, q4.ep) == (1, 4, 4)


def test_routing_a_sharding_strategy_on_a_tpu_is_tpu_inference_env_vars_alone_are_not():
    assert parse_serve(DAILY, platform="tpu").stack == "tpu-inference"
    # the same command without the sharding key stays the torch_tpu plugin's (env vars route nothing)
    plain = (
        "MODEL_IMPL_TYPE=vllm MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 MOE_REQUANTIZE_BLOCK_SIZE=512 "
        + FLAGS.split(" --additional-config")[0]
    )
    assert parse_serve(plain, platform="tpu").stack == "torchtpu-vllm"
    assert parse_serve("vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --enable-expert-parallel", platform="tpu").stack == (
        "torchtpu-vllm"
    )


def _change(cli, old: str, new: str) -> dict:
    assert old in DAILY
    return _fit(cli, DAILY.replace(old, new))["engine"]


def test_each_priced_setting_moves_its_figure(cli):
    base = _fit(cli, DAILY)["engine"]
    # the experts left fp8: 90.89 GiB a device, over the 90.01 GiB utilization 0.95 leaves: no start
    fp8 = _change(cli, "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", "")
    assert round(fp8["weights_bytes"] / GiB, 2) == 90.89 and fp8["starts"] is False
    assert "moe_requantize_weight_dtype" not in fp8["serve"]["stack"]
    # bf16 KV: the same pool in half the tokens (whole 1,024-token blocks)
    bf16 = _change(cli, "--kv-cache-dtype fp8", "--kv-cache-dtype auto")
    assert bf16["kv_pool_bytes"] == base["kv_pool_bytes"]
    assert 0 <= base["kv_pool_tokens"] // 2 - bf16["kv_pool_tokens"] < 1024
    # a lower utilization: the pool shrinks by the HBM it leaves
    low = _change(cli, "--gpu-memory-utilization 0.95", "--gpu-memory-utilization 0.9")
    assert 0 < base["kv_pool_bytes"] - low["kv_pool_bytes"] < 0.06 * 95 * GiB
    longer = _change(cli, "--max-model-len 9216", "--max-model-len 32768")
    assert longer["max_model_len"] == 32768 and longer["max_concurrency"] < base["max_concurrency"]
    seqs = _change(cli, "--max-num-seqs 96", "--max-num-seqs 64")
    assert seqs["serve"]["max_num_seqs"] == 64
    chunk = parse_serve(DAILY.replace("--max-num-batched-tokens 1024", "--max-num-batched-tokens 2k"), platform="tpu")
    assert chunk.chunk == 2000


REFUSED = {
    "fp4 on the JAX path": (DAILY.replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=flax_nnx"), "JAX model path"),
    "JAX path by default": (
        DAILY.replace("MODEL_IMPL_TYPE=vllm ", "").replace(
            "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", ""
        ),
        "'auto' resolves to flax_nnx",
    ),
    "jetpack": (
        DAILY.replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=jetpack").replace(
            "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", ""
        ),
        "MODEL_IMPL_TYPE=jetpack",
    ),
    "impl not read": (
        DAILY.replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=torch").replace(
            "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", ""
        ),
        "not a value tpu-inference takes",
    ),
    "another requant dtype": (DAILY.replace("WEIGHT_DTYPE=fp4", "WEIGHT_DTYPE=int8"), "fp4 requantization only"),
    "another requant block": (DAILY.replace("BLOCK_SIZE=512", "BLOCK_SIZE=256"), "in 512-blocks"),
    "requant without a block": (DAILY.replace("MOE_REQUANTIZE_BLOCK_SIZE=512 ", ""), "in 512-blocks"),
    "unknown sharding_strategy key": (
        DAILY.replace('{"enable_dp_attention": true}', '{"enable_dp_attention": true, "expert_parallelism": 8}'),
        "'expert_parallelism'",
    ),
    "unknown sharding key": (
        DAILY.replace('"sharding": {', '"sharding": {"device_mesh": 1, '),
        "sharding_strategy only",
    ),
    "unknown additional key": (DAILY.replace('"compilation_sizes": [768]', '"kv_offload": 1'), "'kv_offload'"),
    "malformed additional config": (DAILY.replace('"sharding": {', '"sharding": {{'), "expected a JSON object"),
    "no dp attention": (DAILY.replace("true}", "false}"), "MLA models require both"),
    "no NEW_MODEL_DESIGN": (DAILY.replace("NEW_MODEL_DESIGN=1 ", ""), "MLA models require both"),
    "MLA off": (DAILY.replace("VLLM_MLA_DISABLE=0", "VLLM_MLA_DISABLE=1"), "without MLA"),
    "no max-num-seqs": (DAILY.replace("--max-num-seqs 96 ", ""), "without --max-num-seqs"),
    "no max-num-batched-tokens": (
        DAILY.replace("--max-num-batched-tokens 1024 ", ""),
        "without --max-num-batched-tokens",
    ),
    "data parallel": (DAILY.replace("--seed 42", "--data-parallel-size 2"), "--data-parallel-size"),
    "block size": (DAILY.replace("--seed 42", "--block-size 256"), "--block-size"),
    "auto context": (DAILY.replace("--max-model-len 9216", "--max-model-len auto"), "--max-model-len auto"),
    "fp4 on a model without fp8 experts": (
        DAILY.replace("deepseek-ai/DeepSeek-R1", "moonshotai/Kimi-K3"),
        "DeepSeek-V3 / R1",
    ),
    "tpu-inference variable on the plugin": (
        "TPU_BACKEND_TYPE=jax vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --enable-expert-parallel",
        "read only for tpu-inference's command",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_is_not_read_is_refused_in_one_line(cli, name):
    cmd, text = REFUSED[name]
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd)
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert text in r.output, r.output


def test_a_sharding_strategy_on_a_gpu_is_refused(cli):
    cmd = "vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --additional-config " + SHARDING
    r = cli("fit", "-H", "nvidia-h200", "--serve", cmd)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "tpu-inference's mesh" in r.output


def test_the_launch_leaves_the_requantization_unset_at_its_default():
    from k3plan.engines.stack import load_stack
    from k3plan.plan.deployment import engine_options

    flags = [f for f, _, _ in engine_options(load_stack("tpu-inference"))]
    assert "MOE_REQUANTIZE_WEIGHT_DTYPE" not in flags
    fp4 = dict((f, v) for f, v, _ in engine_options(load_stack("tpu-inference:moe_requantize_weight_dtype=fp4")))
    assert fp4["MOE_REQUANTIZE_WEIGHT_DTYPE"] == "fp4" and fp4["MOE_REQUANTIZE_BLOCK_SIZE"] == "512"


def test_vllm_s_model_code_is_priced_at_tp_1_only(cli):
    """model_impl=vllm is read at the split DP attention gives an MLA model (tp 1 x dp N, the experts over every
    device); at tp > 1 the experts would sit over every device, which the stack's dp_experts does not follow: the
    answer is refused in one line rather than priced on the wrong expert split."""
    stack = "tpu-inference:model_impl=vllm"
    r = cli("fit", "-m", "deepseek-v3", "-H", "tpu-v7x", "-t", "2x2x1", "--stack", stack, "--tp", "4")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "priced at tp <= 1" in r.output and "expected --tp 1" in r.output
    ok = cli("fit", "-m", "deepseek-v3", "-H", "tpu-v7x", "-t", "2x2x1", "--stack", stack, "--tp", "1", "--json")
    assert ok.exit_code in (0, 1, 3), ok.output
    assert json.loads(ok.stdout)["parallel"]["ep"] == 8


def test_the_fp8_expert_ids_are_the_ones_serve_reads_as_deepseek_v3():
    """tpu_inference/serve.py keeps its own list (importing engines.serve there is a cycle): it must stay the ids
    engines.serve.HF_MODELS resolves to deepseek-v3, the bundled checkpoint with fp8 block-scaled experts."""
    from k3plan.engines.serve import HF_MODELS
    from k3plan.engines.tpu_inference.serve import FP8_EXPERT_MODELS

    assert set(FP8_EXPERT_MODELS) == {k for k, v in HF_MODELS.items() if v == "deepseek-v3"} | {"deepseek-v3"}
