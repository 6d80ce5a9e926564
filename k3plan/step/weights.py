"""Per-device weight bytes for arrays of (tp, dp, ep) meshes, without resolving a plan per mesh.

How a tensor is sharded depends only on its role, checkpoint shape, logical shape and axes, so the
inventory collapses into a few tensor classes (29 for K3's 2,736 text tensors). For each class the
logical-axis rules of ``k3plan.sharding.resolve.spec_from_rules`` are replayed over numpy arrays
of candidate meshes, with the same semantics: a dim is sharded by the first of its logical axes
with a rule, a mesh axis is used once per tensor (first dim wins), a logical axis its mesh axes do
not divide falls back to replication (recorded), a size-1 mesh axis shards nothing. Bytes a
device = sum over classes of count x ceil(runtime bytes / shards), as ``weight_budget`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from k3plan.budget.weights import runtime_bytes
from k3plan.errors import K3PlanError
from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.sharding.resolve import dim_groups
from k3plan.sharding.stack import Stack
from k3plan.step.stages import Stage


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


def class_shards(
    *,
    tensor: Tensor,
    rules: dict,
    tp: np.ndarray,
    dp: np.ndarray,
    ep_all: np.ndarray,
    kinds: dict[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(shards, fallbacks) per mesh for one tensor under ``rules`` (role overrides merged)."""
    n = tp.shape[0]
    shards = np.ones(n, dtype=np.int64)
    fallbacks = np.zeros(n, dtype=np.int64)
    used_tp = np.zeros(n, dtype=bool)
    used_dp = np.zeros(n, dtype=bool)
    for group in dim_groups(tensor):
        done = np.zeros(n, dtype=bool)
        for li in group:
            target = rules.get(tensor.axes[li])
            if target is None:
                continue  # no rule for this logical axis: try the next one of the dim
            if target not in ("tp", "dp", "ep"):
                raise K3PlanError(f"sharding rule names mesh axis {target!r}; known: tp, dp, ep")
            uses_tp = np.full(n, target in ("tp", "ep"))
            uses_dp = ep_all.copy() if target == "ep" else np.full(n, target == "dp")
            size = np.where(uses_tp, tp, 1) * np.where(uses_dp, dp, 1)
            cand = ~done & ~((uses_tp & used_tp) | (uses_dp & used_dp))
            split = cand & (size > 1)
            nodiv = split & (tensor.logical_shape[li] % size != 0)
            ok = split & ~nodiv
            shards = np.where(ok, shards * size, shards)
            used_tp |= ok & uses_tp
            used_dp |= ok & uses_dp
            fallbacks += nodiv
            if kinds is not None and nodiv.any():
                key = f"{tensor.axes[li]}={tensor.logical_shape[li]} over {target}"
                kinds[key] = kinds.get(key, np.zeros(n, dtype=bool)) | nodiv
            done |= cand
    return shards, fallbacks


def mesh_weights(
    *, classes: list[TensorClass], stack: Stack, tp: np.ndarray, dp: np.ndarray, ep_all: np.ndarray
) -> MeshWeights:
    """Per-device weights for every mesh (tp[i] x dp[i], experts over all devices if ep_all[i])."""
    n = tp.shape[0]
    total = np.zeros(n, dtype=np.int64)
    replicated = np.zeros(n, dtype=np.int64)
    fallbacks = np.zeros(n, dtype=np.int64)
    kinds: dict[str, np.ndarray] = {}
    floats = {k: np.zeros(n) for k in ("dense_bytes", "expert_bytes", "dense_params", "expert_params")}
    multi = tp * dp > 1
    for c in classes:
        t = c.rep
        rules = stack.sharding.rules_for(t.role, t.kind)  # the same rules resolve() applies
        shards, fb = class_shards(tensor=t, rules=rules, tp=tp, dp=dp, ep_all=ep_all, kinds=kinds)
        nbytes = runtime_bytes(t, stack)
        dev = -(-nbytes // shards)
        total += c.count * dev
        replicated += np.where((shards == 1) & multi, c.count * dev, 0)
        fallbacks += c.count * fb
        if t.role == "embed":
            continue  # the decode step gathers embedding rows; it does not stream the table
        kind = "expert" if t.role == "expert" else "dense"
        floats[f"{kind}_bytes"] += c.count * (nbytes / shards)
        floats[f"{kind}_params"] += c.count * (t.params / shards)
    return MeshWeights(
        weights_bytes=total, replicated_bytes=replicated, fallbacks=fallbacks, fallback_kinds=kinds, **floats
    )


def mesh_weight_groups(
    *, inventory: TensorInventory, stack: Stack, tp: np.ndarray, dp: np.ndarray, ep_all: np.ndarray
) -> list:
    """The inventory's weight groups (step/ops.py) with one tensor's bytes and params a device per
    mesh: the op list's weights over columns (sums: ``mesh_weights``' dense/expert columns)."""
    from k3plan.step.ops import WeightGroup, tensor_groups

    out = []
    for name, t, n in tensor_groups(inventory):
        shards, _ = class_shards(tensor=t, rules=stack.sharding.rules_for(t.role, t.kind), tp=tp, dp=dp, ep_all=ep_all)
        out.append(
            WeightGroup(name=name, rep=t, count=n, bytes=runtime_bytes(t, stack) / shards, params=t.params / shards)
        )
    return out
