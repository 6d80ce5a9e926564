"""Placing host data on devices by what each process addresses, never by process-index arithmetic
(the launcher's id, jax.process_index() and mesh order differ on real slices)."""

from __future__ import annotations

from typing import Any, Callable


def place(*, shape: tuple[int, ...], sharding: Any, fill: Callable[[Any], Any]) -> Any:
    """Global array of `shape` with `sharding`; `fill(index)` returns the numpy block at `index`
    (a tuple of slices). Only the blocks this process's devices hold are built."""
    import jax

    index_map = sharding.addressable_devices_indices_map(shape)
    shards = [jax.device_put(fill(index), device) for device, index in index_map.items()]
    return jax.make_array_from_single_device_arrays(shape, sharding, shards)


def place_full(*, full: Any, sharding: Any) -> Any:
    """`full` (numpy, the same on every process) placed with `sharding`."""
    return place(shape=tuple(full.shape), sharding=sharding, fill=lambda index: full[index])
