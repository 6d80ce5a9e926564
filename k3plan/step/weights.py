"""Per-device weight bytes for arrays of (tp, dp, ep) meshes, without resolving a plan per mesh.

How a tensor is sharded depends only on its role, checkpoint shape, logical shape and axes, so the
inventory collapses into a few tensor classes (29 for K3's 2,736 text tensors). For each class the
one replay of the logical-axis rules (``k3plan.sharding.replay``, which ``resolve.spec_from_rules``
reads at one Mesh) runs over numpy arrays of candidate meshes, and the one sum of bytes a device
(``k3plan.step.weight_budget.weight_terms``, which ``weight_budget`` reads at one ShardingPlan) adds the
classes up: nothing here restates a rule or a byte count, it only lays the meshes out as columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from k3plan.engines.stack import Stack
from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.sharding.mesh import WHOLE_TP
from k3plan.sharding.replay import Sizes, Spans, replay, shards, share
from k3plan.step.stages import Stage
from k3plan.step.weight_budget import weight_terms


@dataclass(frozen=True)
class TensorClass:
    rep: Tensor  # one member: every member shards identically
    count: int


@dataclass(frozen=True)
class MeshWeights:
    """One entry per candidate mesh."""

    weights_bytes: np.ndarray  # int64, per device, exact (= weight_budget().weights_bytes)
    replicated_bytes: np.ndarray  # int64, tensors every device holds whole
    fallbacks: np.ndarray  # int64, fallback count (tensor dims that asked to be split and were not)
    fallback_kinds: dict[str, np.ndarray]  # "heads=96 over tp" -> bool per mesh
    dense_bytes: np.ndarray  # float64, sum bytes/shards of non-expert, non-embedding tensors (decode)
    expert_bytes: np.ndarray  # float64, same for routed experts
    dense_params: np.ndarray  # float64, sum params/shards, non-expert non-embedding
    expert_params: np.ndarray  # float64, sum params/shards, routed experts


_MESH_COLUMNS = (
    "weights_bytes",
    "replicated_bytes",
    "fallbacks",
    "dense_bytes",
    "expert_bytes",
    "dense_params",
    "expert_params",
)


def stage_classes(inventory: TensorInventory, stage: Stage | None = None) -> list[TensorClass]:
    """``tensor_classes`` of the tensors a pipeline stage builds (None: every text tensor), worked out
    once an (inventory, stage): plan's weight and stage columns ask for the same classes per stack."""
    key = (id(inventory), stage)
    held = _CLASSES.get(key)
    if held is not None and held[0] is inventory:
        return held[1]
    tensors = None if stage is None else [t for t in inventory.text if stage.holds(t)]
    out = tensor_classes(inventory, tensors)
    _CLASSES[key] = (inventory, out)  # the inventory held too, so its id cannot be reused
    return out


_CLASSES: dict[tuple[int, Stage | None], tuple[TensorInventory, list[TensorClass]]] = {}


def tensor_classes(inventory: TensorInventory, tensors: list[Tensor] | None = None) -> list[TensorClass]:
    """``tensors``: a subset (a pipeline stage's, step/stages.py); default every text tensor."""
    groups: dict[tuple, list[Tensor]] = {}
    for t in inventory.text if tensors is None else tensors:
        groups.setdefault((t.role, t.kind, t.fmt, t.shape, t.logical_shape, t.axes), []).append(t)
    return [TensorClass(rep=ts[0], count=len(ts)) for ts in groups.values()]


def mesh_sizes(*, tp: np.ndarray, dp: np.ndarray, ep_all: np.ndarray) -> tuple[Sizes, Spans]:
    """The replay's view of candidate meshes: tp[i] x dp[i], experts (``ep``) over every device
    where ep_all[i], else over the TP group (``Mesh.aliases``, one mesh at a time); ``WHOLE_TP`` over every device
    (``Mesh.expand``)."""
    return {"tp": tp, "dp": dp}, {
        "tp": {"tp": True},
        "dp": {"dp": True},
        "ep": {"tp": True, "dp": ep_all},
        WHOLE_TP: {"dp": True, "tp": True},  # the whole TP group under DP attention (Stack.lm_head_whole_tp)
    }


def class_shards(
    *,
    tensor: Tensor,
    rules: dict,
    tp: np.ndarray,
    dp: np.ndarray,
    ep_all: np.ndarray,
    kinds: dict[str, np.ndarray] | None = None,
    uneven: frozenset[str] = frozenset(),
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """(shards, fallbacks, the fullest device's share (num, den)) per mesh for one tensor under
    ``rules`` (role overrides merged): the rules' one replay (``sharding.replay``) over the meshes'
    columns, ``uneven`` the stack's unevenly placed axes. ``kinds`` collects, per fallback
    ("heads=96 over tp"), the meshes where it happens."""
    sizes, spans = mesh_sizes(tp=tp, dp=dp, ep_all=ep_all)
    steps = replay(tensor, rules, sizes=sizes, spans=spans, uneven=uneven)
    fallbacks = np.zeros(tp.shape[0], dtype=np.int64)
    for s in steps:
        fallbacks += s.fallback
        if kinds is not None and s.fallback.any():
            key = f"{tensor.axes[s.axis]}={tensor.logical_shape[s.axis]} over {s.target}"
            kinds[key] = kinds[key] | s.fallback if key in kinds else s.fallback

    def column(x) -> np.ndarray:
        return x if isinstance(x, np.ndarray) else np.full(tp.shape, x, dtype=np.int64)

    num, den = share(tensor, steps)
    return column(shards(steps)), fallbacks, (column(num), column(den))


def sp_moe_rows(*, stack: Stack, family: str | None, tp: np.ndarray, dp: np.ndarray, ep_all: np.ndarray) -> np.ndarray:
    """Per mesh: whether the engine runs sequence-parallel MoE there (``Stack.sp_moe_on``; family None: no
    model-keyed rule), so that ``Stack.with_sp_moe``'s rules hold its tensors (setup.make_setup at one mesh)."""
    if family is None:
        return np.zeros(tp.shape, dtype=bool)
    ep = np.where(ep_all, tp * dp, tp)
    return np.broadcast_to(np.asarray(stack.sp_moe_on(family=family, tp=tp, dp=dp, ep=ep), dtype=bool), tp.shape)


def mesh_weights(
    *,
    classes: list[TensorClass],
    stack: Stack,
    tp: np.ndarray,
    dp: np.ndarray,
    ep_all: np.ndarray,
    family: str | None = None,
) -> MeshWeights:
    """Per-device weights for every mesh (tp[i] x dp[i], experts over all devices if ep_all[i]):
    ``budget.weights.weight_terms``, the sum fit's ``weight_budget`` reads, over columns. ``family``: the
    model's (k3plan.models family), for the stack's model-keyed rules (sequence-parallel MoE, ``sp_moe_rows``)."""
    on = sp_moe_rows(stack=stack, family=family, tp=tp, dp=dp, ep_all=ep_all)
    if on.any():
        sp = mesh_weights(classes=classes, stack=stack.with_sp_moe(), tp=tp, dp=dp, ep_all=ep_all)
        if on.all():
            return sp
        base = mesh_weights(classes=classes, stack=stack, tp=tp, dp=dp, ep_all=ep_all)
        either = {
            k: (base.fallback_kinds.get(k, False) & ~on) | (sp.fallback_kinds.get(k, False) & on)
            for k in {*base.fallback_kinds, *sp.fallback_kinds}
        }
        return MeshWeights(
            **{f: np.where(on, getattr(sp, f), getattr(base, f)) for f in _MESH_COLUMNS}, fallback_kinds=either
        )
    n = tp.shape[0]
    fallbacks = np.zeros(n, dtype=np.int64)
    kinds: dict[str, np.ndarray] = {}
    sharded = []
    replayed: dict[tuple, tuple] = {}  # classes apart by format or kind may shard alike
    uneven = stack.sharding.uneven_axes
    for c in classes:
        t = c.rep
        rules = stack.sharding.rules_for(t.role, t.kind)  # the same rules resolve() applies
        key = (t.shape, t.logical_shape, t.axes, tuple(rules.items()))
        if key not in replayed:
            replayed[key] = class_shards(tensor=t, rules=rules, tp=tp, dp=dp, ep_all=ep_all, kinds=kinds, uneven=uneven)
        cut, fb, part = replayed[key]
        fallbacks += c.count * fb
        sharded.append((t, c.count, cut, part))
    w = weight_terms(sharded, stack=stack, multi=tp * dp > 1)

    def column(x, dtype) -> np.ndarray:  # a sum over no class is a plain 0
        return x if isinstance(x, np.ndarray) else np.full(n, x, dtype=dtype)

    return MeshWeights(
        weights_bytes=column(w.weights_bytes, np.int64),
        replicated_bytes=column(w.replicated_bytes, np.int64),
        fallbacks=fallbacks,
        fallback_kinds=kinds,
        dense_bytes=column(w.dense_bytes, np.float64),
        expert_bytes=column(w.expert_bytes, np.float64),
        dense_params=column(w.dense_params, np.float64),
        expert_params=column(w.expert_params, np.float64),
    )


def mesh_weight_groups(
    *,
    inventory: TensorInventory,
    stack: Stack,
    tp: np.ndarray,
    dp: np.ndarray,
    ep_all: np.ndarray,
    family: str | None = None,
) -> list:
    """The inventory's weight groups (step/ops.py) with one tensor's bytes and params a device per
    mesh: the op list's weights over columns (sums: ``mesh_weights``' dense/expert columns). ``family``:
    as ``mesh_weights``."""
    from dataclasses import replace

    from k3plan.step.ops import weight_groups

    on = sp_moe_rows(stack=stack, family=family, tp=tp, dp=dp, ep_all=ep_all)
    if on.any():
        base = mesh_weight_groups(inventory=inventory, stack=stack, tp=tp, dp=dp, ep_all=ep_all)
        sp = mesh_weight_groups(inventory=inventory, stack=stack.with_sp_moe(), tp=tp, dp=dp, ep_all=ep_all)
        return [
            replace(
                a,
                bytes=np.where(on, b.bytes, a.bytes),
                params=np.where(on, b.params, a.params),
                decode_bytes=None if a.decode_bytes is None else np.where(on, b.decode_bytes, a.decode_bytes),
            )
            for a, b in zip(base, sp, strict=True)
        ]

    replayed: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # groups apart by name, format or kind may shard alike

    def shares_of(t: Tensor) -> tuple[np.ndarray, np.ndarray]:
        rules = stack.sharding.rules_for(t.role, t.kind)
        key = (t.shape, t.logical_shape, t.axes, tuple(rules.items()))
        if key not in replayed:
            replayed[key] = class_shards(
                tensor=t, rules=rules, tp=tp, dp=dp, ep_all=ep_all, uneven=stack.sharding.uneven_axes
            )[2]
        return replayed[key]

    return weight_groups(inventory, stack, shares_of)
