"""--target local: the compiled step run once on the attached chip with real arrays, and the OOM boundary
found by compiling the workload doubled until the compiler's verdict (arguments + outputs - alias + temp
against the chip's usable HBM, or its own refusal) says it no longer fits (issue 35 item 4)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional

from k3plan.validate.result import LocalRun, OomBoundary

TIMED_CALLS = 3
MAX_DOUBLINGS = 3


def run_once(compiled: Any, ab: Any, inputs: dict, *, job: Any, fit_fits: bool, fits: bool) -> LocalRun:
    """One warm-up call, then TIMED_CALLS timed ones, with random weights and a zero cache (the cache donated
    and threaded); none when the compiled step does not fit."""
    agrees = fit_fits == fits
    if compiled is None:
        return LocalRun(
            measured_step_s=None,
            samples_s=[],
            fit_fits=fit_fits,
            agrees=agrees,
            note="not run: the compiled step does not fit the chip" if not fits else "not run: no executable",
        )
    import jax
    import jax.numpy as jnp

    weights, cache = concrete(ab.params), zeros(ab.cache)
    args = []
    for name, sds in inputs.items():
        fill = job.context - 1 if name == "positions" else 0
        args.append(jax.device_put(jnp.full(sds.shape, fill, sds.dtype), sds.sharding))
    samples = []
    for i in range(1 + TIMED_CALLS):
        t0 = time.perf_counter()
        nxt, cache = compiled(weights, cache, *args)
        jax.block_until_ready((nxt, cache))
        if i:
            samples.append(time.perf_counter() - t0)
    del weights, cache
    p50 = sorted(samples)[len(samples) // 2]
    return LocalRun(
        measured_step_s=p50,
        samples_s=samples,
        fit_fits=fit_fits,
        agrees=agrees,
        note=f"ran with real arrays (random weights, zero cache): p50 of {TIMED_CALLS} calls after one warm-up",
    )


def concrete(tree, *, seed: int = 0):
    """Arrays for a pytree of sharded ShapeDtypeStructs, drawn ON the device by ONE compiled program (issue 50:
    a drawer program a distinct leaf, with jax.random's threefry, took ~2 minutes for a K3-width step's 13 GB
    on a v5e): each element is a hash of its index and its leaf's number, computed in the fusion that writes
    it -- no random-bits temporary the size of a leaf, so the draw needs no more HBM than the arrays.
    Floats ~ uniform with std 0.02, MXFP4 ``scale`` bytes 2^-7 (E8M0 120), other bytes the hash's top byte,
    integers zero. Not random numbers: weights the step can run on (routing, the next token's range)."""
    import jax
    import numpy as np

    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    plan = []
    for path, sds in leaves:
        dt = np.dtype(sds.dtype)
        if dt == np.uint8 and "scale" in jax.tree_util.keystr(path):
            kind = "scale"
        elif dt == np.uint8:
            kind = "bytes"
        elif dt.kind in "iub":
            kind = "zeros"
        else:
            kind = "normal"
        plan.append((kind, tuple(sds.shape), sds.dtype))

    def draw():
        return [_draw(kind, shape, dtype, salt=seed * 7919 + i) for i, (kind, shape, dtype) in enumerate(plan)]

    out = jax.jit(draw, out_shardings=[sds.sharding for _, sds in leaves])()
    return jax.tree_util.tree_unflatten(treedef, out)


_HALF_WIDTH = 0.02 * 3**0.5  # uniform on [-a, a] has std a / sqrt(3)


def _draw(kind: str, shape: tuple, dtype, *, salt: int):
    import jax.numpy as jnp
    from jax import lax

    if kind == "scale":
        return jnp.full(shape, 120, jnp.uint8)
    if kind == "zeros":
        return jnp.zeros(shape, dtype)
    idx = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for d in reversed(range(len(shape))):
        idx = idx + lax.broadcasted_iota(jnp.uint32, shape, d) * jnp.uint32(stride % 2**32)
        stride *= shape[d]
    h = idx * jnp.uint32(0x9E3779B1) + jnp.uint32((salt * 0x85EBCA77 + 1) % 2**32)
    h = (h ^ (h >> 16)) * jnp.uint32(0x7FEB352D)
    h = (h ^ (h >> 15)) * jnp.uint32(0x846CA68B)
    h = h ^ (h >> 16)
    if kind == "bytes":
        return (h >> 24).astype(jnp.uint8)
    u = (h >> 8).astype(jnp.float32) * (2.0 / 2**24) - 1.0
    return (u * _HALF_WIDTH).astype(dtype)


def zeros(tree):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), tree)


def oom_boundary(run: Callable[..., Any], job: Any, *, fits: bool) -> OomBoundary:
    """Compile (never run) the job with its batch (decode) or tokens (prefill) doubled until it does not fit."""
    axis = "tokens" if job.stage == "prefill" else "batch"
    if not fits:
        return OomBoundary(
            axis=axis, fits_at=None, refused_at=getattr(job, axis), verdict="the job itself does not fit"
        )
    last: Optional[int] = int(getattr(job, axis))
    size = int(getattr(job, axis))
    for _ in range(MAX_DOUBLINGS):
        size = 2 * size
        bigger = dataclasses.replace(
            job, **{axis: size, "context": max(job.context, size) if axis == "tokens" else job.context}
        )
        try:
            r = run(job=bigger)
        except Exception as err:  # a compile that fails otherwise than by memory: the search stops there
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            return OomBoundary(axis=axis, fits_at=last, refused_at=None, verdict=f"stopped at {axis} {size}: {first}")
        if not r.fits:
            return OomBoundary(axis=axis, fits_at=last, refused_at=size, verdict=r.verdict)
        last = size
    return OomBoundary(
        axis=axis,
        fits_at=last,
        refused_at=None,
        verdict=f"still fits after {MAX_DOUBLINGS} doublings (not searched further)",
    )
