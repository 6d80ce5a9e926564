"""The collective bodies, their no-collective baselines and the programs timed (jax inside).

Every program is a `jax.shard_map` over a 1-D mesh axis "x". Chained: a `lax.fori_loop` of N calls,
each consuming the previous result (layers depend on each other). Unchained: N calls on N
independent slices in one program, so they may overlap. The baseline is the same program with the
collective replaced by a local op of the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

AXIS = "x"
OPS = ("all-to-all", "all-reduce", "all-gather")


@dataclass(frozen=True)
class Programs:
    """Compiled-on-demand callables and the inputs they take."""

    build: Callable[[int], Any]  # n -> jitted fn(x)
    build_baseline: Callable[[int], Any]
    make_input: Callable[[int], Any]  # n -> global array, placed by sharding
    host_input: Callable[[int], Any]  # n -> the same array in numpy


def wire_bytes(*, op: str, message_bytes: int, axis_size: int) -> float:
    """Bytes a device sends for one call (ring all-reduce: reduce-scatter + all-gather)."""
    n = axis_size
    return {
        "all-to-all": message_bytes * (n - 1) / n,
        "all-gather": message_bytes * (n - 1),
        "all-reduce": 2 * message_bytes * (n - 1) / n,
    }[op]


def _collective(op: str, axis_size: int):
    import jax
    import jax.numpy as jnp

    if op == "all-to-all":
        return lambda y: jax.lax.all_to_all(y, AXIS, 0, 0, tiled=True)
    if op == "all-reduce":
        return lambda y: jax.lax.psum(y, AXIS) * (1.0 / axis_size)

    def gather(y):  # keep the shape: take the neighbour's shard out of the gathered buffer
        full = jax.lax.all_gather(y, AXIS, tiled=True).reshape(axis_size, y.shape[0])
        idx = (jax.lax.axis_index(AXIS) + 1) % axis_size
        return jnp.take(full, idx, axis=0)

    return gather


def _local(y):
    import jax.numpy as jnp

    return jnp.flip(y) * 1.0001  # same bytes touched, no communication


def programs(*, op: str, mesh: Any, elems: int, dtype: str, chained: bool) -> Programs:
    """`elems` elements a device of `dtype`; returns the program builders for this op and mode."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from k3plan.probes.placement import place_full

    axis_size = mesh.shape[AXIS]
    coll = _collective(op, axis_size)

    def wrap(body, n):
        if chained:

            def per_device(x):
                return jax.lax.fori_loop(0, n, lambda i, y: body(y), x)

            spec = P(AXIS)
        else:

            def per_device(x):
                return jax.numpy.stack([body(x[i]) for i in range(n)])

            spec = P(None, AXIS)
        return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))

    def host_input(n):
        shape = (axis_size * elems,) if chained else (n, axis_size * elems)
        return (np.arange(int(np.prod(shape))).reshape(shape) % 97).astype(dtype)

    def make_input(n):
        sharding = NamedSharding(mesh, P(AXIS) if chained else P(None, AXIS))
        return place_full(full=host_input(n), sharding=sharding)

    return Programs(
        build=lambda n: wrap(coll, n),
        build_baseline=lambda n: wrap(_local, n),
        make_input=make_input,
        host_input=host_input,
    )


def expected_once(*, op: str, full: Any, axis_size: int) -> Any:
    """numpy result of one call on the global input `full` (rows: independent calls)."""
    import numpy as np

    rows = full.reshape(full.shape[0] if full.ndim == 2 else 1, axis_size, -1).astype(np.float64)
    if op == "all-to-all":  # device d's chunk j goes to device j's slot d
        m = rows.shape[-1] // axis_size
        out = rows.reshape(rows.shape[0], axis_size, axis_size, m).transpose(0, 2, 1, 3)
    elif op == "all-reduce":
        out = np.broadcast_to(rows.mean(axis=1, keepdims=True), rows.shape)
    else:  # all-gather, then each device keeps its neighbour's shard
        out = np.roll(rows, -1, axis=1)
    return out.reshape(full.shape)
