"""Device time of an op: N dependent iterations inside ONE compiled program, the marginal cost between
two N (the dispatch floor and the program's fixed cost cancel), and the floor reported apart.

A single timed call of a small op measures the host (a jitted call costs ~0.55 ms to dispatch on the
lent v5e host: docs/device.md), so every probe that feeds an efficiency curve times its op this way:

    program(n, x, *rest) = fori_loop(0, n, body, x)      n a traced argument: one compile for every n
    body(x)              = out = optimization_barrier(op(x, *rest))
                           x with one element replaced by an element of out   (``feed``, default)

Each iteration's input depends on the last one's output, so XLA can neither hoist the op out of the
loop (loop-invariant code motion) nor run the iterations as one; the barrier keeps the whole ``out``
computed (no slice-of-dot simplification to a single element). A caller whose op carries its own
state (KDA decode: the state in and out) passes ``feed`` to thread the whole output instead.

    t(n) = floor + n x per_iter      per_iter = (t(n_hi) - t(n_lo)) / (n_hi - n_lo)   (order statistics paired)
                                     floor    = t(n_lo) - n_lo x per_iter              (dispatch + program fixed cost)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from k3plan.probes.timing import marginal_s, percentile, sample_s

TARGET_S = 0.02  # n_hi is chosen so that one timed program runs about this long on the device
CPU_TARGET_S = 0.005  # a CPU run checks the machinery: short programs
MAX_ITERS = 20_000
N_LO = 1


def poke(args: tuple, out: Any) -> tuple:
    """The default feed: the first argument with its first element replaced by the first element of
    the op's (first) output, cast to its dtype -- a dependency that costs one in-place element write."""
    import jax

    x = args[0]
    leaf = jax.tree.leaves(out)[0]
    first = leaf.reshape(-1)[0].astype(x.dtype)
    return (x.at[(0,) * x.ndim].set(first), *args[1:])


def chained(op: Callable[..., Any], *, feed: Callable[[tuple, Any], tuple] = poke, carried: int = 1):
    """jit(program(n, *args)): ``n`` iterations of ``op(*args)``, ``feed(args, out)`` giving the next
    iteration's first ``carried`` arguments (the rest are loop-invariant operands, passed once)."""
    import jax
    from jax import lax

    def program(n, *args):
        carry, rest = args[:carried], args[carried:]

        def body(i, carry):
            full = (*carry, *rest)
            out = lax.optimization_barrier(op(*full))
            return tuple(feed(full, out)[:carried])

        return lax.fori_loop(0, n, body, tuple(carry))

    return jax.jit(program)


@dataclass(frozen=True)
class LoopTiming:
    per_iter_s: list[float]  # marginal seconds an iteration, one per pair of samples
    floor_s: float  # p50 of t(n_lo) - n_lo x per_iter: the dispatch floor plus the program's fixed cost
    n_lo: int
    n_hi: int
    samples_lo_s: list[float]
    samples_hi_s: list[float]

    def params(self) -> dict[str, Any]:
        return {"iterations": [self.n_lo, self.n_hi], "floor_s": self.floor_s}

    def samples(self) -> dict[str, list[float]]:
        return {f"program_n{self.n_lo}": self.samples_lo_s, f"program_n{self.n_hi}": self.samples_hi_s}


def time_loop(
    program: Any,
    args: tuple,
    *,
    warmup: int,
    repeats: int,
    deadline: Any = None,
    target_s: float = TARGET_S,
    n_hi: Optional[int] = None,
) -> LoopTiming:
    """Time ``program(n, *args)`` (from ``chained``) at n_lo and n_hi; n_hi sized so that a program runs
    ~``target_s`` (a pilot at n = 1 and 11), or given. Every call is waited for."""
    import jax.numpy as jnp

    def at(n: int) -> Callable[..., Any]:
        nn = jnp.int32(n)
        return lambda *a: program(nn, *a)

    if n_hi is None:
        pilot_lo = min(sample_s(at(N_LO), *args, warmup=max(warmup, 1), repeats=3))
        pilot_hi = min(sample_s(at(N_LO + 10), *args, warmup=0, repeats=3))
        per = max((pilot_hi - pilot_lo) / 10, 1e-9)
        n_hi = int(min(MAX_ITERS, max(N_LO + 10, round(target_s / per))))
    lo = sample_s(at(N_LO), *args, warmup=warmup, repeats=repeats, deadline=deadline)
    hi = sample_s(at(n_hi), *args, warmup=warmup, repeats=repeats, deadline=deadline)
    per_iter = marginal_s(lo, hi, n_lo=N_LO, n_hi=n_hi)
    per_iter = [max(p, 1e-12) for p in per_iter]  # noise can invert a pair at tiny sizes
    p50 = percentile(per_iter, 50)
    return LoopTiming(
        per_iter_s=per_iter,
        floor_s=max(percentile(lo, 50) - N_LO * p50, 0.0),
        n_lo=N_LO,
        n_hi=n_hi,
        samples_lo_s=lo,
        samples_hi_s=hi,
    )


def dispatch_floor_s(*, repeats: int = 50) -> list[float]:
    """Seconds from dispatch to a result on the host for an empty jitted call (a scalar + 1): what a
    single timed call of a small op measures instead of the device."""
    import jax
    import jax.numpy as jnp

    fn = jax.jit(lambda x: x + 1)
    z = jnp.zeros((), jnp.float32)
    return sample_s(fn, z, warmup=3, repeats=repeats)
