"""Timing compiled JAX callables: raw samples, order statistics, marginal cost between two N."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from k3plan.evidence.probe_record import Stats


def block(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)


def sample_s(fn: Callable[..., Any], *args: Any, warmup: int, repeats: int, deadline: Any = None) -> list[float]:
    """Wall seconds of `repeats` calls of fn(*args), each waited for, after `warmup` calls. With a
    ``deadline`` (context.Deadline) that expires, sampling stops early, keeping at least 2 samples
    (what a marginal cost between two N needs) -- --timeout holds within one sweep point."""
    for _ in range(max(warmup, 0)):
        block(fn(*args))
    out: list[float] = []
    for _ in range(max(repeats, 1)):
        if deadline is not None and len(out) >= 2 and deadline.expired():
            break
        t0 = time.perf_counter()
        block(fn(*args))
        out.append(time.perf_counter() - t0)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no samples")
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats(values: Sequence[float]) -> Stats:
    return Stats(n=len(values), min=min(values), p50=percentile(values, 50), p90=percentile(values, 90))


def marginal_s(lo: Sequence[float], hi: Sequence[float], *, n_lo: int, n_hi: int) -> list[float]:
    """Per-call cost between N=n_lo and N=n_hi: the i-th smallest of each, differenced, over dN.
    Pairing order statistics keeps min/p50/p90 of the result meaningful."""
    if n_hi <= n_lo:
        raise ValueError("n_hi must exceed n_lo")
    pairs = zip(sorted(lo), sorted(hi))
    return [(h - lo_t) / (n_hi - n_lo) for lo_t, h in pairs]
