"""The logical-axis rules replayed on one tensor, written once over ``int | numpy array`` mesh sizes.

``resolve.spec_from_rules`` reads it at one Mesh (Python ints: a ShardSpec and Fallback records,
numpy never imported) and ``step.weights.class_shards`` over arrays of candidate meshes (plan: the
shards and fallbacks of every mesh at once). The semantics are resolve.py's: a checkpoint dim is
sharded by the first of its logical axes with a rule; a mesh axis shards at most one dim of a
tensor (first dim wins; a logical axis whose mesh axes are taken passes to the next one of its
dim); a target of size 1 shards nothing; a logical axis its mesh size does not divide falls back
to replication (the dim stays whole) and the step says so -- unless the stack places that axis
unevenly (``uneven``: the expert axis of an engine that gives the first E mod ep ranks one expert
more, ``Sharding.expert_placement``): then it splits, and ``share`` gives the fullest device's part.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from k3plan.columns import all_true, logical_not, where
from k3plan.errors import K3PlanError
from k3plan.models.inventory import Tensor

# mesh axis -> its size (an int, or an int array: one entry a candidate mesh)
Sizes = dict[str, Any]
# rule target (a mesh axis or an alias) -> {mesh axis it spans: True, or a bool array per mesh}
Spans = dict[str, dict[str, Any]]


class RuleStep(NamedTuple):
    """One logical axis with a rule, as the replay met it: scalars at one mesh, arrays over many."""

    dim: int  # checkpoint dim
    axis: int  # index into the tensor's logical_shape and axes
    target: str  # what the rule asks for
    size: Any  # devices the target spans
    split: Any  # this logical axis shards its dim over ``size``
    fallback: Any  # it asked (size > 1) and does not divide ``size``: its dim stays whole
    uneven: Any = False  # it splits although ``size`` does not divide it: the fullest holds the ceiling


def dim_groups(t: Tensor) -> tuple[tuple[int, ...], ...]:
    """Indices of logical axes making up each checkpoint dim (greedy product match)."""
    key = (t.shape, t.logical_shape)
    held = _GROUPS.get(key)
    if held is None:
        if len(_GROUPS) >= 4096:  # a model has a few dozen shapes; a long-lived process many models
            _GROUPS.clear()
        held = _GROUPS[key] = tuple(tuple(g) for g in _dim_groups(t.shape, t.logical_shape))
    return held


_GROUPS: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], ...]] = {}


def _dim_groups(shape: tuple[int, ...], logical_shape: tuple[int, ...]) -> list[list[int]]:
    groups: list[list[int]] = []
    i = 0
    for d in shape:
        group: list[int] = []
        prod = 1
        while i < len(logical_shape) and (prod < d or not group):
            prod *= logical_shape[i]
            group.append(i)
            i += 1
            if prod == d:
                # absorb trailing unit axes only if the next checkpoint dim cannot use them
                break
        groups.append(group)
    if i != len(logical_shape):
        groups[-1].extend(range(i, len(logical_shape)))
    return groups


def replay(
    t: Tensor, rules: dict[str, str | None], *, sizes: Sizes, spans: Spans, uneven: frozenset[str] = frozenset()
) -> list[RuleStep]:
    """The rules (role overrides merged) on tensor ``t``, dim by dim, over the mesh ``sizes``;
    ``uneven``: logical axes that split even where the size does not divide them."""
    used: dict[str, Any] = dict.fromkeys(sizes, False)  # mesh axis already shards a dim of t
    steps: list[RuleStep] = []
    for dim, group in enumerate(dim_groups(t)):
        done: Any = False  # this dim is settled: sharded, whole by a size-1 target, or fallen back
        for li in group:
            target = rules.get(t.axes[li])
            if target is None:
                continue  # no rule for this logical axis: the next one of the dim may have one
            span = spans.get(target)
            if span is None:
                raise K3PlanError(f"sharding rule names mesh axis {target!r}; known: {', '.join(spans)}")
            size: Any = 1
            clash: Any = False
            for axis, on in span.items():
                size = size * (sizes[axis] if on is True else where(on, sizes[axis], 1))
                clash = clash | (used[axis] if on is True else used[axis] & on)
            meets = logical_not(done | clash)
            split = meets & (size > 1)
            odd = split & (t.logical_shape[li] % size != 0)
            placed = t.axes[li] in uneven
            fallback = odd & (not placed)  # a bool, or a bool array per mesh
            split = split & logical_not(fallback)
            for axis, on in span.items():
                used[axis] = used[axis] | (split if on is True else split & on)
            done = done | meets
            steps.append(
                RuleStep(
                    dim=dim,
                    axis=li,
                    target=target,
                    size=size,
                    split=split,
                    fallback=fallback,
                    uneven=odd & placed,
                )
            )
            if all_true(done):
                break
    return steps


def shards(steps: list[RuleStep]) -> Any:
    """Devices one copy of the tensor is cut over (1: every device holds it whole)."""
    out: Any = 1
    for s in steps:
        out = out * (s.size if s.split is True else where(s.split, s.size, 1))
    return out


def share(t: Tensor, steps: list[RuleStep]) -> tuple[Any, Any]:
    """(num, den): the fullest device holds num / den of the tensor. An even split of size s gives
    1 / s; an uneven one of a logical axis of L gives ceil(L / s) / L (vLLM determine_expert_map:
    L // s a rank, one more on the first L mod s ranks). Without an uneven step it is
    (1, ``shards(steps)``), so every even tensor's bytes stay ceil(bytes / shards)."""
    if not any(s.uneven.any() if hasattr(s.uneven, "shape") else s.uneven for s in steps):
        return 1, shards(steps)
    num: Any = 1
    den: Any = 1
    for s in steps:
        n = t.logical_shape[s.axis]
        even = s.size if s.split is True else where(s.split, s.size, 1)
        num = num * where(s.uneven, -(-n // s.size), 1)
        den = den * where(s.uneven, n, even)
    return num, den
