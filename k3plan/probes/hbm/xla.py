"""XLA copy and reduce over a [rows, 1024] array on one device."""

from __future__ import annotations

from typing import Any


def build(*, op: str, x: Any) -> Any:
    import jax
    import jax.numpy as jnp

    fn = (lambda a: a * 1.0001) if op == "copy" else (lambda a: jnp.sum(a, dtype=jnp.float32))
    return jax.jit(fn).lower(x).compile()
