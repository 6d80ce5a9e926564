"""Shared helpers for the budget and sharding tests: cached setups, one fit call, the shared/ dir."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from k3plan.budget.fit import check_workload, fit
from k3plan.setup import make_setup

GiB = 2**30
# ../shared next to the repository (design notes, calibration files); may be absent.
SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CALIBRATION = SHARED / "data" / "calibration" / "k3-tpu7x-2x2x4-tp32-jax-native.yaml"


@lru_cache(maxsize=None)
def setup(**kw):
    return make_setup(**kw)


def cached_setup(
    model="kimi-k3",
    hardware="tpu-v7x",
    topology=None,
    tp=None,
    ep=None,
    dp=None,
    stack="vllm-tpu",
    kv_dtype=None,
    shardspecs=None,
):
    return setup(
        model=model,
        hardware=hardware,
        topology=topology,
        tp=tp,
        ep=ep,
        dp=dp,
        stack=stack,
        kv_dtype=kv_dtype,
        shardspecs=shardspecs,
    )


def run_fit(s, context=131072, batch=1, chunk=None, calibration=None):
    return fit(
        s, check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=chunk), calibration=calibration
    )


def transposed_torchtpu_stack() -> str:
    """A stack YAML path: torchtpu-vllm with tpu-inference's MLA_TRANSPOSE_KV_CACHE=1 entry (576 values a token a
    MLA layer, the rope part unpadded), for the hand arithmetic of k3-facts.md §3's 576-value tables on a
    head-parallel TP deployment (tpu-inference itself runs attention TP only under DP attention)."""
    import tempfile
    from pathlib import Path

    import yaml

    from k3plan.engines.stack import STACK_DIR, load_stack

    data = yaml.safe_load((STACK_DIR / "torchtpu-vllm.yaml").read_text())
    data["name"] = "torchtpu-vllm-transposed"
    layout = load_stack("tpu-inference:mla_transpose_kv_cache=1").kv_cache.layout
    assert layout is not None
    data["kv_cache"]["layout"] = layout.model_dump()
    path = Path(tempfile.gettempdir()) / f"k3plan-test-{os.getpid()}-torchtpu-transposed.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)
