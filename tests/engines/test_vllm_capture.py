"""What vLLM's CUDA-graph capture takes after the KV pool (engines/vllm/cudagraph.py capture_need, engines/vllm/
memory.py capture_room), read in the vllm 0.21.0 wheel (gpu_worker.py Worker.compile_or_warm_up_model,
gpu_model_runner.py GPUModelRunner.capture_model / profile_cudagraph_memory, utils/mem_utils.py memory_profiling) and
the 0.28.0 wheel (v1/worker/gpu/cudagraph_utils.py CudaGraphManager.capture): one global graph pool holding the
largest graph's forward, at least 1 MiB a graph for the driver, out of what the pool leaves; the start fails in
capture_model where the first exceeds the second."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from k3plan.engines.vllm.cudagraph import (
    CAPTURE_AT_V1,
    CAPTURE_AT_V2,
    MIN_PER_GRAPH,
    CompilationRead,
    capture_need,
    cudagraph_plan,
)
from k3plan.engines.vllm.memory import Figure, capture_room, vllm_kv_pool
from k3plan.units import GiB

CASES = Path(__file__).parent / "cases"


def test_the_need_is_the_largest_graph_s_forward_and_the_floor_a_graph():
    # the H100 TP8 x PP2 decode worker's graphs: FULL_DECODE_ONLY at max_num_seqs 16, sizes 1 .. 32, FULL decode
    # graphs up to 16 tokens (CudagraphDispatcher: 1 + k <= size <= (1 + k) x max_num_seqs)
    plan = cudagraph_plan(max_num_seqs=16, max_num_batched_tokens=16384, read=CompilationRead(mode="FULL_DECODE_ONLY"))
    assert plan.sizes == (1, 2, 4, 8, 16, 24, 32) and (plan.piecewise, plan.full) == (0, 5)
    need = capture_need(plan, forward_bytes=1000, forward_source="test")
    assert need is not None and need.bytes == 1000 + 5 * MIN_PER_GRAPH
    assert "32 tokens" in need.source and "5 graphs" in need.source
    none = cudagraph_plan(max_num_seqs=16, max_num_batched_tokens=16384, read=CompilationRead(mode="NONE"))
    assert capture_need(none, forward_bytes=1000, forward_source="test") is None


def test_the_room_a_fixed_pool_leaves_ignores_utilization():
    room, how = capture_room(
        visible=192 * GiB,
        utilization=0.92,
        weights=150 * GiB,
        transient=4 * GiB,
        resident_non_torch=GiB,
        estimate=0,
        kv_cache_memory_bytes=30 * GiB,
    )
    assert room == 11 * GiB and "utilization ignored" in how


def test_the_room_a_utilization_pool_leaves_holds_the_peak_given_back_and_the_estimate():
    visible = 100 * GiB
    room, how = capture_room(
        visible=visible,
        utilization=0.9,
        weights=50 * GiB,
        transient=3 * GiB,
        resident_non_torch=0,
        estimate=2 * GiB,
        kv_cache_memory_bytes=None,
    )
    assert room == visible - int(0.9 * visible) + 3 * GiB + 2 * GiB
    assert "--gpu-memory-utilization 0.9" in how and "graph estimate" in how


def _pool(capture_oom):
    zero = Figure(0, "test")
    return vllm_kv_pool(
        engine="vllm",
        utilization=0.9,
        visible_bytes=80 * GiB,
        weights_bytes=40 * GiB,
        activation_bytes=zero,
        non_torch_bytes=zero,
        visible_source="test",
        page_bytes=GiB // 1024,
        block_tokens=16,
        block_source="test",
        n_attention=1,
        n_state=0,
        max_model_len=16,
        worker_source="test",
        capture_oom=capture_oom,
    )


def test_a_capture_past_the_room_fails_after_the_pool_in_capture_model():
    assert _pool(None).starts and _pool((GiB, 2 * GiB, "fits", CAPTURE_AT_V1)).starts
    failed = _pool((3 * GiB, 2 * GiB, "torch.OutOfMemoryError: CUDA out of memory", CAPTURE_AT_V2))
    assert not failed.starts and failed.raised_at == CAPTURE_AT_V2 and failed.message.startswith("torch.Out")
    assert failed.kv_pool_bytes.value > 0  # the pool was sized first


def _fit(name: str) -> dict:
    from typer.testing import CliRunner

    from k3plan.cli.app import app

    case = yaml.safe_load((CASES / f"{name}.yaml").read_text())
    args = ["fit", "-H", case["hardware"], "-t", str(case["topology"]), "--serve", " ".join(case["serve"].split())]
    if "engine_version" in case:
        args += ["--engine-version", str(case["engine_version"])]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)["engine"]


def test_a_fixed_pool_s_starts_line_names_what_the_device_leaves_after_it():
    # --kv-cache-memory-bytes 30 GB on one MI300X: the capture has the device less the weights and that pool, not
    # the 1 - utilization share the line named before
    from k3plan.hardware.loader import load_hardware

    e = _fit("vllm-mi300x-stack-dsv4-flash-0731-tp1-kv30g-graphs-oom")
    visible = load_hardware("amd-mi300x").usable_bytes_per_device  # no engine-logged figure for it
    room = f"{(visible - e['weights_bytes'] - e['non_torch_bytes'] - e['kv_pool_bytes']) / GiB:.2f} GiB"
    assert e["starts"] and f"in the {room} the device's" in e["unpriced"]


def test_the_graph_oom_cases_capture_within_the_room_the_code_sizes():
    # no logged graph-capture OOM is explained by what the code sizes: the largest graph's forward and the 1 MiB
    # floor a graph stay far inside what the pool leaves (the cases keep their gaps)
    for name in (
        "vllm-mirothinker-dsv4-pro-h200-tp8-graphs-oom",
        "vllm-inferencex-h100-dsv4-pro-tp8pp2-decode-graphs-oom",
        "vllm-inferencex-gb200-k3-tp16-dcp16-graphs-oom",
    ):
        e = _fit(name)
        assert e["starts"] and "GiB priced, in the " in e["unpriced"], name
