"""Serving benchmarks as evidence (issue 38): the shipped files carry the published figures, match
the configurations they were measured on, and transfer to nearby workloads by the model's ratio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from k3plan.errors import K3PlanError
from k3plan.evidence.benchmarks import (
    FOLDER,
    Asked,
    differing,
    load_benchmark,
    load_benchmarks,
    matching,
    serving_figure,
)

# every golden file (one a source family), each case with the URL it was read from
CASES = [
    c for f in sorted((Path(__file__).parent / "benchmarks").glob("*.yaml")) for c in yaml.safe_load(f.read_text())
]
K3 = dict(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32, dp=1, ep=32)
# the key a default question on the torchtpu-vllm stack asks: bf16 KV, the 16-token page the model prices, sync


def key(batch=1, context=8192, chunk=512, kv="bf16", page=16, async_scheduling=False) -> Asked:
    return Asked(
        kv_dtype=kv, page_tokens=page, async_scheduling=async_scheduling, batch=batch, context=context, chunk=chunk
    )


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_file_carries_the_published_figures(case):
    b = load_benchmark(FOLDER / case["file"])
    assert b.sources.baseline == case["source"]
    stat = case.get("statistic", "median")
    assert b.measured.statistic == stat
    assert getattr(b.measured, f"{stat}_tpot_ms") == case[f"{stat}_tpot_ms"]
    assert getattr(b.measured, f"{stat}_ttft_ms") == case[f"{stat}_ttft_ms"]
    assert b.waiting_for_model is (not case["bundled"])
    assert b.engine.name == case.get("engine", "torchtpu-vllm")
    for flag in ("kv_cache_dtype", "async_scheduling", "gpu_memory_utilization"):  # where the golden reads them
        if flag in case:
            assert getattr(b.flags, flag) == case[flag], flag


def test_every_shipped_file_is_a_case():
    assert {Path(b.path).name for b in load_benchmarks()} == {c["file"] for c in CASES}


def test_k3_nightly_matches_the_default_tpu_stack_and_nothing_else():
    got = matching(**K3, stack="torchtpu-vllm")  # the engine's own stack (vllm-tpu, its old name, loads it)
    assert {b.flags.max_num_batched_tokens for b in got} == {512, 8192}
    assert not matching(**K3, stack="tpu-inference") and not matching(**K3, stack="sglang")
    assert not matching(**{**K3, "tp": 16}, stack="torchtpu-vllm")
    assert not matching(**{**K3, "topology": "2x4x4"}, stack="torchtpu-vllm")


def test_no_shipped_file_waits_for_its_model():
    """Both DeepSeek-V4 models are bundled now: no file waits (tests/engines/test_v4_baselines.py prices them)."""
    assert not [b.name for b in load_benchmarks() if b.waiting_for_model]


def test_measured_at_the_benchmark_workload_and_transferred_elsewhere():
    cands = matching(**K3, stack="torchtpu-vllm")
    at = serving_figure("tpot", model_s=0.010, cands=cands, asked=key(), model_at=lambda b: 0.010)
    assert at.source == "measured" and at.value_s == pytest.approx(0.030899158045435588)
    assert "chunk 512" in at.label and "all match" in at.label
    near = serving_figure("tpot", model_s=0.012, cands=cands, asked=key(batch=2), model_at=lambda b: 0.010)
    assert near.source == "transferred" and near.value_s == pytest.approx(0.030899158045435588 * 1.2)
    assert near.differing == ("batch 1->2",)
    none = serving_figure("ttft", model_s=0.5, cands=(), asked=key(), model_at=None)
    assert none.source == "model" and none.value_s == 0.5


def test_measured_only_when_kv_dtype_page_chunk_and_scheduling_match_too():
    """Issue 46 item 6: the tuned recipe (fp8 KV, 256-token pages, async, chunk 8192) is measured only for a question
    that asks all of it; the default question (bf16 KV, 16-token pages, sync) at chunk 8192 is transferred from
    the benchmark with the fewest differing keys beside the workload (the nightly at chunk 512: the model's ratio
    prices the chunk), and where only a benchmark across a KV dtype / page / scheduling is near, the label says
    the ratio does not price those keys."""
    cands = matching(**K3, stack="torchtpu-vllm")
    tuned = key(chunk=8192, kv="fp8", page=256, async_scheduling=True)
    big = serving_figure("ttft", model_s=1.0, cands=cands, asked=tuned, model_at=lambda b: 1.0)
    assert big.source == "measured" and big.value_s == pytest.approx(0.9951696610078216)
    plain = serving_figure("ttft", model_s=1.0, cands=cands, asked=key(chunk=8192), model_at=lambda b: 1.0)
    assert plain.source == "transferred" and plain.differing == ("chunk 512->8,192",)
    (tuned_b,) = [b for b in cands if b.flags.max_num_batched_tokens == 8192]
    only = serving_figure("ttft", model_s=1.0, cands=(tuned_b,), asked=key(chunk=8192), model_at=lambda b: 1.0)
    assert only.source == "transferred"
    assert set(only.differing) == {"KV dtype fp8->bf16", "page 256->16 tokens", "scheduling async->sync"}
    assert "the ratio does not price" in only.label
    assert not differing(tuned_b, tuned)
    for k, v in (("kv", "fp8"), ("page", 256), ("async_scheduling", True)):
        (nightly,) = [b for b in cands if b.flags.max_num_batched_tokens == 512]
        assert differing(nightly, key(**{k: v})), k  # one key apart is never measured


def test_an_unpublished_key_is_never_measured():
    """A benchmark that does not publish its page or scheduling (the V4 nightlies: no --block-size is the plugin's
    16; async_scheduling unset) is transferred to the question at its own workload, the key named."""
    (v4,) = [b for b in load_benchmarks() if b.engine.commit and b.engine.commit.startswith("396c3504")]
    keys = differing(v4, key(batch=2048, chunk=1024, kv="fp8"))
    assert keys == ("scheduling unpublished->sync",)
    (r1,) = [
        b
        for b in load_benchmarks()
        if b.model == "deepseek-v3"
        and b.engine.name == "sglang"
        and b.hardware == "nvidia-h200"
        and b.workload.concurrency == 8
    ]
    keys = differing(r1, key(batch=8, context=1024, chunk=1024, page=None))
    assert keys[:2] == ("KV dtype unpublished->bf16", "page unpublished->unpublished tokens")


def test_bad_file_is_one_line(tmp_path):
    src = (FOLDER / "kimi-k3-tp32-ep-isl8192-osl1024-c1.yaml").read_text().replace("tp: 32, dp: 1", "tp: 16, dp: 1")
    p = tmp_path / "bad.yaml"
    p.write_text(src)
    with pytest.raises(K3PlanError, match="flags say tp 32"):
        load_benchmark(p)
    p.write_text(src.replace("median_tpot_ms: 30.899158045435588", "median_tpot_ms: -1"))
    with pytest.raises(K3PlanError, match="measured.median_tpot_ms"):
        load_benchmark(p)


def test_a_workload_far_from_every_benchmark_is_still_transferred_and_says_so():
    """Issue 46 item 7: past 16x of every benchmark's workload the nearest still speaks by the model's ratio (a figure
    falling to the ceiling or the model there made TPOT fall as the batch grew); the label says how far it reaches."""
    cands = matching(**K3, stack="torchtpu-vllm")
    far = serving_figure(
        "tpot", model_s=0.02, cands=cands, asked=key(context=1048576, chunk=8192), model_at=lambda b: 0.01
    )
    assert far.source == "transferred" and far.value_s == pytest.approx(2 * far.measured_s)
    assert "farther than 16x from its workload" in far.label and far.band_s == (0.02, 2 * far.measured_s)
    none = serving_figure("tpot", model_s=0.02, cands=(), asked=key(context=1048576, chunk=8192), model_at=None)
    assert none.source == "model" and none.value_s == 0.02 and none.band_s == (0.02, 0.02)
    near = serving_figure(
        "tpot", model_s=0.02, cands=cands, asked=key(context=131072, chunk=8192), model_at=lambda b: 0.01
    )
    assert near.source == "transferred"  # 16x the nightly's 8,192 tokens: the edge of "nearby"


def test_a_run_with_tp_split_experts_speaks_for_ep_over_its_group_and_is_never_measured():
    """A run at --ep-size 1 on 8 GPUs holds each expert TP-split over the group, which k3plan holds as EP 8 (the same
    bytes a device): it speaks for the question at EP 8, transferred, the MoE key named (its collectives are the
    run's own). Before, such runs never matched and the default answer fell to the roofline bound (2.89 ms for
    DeepSeek-V3 on 8 B200 at batch 1, against the curve's measured 7.18)."""
    at = dict(model="deepseek-v3", hardware="nvidia-b200", topology="8", tp=8, dp=1, stack="sglang")
    got = matching(**at, ep=8)
    assert {b.workload.concurrency for b in got if b.workload.isl == 1024} == {1, 2, 4, 8, 16, 32, 64}
    (c1,) = [b for b in got if b.workload.isl == 1024 and b.workload.concurrency == 1]
    keys = differing(c1, key(batch=1, context=1024, chunk=32768, kv="fp8"))
    assert "MoE TP-split (--ep-size 1)->EP 8" in keys


def test_the_default_answer_stands_behind_the_tp_split_run(cli):
    r = cli(
        "roofline",
        "-m",
        "deepseek-v3",
        "-H",
        "nvidia-b200",
        "-t",
        "8",
        "--stack",
        "sglang",
        "--batch",
        "1",
        "--context",
        "1024",
        "--json",
    )
    assert r.exit_code == 0, r.output
    tpot = json.loads(r.stdout)["serving"]["tpot"]
    assert tpot["source"] == "transferred" and "MoE TP-split" in tpot["label"]
    assert tpot["value_s"] == pytest.approx(7.18e-3, rel=0.05)
