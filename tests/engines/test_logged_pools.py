"""vLLM's own pool conversion against its logs (issue 34): from the KV memory a startup log prints, k3plan's
layout (block, page, layer groups) and engines.vllm.memory must give the tokens and the concurrency the same log
prints, within the log's rounding. The cases are in tests/engines/pool_cases, each with its source."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k3plan.engines.vllm.memory import Figure, kv_groups, vllm_kv_pool
from k3plan.units import GiB

CASES = sorted((Path(__file__).parent / "pool_cases").glob("*.yaml"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_the_logged_tokens_and_concurrency_follow_from_the_logged_pool(path):
    from k3plan.budget.fit import Workload, fit
    from k3plan.setup import make_setup

    case = yaml.safe_load(path.read_text())
    assert case["source"].startswith("https://") and case["logged"]
    exp = case["expect"]
    setup = make_setup(
        model=case["model"],
        hardware="nvidia-h100-sxm",
        topology=str(case["tp"]),
        tp=case["tp"],
        stack="vllm",
        # the release the log's lines place it in (its block alignment: engines/vllm/releases.py hybrid_mla_align)
        engine_release=tuple(int(x) for x in case["engine_version"].split(".")) if "engine_version" in case else None,
    )
    lay = fit(setup, Workload(context_tokens=case["max_model_len"]), evidence=False).cache_layout
    assert lay is not None and lay.page_bytes
    size, att, st = kv_groups(n_attention=lay.n_mla, n_state=lay.n_kda)
    assert (att + st) * size - (lay.n_mla + lay.n_kda) == exp["padding_layers"]  # "Add 1 padding layers"
    zero = Figure(0, "the log's available memory is the pool")
    # every pool the printed figure can stand for, [x - 0.005, x + 0.005) GiB, one whole block (of every group slot)
    # at a time: the engine allocates whole blocks
    per_block = lay.page_bytes * size
    lo, hi = int((exp["available_gib"] - 0.005) * GiB), int((exp["available_gib"] + 0.005) * GiB)
    got = set()
    for blocks in range(lo // per_block, (hi - 1) // per_block + 1):
        s = vllm_kv_pool(
            engine="vllm",
            utilization=1.0,
            visible_bytes=max(blocks * per_block, lo),
            weights_bytes=0,
            activation_bytes=zero,
            non_torch_bytes=zero,
            visible_source="the log",
            page_bytes=lay.page_bytes,
            block_tokens=lay.block_tokens,
            block_source="k3plan",
            n_attention=lay.n_mla,
            n_state=lay.n_kda,
            max_model_len=case["max_model_len"],
            worker_source="the log",
        )
        got.add((s.kv_pool_tokens.value, s.max_concurrency.value))
    assert (exp["kv_pool_tokens"], exp["max_concurrency"]) in got, sorted(got)
