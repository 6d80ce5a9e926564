"""vLLM's dual-batch overlap and the EngineArgs flags swept beside it (engines/vllm/serve.py read_dbo, read_removed;
engines/serve.py IGNORED): each read as the release's code does, from the vllm 0.26.0-0.34.0 wheels (PyPI)."""

from __future__ import annotations

import pytest

from k3plan.engines.release import parse_release
from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware
from k3plan.units import GiB

# ai-dynamo/dynamo recipes/deepseek-r1/vllm/disagg/deploy_hopper_16gpu.yaml @0044eb90 (decode worker, python3 -m
# dynamo.vllm's EngineArgs written as vllm serve with the Hugging Face id for /model-cache/deepseek-r1): 2 x 8 H200
DYNAMO_DECODE = (
    "vllm serve deepseek-ai/DeepSeek-R1 --served-model-name deepseek-ai/DeepSeek-R1 --all2all-backend "
    "deepep_low_latency --data-parallel-hybrid-lb --tensor-parallel-size 1 --data-parallel-size 16 "
    "--enable-expert-parallel --max-model-len 16384 --enable-dbo --dbo-decode-token-threshold 32 --async-scheduling "
    '--enable-eplb --eplb-config \'{"window_size":"1000","step_interval":"3000","num_redundant_experts":"32",'
    '"log_balancedness":"False"}\' --max-num-seqs 512 --compilation_config \'{"pass_config":{"enable_fusion":true,'
    '"enable_attn_fusion":true,"enable_noop":true},"custom_ops":["+rms_norm"],"cudagraph_mode":"FULL_DECODE_ONLY"}\''
)
# the command (DeepSeek-V3 DP8 DeepEP low-latency with DBO, as vLLM's expert-parallel deployment docs write it)
BRIEF = (
    "vllm serve deepseek-ai/DeepSeek-V3 --data-parallel-size 8 --enable-expert-parallel --all2all-backend "
    "deepep_low_latency --enable-dbo --async-scheduling --api-server-count 4"
)


def _read(command: str, *, hardware: str = "nvidia-h200", release: str | None = None):
    hw = load_hardware(hardware)
    return parse_serve(
        command,
        platform=hw.kind,
        device_gib=hw.usable_bytes_per_device / GiB,
        device_name=hw.name,
        release=parse_release(release) if release else None,
    )


@pytest.mark.parametrize("command", [DYNAMO_DECODE, BRIEF, BRIEF.replace("--enable-dbo", "--disable-dbo --enable-dbo")])
def test_dbo_is_refused_with_what_it_holds(command):
    with pytest.raises(K3PlanError, match=r"--enable-dbo: vLLM's microbatching .* not priced by k3plan"):
        _read(command)


def test_microbatching_by_ubatch_size_is_refused_alike():
    with pytest.raises(K3PlanError, match=r"--ubatch-size 3: vLLM's microbatching \(3 microbatches"):
        _read(BRIEF.replace("--enable-dbo", "--ubatch-size 3"))


def test_the_engines_own_dbo_checks_come_first():
    # vllm/config/vllm.py: 'Microbatching currently only supports the deepep_low_latency, deepep_high_throughput,
    # nixl_ep all2all backends' on CUDA (the default allgather_reducescatter refused)
    with pytest.raises(K3PlanError, match="AssertionError: 'Microbatching currently only supports"):
        _read(BRIEF.replace(" --all2all-backend deepep_low_latency", ""))
    # ROCm takes allgather_reducescatter too from 0.33.0 (not in 0.31.0's list): refused only as not priced
    rocm = BRIEF.replace("deepep_low_latency", "allgather_reducescatter")
    with pytest.raises(K3PlanError, match="not priced by k3plan"):
        _read(rocm, hardware="amd-mi355x", release="0.33.0")
    with pytest.raises(K3PlanError, match="AssertionError"):
        _read(rocm, hardware="amd-mi355x", release="0.31.0")
    # ParallelConfig: a threshold under the microbatch count is a ValueError from 0.30.0 (not in 0.29.0)
    low = BRIEF + " --dbo-decode-token-threshold 1"
    with pytest.raises(K3PlanError, match="must be at least the number of microbatches"):
        _read(low, release="0.30.0")
    with pytest.raises(K3PlanError, match="not priced by k3plan"):
        _read(low, release="0.29.0")


def test_without_microbatching_the_dbo_flags_do_nothing():
    q = _read(BRIEF.replace("--enable-dbo", "--no-enable-dbo --dbo-decode-token-threshold 64 --ubatch-size 1"))
    assert {"--enable-dbo", "--dbo-decode-token-threshold", "--ubatch-size"} <= set(q.ignored)


def test_flags_gone_from_0_28_are_refused_there_and_read_before():
    base = "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --enable-expert-parallel "
    for flag in ("--max-num-partial-prefills 2", "--max-long-partial-prefills 1", "--calculate-kv-scales"):
        with pytest.raises(K3PlanError, match="has no such flag"):
            _read(base + flag)
    assert "--max-num-partial-prefills" in _read(base + "--max-num-partial-prefills 2", release="0.26.0").ignored
    with pytest.raises(K3PlanError, match="fp8 KV scales"):
        _read(base + "--calculate-kv-scales", release="0.26.0")
    # cascade attention: removed from 0.28.0 (the flag does nothing), on by --no-disable-cascade-attn in 0.26.0
    assert "--no-disable-cascade-attn" in _read(base + "--no-disable-cascade-attn").ignored
    with pytest.raises(K3PlanError, match="cascade attention on"):
        _read(base + "--no-disable-cascade-attn", release="0.26.0")


def test_hf_overrides_prices_the_fields_k3plan_s_spec_reads_and_refuses_any_other():
    """--hf-overrides (ModelConfig.hf_overrides: its flat fields set over the Hugging Face config before the model is
    built, config.update(hf_overrides_kw), the 0.11.2-0.34.0 wheels): num_hidden_layers / first_k_dense_replace read
    into the question, the model keeping its name; any other field (max_position_embeddings among them: vLLM may
    scale it by the rope factor, not read), a value that is not a whole number, or a nested object refused by name
    (exit 2)."""
    base = "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --hf-overrides "
    q = _read(base + """'{"num_hidden_layers":4, "first_k_dense_replace": 1}'""")
    assert (q.model, q.hf_overrides) == ("deepseek-v3", (("num_hidden_layers", 4), ("first_k_dense_replace", 1)))
    assert any(c.startswith("--hf-overrides: the model built from the bundled config") for c in q.caveats)
    assert _read(base + "'{}'").hf_overrides == ()
    for value, says in (
        ('{"rope_theta": 1}', "--hf-overrides rope_theta: vLLM sets it over"),
        ('{"max_position_embeddings": 8192}', "--hf-overrides max_position_embeddings: vLLM sets it over"),
        ('{"text_config": {"num_hidden_layers": 4}}', "--hf-overrides text_config"),
        ('{"num_hidden_layers": 0}', "num_hidden_layers 0: expected a whole number from 1"),
        ('{"num_hidden_layers": "4"}', "expected a whole number"),
        ("[4]", "expected a JSON object"),
    ):
        with pytest.raises(K3PlanError, match=says):
            _read(base + f"'{value}'")


def test_a_model_cut_by_hf_overrides_is_built_from_its_bundled_config_with_them(cli):
    """fit prices the model the engine builds: DeepSeek-V3 cut to 4 layers (3 dense, 1 MoE) holds the bundled
    model's embedding, head and first 4 layers, the rules kept for deepseek-v3 still finding it (its name kept); a
    config whose text model reads its own text_config (Kimi-K2.6) is refused, as a top-level field does not reach
    it."""
    import json

    from k3plan.models import load_model

    full, cut = load_model("deepseek-v3"), load_model("deepseek-v3", (("num_hidden_layers", 4),))
    assert (cut.name, cut.spec.num_layers, cut.spec.mlps) == ("deepseek-v3", 4, ("dense",) * 3 + ("moe",))
    per_layer = {t.layer for t in full.inventory.tensors if getattr(t, "layer", None) is not None}
    assert len(per_layer) > 4  # the full model's layers, of which the cut keeps 4
    assert cut.inventory.checkpoint_bytes < full.inventory.checkpoint_bytes / 10
    cmd = "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --max-model-len 4096"
    a = json.loads(cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--json").stdout)["engine"]
    b = cli(
        "fit",
        "-H",
        "nvidia-h200",
        "-t",
        "8",
        "--serve",
        cmd + """ --hf-overrides '{"num_hidden_layers": 4}'""",
        "--json",
    )
    assert b.exit_code == 0, b.output
    b = json.loads(b.stdout)["engine"]
    assert b["weights_bytes"] < a["weights_bytes"] / 5 and b["kv_pool_bytes"] > a["kv_pool_bytes"]
    k26 = """vllm serve moonshotai/Kimi-K2.6 -tp 8 --hf-overrides '{"num_hidden_layers": 4}'"""
    got = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", k26)
    assert got.exit_code == 2 and "text_config, which a top-level field does not reach" in got.output


def test_variables_no_read_wheel_names_are_listed_from_where_they_go_and_refused_before():
    # NVIDIA Dynamo's hopper decode env (recipes/deepseek-r1/vllm/disagg @0044eb90): VLLM_MOE_DP_CHUNK_SIZE=384; no
    # file of the 0.20.0-0.34.0 wheels read names it (fused_moe/config.py and layer.py in 0.18.0's)
    cmd = (
        "VLLM_MOE_DP_CHUNK_SIZE=384 vllm serve deepseek-ai/DeepSeek-R1 --data-parallel-size 16 --enable-expert-parallel"
    )
    assert "VLLM_MOE_DP_CHUNK_SIZE=384" in _read(cmd).ignored
    assert "VLLM_MOE_DP_CHUNK_SIZE=384" in _read(cmd, release="0.20.0").ignored
    with pytest.raises(K3PlanError, match="releases before 0.20.0"):
        _read(cmd, release="0.18.0")
    with pytest.raises(K3PlanError, match="vllm's variable, read only on its own commands"):
        _read("VLLM_MOE_DP_CHUNK_SIZE=384 sglang serve --model-path deepseek-ai/DeepSeek-V3 --tp 8")


def test_the_deepep_buffer_size_is_read_where_deepep_runs():
    # NVIDIA Dynamo's GB200 decode env (@40200470) sets VLLM_DEEPEP_BUFFER_SIZE_MB=0: all2all.py's num_nvl_bytes /
    # num_rdma_bytes. Refused until session 48; now read where the command makes DeepEP's buffers (engines/vllm/
    # all2all_buffers.py, tests/engines/test_vllm_all2all_buffers.py) and listed where it makes none, as here
    # (the default allgather_reducescatter)
    cmd = _read(
        "VLLM_DEEPEP_BUFFER_SIZE_MB=0 vllm serve nvidia/DeepSeek-R1-0528-FP4-v2 --data-parallel-size 8 "
        "--enable-expert-parallel",
        hardware="nvidia-gb200-nvl72",
    )
    assert "VLLM_DEEPEP_BUFFER_SIZE_MB=0" in cmd.ignored
    deepep = _read(
        "VLLM_DEEPEP_BUFFER_SIZE_MB=0 vllm serve nvidia/DeepSeek-R1-0528-FP4-v2 --data-parallel-size 8 "
        "--enable-expert-parallel --all2all-backend deepep_low_latency",
        hardware="nvidia-gb200-nvl72",
    )
    assert "VLLM_DEEPEP_BUFFER_SIZE_MB=0" not in deepep.ignored


# NVIDIA Dynamo's GB200 prefill worker (recipes/deepseek-r1/vllm/disagg/deploy_gb200_2prefill_dep4_1decode_dep8.yaml
# @40200470, image vllm-32693db: its release not read), written as vllm serve: --swap-space 16
DYNAMO_GB200_PREFILL = (
    "vllm serve nvidia/DeepSeek-R1-0528-FP4-v2 --served-model-name deepseek-ai/DeepSeek-R1 --data-parallel-size 4 "
    "--kv-cache-dtype fp8 --enable-expert-parallel --attention-config.backend FLASHINFER_MLA "
    "--attention-config.use_trtllm_ragged_deepseek_prefill=true --max-model-len 2148 --trust-remote-code "
    "--all2all-backend allgather_reducescatter --data-parallel-rpc-port 13345 --disable-custom-all-reduce "
    "--disable-nccl-for-dp-synchronization --no-enable-prefix-caching --async-scheduling --gpu-memory-utilization 0.85 "
    "--max-num-batched-tokens 65536 --max-num-seqs 1024 --swap-space 16 --enforce-eager --kv-transfer-config "
    '\'{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"fail"}\''
)


def test_swap_space_is_gone_from_0_18():
    # in the 0.17.1 wheel's EngineArgs (CacheConfig.swap_space, host memory), not in 0.18.0's
    with pytest.raises(K3PlanError, match="--swap-space: vLLM 0.33.0 has no such flag"):
        _read(DYNAMO_GB200_PREFILL, hardware="nvidia-gb200-nvl72")
    q = _read(DYNAMO_GB200_PREFILL, hardware="nvidia-gb200-nvl72", release="0.17.1")
    assert {"--swap-space", "--disable-nccl-for-dp-synchronization"} <= set(q.ignored)


def test_mori_all2all_backends_are_stack_choices():
    # llm-d's AMD DeepSeek-V3 decode passes --all2all-backend mori_low_latency (guides/wide-ep-lws/modelserver/amd/
    # vllm-deepseek-v3/base/decode.yaml @368f5b0a); vLLM's MoriPrepareAndFinalize dispatches a block-fp8 checkpoint's
    # activations in fp8 (vllm 0.33.0 wheel fused_moe/all2all_utils.py maybe_make_prepare_and_finalize)
    from k3plan.engines.stack import load_stack

    for backend in ("mori_low_latency", "mori_high_throughput"):
        st = load_stack(f"vllm:all2all_backend={backend}")
        assert (st.collectives.experts, st.collectives.dispatch_dtype) == ("all_to_all", "fp8")
