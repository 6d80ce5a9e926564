"""vLLM's expert-parallel all2all buffers (engines/vllm/all2all_buffers.py): --all2all-backend deepep_high_throughput /
deepep_low_latency make DeepEP's buffers at load, outside torch's allocator, so they are in the non-torch increase the
start check subtracts from the pool. The sizes are the code's: vllm 0.11.0-0.34.0 wheels (PyPI) vllm/distributed/
device_communicators/all2all.py DeepEPHTAll2AllManager / DeepEPLLAll2AllManager._make_all2all_kwargs
(VLLM_DEEPEP_BUFFER_SIZE_MB, default 1024; RDMA only where the EP group spans nodes for high throughput) and
deepseek-ai/DeepEP@73b6ea4a (vLLM's pin) csrc/deep_ep.cpp Buffer::Buffer (a 32 MiB workspace, barrier signals and
pointers) and csrc/config.hpp get_low_latency_rdma_size_hint. The tokens the low-latency buffer holds: 256 by default
(VLLM_MOE_DP_CHUNK_SIZE to 0.19.x; from 0.20.0 max_num_batched_tokens, whose default under this backend is 256:
vllm/engine/arg_utils.py use_batched_dp_moe)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.vllm.all2all_buffers import all2all_non_torch, low_latency_rdma_bytes
from k3plan.errors import K3PlanError

MiB = 1 << 20
# DeepEP's own a GPU beside the NVLink buffer: NUM_MAX_NVL_PEERS 8 x (int + void* + int*) and the 32 MiB workspace
OWN = 8 * (4 + 8 + 8) + 32 * MiB
NVL = 1024 * MiB  # VLLM_DEEPEP_BUFFER_SIZE_MB's default


def _ll_by_hand(tokens: int, hidden: int, experts: int) -> int:
    """LowLatencyLayout written out: 2 send + 2 receive buffers of experts x tokens combine messages (the larger
    message: hidden bf16 + hidden/128 bf16x2 min/max), 2 signalling buffers of experts ints rounded to 128 B, and
    get_low_latency_rdma_size_hint's round past 128 B."""
    combine = (hidden // 128) * 4 + hidden * 2
    total = 4 * experts * tokens * combine + 2 * (-(-experts * 4 // 128) * 128)
    return (total + 128) // 128 * 128


@pytest.mark.parametrize(
    ("hidden", "experts"),
    [(7168, 256), (7168, 384), (4096, 256)],  # DeepSeek-R1 / V3; Kimi-K2 / DeepSeek-V4-Pro; DeepSeek-V4-Flash
)
def test_deepep_s_low_latency_hint(hidden, experts):
    for tokens in (128, 256, 8192):
        assert low_latency_rdma_bytes(tokens=tokens, hidden=hidden, ranks=8, experts=experts) == _ll_by_hand(
            tokens, hidden, experts
        )
    # R1 at vLLM's default 256 tokens a rank: 3.55 GiB
    assert low_latency_rdma_bytes(tokens=256, hidden=7168, ranks=8, experts=256) == 3_816_818_816


def _buffers(backend: str, **kw) -> tuple[int, str] | None:
    args = dict(
        backend=backend,
        release=(0, 33, 0),
        vendor="nvidia",
        expert_parallel=True,
        dp=8,
        ep=8,
        devices_per_host=8,
        hidden=7168,
        experts=256,
        max_num_batched_tokens=256,
        env={},
    )
    args.update(kw)
    return all2all_non_torch(**args)


def test_sizes_by_backend_node_and_release():
    ht = _buffers("deepep_high_throughput")
    assert ht is not None and ht[0] == NVL + OWN  # within a node: no RDMA buffer
    two = _buffers("deepep_high_throughput", dp=16, ep=16)
    assert two is not None and two[0] == 2 * NVL + OWN  # across nodes: num_rdma_bytes the same 1 GiB
    forced = _buffers("deepep_high_throughput", dp=16, ep=16, env={"VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE": "1"})
    assert forced is not None and forced[0] == NVL + OWN
    ll = _buffers("deepep_low_latency")
    assert ll is not None and ll[0] == NVL + OWN + _ll_by_hand(256, 7168, 256)
    # from 0.20.0 the low-latency buffer follows max_num_batched_tokens; before, VLLM_MOE_DP_CHUNK_SIZE (256)
    big = _buffers("deepep_low_latency", max_num_batched_tokens=8192)
    assert big is not None and big[0] == NVL + OWN + _ll_by_hand(8192, 7168, 256)
    old = _buffers("deepep_low_latency", max_num_batched_tokens=8192, release=(0, 18, 0))
    assert old is not None and old[0] == ll[0]
    # the low-latency buffer is sized for the hidden rounded up to DeepEP's kernels' (2880 -> 3072); above 8192 refused
    odd = _buffers("deepep_low_latency", hidden=2880)
    assert odd is not None and odd[0] == NVL + OWN + _ll_by_hand(256, 3072, 256)
    with pytest.raises(K3PlanError, match="maximum supported hidden size 8192"):
        _buffers("deepep_low_latency", hidden=12288)
    with pytest.raises(K3PlanError, match="not in supported list"):
        _buffers("deepep_low_latency", hidden=3072, release=(0, 11, 0))
    small = _buffers("deepep_high_throughput", env={"VLLM_DEEPEP_BUFFER_SIZE_MB": "256"})
    assert small is not None and small[0] == 256 * MiB + OWN
    # none without all2all kernels (no EP, or DP 1), for the collective backends, and off NVIDIA
    assert _buffers("deepep_high_throughput", expert_parallel=False) is None
    assert _buffers("deepep_high_throughput", dp=1) is None
    assert _buffers("allgather_reducescatter") is None
    assert _buffers("deepep_low_latency", vendor="amd") is None
    assert _buffers("pplx", release=(0, 17, 0)) is None  # gone: ParallelConfig falls back to allgather_reducescatter
    with pytest.raises(K3PlanError, match="nixl_ep's Buffer"):
        _buffers("nixl_ep")
    with pytest.raises(K3PlanError, match="pplx_kernels"):
        _buffers("pplx", release=(0, 16, 0))


def _engine(model: str, backend: str, devices: int, extra: str = "") -> dict:
    cmd = f"vllm serve {model} --data-parallel-size {devices} --enable-expert-parallel --all2all-backend {backend}"
    res = CliRunner().invoke(app, ["fit", "-H", "nvidia-h200", "-t", str(devices), "--serve", cmd + extra, "--json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)["engine"]


# DeepSeek-R1 / V3 (hidden 7168, 256 experts), Kimi-K2 and DeepSeek-V4-Pro (7168, 384), at DP 8 EP on one H200 node
# and DP 16 over two (internode: the high-throughput buffer's RDMA half)
MODELS = [
    ("deepseek-ai/DeepSeek-R1", 7168, 256),
    ("deepseek-ai/DeepSeek-V3", 7168, 256),
    ("moonshotai/Kimi-K2-Instruct", 7168, 384),
    ("deepseek-ai/DeepSeek-V4-Pro", 7168, 384),
]


@pytest.mark.parametrize(("model", "hidden", "experts"), MODELS)
@pytest.mark.parametrize("devices", [8, 16])
def test_the_start_check_subtracts_them(model, hidden, experts, devices):
    # the same token budget on both sides, so only the buffers differ
    budget = " --max-num-batched-tokens 256 --max-num-seqs 256"
    base = _engine(model, "allgather_reducescatter", devices, budget)
    ht = _engine(model, "deepep_high_throughput", devices, budget)
    ll = _engine(model, "deepep_low_latency", devices, budget)
    # high throughput runs without CUDA graphs (test_high_throughput_turns_the_graphs_off): against an eager baseline
    eager = _engine(model, "allgather_reducescatter", devices, budget + " --enforce-eager")
    rdma = NVL if devices > 8 else 0
    assert ht["non_torch_bytes"] - eager["non_torch_bytes"] == NVL + OWN + rdma
    assert ll["non_torch_bytes"] - base["non_torch_bytes"] == NVL + OWN + _ll_by_hand(256, hidden, experts)
    assert "deepep_high_throughput all2all buffers" in ht["sources"]["non_torch"]
    assert "get_low_latency_rdma_size_hint" in ll["sources"]["non_torch"]
    if base["kv_pool_bytes"]:
        assert ll["kv_pool_bytes"] < base["kv_pool_bytes"] and ht["kv_pool_bytes"] < eager["kv_pool_bytes"]


def _fit(cmd: str, version: str | None = None) -> tuple[int, dict]:
    args = ["fit", "-H", "nvidia-h200", "-t", "8", "--json", "--serve", cmd]
    res = CliRunner().invoke(app, args + (["--engine-version", version] if version else []))
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def test_the_low_latency_default_token_budget():
    # from 0.20.0 a deepep_low_latency command with EP and DP > 1 that sets no budget gets 256 tokens (and max_num_seqs
    # cut to them); 0.18.0 keeps the device's default (8192 on an H200) and its buffer VLLM_MOE_DP_CHUNK_SIZE's 256
    cmd = "vllm serve deepseek-ai/DeepSeek-R1 --data-parallel-size 8 --enable-expert-parallel --all2all-backend "
    _, new = _fit(cmd + "deepep_low_latency")
    assert new["workload"]["prefill_chunk_tokens"] == 256 and new["engine"]["serve"]["max_num_seqs"] == 256
    _, old = _fit(cmd + "deepep_low_latency", "0.18.0")
    assert old["workload"]["prefill_chunk_tokens"] == 8192
    assert f"{_ll_by_hand(256, 7168, 256):,}" in old["engine"]["sources"]["non_torch"]
    _, ht = _fit(cmd + "deepep_high_throughput")
    assert ht["workload"]["prefill_chunk_tokens"] == 8192
    # an explicit 8192 tokens a rank sizes the low-latency buffer for them (113.6 GiB for R1): no pool, WON'T START
    code, big = _fit(cmd + "deepep_low_latency --max-num-batched-tokens 8192")
    assert code == 1 and big["engine"]["kv_pool_bytes"] == 0
    assert big["engine"]["non_torch_bytes"] >= _ll_by_hand(8192, 7168, 256)


def test_the_buffer_size_variable_is_read_where_deepep_runs():
    cmd = "vllm serve deepseek-ai/DeepSeek-R1 --data-parallel-size 8 --enable-expert-parallel --all2all-backend "
    budget = " --max-num-batched-tokens 256 --max-num-seqs 256"
    _, ht = _fit(cmd + "deepep_high_throughput" + budget)
    _, half = _fit("VLLM_DEEPEP_BUFFER_SIZE_MB=512 " + cmd + "deepep_high_throughput" + budget)
    assert ht["engine"]["non_torch_bytes"] - half["engine"]["non_torch_bytes"] == 512 * MiB
    # NVIDIA Dynamo's GB200 decode sets 0 for low latency: no NVLink buffer, the RDMA one as sized
    _, ll = _fit(cmd + "deepep_low_latency" + budget)
    _, zero = _fit("VLLM_DEEPEP_BUFFER_SIZE_MB=0 " + cmd + "deepep_low_latency" + budget)
    assert ll["engine"]["non_torch_bytes"] - zero["engine"]["non_torch_bytes"] == NVL + 8 * (4 + 8 + 8)
    # where no DeepEP buffer is made it sizes nothing: listed
    _, ag = _fit("VLLM_DEEPEP_BUFFER_SIZE_MB=512 " + cmd + "allgather_reducescatter")
    assert "VLLM_DEEPEP_BUFFER_SIZE_MB=512" in ag["engine"]["serve"]["ignored"]
    # one line, exit 2: not an int; on ROCm (its DeepEP not priced here); on SGLang's command (not its variable)
    for bad, hw in (
        ("VLLM_DEEPEP_BUFFER_SIZE_MB=big " + cmd + "deepep_high_throughput", "nvidia-h200"),
        ("VLLM_DEEPEP_BUFFER_SIZE_MB=512 " + cmd + "deepep_high_throughput", "amd-mi355x"),
        (
            "VLLM_DEEPEP_BUFFER_SIZE_MB=512 python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 "
            "--tp 8",
            "nvidia-h200",
        ),
    ):
        res = CliRunner().invoke(app, ["fit", "-H", hw, "-t", "8", "--serve", bad])
        assert res.exit_code == 2, res.output
        assert "VLLM_DEEPEP_BUFFER_SIZE_MB" in res.output and "Traceback" not in res.output
    assert "VLLM_DEEPEP_BUFFER_SIZE_MB=512" not in half["engine"]["serve"]["ignored"]


def test_the_stack_options_price_them_without_serve():
    # fit without --serve reads the vllm stack's options as the command would: DeepEP's kernels need expert
    # parallelism (enable_expert_parallel, default false: the MoE falls back to all-gather + reduce-scatter)
    def engine(stack: str) -> dict:
        args = ["fit", "-H", "nvidia-h200", "-t", "8", "--tp", "1", "--dp", "8", "-m", "deepseek-v3", "--json"]
        res = CliRunner().invoke(app, args + ["--stack", stack])
        assert res.exit_code in (0, 1, 3), res.output  # 3: fits if the unverified temporaries do
        return json.loads(res.stdout)["engine"]

    off = engine("vllm:all2all_backend=deepep_high_throughput")
    on = engine("vllm:all2all_backend=deepep_high_throughput,enable_expert_parallel=true")
    base = engine("vllm:enable_expert_parallel=true")
    assert off["non_torch_bytes"] == base["non_torch_bytes"]
    assert on["non_torch_bytes"] - base["non_torch_bytes"] == NVL + OWN


def test_eplb_s_redundant_experts_are_global_experts():
    # FusedMoEConfig(num_experts=global_num_experts): the low-latency buffer is sized for E + R experts (vllm 0.33.0
    # wheel fused_moe/layer.py, all2all_utils.py num_global_experts=moe.num_experts)
    cmd = (
        "vllm serve deepseek-ai/DeepSeek-R1 --data-parallel-size 8 --enable-expert-parallel --all2all-backend "
        "deepep_low_latency --enable-eplb --eplb-config '{\"num_redundant_experts\": 32}'"
    )
    _, got = _fit(cmd)
    assert f"{_ll_by_hand(256, 7168, 288):,}" in got["engine"]["sources"]["non_torch"]


def test_high_throughput_turns_the_graphs_off():
    # vLLM sets cudagraph_mode NONE for deepep_high_throughput at DP > 1 (vllm 0.13.0-0.34.0 wheels,
    # config/compilation.py set_splitting_ops_for_v1): DeepSeek-V4's graph estimate (priced: engines/vllm/
    # cudagraph.py) leaves the non-torch memory, DeepEP's buffers enter it
    cmd = "vllm serve deepseek-ai/DeepSeek-V4-Flash --data-parallel-size 8 --enable-expert-parallel --all2all-backend "
    _, ag = _fit(cmd + "allgather_reducescatter")
    _, ht = _fit(cmd + "deepep_high_throughput")
    _, ll = _fit(cmd + "deepep_low_latency --max-num-batched-tokens 8192")
    _, ag8 = _fit(cmd + "allgather_reducescatter --max-num-batched-tokens 8192")
    assert ag["engine"]["non_torch_bytes"] > 0  # the graphs' estimate
    assert ht["engine"]["non_torch_bytes"] == NVL + OWN
    assert any("cudagraph_mode NONE" in c for c in ht["engine"]["serve"]["caveats"])
    # low latency keeps the graphs: its buffers add to their estimate
    assert ll["engine"]["non_torch_bytes"] == ag8["engine"]["non_torch_bytes"] + NVL + OWN + _ll_by_hand(
        8192, 4096, 256
    )
