"""Per-device weight bytes: the inventory in the stack's runtime formats, cut by the ShardSpecs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from k3plan.budget.result import RoleBytes
from k3plan.models.formats import get_format
from k3plan.models.inventory import Role, TensorInventory
from k3plan.sharding.resolve import Fallback, ShardingPlan
from k3plan.sharding.stack import Stack


class WeightBudget(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    runtime_weight_bytes: int  # whole model, one copy, runtime formats
    weights_bytes: int  # per device
    replicated_weights_bytes: int  # per device: tensors every device holds whole
    by_role: tuple[RoleBytes, ...]  # per device, roles in the inventory's order
    fallbacks: tuple[Fallback, ...]  # with bytes_replicated filled in

    def role_bytes(self, role: Role) -> int:
        """A role's bytes a device (0 where the model has no tensor of that role)."""
        return next((r.bytes for r in self.by_role if r.role == role), 0)


def runtime_bytes(t, stack: Stack) -> int:
    return get_format(stack.runtime_format(t.role, t.fmt)).nbytes(t.shape)


def weight_budget(*, inventory: TensorInventory, plan: ShardingPlan, stack: Stack, tensors=None) -> WeightBudget:
    """``tensors``: the ones a device builds (a pipeline stage's, step/stages.py); default all text tensors."""
    total = per_device = replicated = 0
    by_role: dict[Role, int] = {}
    per_tensor: dict[str, int] = {}
    many_devices = plan.mesh.size(tuple(plan.mesh.axes)) > 1
    seen: dict[tuple, tuple[int, int]] = {}  # (role, format, shape, partition) -> (bytes, shards): layers repeat
    for t in inventory.text if tensors is None else tensors:
        partition = plan.specs[t.name].partition
        key = (t.role, t.fmt, t.shape, partition)
        if key not in seen:
            seen[key] = (runtime_bytes(t, stack), plan.specs[t.name].shards(plan.mesh))
        nbytes, shards = seen[key]
        dev = -(-nbytes // shards)  # exact when the shards divide; ceil otherwise
        total += nbytes
        per_device += dev
        per_tensor[t.name] = dev
        by_role[t.role] = by_role.get(t.role, 0) + dev
        if shards == 1 and many_devices:
            replicated += dev
    fallbacks = tuple(
        f.model_copy(update={"bytes_replicated": _extra_bytes(f, plan, per_tensor[f.tensor])})
        for f in plan.fallbacks
        if f.tensor in per_tensor
    )
    return WeightBudget(
        runtime_weight_bytes=total,
        weights_bytes=per_device,
        replicated_weights_bytes=replicated,
        by_role=tuple(RoleBytes(role=r, bytes=n) for r, n in by_role.items()),
        fallbacks=fallbacks,
    )


def _extra_bytes(f: Fallback, plan: ShardingPlan, per_device: int) -> int:
    """What a device holds beyond its share because dim ``f.dim`` was not split: zero when the
    mesh axes it asked for ended up splitting another dim of the same tensor."""
    asked = set(plan.mesh.expand(f.mesh_axis)) if f.mesh_axis in (*plan.mesh.axes, *plan.mesh.aliases) else set()
    if asked & plan.specs[f.tensor].mesh_axes():
        return 0
    return per_device - per_device // f.mesh_size
