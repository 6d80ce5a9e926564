"""Logical-axis rules -> a ShardSpec per tensor (the flax/MaxText ``logical_axis_rules`` idea).

Rules map a logical axis name (heads, vocab, expert, ...) to a mesh axis or alias (tp, dp, ep) or
None. A tensor's checkpoint dimension may hold several logical axes (12288 = heads x head_dim);
it is sharded by the first of them that has a rule, and divisibility is checked on THAT logical
axis (96 heads over tp=64 does not divide although 12288 would). A mesh axis is used at most once
per tensor (first dim wins). A dimension its mesh axes do not divide falls back to replication,
and the fallback is recorded: never silent -- except the expert axis of a stack whose engine places
experts unevenly (``Sharding.expert_placement``): it splits, the fullest device holds ceil(E / ep)
experts, and the plan records that too (``UnevenSplit``, ``ShardingPlan.share``). The rules are replayed in one place, replay.py, which
plan's columns (step/weights.py) read too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from k3plan.engines.stack import merged_rules
from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.sharding.mesh import WHOLE_TP, Mesh
from k3plan.sharding.replay import Spans, replay, share
from k3plan.structs import Frozen, replace

DimSpec = tuple[str, ...] | None  # mesh axes sharding one checkpoint dim, None = replicated


class ShardSpec(Frozen):
    """PartitionSpec-like: one entry per checkpoint dimension of the tensor."""

    partition: tuple[DimSpec, ...]

    def shards(self, mesh: Mesh) -> int:
        return math.prod(mesh.size(p) for p in self.partition if p)

    def mesh_axes(self) -> set[str]:
        return {a for p in self.partition if p for a in p}


class Fallback(Frozen):
    tensor: str
    dim: int  # checkpoint dim
    axis: str  # logical axis that asked to be sharded
    size: int  # its size
    mesh_axis: str  # what it asked for
    mesh_size: int
    bytes_replicated: int = 0  # filled by the budget: extra bytes a device holds because of it

    def describe(self) -> str:
        return (
            f"{self.tensor}: {self.axis}={self.size} is not divisible by {self.mesh_axis}={self.mesh_size}; "
            f"dim {self.dim} replicated"
        )


def fallback_summary(fallbacks: Iterable[Fallback]) -> str | None:
    """The dimensions that do not divide the mesh, each (axis, size, mesh axis, mesh size) once, or None."""
    found = list(fallbacks)
    if not found:
        return None
    seen = dict.fromkeys(f"{f.axis}={f.size} by {f.mesh_axis}={f.mesh_size}" for f in found)
    return f"{len(found)} tensor dimension(s) do not divide the mesh ({'; '.join(seen)})"


class UnevenSplit(Frozen):
    """A logical axis split over a mesh size that does not divide it, because the engine places it
    unevenly: ``size // mesh_size`` a device and one more on the first ``size % mesh_size``."""

    axis: str  # logical axis ("expert")
    size: int  # its size (896)
    mesh_axis: str  # the rule's target ("ep")
    mesh_size: int  # devices it spans (72)
    tensors: int  # how many tensors split it

    @property
    def fullest(self) -> int:
        return -(-self.size // self.mesh_size)

    @property
    def fuller_devices(self) -> int:
        """Devices holding ``fullest`` (the others hold one fewer)."""
        return self.size % self.mesh_size

    def describe(self) -> str:
        """'experts 896 over ep 72: 32 devices hold 13, 40 hold 12'."""
        return uneven_words(axis=self.axis, size=self.size, mesh_axis=self.mesh_axis, mesh_size=self.mesh_size)


def uneven_words(*, axis: str, size: int, mesh_axis: str, mesh_size: int) -> str:
    """An uneven split in words (``UnevenSplit.describe``; plan's rows say it from their columns)."""
    fullest, fuller = -(-size // mesh_size), size % mesh_size
    what = "experts" if axis == "expert" else axis
    return (
        f"{what} {size} over {mesh_axis} {mesh_size}: {fuller} devices hold {fullest}, "
        f"{mesh_size - fuller} hold {fullest - 1}"
    )


class ShardingPlan(Frozen):
    mesh: Mesh
    specs: dict[str, ShardSpec]  # by inventory tensor name
    fallbacks: tuple[Fallback, ...]
    source: str  # "rules of stack X" / "shardspecs FILE"
    uneven: tuple[UnevenSplit, ...] = ()  # axes split unevenly, each once (the engine places them so)
    shares: dict[str, tuple[int, int]] = {}  # tensor name -> (num, den) where a split is uneven

    def spec(self, t: Tensor) -> ShardSpec:
        return self.specs[t.name]

    def share(self, t: Tensor) -> tuple[int, int]:
        """(num, den): the fullest device holds num / den of ``t`` ((1, shards) when every split is even)."""
        return self.shares.get(t.name) or (1, self.specs[t.name].shards(self.mesh))

    def per_device_shape(self, t: Tensor) -> tuple[int, ...]:
        """The fullest device's shape (a dim split unevenly: its ceiling)."""
        spec = self.specs[t.name]
        return tuple(-(-d // self.mesh.size(p)) if p else d for d, p in zip(t.shape, spec.partition))

    def shard_fraction(self, t: Tensor) -> float:
        num, den = self.share(t)
        return num / den

    def is_replicated(self, t: Tensor) -> bool:
        return self.specs[t.name].shards(self.mesh) == 1


def mesh_spans(mesh: Mesh) -> Spans:
    """The replay's view of a Mesh: each rule target (a mesh axis or an alias) -> the axes it spans."""
    return {name: dict.fromkeys(mesh.expand(name), True) for name in (*mesh.axes, *mesh.aliases, WHOLE_TP)}


def spec_from_rules(
    t: Tensor, rules: dict[str, str | None], mesh: Mesh, uneven: frozenset[str] = frozenset()
) -> tuple[ShardSpec, list[Fallback]]:
    """The rules' ShardSpec for one tensor on one mesh, and the fallbacks it records
    (``replay.replay`` at the mesh's sizes: the one replay plan's columns read too)."""
    return _from_rules(t, rules, mesh, uneven)[:2]


def _from_rules(
    t: Tensor, rules: dict[str, str | None], mesh: Mesh, uneven: frozenset[str]
) -> tuple[ShardSpec, list[Fallback], list[UnevenSplit], tuple[int, int] | None]:
    """``spec_from_rules`` and the uneven splits, with the fullest device's share where there is one."""
    steps = replay(t, rules, sizes=mesh.axes, spans=mesh_spans(mesh), uneven=uneven)
    partition: list[DimSpec] = [None] * len(t.shape)
    fallbacks: list[Fallback] = []
    odd = [
        UnevenSplit(axis=t.axes[s.axis], size=t.logical_shape[s.axis], mesh_axis=s.target, mesh_size=s.size, tensors=1)
        for s in steps
        if s.uneven
    ]
    for s in steps:
        if s.split:
            partition[s.dim] = mesh.expand(s.target)
        elif s.fallback:
            fallbacks.append(
                Fallback(
                    tensor=t.name,
                    dim=s.dim,
                    axis=t.axes[s.axis],
                    size=t.logical_shape[s.axis],
                    mesh_axis=s.target,
                    mesh_size=s.size,
                )
            )
    return ShardSpec(partition=tuple(partition)), fallbacks, odd, share(t, steps) if odd else None


def rules_for(
    t: Tensor, rules: dict[str, str | None], role_overrides: dict[str, dict[str, str | None]]
) -> dict[str, str | None]:
    """The rules one tensor sees: global, then its role's override, then its role@kind override."""
    return merged_rules(rules, role_overrides, t.role, t.kind)


def resolve(
    inventory: TensorInventory,
    *,
    mesh: Mesh,
    rules: dict[str, str | None],
    role_overrides: dict[str, dict[str, str | None]] | None = None,
    user_specs: dict[str, tuple] | None = None,
    source: str,
    tensors: Iterable[Tensor] | None = None,
    uneven: frozenset[str] = frozenset(),
) -> ShardingPlan:
    """A ShardSpec for every text tensor. ``role_overrides[role]`` replaces rules for that role and
    ``role_overrides["role@kind"]`` (e.g. "attn@kda") for that role in layers of that kind;
    ``user_specs`` (tensor name -> partition) win over all and are checked for divisibility;
    ``uneven``: logical axes the stack splits unevenly (``Sharding.uneven_axes``)."""
    specs: dict[str, ShardSpec] = {}
    fallbacks: list[Fallback] = []
    shares: dict[str, tuple[int, int]] = {}
    odd: dict[tuple, UnevenSplit] = {}
    role_overrides = role_overrides or {}
    # the rules' answer depends on the tensor's role, kind, shapes and axes, not its name or layer:
    # each layer repeats the same few dozen, so one answer per distinct tensor (a fallback names its
    # tensor, so tensors that fall back are worked out one by one)
    seen: dict[tuple, tuple[ShardSpec, list[UnevenSplit], tuple[int, int] | None]] = {}
    for t in tensors if tensors is not None else inventory.text:
        split: list[UnevenSplit] = []
        part: tuple[int, int] | None = None
        if user_specs and t.name in user_specs:
            spec, fb = spec_from_user(t, user_specs[t.name], mesh)
        else:
            key = (t.role, t.kind, t.shape, t.logical_shape, t.axes)
            known = seen.get(key)
            if known is None:
                spec, fb, split, part = _from_rules(t, rules_for(t, rules, role_overrides), mesh, uneven)
                if not fb:
                    seen[key] = (spec, split, part)
            else:
                (spec, split, part), fb = known, []
        specs[t.name] = spec
        fallbacks.extend(fb)
        if part is not None:
            shares[t.name] = part
        for u in split:
            k = (u.axis, u.size, u.mesh_axis, u.mesh_size)
            odd[k] = replace(u, tensors=odd[k].tensors + 1) if k in odd else u
    return ShardingPlan(
        mesh=mesh, specs=specs, fallbacks=tuple(fallbacks), source=source, uneven=tuple(odd.values()), shares=shares
    )


def spec_from_user(t: Tensor, partition: tuple, mesh: Mesh) -> tuple[ShardSpec, list[Fallback]]:
    """A user's PartitionSpec over the checkpoint dims; entries are None, an axis or a list."""
    from k3plan.errors import K3PlanError

    if len(partition) > len(t.shape):
        raise K3PlanError(
            f"shardspec for {t.name}: {len(partition)} entries for a {len(t.shape)}-dim tensor {list(t.shape)}"
        )
    out: list[DimSpec] = []
    fallbacks = []
    for dim, entry in enumerate(list(partition) + [None] * (len(t.shape) - len(partition))):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        axes = tuple(a for n in names for a in mesh.expand(n))
        size = mesh.size(axes) if axes else 1
        if axes and t.shape[dim] % size:
            fallbacks.append(
                Fallback(
                    tensor=t.name,
                    dim=dim,
                    axis=f"dim{dim}",
                    size=t.shape[dim],
                    mesh_axis="+".join(names),
                    mesh_size=size,
                )
            )
            axes = ()
        out.append(axes or None)
    return ShardSpec(partition=tuple(out)), fallbacks
