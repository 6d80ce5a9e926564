"""DeepSeek-V4 Flash and Pro nightly baselines (issue 38 item 3): both models are bundled, so each published
baseline speaks for its own configuration -- it matches it, roofline stands behind its median TPOT there
(measured) and prices the configuration's model beside it -- and for nothing else.

Sources (the files in k3plan/evidence/benchmarks/ carry them; tests/engines/benchmarks/torchtpu-vllm-nightly.yaml
holds their figures):
  Flash  https://github.com/kowalski-4831/vllm-torchtpu/blob/396c35040f7ddc7f15e15ca4613d6e4b40ae1e9f/scripts/vllm/benchmarking/baselines/perf/deepseek-v4-flash-dp8-ep.baseline.json
  Pro    https://github.com/kowalski-4831/vllm-torchtpu/blob/5e1723dbf012cb9663dd800bb0fc58991eccfa72/scripts/vllm/benchmarking/baselines/perf/deepseek-v4-pro-dp16-ep.baseline.json

Both are throughput runs (concurrency 2048 over DP 8, 1024 over DP 16): their TPOT holds the prefill chunks of
arriving prompts that share the decode steps, which roofline's one decode step does not, so the model / measured
ratio there is not like for like; the gap line names the load. No TTFT is published for either.
"""

from __future__ import annotations

import json

import pytest

from k3plan.evidence.benchmarks import load_benchmarks, matching

CASES = [
    # (model, topology, tp, dp, ep, concurrency, chunk, median TPOT ms)
    ("deepseek-v4-flash", "2x2x1", 1, 8, 8, 2048, 1024, 154.41),
    ("deepseek-v4-pro", "2x2x2", 1, 16, 16, 1024, 1024, 215.46),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_baseline_matches_its_configuration_only(case):
    model, topo, tp, dp, ep, *_ = case
    (b,) = [b for b in load_benchmarks() if b.model == model and b.engine.commit in ("396c35040f7ddc7f15e15ca4613d6e4b40ae1e9f", "5e1723dbf012cb9663dd800bb0fc58991eccfa72")]
    assert not b.waiting_for_model and b.engine.name == "torchtpu-vllm"
    cfg = dict(model=model, hardware="tpu-v7x", topology=topo, tp=tp, dp=dp, ep=ep)
    assert b in matching(**cfg, stack="torchtpu-vllm")
    assert not matching(**cfg, stack="tpu-inference")
    assert not matching(**{**cfg, "dp": dp // 2, "ep": ep // 2}, stack="torchtpu-vllm")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_roofline_prices_the_configuration_and_stands_behind_the_median(cli, case):
    model, topo, tp, dp, ep, conc, chunk, tpot_ms = case
    r = cli(
        "roofline", "-m", model, "-t", topo, "--tp", tp, "--dp", dp, "--ep", ep,
        "--batch", conc, "--context", 8192, "--chunk", chunk, "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stdout
    x = json.loads(r.stdout)
    s = x["serving"]
    assert s["tpot"]["source"] == "measured" and s["tpot"]["value_s"] == pytest.approx(tpot_ms / 1e3)
    assert s["ttft"]["source"] != "measured"  # no TTFT published
    dec = s["decode"]
    # the model stands on its own (no benchmark in it) and is priced for this configuration
    assert dec["model_s"] == x["expected"]["decode"]["expected_s"] > dec["ceiling_s"] > 0
    assert dec["measured_s"] == pytest.approx(tpot_ms / 1e3)
    (gap,) = dec["gap_terms"]
    assert gap["seconds"] == pytest.approx(tpot_ms / 1e3 - dec["model_s"])
    assert "prefill chunks of arriving requests" in gap["source"]  # the load the single step does not hold
