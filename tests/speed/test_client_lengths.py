"""The term client-lengths: a benchmark's requests at the lengths its client draws (``--random-range-ratio`` r:
ISL and OSL each uniform over [int(L r), L], kimbochen/bench_serving sample_random_requests, the client of
InferenceX and ROCm/ATOM), and the InferenceX #870 runs read from the workflow that closed the issue."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from k3plan.errors import K3PlanError
from k3plan.evidence.benchmarks import load_benchmarks
from k3plan.speed.scheduler import StepCoefficients, client_lengths, simulate


def _step():
    return StepCoefficients(base_s=0.01, per_decode_seq_s=0.001, per_prefill_token_s=1e-5, source="test")


@pytest.mark.parametrize("nominal, ratio", [(1024, 0.8), (8192, 0.8), (1024, 0.0), (7, 0.5)])
def test_lengths_cover_the_client_s_range_evenly(nominal, ratio):
    n = 640
    xs = client_lengths(nominal, ratio, n, base=2)
    lower = max(int(nominal * ratio), 1)
    assert min(xs) >= lower and max(xs) <= nominal
    # a uniform draw over [lower, nominal]: the mean within half a percent of the midpoint
    assert sum(xs) / n == pytest.approx((lower + nominal) / 2, rel=5e-3)
    assert xs == client_lengths(nominal, ratio, n, base=2)  # deterministic: no seed, no sample noise


def test_inputs_and_outputs_are_drawn_apart():
    """Base 2 for ISL, 3 for OSL: a long prompt is not always a long answer (the client draws them apart)."""
    ins, outs = client_lengths(1024, 0.8, 64, base=2), client_lengths(1024, 0.8, 64, base=3)
    assert ins != outs


def test_ratio_one_is_every_request_at_its_nominal_lengths():
    kw = dict(step_time=_step(), isl=300, osl=20, token_budget=512, concurrency=4, prompts=16)
    fixed, drawn = simulate(**kw), simulate(range_ratio=1.0, **kw)
    assert drawn.ttft_s == pytest.approx(fixed.ttft_s)
    assert drawn.tpot_s == pytest.approx(fixed.tpot_s)
    assert drawn.output_tokens_per_s == pytest.approx(fixed.output_tokens_per_s)


def test_unequal_lengths_spread_the_later_arrivals():
    """Fixed lengths and a budget that prefills every prompt sent together in one step: they finish together, so
    every later wave queues as the first did (0.17 s); the client's lengths finish apart, so after the first wave a
    prompt mostly arrives alone (0.047 s)."""
    kw = dict(step_time=_step(), isl=1000, osl=200, token_budget=16384, concurrency=16, prompts=160)
    waves, spread = simulate(**kw), simulate(range_ratio=0.8, **kw)
    assert spread.ttft_s < 0.6 * waves.ttft_s
    assert any("uniform over the integers" in a for a in spread.assumptions)


def test_tpot_is_the_client_s_per_request_mean():
    """bench_serving's TPOT is each request's (latency - TTFT) / (its output tokens - 1), averaged; at one
    request at a time every decode step is the same, so each TPOT is that step, whatever the lengths."""
    r = simulate(step_time=_step(), isl=100, osl=50, token_budget=512, concurrency=1, prompts=8, range_ratio=0.5)
    assert r.tpot_s == pytest.approx(0.011)
    assert math.isclose(r.tpot_median_s, 0.011)


def test_a_range_needs_a_benchmark_run():
    with pytest.raises(K3PlanError, match="range ratio"):
        simulate(step_time=_step(), isl=100, osl=10, token_budget=512, concurrency=2, range_ratio=0.8)


def test_the_inferencex_870_runs_are_the_workflow_s():
    """InferenceX 8c145e00 (the commit that closed #870): --chunked-prefill-size 32768, --max-running-requests
    512, CONC x 10 prompts, range ratio 0.8 (benchmarks/experimental/dsr1_fp8_h200_gpu_monitor.sh,
    .github/workflows/gpu-monitor-experiment.yml)."""
    runs = [b for b in load_benchmarks() if "deepseek-v3-sglang-h200" in b.path]
    assert len(runs) == 4
    for b in runs:
        w, f = b.workload, b.flags
        assert (f.max_num_batched_tokens, f.max_num_seqs) == (32768, 512)
        assert w.num_prompts == 10 * w.concurrency and w.random_range_ratio == 0.8
        assert "8c145e005a9cce18bbbad43ac121de284d0d62c0" in (b.sources.config or "")


def test_every_published_range_is_a_client_with_prompts():
    """A range ratio is read only with the run's prompt count (the client's run), and only where stated."""
    ranged = [b for b in load_benchmarks() if b.workload.random_range_ratio is not None]
    # ATOM's 11 (atom-vllm-oot-benchmark.yaml), InferenceX #870's 4, its B200 curve's 10 and its B300 NVFP4 curve's 12
    # (benchmark-tmpl.yml), the SGLang DeepSeek-V4 cookbook's 6 (bench_serving's default)
    assert len(ranged) == 43
    assert all(b.workload.num_prompts is not None for b in ranged)


def test_the_inferencex_b200_curve_is_its_script_s():
    """InferenceX d4948f99 benchmarks/single_node/dsr1_fp8_b200.sh: TP 8 runs 32,768-token chunks and 128 requests at
    memory fraction 0.82, TP 4 8,192 and 32 at 0.95; fp8 KV; the scheduler polls every 30 steps from concurrency 16
    at TP 8, else 10. PR #3363's baseline figures are per GPU: the file holds the deployment's."""
    runs = {Path(b.path).stem: b for b in load_benchmarks() if "deepseek-v3-sglang-b200" in b.path}
    assert len(runs) == 10
    for b in runs.values():
        f, w = b.flags, b.workload
        tp8 = f.tensor_parallel_size == 8
        assert (f.max_num_batched_tokens, f.max_num_seqs) == ((32768, 128) if tp8 else (8192, 32))
        assert f.gpu_memory_utilization == (0.82 if tp8 else 0.95) and f.kv_cache_dtype == "fp8_e4m3"
        recv = 30 if tp8 and w.concurrency >= 16 else 10
        assert f"--scheduler-recv-interval {recv} " in f.extra
    c1 = runs["deepseek-v3-sglang-b200-tp8-isl1024-osl1024-c1"].measured
    assert c1.output_token_throughput == pytest.approx(17.01 * 8)


def test_the_inferencex_b300_nvfp4_curve_is_its_script_s():
    """InferenceX d4948f99 benchmarks/single_node/dsr1_fp4_b300.sh: 16,384-token chunks, 256 requests at memory
    fraction 0.85, fp8 KV, --ep-size the search space's (EP = TP), --quantization modelopt_fp4; the scheduler polls
    every 30 steps from concurrency 16, else 10; range ratio 0.8 and CONC x 10 prompts. PR #3183's baseline figures
    are per GPU: the file holds the deployment's (one DP group, TP GPUs)."""
    runs = {Path(b.path).stem: b for b in load_benchmarks() if "deepseek-r1-fp4-sglang-b300" in b.path}
    assert len(runs) == 12
    for b in runs.values():
        f, w, s = b.flags, b.workload, b.split
        assert b.model == "deepseek-r1-0528-fp4-v2" and b.engine.version == "0.5.12"
        assert (f.max_num_batched_tokens, f.max_num_seqs, f.gpu_memory_utilization) == (16384, 256, 0.85)
        assert f.kv_cache_dtype == "fp8_e4m3" and f.quantization == "modelopt_fp4"
        assert s.ep == s.tp and s.dp == 1 and f"--ep-size {s.ep} " in f.extra
        recv = 30 if w.concurrency >= 16 else 10
        assert f.scheduler_recv_interval == recv and f"--scheduler-recv-interval {recv} " in f.extra
        assert (w.random_range_ratio, w.num_prompts) == (0.8, 10 * w.concurrency)
    c1 = runs["deepseek-r1-fp4-sglang-b300-tp4-isl1024-osl1024-c1"].measured
    assert c1.output_token_throughput == pytest.approx(41.56 * 4)
    assert runs["deepseek-r1-fp4-sglang-b300-tp8-isl1024-osl1024-c32"].measured.total_token_throughput == pytest.approx(
        635.41 * 8
    )


def test_the_sglang_cookbook_runs_are_its_client_s_defaults():
    """SGLang's DeepSeek-V4 cookbook runs sglang.bench_serving with no --random-range-ratio: its default 0.0 draws each
    ISL over [1, 8192] and OSL over [1, 1024] (sglang@2df7ed9a benchmark/args.py). Its tokens_per_sec_per_gpu for fp4
    cells is "measured output/GPU x (isl+osl)/osl" (deepseek-v4-benchmarks.jsx @08587007): the output throughput is
    that inverted, the cell's GPUs x the figure x 1024 / 9216."""
    import re

    runs = [b for b in load_benchmarks() if "deepseek-v4-flash-sglang" in b.path or "deepseek-v4-pro-sglang" in b.path]
    assert len(runs) == 6
    for b in runs:
        w, gpus = b.workload, b.split.tp * b.split.dp
        assert w.random_range_ratio == 0.0 and (w.isl, w.osl) == (8192, 1024)
        (per_gpu,) = re.findall(r"tokens_per_sec_per_gpu (\d+)", b.notes)
        assert b.measured.output_token_throughput == pytest.approx(
            int(per_gpu) * gpus * w.osl / (w.isl + w.osl), abs=0.05
        )
