"""fit --serve reads tpu-inference's own ``vllm serve`` (issue 47 item 2; k3plan/engines/tpu_inference/serve.py): a TPU
command whose --additional-config holds a sharding_strategy is tpu-inference's, priced on its stack; each priced
setting moves its figure, the no-effect ones are listed, the rest refused in one line (exit 2)."""

from __future__ import annotations

import json
import math

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
    assert round(eng["weights_bytes"] / GiB, 2) == 53.45  # the experts requantized to fp4 in 512-blocks
    # (kv_b_proj held as fp8 W_UK_T / W_UV with float32 per-head scales: VllmMLAAttention; vLLM's bf16 RoPE table)
    assert round(eng["kv_pool_bytes"] / GiB, 2) == 36.57
    # the worker sums the 8 devices' pools and vLLM counts 1,024-token pages of 61 MLA layers x 640 B a token (fp8) in
    # the sum (HbmWorker.sums_devices): 8 x 36.57 GiB // 39,976,960 B = 7,857 blocks
    assert eng["kv_pool_tokens"] == 8_045_568 == 7_857 * 1024
    assert eng["serve"]["max_num_seqs"] == 96 and eng["max_model_len"] == 9216
    for name in (
        "--additional-config compilation_sizes",
        "--seed",
        "--async-scheduling",
        "--no-enable-prefix-caching",
        "VLLM_MLA_DISABLE=0",
        "TPU_BACKEND_TYPE=jax",
        "VLLM_USE_V1=1",
    ):
        assert name in eng["serve"]["ignored"], name
    # --enable-expert-parallel is read: it picks the MoE backend the step compiles (GMM_EP), not the weights a device
    assert "--enable-expert-parallel" not in eng["serve"]["ignored"]
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
    # the experts left fp8: 90.93 GiB a device, over the 90.01 GiB utilization 0.95 leaves: no start
    fp8 = _change(cli, "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", "")
    assert round(fp8["weights_bytes"] / GiB, 2) == 90.93 and fp8["starts"] is False
    assert "moe_requantize_weight_dtype" not in fp8["serve"]["stack"]
    # bf16 KV: about half the tokens (whole 1,024-token blocks). The pool moves by the absorbed copies alone: at an fp8
    # cache VllmMLAAttention holds kv_b_proj as fp8 W_UK_T / W_UV with float32 scales a (head, latent) and a (head, v),
    # 128 x (512 + 128) a layer, in place of its fp8 128-blocks' 256 x 4; at auto that quantization is not read
    bf16 = _change(cli, "--kv-cache-dtype fp8", "--kv-cache-dtype auto")
    copies = 61 * 4 * (128 * (512 + 128) - 256 * 4)
    assert bf16["kv_pool_bytes"] - base["kv_pool_bytes"] == base["weights_bytes"] - bf16["weights_bytes"] == copies
    assert abs(base["kv_pool_tokens"] // 2 - bf16["kv_pool_tokens"]) < 4 * 1024
    # a lower utilization: the pool shrinks by the HBM it leaves
    low = _change(cli, "--gpu-memory-utilization 0.95", "--gpu-memory-utilization 0.9")
    assert 0 < base["kv_pool_bytes"] - low["kv_pool_bytes"] < 0.06 * 95 * GiB
    longer = _change(cli, "--max-model-len 9216", "--max-model-len 32768")
    assert longer["max_model_len"] == 32768 and longer["max_concurrency"] < base["max_concurrency"]
    seqs = _change(cli, "--max-num-seqs 96", "--max-num-seqs 64")
    assert seqs["serve"]["max_num_seqs"] == 64
    chunk = parse_serve(DAILY.replace("--max-num-batched-tokens 1024", "--max-num-batched-tokens 2k"), platform="tpu")
    assert chunk.chunk == 2000


def test_an_unset_chunk_is_vllm_serves_default_under_tpu_inference():
    """--max-num-batched-tokens unset: vLLM's OPENAI_API_SERVER default of 2,048 (get_batch_defaults' else branch:
    TpuPlatform.get_device_total_memory raises, and its device name matches none of the TPU branch's chips), capped at
    max_num_seqs x max_model_len (serve.py DEFAULT_CHUNK_SOURCE)."""
    unset = DAILY.replace("--max-num-batched-tokens 1024 ", "")
    assert parse_serve(unset, platform="tpu").chunk == 2048
    capped = unset.replace("--max-num-seqs 96", "--max-num-seqs 1").replace(
        "--max-model-len 9216", "--max-model-len 1024"
    )
    assert parse_serve(capped, platform="tpu").chunk == 1024


REFUSED = {
    # the JAX DeepSeek-V3 is read at tensor_parallelism 1 x expert_parallelism = the devices (GMM_EP) only: DAILY's
    # strategy (expert_parallelism unset) runs its GMM_TP experts
    "the JAX DeepSeek off GMM_EP": (
        DAILY.replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=flax_nnx"),
        "JAX DeepseekV3ForCausalLM at sharding_strategy expert_parallelism 1 on 8 devices runs its GMM_TP experts",
    ),
    "JAX path by default": (
        DAILY.replace("MODEL_IMPL_TYPE=vllm ", "").replace(
            "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", ""
        ),
        "auto resolves to flax_nnx",
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
    "a mesh smaller than the devices": (
        DAILY.replace('{"enable_dp_attention": true}', '{"enable_dp_attention": true, "tensor_parallelism": 4}'),
        "= 4 devices, not the 8 of --tensor-parallel-size",
    ),
    "a mesh larger than the devices": (
        DAILY.replace('{"enable_dp_attention": true}', '{"enable_dp_attention": true, "expert_parallelism": 8}'),
        "attn_dp 8 x attn_dp_expert 8 = 64 devices",
    ),
    "a degree that is no count": (
        DAILY.replace('{"enable_dp_attention": true}', '{"enable_dp_attention": true, "expert_parallelism": "8"}'),
        "expected a whole number",
    ),
    "unknown sharding_strategy key": (
        DAILY.replace('{"enable_dp_attention": true}', '{"enable_dp_attention": true, "sequence_parallelism": 2}'),
        "'sequence_parallelism'",
    ),
    "another checkpoint's config": (DAILY + " --hf-config-path moonshotai/Kimi-K2.6", "--hf-config-path"),
    "another checkpoint's config, abbreviated": (DAILY + " --hf-config=moonshotai/Kimi-K2.6", "--hf-config-path"),
    "a config override of a field the JAX model does not read": (
        DAILY + " --hf-overrides '{\"first_k_dense_replace\": 1}'",
        "--hf-overrides first_k_dense_replace: tpu-inference sets it over",
    ),
    "a config override on a model whose reading of it was not read": (
        DAILY.replace("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V4-Flash")
        + " --hf-overrides '{\"num_hidden_layers\": 5}'",
        "was read for deepseek-v3 only",
    ),
    # argparse keeps the last of the two, both --hf-config-path: here another checkpoint's
    "both spellings of the config path, the last another's": (
        DAILY + " --hf-config-path deepseek-ai/DeepSeek-R1 --hf-config moonshotai/Kimi-K2.6",
        "--hf-config-path moonshotai/Kimi-K2.6: the config of another checkpoint",
    ),
    "the JAX MoE backend switch on": ("USE_UNFUSED_MEGABLOCKS=1 " + DAILY, "MEGABLX_GMM"),
    "unknown sharding key": (
        DAILY.replace('"sharding": {', '"sharding": {"device_mesh": 1, '),
        "sharding_strategy only",
    ),
    "unknown additional key": (DAILY.replace('"compilation_sizes": [768]', '"kv_offload": 1'), "'kv_offload'"),
    "malformed additional config": (DAILY.replace('"sharding": {', '"sharding": {{'), "expected a JSON object"),
    "no dp attention": (DAILY.replace("true}", "false}"), "MLA models require both"),
    "no NEW_MODEL_DESIGN": (DAILY.replace("NEW_MODEL_DESIGN=1 ", ""), "MLA models require both"),
    "MLA off": (DAILY.replace("VLLM_MLA_DISABLE=0", "VLLM_MLA_DISABLE=1"), "without MLA"),
    "no max-num-batched-tokens with chunked prefill off": (
        DAILY.replace("--max-num-batched-tokens 1024 ", "--no-enable-chunked-prefill "),
        "without --max-num-batched-tokens and with chunked prefill off",
    ),
    "no DP attention on the K3 bring-up branches": (
        "TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION=1 " + DAILY.replace("true}", "false}"),
        "the layout without DP attention was read for tpu-inference's JAX Kimi model",
    ),
    "the K3 branches' downgrade still needs NEW_MODEL_DESIGN": (
        "TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION=1 "
        + DAILY.replace("true}", "false}").replace("NEW_MODEL_DESIGN=1 ", ""),
        "MLA models require both",
    ),
    "data parallel": (DAILY.replace("--seed 42", "--data-parallel-size 2"), "--data-parallel-size"),
    "block size off the dense-MLA checkpoints": (
        DAILY.replace("--seed 42", "--block-size 256").replace("deepseek-ai/DeepSeek-R1", "moonshotai/Kimi-K3"),
        "--block-size",
    ),
    "auto context": (DAILY.replace("--max-model-len 9216", "--max-model-len auto"), "--max-model-len auto"),
    "fp4 on a model without fp8 experts": (
        DAILY.replace("deepseek-ai/DeepSeek-R1", "moonshotai/Kimi-K3"),
        "DeepSeek-V3 / R1",
    ),
    # no sharding key: read as the torch_tpu plugin's, whose refusal names tpu-inference's 2D-mesh layout for it
    "a TPU command naming no plugin": (
        "MODEL_IMPL_TYPE=vllm vllm serve moonshotai/Kimi-K2.5 --kv-cache-dtype fp8 --max-model-len 1024 -tp 8",
        "ShardingAxisName2D",
    ),
    "tpu-inference variable on the plugin": (
        "TPU_BACKEND_TYPE=jax vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --enable-expert-parallel",
        "read only for tpu-inference's command",
    ),
}


def test_a_dense_mla_block_size_is_the_page_the_pool_is_counted_in(cli):
    """--block-size 256 on DeepSeek-R1: the platform keeps a user's block and the MLA kernel pages it at the same 640 B
    a token (serve.py BLOCK_SOURCE), so the pool's tokens stay (8 x 36.57 GiB in 163,840-B pages x 61 layers: 31,428
    blocks of 256) while a 9,216-token request takes 36 blocks."""
    eng = _fit(cli, DAILY.replace("--seed 42", "--block-size 256"))["engine"]
    assert eng["block_tokens"] == 256 and eng["num_blocks"] == 31_428 and eng["kv_pool_tokens"] == 31_428 * 256
    assert eng["max_concurrency"] == round(31_428 / 36, 2)


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


def test_a_sharding_tensor_parallelism_equal_to_the_flag_changes_nothing(cli):
    """from_vllm_config takes sharding_strategy tensor_parallelism only where it is set and differs from
    --tensor-parallel-size: the Kimi-K2.6 nightly's tests/e2e/benchmarking/mmlu.sh writes it as the device count it
    also passes to --tensor-parallel-size (8), so the mesh is the flag's."""
    same = DAILY.replace('{"enable_dp_attention": true}', '{"enable_dp_attention": true, "tensor_parallelism": 8}')
    base, d = _fit(cli, DAILY)["engine"], _fit(cli, same)["engine"]
    assert (d["weights_bytes"], d["kv_pool_bytes"]) == (base["weights_bytes"], base["kv_pool_bytes"])
    assert "--additional-config sharding_strategy tensor_parallelism=8" in d["serve"]["ignored"]


def test_without_max_num_seqs_vllm_s_default_of_256_a_rank():
    """vLLM's EngineArgs.get_batch_defaults reads get_device_total_memory in a try; tpu-inference's TpuPlatform
    raises NotImplementedError there, so vllm serve takes the 256 sequences of its except branch (the TPU branch after
    it moves max_num_batched_tokens only): vllm 0.26.0 / 0.28.0 wheels, vllm/engine/arg_utils.py."""
    r = parse_serve(DAILY.replace("--max-num-seqs 96 ", ""), platform="tpu")
    assert r.batch == 256


def test_the_profile_capture_directory_is_listed_not_priced(cli):
    """PHASED_PROFILING_DIR (its daily deepseek_profile.json cases) names where the phase profiler writes; the pool
    is sized before it runs."""
    cmd = "PHASED_PROFILING_DIR=gs://bucket/xprof " + DAILY
    d, base = _fit(cli, cmd)["engine"], _fit(cli, DAILY)["engine"]
    assert d["kv_pool_bytes"] == base["kv_pool_bytes"]
    assert "PHASED_PROFILING_DIR=gs://bucket/xprof" in d["serve"]["ignored"]


# tpu-inference's Kimi-K2.6 nightly accuracy run on a v7x-8 (tests/e2e/benchmarking/mmlu.sh @b8692ff0; the case
# tests/engines/cases/tpu-inference-kimi-k2.6-v7x8-mmlu-nightly.yaml)
K26 = (
    "NEW_MODEL_DESIGN=1 VLLM_MLA_DISABLE=0 MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 "
    "MODEL_IMPL_TYPE=vllm vllm serve moonshotai/Kimi-K2.6 --max-model-len 1024 --max-num-seqs 64 "
    "--max-num-batched-tokens 1024 --tensor-parallel-size 8 --kv-cache-dtype=fp8 --gpu-memory-utilization 0.95 "
    "--enable-expert-parallel --additional-config "
    '\'{"sharding": {"sharding_strategy": {"enable_dp_attention": true, "tensor_parallelism": 8}}}\''
)


def test_kimi_k2_6_s_int4_experts_are_requantized_to_fp4_in_512_blocks(cli):
    """compressed_tensors_moe_w4a8.py VllmCompressedTensorsW4A8MoEMethod unpacks K2.6's int4 group-32 experts and
    requantizes them through process_quantized_moe_weights: 0.5 B a parameter + a 4-B scale a 512, not the
    checkpoint's 0.5 B + a 2-B scale a 32."""
    from k3plan.models import load_model
    from k3plan.models.formats import get_format

    d = _fit(cli, K26)
    assert d["engine"]["starts"] is True and d["parallel"] == {**d["parallel"], "tp": 1, "dp": 8, "ep": 8}
    experts = [t for t in load_model("kimi-k2.6").inventory.text if t.role == "expert"]
    held = sum(get_format("fp4_f32scale_b512").nbytes(t.shape) for t in experts) / 8
    assert abs(d["weights_by_role"]["expert"] - held) / held < 1e-9
    ckpt = sum(t.nbytes for t in experts) / 8
    assert d["weights_by_role"]["expert"] < ckpt


def test_deepseek_v4_s_fp4_experts_are_requantized_whatever_the_variables_say(cli):
    """DeepSeek-V4's fp4 experts go to VllmMxfp4MoEMethod, which requantizes them to fp4 with an f32 scale a 512 on
    its own (MXFP4_REQUANTIZED_BLOCK_SIZE) and reads no MOE_REQUANTIZE_* variable: with or without them, one price,
    and it is not the checkpoint's (a 1-B scale a 32)."""
    from k3plan.models import load_model
    from k3plan.models.formats import get_format

    v4 = DAILY.replace("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V4-Flash")
    bare = v4.replace("MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", "")
    a, b = _fit(cli, v4), _fit(cli, bare)
    assert a["weights_by_role"] == b["weights_by_role"]
    experts = [t for t in load_model("deepseek-v4-flash").inventory.text if t.role == "expert"]
    held = sum(get_format("fp4_f32scale_b512").nbytes(t.shape) for t in experts) / 8
    assert abs(a["weights_by_role"]["expert"] - held) / held < 1e-9


def test_the_int4_and_dsv4_expert_ids_are_the_ones_serve_resolves_to_those_bundles():
    """tpu_inference/serve.py keeps its own id lists (importing engines.serve there is a cycle): they must stay the
    priced ids that resolve to a bundle whose experts are int4 group-32 (Kimi-K2.6 / K2-Thinking) or DeepSeek-V4's
    fp4 (V4-Flash, its 0731 release / V4-Pro, its 0813 release; V4.1 has no tpu-inference path), with the bundles' own names."""
    from k3plan.engines.serve import model_of, priced_ids
    from k3plan.engines.tpu_inference.serve import DSV4_EXPERT_MODELS, INT4_EXPERT_MODELS
    from k3plan.models import load_model

    def expert_formats(name: str) -> set[str]:
        return {t.fmt for t in load_model(name).inventory.tensors if t.role == "expert"}

    int4 = {i for i in priced_ids() if expert_formats(model_of(i)) == {"int4_g32"}}
    assert INT4_EXPERT_MODELS == int4 | {model_of(i) for i in int4}
    v4 = ("deepseek-v4-flash", "deepseek-v4-flash-0731", "deepseek-v4-pro", "deepseek-v4-pro-0813")
    dsv4 = {i for i in priced_ids() if model_of(i) in v4}
    assert DSV4_EXPERT_MODELS == dsv4 | {model_of(i) for i in dsv4}


# tpu-inference's CI for Kimi-Linear on a v7x-8 (.buildkite/models/moonshotai_Kimi-Linear-48B-A3B-Instruct.yml, the
# case tests/engines/cases/tpu-inference-kimi-linear-v7x8-ep8-bench-gmu060.yaml): the JAX model, experts split 8 ways
KIMI_LINEAR = (
    "MODEL_IMPL_TYPE=flax_nnx NEW_MODEL_DESIGN=1 vllm serve moonshotai/Kimi-Linear-48B-A3B-Instruct "
    "--tensor-parallel-size 8 --max-model-len 2048 --max-num-seqs 64 --max-num-batched-tokens 1024 "
    "--trust-remote-code --gpu-memory-utilization 0.60 --additional-config "
    '\'{"sharding":{"sharding_strategy":{"tensor_parallelism":1,"expert_parallelism":8,"enable_dp_attention":true}}}\''
)


def test_the_jax_kimi_model_is_the_stack_s_own_with_its_experts_over_every_device(cli):
    """MODEL_IMPL_TYPE=flax_nnx on Kimi-Linear runs kimi_k3.py, the stack's model (model_impl at its default): tensor_
    parallelism 1 x expert_parallelism 8 is from_vllm_config's attn_dp 1 x attn_dp_expert 8, the routed experts
    over ATTN_DATA_EXPERT = every device -- k3plan's tp 1 x dp 8 x ep 8; MODEL_IMPL_TYPE auto resolves to it."""
    q = parse_serve(KIMI_LINEAR, platform="tpu")
    assert (q.stack, q.tp, q.dp, q.ep) == ("tpu-inference", 1, 8, 8)
    d = _fit(cli, KIMI_LINEAR)
    assert (
        d["engine"]["starts"] is True and d["engine"]["serve"]["stack"] == "tpu-inference:gpu_memory_utilization=0.60"
    )
    auto = _fit(cli, KIMI_LINEAR.replace("MODEL_IMPL_TYPE=flax_nnx ", ""))
    assert auto["engine"]["weights_bytes"] == d["engine"]["weights_bytes"]
    assert not [x for x in d["engine"]["serve"]["ignored"] if x.startswith(("MODEL_IMPL_TYPE", "--additional"))]


@pytest.mark.parametrize(
    ("old", "new", "text"),
    [
        ('"tensor_parallelism":1,"expert_parallelism":8,', "", "routed experts would be replicated on all 8"),
        ('"tensor_parallelism":1,"expert_parallelism":8', '"tensor_parallelism":2,"expert_parallelism":4', "4 ways"),
        ("MODEL_IMPL_TYPE=flax_nnx", "MODEL_IMPL_TYPE=flax_nnx MOE_REQUANTIZE_WEIGHT_DTYPE=fp4", "JAX Kimi model"),
    ],
)
def test_the_jax_kimi_model_s_refusals(cli, old, new, text):
    """kimi_k3.py validate_routed_expert_sharding refuses a mesh that replicates the routed experts (expert_
    parallelism unset under DP attention: attn_dp 8 x attn_dp_expert 1); an expert axis short of every device is a
    split k3plan does not express; the JAX model's requantization was not read."""
    assert old in KIMI_LINEAR
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", KIMI_LINEAR.replace(old, new))
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert text in r.output, r.output


def test_the_multihost_daily_s_no_effect_settings_are_listed(cli):
    """The daily multi-host DeepSeek-R1 run's settings that change nothing a device holds (.buildkite/benchmark/
    cases/daily/run_jax_deepseek_v3_1k_8k.json): replicate_attn_weights (no reader since tpu-inference@350d3857),
    --hf-config-path naming the served checkpoint, the MoE all-gather dtype, the shared-experts stream, the JAX MoE
    switch off and Ray's variables; tensor_parallelism 1 x expert_parallelism 8 prices as DP attention alone."""
    extra = (
        "VLLM_DISABLE_SHARED_EXPERTS_STREAM=0 USE_UNFUSED_MEGABLOCKS=0 MOE_ALL_GATHER_ACTIVATION_DTYPE=fp8 "
        "RAY_LOG_TO_STDERR=1 AUTOSCALER_UPDATE_INTERVAL_S=300 "
    )
    strategy = '{"enable_dp_attention": true, "expert_parallelism": 8, "tensor_parallelism": 1}'
    cmd = extra + DAILY.replace('{"enable_dp_attention": true}}}', strategy + '}, "replicate_attn_weights": "True"}')
    cmd += " --hf-config-path deepseek-ai/DeepSeek-R1"
    base, d = _fit(cli, DAILY)["engine"], _fit(cli, cmd)["engine"]
    assert (d["weights_bytes"], d["kv_pool_bytes"]) == (base["weights_bytes"], base["kv_pool_bytes"])
    for name in (
        "--additional-config replicate_attn_weights",
        "--hf-config-path deepseek-ai/DeepSeek-R1",
        "VLLM_DISABLE_SHARED_EXPERTS_STREAM=0",
        "USE_UNFUSED_MEGABLOCKS=0",
        "MOE_ALL_GATHER_ACTIVATION_DTYPE=fp8",
        "RAY_LOG_TO_STDERR=1",
        "AUTOSCALER_UPDATE_INTERVAL_S=300",
    ):
        assert name in d["serve"]["ignored"], name


def test_the_multihost_wrappers_spellings_read_as_the_engine_reads_them(cli):
    """scripts/multihost/nightly_benchmarking.sh @b8692ff0 writes --hf-config=<id> (vLLM's parser: --hf-config-path,
    argparse's prefix matching over vLLM's options: k3plan.engines.vllm.serve OPTIONS; the last of two spellings
    kept, as argparse keeps the last occurrence) and its random-routing wrapper FORCE_MOE_RANDOM_ROUTING=1 (the top-k
    ids redrawn in the compiled step, fused_moe_gmm.py): neither moves a figure; each is listed."""
    base = _fit(cli, DAILY)["engine"]
    for extra, name in (
        (" --hf-config=deepseek-ai/DeepSeek-R1", "--hf-config-path deepseek-ai/DeepSeek-R1"),
        (" --hf-config deepseek-ai/DeepSeek-R1 --hf-config-path deepseek-ai/DeepSeek-R1", "--hf-config-path"),
        (" --hf-config deepseek-ai/DeepSeek-V3 --hf-config-path deepseek-ai/DeepSeek-R1", "--hf-config-path"),
        (" --hf-con=deepseek-ai/DeepSeek-R1", "--hf-config-path deepseek-ai/DeepSeek-R1"),
    ):
        d = _fit(cli, DAILY + extra)["engine"]
        assert (d["weights_bytes"], d["kv_pool_bytes"]) == (base["weights_bytes"], base["kv_pool_bytes"])
        assert any(i.startswith(name) for i in d["serve"]["ignored"]), d["serve"]["ignored"]
    d = _fit(cli, "FORCE_MOE_RANDOM_ROUTING=1 " + DAILY)["engine"]
    assert (d["weights_bytes"], d["kv_pool_bytes"]) == (base["weights_bytes"], base["kv_pool_bytes"])
    assert "FORCE_MOE_RANDOM_ROUTING=1" in d["serve"]["ignored"]


def test_flax_nnx_on_an_architecture_outside_the_jax_registry_is_vllm_s_model_code(cli):
    """model_loader.py get_model @b8692ff0: flax_nnx on an architecture its JAX registry lacks (DeepSeek-V4) raises
    UnsupportedArchitectureError, caught and answered with get_vllm_model -- the same weights as MODEL_IMPL_TYPE=vllm;
    auto resolves to vllm for _VLLM_PREFERRED_ARCHITECTURES (Kimi-K2.5 / K2.6)."""
    v4 = DAILY.replace("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V4-Flash")
    a, b = _fit(cli, v4)["engine"], _fit(cli, v4.replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=flax_nnx"))["engine"]
    assert (a["weights_bytes"], a["kv_pool_bytes"]) == (b["weights_bytes"], b["kv_pool_bytes"])
    assert any("Falling back" not in c and "get_vllm_model" in c for c in b["serve"]["caveats"])
    k26, auto = _fit(cli, K26)["engine"], _fit(cli, K26.replace("MODEL_IMPL_TYPE=vllm ", ""))["engine"]
    assert auto["weights_bytes"] == k26["weights_bytes"]


# the daily multi-host DeepSeek-R1 run's split on a v7x-8 (tests/engines/cases/tpu-inference-deepseek-r1-v7x16-multihost-
# daily.yaml: tensor_parallelism 1 x expert_parallelism = the devices)
EP_ALL = '{"enable_dp_attention": true, "tensor_parallelism": 1, "expert_parallelism": 8}'


# what vLLM's model code holds on DeepSeek-R1 under tpu-inference beyond the JAX deepseek_v3.py: kv_b_proj's float32
# per-head scales (61 layers x 128 x (512 + 128)) against the checkpoint's 128-blocks (256 x 4), and the bf16 RoPE table
VLLM_ONLY = 61 * 4 * (128 * (512 + 128) - 256 * 4) + 4096 * 40 * 64 * 2


def test_the_jax_deepseek_at_tp1_ep_all_holds_vllm_s_model_code_s_tensors(cli):
    """MODEL_IMPL_TYPE flax_nnx (and auto) on DeepSeek-R1 runs tpu-inference's JAX deepseek_v3.py @b8692ff0; at
    tensor_parallelism 1 x expert_parallelism = the devices its experts take GMM_EP through the same
    process_quantized_moe_weights, its linear layers the same process_blockwise_fp8_linear_weights, its kv_b_proj the
    same fp8 split, its KV cache the same spec as vLLM's model code (serve.py JAX_DEEPSEEK_SOURCE): the same weights
    but kv_b_proj's scales, priced at the stack's model_impl default, with its RoPE table named, not priced."""
    vllm_cmd = DAILY.replace('{"enable_dp_attention": true}', EP_ALL)
    base = _fit(cli, vllm_cmd)["engine"]
    for impl in ("MODEL_IMPL_TYPE=flax_nnx", ""):
        d = _fit(cli, vllm_cmd.replace("MODEL_IMPL_TYPE=vllm", impl))
        eng = d["engine"]
        assert eng["starts"] is True
        assert eng["serve"]["stack"] == "tpu-inference:gpu_memory_utilization=0.95,moe_requantize_weight_dtype=fp4"
        # the JAX k_up_proj / v_up_proj keep the checkpoint's fp8 128-blocks (256 x 4 scales a layer), where vLLM's
        # model code requantizes kv_b_proj's split per (head, latent) and (head, v): 128 x (512 + 128) float32 scales;
        # and vLLM's code holds its bf16 RoPE table [4,096 x 40, 64] (the JAX one is named below, not priced)
        assert base["weights_bytes"] - eng["weights_bytes"] == VLLM_ONLY
        assert eng["kv_pool_tokens"] - base["kv_pool_tokens"] == 8 * 1024  # 8 x those bytes, summed: 8 blocks more
        rope = [c for c in eng["serve"]["caveats"] if "RoPE table" in c]
        # f32 [4,096 x 40 positions, 64 rope dims padded to 128] (DeepseekScalingRotaryEmbedding._compute_sin_cos)
        assert len(rope) == 1 and f"{4096 * 40 * 128 * 4:,} B" in rope[0] and "not priced" in rope[0]
    # the experts left fp8 (MOE_REQUANTIZE_* unset): the same process_quantized_moe_weights keeps their dtype, as on
    # vLLM's model code
    fp8 = "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 "
    a = _fit(cli, vllm_cmd.replace(fp8, ""))["engine"]
    b = _fit(cli, vllm_cmd.replace(fp8, "").replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=flax_nnx"))["engine"]
    assert a["weights_bytes"] - b["weights_bytes"] == VLLM_ONLY
    assert a["starts"] is b["starts"] is False


@pytest.mark.parametrize(
    ("cmd", "text"),
    [
        # DeepseekV3ForCausalLM is Kimi-K2's architecture too; deepseek_v3.py hard-codes DeepSeek-V3's shapes
        (
            DAILY.replace('{"enable_dp_attention": true}', EP_ALL)
            .replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=flax_nnx")
            .replace("MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", "")
            .replace("deepseek-ai/DeepSeek-R1", "moonshotai/Kimi-K2-Instruct"),
            "hard-codes DeepSeek-V3's shapes",
        ),
        # tensor_parallelism 2 x expert_parallelism 4: attn_dp 2, use_ep false -> GMM_TP
        (
            DAILY.replace(
                '{"enable_dp_attention": true}',
                '{"enable_dp_attention": true, "tensor_parallelism": 2, "expert_parallelism": 4}',
            ).replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=flax_nnx"),
            "GMM_TP",
        ),
    ],
)
def test_the_jax_deepseek_s_refusals(cli, cmd, text):
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert text in r.output, r.output


def test_the_mlperf_unit_test_s_five_layer_r1_is_the_bundled_config_cut_to_five_layers(cli):
    """mlperf.sh @b8692ff0's --hf_overrides '{"num_hidden_layers": 5}' (vLLM's ModelConfig.hf_overrides; the JAX
    deepseek_v3.py builds make_layers(hf_config.num_hidden_layers) and skips the checkpoint's later layers): the
    daily command with it holds 5 layers' weights (3 dense + 2 MoE), the same per-layer KV a token over 5 layers,
    and the model keeps its name (the deepseek-v3 rules of the JAX path still apply: the MLA 640-value spec)."""
    full = _fit(cli, DAILY)["engine"]
    d = _fit(cli, DAILY + """ --hf_overrides '{"num_hidden_layers": 5}'""")
    cut = d["engine"]
    assert d["model"]["name"] == "deepseek-v3"
    assert cut["starts"] and cut["weights_bytes"] < full["weights_bytes"] / 5
    # the pool a token: 5 layers where the full model has 61
    per_token_full = full["kv_pool_bytes"] / full["kv_pool_tokens"]
    per_token_cut = cut["kv_pool_bytes"] / cut["kv_pool_tokens"]
    assert per_token_cut == pytest.approx(per_token_full * 5 / 61, rel=0.01)
    # the compile that settles the temporaries is of the bundled model: said so, as fit has no flag for the cut
    text = cli(
        "fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", DAILY + """ --hf-overrides '{"num_hidden_layers": 5}'"""
    )
    assert "not the model built with num_hidden_layers 5 (fit has no flag for those)" in text.output


# Jacob Platin's Kimi-K2.6 lm_eval run on a v7x-8 (nohup.out @0998d381, 2026-04-30 22:42; the case
# tests/engines/cases/tpu-inference-kimi-k2.6-v7x8-dpattn-8k-lmeval.yaml): no MOE_REQUANTIZE_*, no
# --enable-expert-parallel
K26_LMEVAL = (
    "NEW_MODEL_DESIGN=1 MODEL_IMPL_TYPE=vllm vllm serve moonshotai/Kimi-K2.6 --kv-cache-dtype fp8 --max-model-len 8192 "
    "--tensor-parallel-size 8 --block-size 256 --gpu-memory-utilization 0.978 --max-num-batched-tokens 1024 "
    '--max-num-seqs 64 --additional-config \'{"sharding": {"sharding_strategy": {"enable_dp_attention": true}}}\''
)


def _fit_release(cli, cmd: str, release: str | None):
    args = ["fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd, "--json"]
    r = cli(*args, *(("--engine-version", release) if release else ()))
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_kimi_k2_6_s_int4_experts_keep_float32_group_scales_at_0_20_and_0_21(cli):
    """tpu-inference 0.20.0 / 0.21.x (main 507cfa16..443bcc3b; the lm_eval runs' 56b1e079):
    VllmCompressedTensorsW4A8MoEMethod hands the int4 codes and their group-32 scales to process_moe_weights, which
    casts the scales to float32: 0.5 B a parameter + a 4-B scale a 32 (int4_g32_f32scale), not the checkpoint's
    2-B scale a 32 plus its packed words' shape tensors. Read so at those releases, and wherever
    DISABLE_WEIGHT_REQUANTIZATION=1 asks for it; not at the commit read without a release (b8692ff0)."""
    from k3plan.models import load_model
    from k3plan.models.formats import get_format

    experts = [t for t in load_model("kimi-k2.6").inventory.text if t.role == "expert"]
    held = sum(get_format("int4_g32_f32scale").nbytes(t.shape) for t in experts) / 8
    ckpt = sum(get_format("int4_g32").nbytes(t.shape) for t in experts) / 8
    for release in ("0.20.0", "0.21.0"):
        d = _fit_release(cli, K26_LMEVAL, release)
        assert "disable_weight_requantization=1" in d["engine"]["serve"]["stack"]
        assert abs(d["weights_by_role"]["expert"] - held) / held < 1e-9
    base = _fit_release(cli, K26_LMEVAL, None)
    assert "disable_weight_requantization" not in base["engine"]["serve"]["stack"]
    assert abs(base["weights_by_role"]["expert"] - ckpt) / ckpt < 1e-9
    switched = _fit_release(cli, "DISABLE_WEIGHT_REQUANTIZATION=1 " + K26_LMEVAL, None)
    assert switched["weights_by_role"]["expert"] == _fit_release(cli, K26_LMEVAL, "0.20.0")["weights_by_role"]["expert"]
    # the scales' widening alone: 2 B more a 32-group of every expert matrix, less the int32[2] shape tensors
    extra = sum(2 * math.prod(t.shape[:-1]) * (t.shape[-1] // 32) - 8 * math.prod(t.shape[:-2]) for t in experts) / 8
    assert abs(switched["weights_by_role"]["expert"] - base["weights_by_role"]["expert"] - extra) < 1


def test_the_int4_scales_switch_is_refused_where_the_engine_refuses_it_or_it_was_not_read(cli):
    def code(cmd: str, release: str | None = None) -> tuple[int, str]:
        r = cli(
            "fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd, *(("--engine-version", release) if release else ())
        )
        return r.exit_code, r.output

    fp4 = "MOE_REQUANTIZE_BLOCK_SIZE=512 MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 "
    # the engine asserts the dtype unset when requantization is disabled
    rc, out = code("DISABLE_WEIGHT_REQUANTIZATION=1 " + fp4 + K26_LMEVAL)
    assert rc == 2 and "asserts" in out
    # another checkpoint's experts: not read
    rc, out = code("DISABLE_WEIGHT_REQUANTIZATION=1 " + DAILY.replace("MOE_REQUANTIZE_BLOCK_SIZE=512 ", "").replace(
        "MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 ", ""))  # fmt: skip
    assert rc == 2 and "int4" in out
    # 0.20.0's W4A8 method reads no MOE_REQUANTIZE_* variable; 0.21.0's requantizes with the block size set
    rc, out = code(fp4 + K26_LMEVAL, "0.20.0")
    assert rc == 2 and "reads no MOE_REQUANTIZE_*" in out
    d = _fit_release(cli, fp4 + K26_LMEVAL, "0.21.0")
    assert "moe_requantize_weight_dtype=fp4" in d["engine"]["serve"]["stack"]
    assert "disable_weight_requantization" not in d["engine"]["serve"]["stack"]


def test_vllm_code_holds_its_rope_table_on_every_device(cli):
    """vLLM's DeepSeek-V3-family MLA attention builds one YaRN cos_sin_cache for every layer (get_rope's _ROPE_DICT), a
    buffer in the model's bf16 that shard_model_to_tpu replicates (serve.py VLLM_ROPE_SOURCE): Kimi-K2.6's
    [4,096 x 64 positions, 64 rope dims], 33,554,432 B a device in the weights the worker measures; the JAX model's
    own table is not this one (named in a caveat, not priced)."""
    cmd = DAILY.replace("deepseek-ai/DeepSeek-R1", "moonshotai/Kimi-K2.6")
    q = parse_serve(cmd, platform="tpu")
    assert q.model_buffers is not None and q.model_buffers[0] == 4096 * 64 * 64 * 2 == 33_554_432
    assert "RoPE table" in q.model_buffers[1] and "cos_sin_cache" in q.model_buffers[1]
    r1 = parse_serve(DAILY, platform="tpu")
    assert r1.model_buffers is not None and r1.model_buffers[0] == 4096 * 40 * 64 * 2
    jax = parse_serve(
        DAILY.replace("MODEL_IMPL_TYPE=vllm", "MODEL_IMPL_TYPE=flax_nnx").replace(
            '{"enable_dp_attention": true}', EP_ALL
        ),
        platform="tpu",
    )
    assert jax.model_buffers is None
    eng = _fit(cli, cmd)["engine"]
    assert "33,554,432 B: vLLM's MLA RoPE table" in json.dumps(eng["sources"])


def test_skip_jax_precompile_compiles_no_step_at_start(cli):
    """SKIP_JAX_PRECOMPILE=1 (examples/offline_inference.py sets it itself): CompilationManager.capture_model returns
    before any token bucket (serve.py SKIP_PRECOMPILE_SOURCE), so the start holds no compiled step: Kimi-K2.6's
    chunk-4,096 run, which died compiling its step after the pool, starts with it (the pool and weights unchanged)."""
    cmd = (
        "NEW_MODEL_DESIGN=1 MODEL_IMPL_TYPE=vllm vllm serve moonshotai/Kimi-K2.6 --kv-cache-dtype fp8 "
        "--max-model-len 8192 --tensor-parallel-size 8 --block-size 256 --gpu-memory-utilization 0.978 "
        "--max-num-batched-tokens 4096 --max-num-seqs 64 "
        '--additional-config \'{"sharding": {"sharding_strategy": {"enable_dp_attention": true}}}\''
    )
    compiled = _fit(cli, cmd)["engine"]
    skipped = _fit(cli, "SKIP_JAX_PRECOMPILE=1 " + cmd)["engine"]
    assert compiled["starts"] is False and "compiling the step" in compiled["message"]
    assert skipped["starts"] is True and "skip_jax_precompile=1" in skipped["serve"]["stack"]
    assert (skipped["weights_bytes"], skipped["kv_pool_bytes"]) == (
        compiled["weights_bytes"],
        compiled["kv_pool_bytes"],
    )
    assert any(c.startswith("SKIP_JAX_PRECOMPILE=1: no step is compiled at start") for c in skipped["serve"]["caveats"])
    assert "SKIP_JAX_PRECOMPILE=1" not in skipped["serve"]["ignored"]


# the K3 bring-up's attempt-10 command (tpu-inference@5d50c950 .buildkite/pipeline_dev.yml; the logged case
# tpu-inference-kimi-k3-v7x32-nodp-blocks512-warmup-oom), with DP attention off on the branches' escape hatch
K3_NO_DP = (
    "MODEL_IMPL_TYPE=flax_nnx NEW_MODEL_DESIGN=1 TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION=1 vllm serve "
    "moonshotai/Kimi-K3 --tensor-parallel-size 32 --trust-remote-code --max-model-len 2048 --max-num-seqs 8 "
    "--max-num-batched-tokens 512 --num-gpu-blocks-override 512 --gpu-memory-utilization 0.8 --additional-config "
    '\'{"sharding":{"sharding_strategy":{"enable_dp_attention":false,"tensor_parallelism":8,"expert_parallelism":4}}}\''
)
# K3 (config.json): 92 MoE layers of 896 experts (gate, up 3,584 -> 3,072 and down), MXFP4 codes with fp32 scales as
# kimi_k3.py holds them (stack.yaml runtime_formats_source); 69 KDA layers of 96 heads of 128
K3_EXPERT_PARAMS = 92 * 896 * 3 * 3584 * 3072
K3_EXPERT_BYTES = K3_EXPERT_PARAMS // 2 + K3_EXPERT_PARAMS // 32 * 4
K3_STATE_LAYER = 96 * 128 * 128 * 4 + 3 * (4 - 1) * 96 * 128 * 2  # recurrent f32 + q/k/v conv windows bf16


def test_k3_without_dp_attention_is_attention_tp_over_every_device(cli):
    """TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION=1 (the K3 bring-up branches) with enable_dp_attention false:
    from_vllm_config's mesh is 'model' 8 x 'expert' 4, ATTN_HEAD over every device: k3plan's tp 32 x dp 1, the
    experts over all 32, the KDA state split by heads (96 / 32 = 3 a device), the MLA cache whole on every device,
    no vision tower (kimi_k3.py drops it). Its weights are the engine's build-755 figure, 62.57 GiB a device."""
    q = parse_serve(K3_NO_DP, platform="tpu")
    assert (q.stack, q.tp, q.dp, q.ep) == ("tpu-inference", 32, 1, 32)
    assert dict(q.stack_options)["unsafe_mla_without_dp_attention"] == "1"
    assert q.language_model_only and q.num_gpu_blocks_override == 512
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x4", "--serve", K3_NO_DP, "--json")
    d = json.loads(r.stdout)
    assert d["weights_by_role"]["expert"] == K3_EXPERT_BYTES // 32
    assert d["cache_layout"]["state_bytes_per_layer"] == K3_STATE_LAYER // 32 == 203_520
    assert d["cache_layout"]["kv_bytes_per_token_layer"] == (512 + 128) * 2  # whole: BATCH is 1 x 1 x 1
    assert abs(d["engine"]["weights_bytes"] / 2**30 - 62.57) / 62.57 < 0.001
    assert d["engine"]["num_blocks"] == 512


@pytest.mark.parametrize(
    ("old", "new", "text"),
    [
        ('"tensor_parallelism":8', '"tensor_parallelism":4', "'model' 4 x 'expert' 4 = 16 devices"),
        ("moonshotai/Kimi-K3", "deepseek-ai/DeepSeek-R1", "read for tpu-inference's JAX Kimi model"),
    ],
)
def test_k3_without_dp_attention_refusals(cli, old, new, text):
    """A mesh short of the --tensor-parallel-size devices, and another model than the JAX Kimi one, are refused."""
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x4", "--serve", K3_NO_DP.replace(old, new))
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert text in r.output, r.output


def test_k3_sharded_expert_streaming_and_the_decode_loop_off_are_listed(cli):
    """K3_SHARDED_EXPERT_STREAMING=1 (the K3 branches' per-host filtered checkpoint read, serve.py
    SHARDED_STREAMING_SOURCE: the same device shards, staged on the host) and additional_config enable_continue_decode
    false (read for truth alone: no loop compiled, serve.py CONTINUE_DECODE_SOURCE) move no device byte: listed, the
    weights and pool as without them."""
    off = K3_NO_DP.replace('{"sharding"', '{"enable_continue_decode":false,"sharding"')
    cmd = "K3_SHARDED_EXPERT_STREAMING=1 " + off
    d, base = (
        json.loads(cli("fit", "-H", "tpu-v7x", "-t", "2x2x4", "--serve", c, "--json").stdout) for c in (cmd, K3_NO_DP)
    )
    d, base = d["engine"], base["engine"]
    assert (d["weights_bytes"], d["kv_pool_bytes"], d["starts"]) == (
        base["weights_bytes"],
        base["kv_pool_bytes"],
        base["starts"],
    )
    assert {"K3_SHARDED_EXPERT_STREAMING=1", "--additional-config enable_continue_decode=false"} <= set(
        d["serve"]["ignored"]
    )


def test_k3_the_fused_decode_loop_on_is_priced_at_the_compiled_point_only(cli):
    """enable_continue_decode true compiles one more executable after the pool (the fused decode loop): priced for K3
    without DP attention at 'model' 8 x 'expert' 4 and 64 requests (memory.py LOOP_SOURCE, stack option
    continue_decode=1); at another request bucket (here 8 sequences) refused in one line."""
    on = K3_NO_DP.replace('{"sharding"', '{"enable_continue_decode":true,"sharding"')
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x4", "--serve", on)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "at 64 requests only (the point compiled)" in r.output, r.output
    q = parse_serve(on.replace("--max-num-seqs 8", "--max-num-seqs 64"), platform="tpu")
    assert dict(q.stack_options)["continue_decode"] == "1"


# Kimi-K2.6's DP-attention command of the 8k lm_eval runs (tests/engines/cases/tpu-inference-kimi-k2.6-v7x8-dpattn-*),
# its flags as lm_eval's model_args
K26_ARGS = (
    "pretrained=moonshotai/Kimi-K2.6,trust_remote_code=True,kv_cache_dtype=fp8,tensor_parallel_size=8,"
    "max_model_len=8192,max_num_seqs=64,gpu_memory_utilization=0.978,block_size=256,"
    'additional_config=\'{"sharding":{"sharding_strategy":{"enable_dp_attention":true}}}\''
)
K26_SERVE = (
    "vllm serve moonshotai/Kimi-K2.6 --trust-remote-code --kv-cache-dtype fp8 --tensor-parallel-size 8 "
    "--max-model-len 8192 --max-num-seqs 64 --gpu-memory-utilization 0.978 --block-size 256 "
    '--additional-config \'{"sharding": {"sharding_strategy": {"enable_dp_attention": true}}}\''
)
K26_ENV = "NEW_MODEL_DESIGN=1 MODEL_IMPL_TYPE=vllm "


def test_lm_eval_reads_as_the_llm_class(cli):
    """lm_eval --model vllm (engines/tpu_inference/llm_class.py LM_EVAL_SOURCE): each model_args key is the EngineArgs
    flag, lm_eval's own flags are listed, and the chunk left unset is vLLM's LLM_CLASS default 8,192 (serve.py
    DEFAULT_CHUNK_LLM_CLASS), not vllm serve's 2,048; the same flags with the chunk given read as vllm serve does."""
    lm = f"lm_eval --model vllm --model_args {K26_ARGS} --tasks mmlu_pro --batch_size auto --output_path /tmp/o"
    q = parse_serve(K26_ENV + lm, platform="tpu")
    served = parse_serve(K26_ENV + K26_SERVE, platform="tpu")
    assert (q.chunk, served.chunk) == (8192, 2048)
    assert {"lm_eval --tasks", "lm_eval --batch_size", "lm_eval --output_path"} <= set(q.ignored)
    given = parse_serve(
        K26_ENV + lm.replace("block_size=256", "block_size=256,max_num_batched_tokens=1024"), platform="tpu"
    )
    a = _fit(cli, K26_ENV + lm.replace("block_size=256", "block_size=256,max_num_batched_tokens=1024"))["engine"]
    b = _fit(cli, K26_ENV + K26_SERVE + " --max-num-batched-tokens 1024")["engine"]
    assert given.chunk == 1024
    assert (a["weights_bytes"], a["kv_pool_bytes"], a["kv_pool_tokens"]) == (
        b["weights_bytes"],
        b["kv_pool_bytes"],
        b["kv_pool_tokens"],
    )


def test_offline_script_takes_its_defaults_and_env():
    """examples/offline_inference.py (llm_class.py OFFLINE_SOURCE): max_model_len 1,024 and SKIP_JAX_PRECOMPILE=1 by
    default, vLLM's LLM-class chunk; a value the command sets wins (os.environ.setdefault, parser defaults)."""
    flags = K26_SERVE.removeprefix("vllm serve moonshotai/Kimi-K2.6").replace("--max-model-len 8192 ", "")
    for head in (
        "python examples/offline_inference.py",
        "python3 -m examples.offline_inference",
        "python3 /x/examples/offline_inference.py",
    ):
        q = parse_serve(f"{K26_ENV}{head} --model moonshotai/Kimi-K2.6 {flags} --max-tokens 64", platform="tpu")
        assert (q.context, q.chunk) == (1024, 8192)
        assert q.stack_options.get("skip_jax_precompile") == "1"
        assert "offline_inference.py --max-tokens" in q.ignored
    q = parse_serve(
        f"{K26_ENV}python examples/offline_inference.py --model moonshotai/Kimi-K2.6 {flags} --max-model-len 4096",
        platform="tpu",
    )
    assert q.context == 4096


def test_enforce_eager_skips_the_start_compile(cli):
    """--enforce-eager on tpu-inference (serve.py EAGER_SOURCE): capture_model returns as under SKIP_JAX_PRECOMPILE=1."""
    cmd = K26_ENV + K26_SERVE + " --max-num-batched-tokens 4096"
    compiled = _fit(cli, cmd)["engine"]
    eager = _fit(cli, cmd + " --enforce-eager")["engine"]
    assert compiled["starts"] is False and eager["starts"] is True
    assert "skip_jax_precompile=1" in eager["serve"]["stack"]
    assert any(c.startswith("--enforce-eager: no step is compiled at start") for c in eager["serve"]["caveats"])


@pytest.mark.parametrize(
    "cmd",
    [
        "lm_eval --model hf --model_args pretrained=moonshotai/Kimi-K2.6",
        "lm_eval --model_args pretrained=moonshotai/Kimi-K2.6",
        "lm_eval --model vllm --model_args tensor_parallel_size=8",
        "lm_eval --model vllm --model_args pretrained=moonshotai/Kimi-K2.6,oops",
        "lm_eval --model vllm --model_args pretrained=moonshotai/Kimi-K2.6 --nonsense 1",
        "python examples/offline_inference.py --tensor-parallel-size 8",
    ],
)
def test_llm_class_bad_input_one_line(cli, cmd):
    """An lm_eval command without --model vllm or pretrained=, a model_args fragment without '=', a flag lm_eval
    does not take, the offline script without --model: one line, exit 2."""
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd, "--json")
    assert r.exit_code == 2
    assert r.output.count("\n") <= 1


def test_llm_class_on_a_gpu_refused_where_its_defaults_are_unread(cli):
    """On a GPU the LLM class's own defaults (vLLM's LLM_CLASS tiers) are read at 0.8.4-0.34.x (tests/engines/
    test_vllm_llm_class.py): lm_eval at another release needs the chunk and the batch given; tpu-inference's offline
    script is refused by name."""
    lm = "lm_eval --model vllm --model_args pretrained=moonshotai/Kimi-K2.6,tensor_parallel_size=8"
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--engine-version", "0.8.3", "--serve", lm, "--json")
    assert r.exit_code == 2 and "LLM_CLASS" in r.output
    # at a release whose LLM_CLASS entries were read (vllm/serve.py LLM_CLASS_SOURCE): an H200 (>= 70 GiB) takes
    # 16,384 batched tokens and 1,024 sequences, where vllm serve takes 8,192 / 1,024
    q = parse_serve(lm, platform="gpu", device_gib=141, device_name="nvidia-h200", release=(0, 20, 0))
    served = parse_serve(
        "vllm serve moonshotai/Kimi-K2.6 --tensor-parallel-size 8",
        platform="gpu",
        device_gib=141,
        device_name="nvidia-h200",
        release=(0, 20, 0),
    )
    assert (q.chunk, q.batch, served.chunk, served.batch) == (16384, 1024, 8192, 1024)
    q = parse_serve(lm, platform="gpu", device_gib=44, device_name="nvidia-l40s", release=(0, 20, 0))
    assert (q.chunk, q.batch) == (8192, 256)
    off = "python examples/offline_inference.py --model moonshotai/Kimi-K2.6 --tensor-parallel-size 8"
    r = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", off, "--json")
    assert r.exit_code == 2 and "TPU" in r.output


# the developers' Kimi-K2.5 run on the 2-D mesh (tests/engines/cases/tpu-inference-kimi-k2.5-v7x8-tp8-1k-offline,
# nohup.out @f5f1d337): the offline script with no sharding strategy and NEW_MODEL_DESIGN unset
K25_2D = (
    "MODEL_IMPL_TYPE=vllm python examples/offline_inference.py --model moonshotai/Kimi-K2.5 --trust-remote-code "
    '--kv-cache-dtype fp8 --tensor-parallel-size 8 --limit-mm-per-prompt \'{"image": 0, "video": 0}\''
)


def test_the_2d_mesh_before_the_mla_check():
    """Before the MLA check (#2222, first in v0.19.0: serve.py MLA_CHECK_SOURCE) a command with no sharding_strategy
    and NEW_MODEL_DESIGN unset runs ShardingAxisName2D's mesh: k3plan's tp = the devices, dp 1 (stack option
    new_model_design=0, set after model_impl=vllm), the int4 experts with float32 group scales (W4A16_SOURCE)."""
    q = parse_serve(K25_2D, platform="tpu", release=(0, 18, 0))
    assert (q.tp, q.dp, q.ep) == (8, 1, 8)
    opts = q.stack_options
    assert opts["new_model_design"] == "0" and opts["disable_weight_requantization"] == "1"
    assert list(opts).index("new_model_design") > list(opts).index("model_impl")
    assert any("2-D mesh 'data' 1 x 'model' 8" in c for c in q.caveats)


@pytest.mark.parametrize(
    ("cmd", "release", "says"),
    [
        (K25_2D, None, "from v0.19.0 it refuses an MLA model so"),  # no release named: the code each rule cites
        (K25_2D, "0.19.0", "at 0.19.0 without --additional-config"),
        ("NEW_MODEL_DESIGN=1 " + K25_2D, "0.18.0", "base mesh"),
        (K25_2D + " --additional-config '{\"compilation_sizes\": [768]}'", "0.18.0", "but no sharding key"),
        (
            K25_2D.replace(
                "MODEL_IMPL_TYPE=vllm",
                "MODEL_IMPL_TYPE=vllm MOE_REQUANTIZE_WEIGHT_DTYPE=fp4 MOE_REQUANTIZE_BLOCK_SIZE=512",
            ),
            "0.18.0",
            "reads no MOE_REQUANTIZE_*",
        ),
        (
            K25_2D.replace("moonshotai/Kimi-K2.5", "deepseek-ai/DeepSeek-R1").replace(
                ' --limit-mm-per-prompt \'{"image": 0, "video": 0}\'', ""
            ),
            "0.18.0",
            "int4 group-32 Kimi checkpoints",
        ),
    ],
)
def test_the_2d_mesh_refusals(cli, cmd, release, says):
    """From 0.19.0 (and with no release named) tpu-inference refuses the command, as its MLA check does; before it
    NEW_MODEL_DESIGN=1 without a strategy, MOE_REQUANTIZE_*, another checkpoint and a TP that GMM_TP pads are refused
    with what they do: one line, exit 2."""
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd, *(("--engine-version", release) if release else ()))
    assert r.exit_code == 2, r.output
    assert says in r.output and r.output.count("\n") <= 1


def test_the_2d_mesh_prices_the_k25_run(cli):
    """The Kimi-K2.5 run's figures from the 2-D layout (case tpu-inference-kimi-k2.5-v7x8-tp8-1k-offline): 77.68 GiB of
    weights a device (attention, dense MLP, shared experts, vocabulary and experts over 'model'; the router, norms and
    vision tower whole), vLLM's utilization 0.9 at 0.18.0 (engines/tpu_inference/__init__.py option_defaults), the
    pool's pages split over 'model' and counted in whole 1,024-token pages of 61 x 640 B (fp8) over the summed HBM."""
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", K25_2D, "--engine-version", "0.18.0", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    eng = d["engine"]
    assert d["parallel"] == {"tp": 8, "ep": 8, "dp": 1}
    assert round(eng["weights_bytes"] / GiB, 2) == 77.68
    assert round(eng["kv_pool_bytes"] / GiB, 2) == 7.60  # logged 60.72 / 8 = 7.59
    pool = int(0.9 * 101_737_037_824) - eng["weights_bytes"]  # a device's int(limit x 0.9) - bytes in use
    assert eng["kv_pool_bytes"] == pool
    assert eng["num_blocks"] == 8 * pool // (1024 * 640 * 61) == 1632  # logged 1,630
    assert eng["kv_pool_tokens"] == 1632 * 1024 and eng["max_concurrency"] == 1632.0
    assert "--gpu-memory-utilization 0.9, release 0.18.0's default" in d["provenance"]["reserve"]


def test_the_2d_mesh_refuses_a_width_gmm_tp_pads():
    """GMM_TP pads a device's share of an expert's width to a multiple of 128 (moe_weights.py get_w13_padding_config
    @f5f1d337), not priced: Kimi-K2.5's 2,048 over 32 devices (64 a device) is refused in one line."""
    from k3plan.errors import K3PlanError

    with pytest.raises(K3PlanError, match="pads a device's share"):
        parse_serve(
            K25_2D.replace("--tensor-parallel-size 8", "--tensor-parallel-size 32"), platform="tpu", release=(0, 18, 0)
        )


def test_the_utilization_default_follows_the_release(cli):
    """vLLM's CacheConfig default under tpu-inference: 0.9 in the vllm-tpu 0.18.0 / 0.19.0 wheels, 0.92 from 0.20.0
    (engines/tpu_inference/__init__.py UTILIZATION_09_SOURCE): a command that sets none sizes its pool so."""
    cmd = DAILY.replace(" --gpu-memory-utilization 0.95", "")
    pools = {}
    for release in ("0.19.0", "0.20.0"):
        r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", cmd, "--engine-version", release, "--json")
        assert r.exit_code in (0, 1), r.output
        eng = json.loads(r.stdout)["engine"]
        pools[release] = eng["kv_pool_bytes"] + eng["weights_bytes"]
    assert pools == {"0.19.0": int(0.9 * 101_737_037_824), "0.20.0": int(0.92 * 101_737_037_824)}
