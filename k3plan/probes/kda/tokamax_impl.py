"""tokamax's kimi_delta_attention, when installed; which of its implementations ran is explicit
(one entry per implementation), so a silent fallback inside tokamax cannot hide."""

from __future__ import annotations

from typing import Any, Callable


def _kda_fn() -> Callable[..., Any]:
    try:
        import tokamax
    except ImportError:
        raise NotImplementedError("tokamax is not installed") from None
    fn: Callable[..., Any] | None = getattr(tokamax, "kimi_delta_attention", None)
    if fn is None:
        try:
            from tokamax._src.ops.experimental.kda.api import kimi_delta_attention
        except ImportError:
            raise NotImplementedError(
                f"tokamax {getattr(tokamax, '__version__', '?')} has no kimi_delta_attention"
            ) from None
        fn = kimi_delta_attention
    return fn


def build(*, implementation: str, args: tuple, scale: float) -> Callable[..., Any]:
    """Compiled fn(q, k, v, g, beta) in the reference layout [B, T, H, D] -> o [B, T, H, Dv]."""
    import jax
    import jax.numpy as jnp

    fn = _kda_fn()

    def call(q, k, v, g, beta):
        to = lambda a: jnp.transpose(a, (2, 0, 1, 3))  # noqa: E731  [B,T,H,D] -> [H,B,T,D]
        out = fn(to(q), to(k), to(v), to(g), jnp.transpose(beta, (2, 0, 1)), scale=scale, implementation=implementation)
        o = out[0] if isinstance(out, tuple) else out
        return jnp.transpose(o, (1, 2, 0, 3))

    return jax.jit(call).lower(*args).compile()
