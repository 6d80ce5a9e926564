"""Which layers are folded into a scan, and truncation to the first N layers (jax-free).

A layer's signature is (mixer, mlp). The repeating block is derived from the model: the period p
and start s that cover the most layers with identical consecutive blocks; ties go to the block
that ends with the model's rarest mixer (K3: KDA, KDA, KDA, MLA — the MLA layers are every 4th),
then to the earliest start. Layers before the first block are the prefix (K3: layers 1-4, the
first of which has a dense MLP), those after the last are the remainder (K3: layer 93).
"""

from __future__ import annotations

from k3plan.structs import Frozen

MAX_PERIOD = 8


class LayerPlan(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    __coerce__ = False

    prefix: tuple[int, ...]  # unrolled layers before the scan
    block: tuple[tuple[str, str], ...]  # (mixer, mlp) of each position in the block
    block_start: int
    n_blocks: int
    suffix: tuple[int, ...]  # unrolled remainder

    def block_layers(self, position: int) -> tuple[int, ...]:
        p = len(self.block)
        return tuple(self.block_start + k * p + position for k in range(self.n_blocks))

    def describe(self) -> str:
        if not self.n_blocks:
            return f"{len(self.prefix)} layers unrolled"
        names = ", ".join(m.upper() for m, _ in self.block)
        return (
            f"{len(self.prefix)} prefix layer(s) + scan over {self.n_blocks} x ({names}) "
            f"+ {len(self.suffix)} remainder layer(s)"
        )


def _blocks(sig: list, p: int, s: int) -> int:
    first = sig[s : s + p]
    if len(first) < p:
        return 0
    n = 1
    while sig[s + n * p : s + (n + 1) * p] == first:
        n += 1
    return n


def _period(mixers: tuple[str, ...]) -> int:
    """The mixer pattern's period: the p whose repeated blocks (two or more, any start) cover the
    most layers; ties to the smaller p."""
    seq, best = list(mixers), (0, 1)
    for p in range(1, min(MAX_PERIOD, len(seq) // 2) + 1):
        for s in range(p):
            k = _blocks(seq, p, s)
            if k >= 2 and k * p > best[0]:
                best = (k * p, p)
    return best[1]


def layer_plan(*, mixers: tuple[str, ...], mlps: tuple[str, ...], unroll: bool = False) -> LayerPlan:
    """The period comes from the mixers alone (K3: 4); the block's start from the full (mixer, mlp)
    signature: most consecutive identical blocks, then a block ending with the rarest mixer, then
    the fewest distinct layer kinds in it, then the earliest start. One block is still a scan (a small truncated model keeps the structure)."""
    sig = list(zip(mixers, mlps))
    n = len(sig)
    flat = LayerPlan(prefix=tuple(range(n)), block=(), block_start=n, n_blocks=0, suffix=())
    if unroll or n < 2:
        return flat
    p = _period(mixers)
    rare = min(set(mixers), key=lambda m: (mixers.count(m), m))
    best = None
    for s in range(0, n - p + 1):
        k = _blocks(sig, p, s)
        key = (k, sig[s + p - 1][0] == rare, -len(set(sig[s : s + p])), -s)
        if k and (best is None or key > best[0]):
            best = (key, s, k)
    if best is None:
        return flat
    _, s, k = best
    return LayerPlan(
        prefix=tuple(range(s)),
        block=tuple(sig[s : s + p]),
        block_start=s,
        n_blocks=k,
        suffix=tuple(range(s + k * p, n)),
    )
