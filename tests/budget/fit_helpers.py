"""Shared helpers for the budget and sharding tests: cached setups, one fit call, the shared/ dir."""

from __future__ import annotations

from functools import lru_cache

from k3_testing import CALIBRATION  # noqa: F401  (re-exported for the budget tests)

from k3plan.budget.fit import check_workload, fit
from k3plan.setup import make_setup

GiB = 2**30


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


from k3_testing import transposed_torchtpu_stack  # noqa: E402,F401  (re-exported for tests/budget)
