"""Per-device weight bytes: the inventory in the stack's runtime formats, cut by the ShardSpecs.

``weight_terms`` is the one sum, over ``int | numpy array`` shards: ``weight_budget`` reads it at one
ShardingPlan (Python ints, numpy never imported), ``step.weights.mesh_weights`` over arrays of
candidate meshes (plan), ``roofline.bounds.weight_sums`` for the decode step's dense/expert split.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from k3plan.columns import where
from k3plan.engines.stack import Stack
from k3plan.models.formats import get_format
from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.sharding.resolve import Fallback, ShardingPlan
from k3plan.step.names import ABSORBED_LEAF, leaf_name, row_gather
from k3plan.step.terms import HeldRole, RoleBytes
from k3plan.structs import Frozen, replace


class WeightBudget(Frozen):
    runtime_weight_bytes: int  # whole model, one copy, runtime formats
    weights_bytes: int  # per device
    replicated_weights_bytes: int  # per device: tensors every device holds whole
    by_role: tuple[RoleBytes, ...]  # per device, roles in the inventory's order (then mla_absorbed, if held)
    fallbacks: tuple[Fallback, ...]  # with bytes_replicated filled in

    def role_bytes(self, role: HeldRole) -> int:
        """A role's bytes a device (0 where the model has no tensor of that role)."""
        return next((r.bytes for r in self.by_role if r.role == role), 0)


class WeightTerms(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    """The weights of a set of tensor classes a device: ints at one mesh, arrays over many."""

    __coerce__ = False

    runtime_weight_bytes: int  # whole model, one copy, runtime formats
    weights_bytes: Any  # per device: sum of count x ceil(runtime bytes / shards)
    replicated_bytes: Any  # the part held whole (shards = 1) on a mesh of more than one device
    # weights_bytes by tensor role, roles in the order the classes give them; then "mla_absorbed": the absorbed-MLA
    # copies the engine holds beside kv_b_proj (``absorbed_copy_bytes``), where it holds any
    by_role: dict[HeldRole, Any]
    # what a decode step streams (embeddings excluded: it gathers rows): floats, bytes / shards
    dense_bytes: Any  # non-expert tensors, per device
    expert_bytes: Any  # routed experts, per device
    dense_params: Any
    expert_params: Any
    dense_total_bytes: int  # the same tensors, whole model
    expert_total_bytes: int


# (a member, how many tensors share its role, format, shape and sharding, its shards: int or array,
# the fullest device's share (num, den): (1, shards) unless a split is uneven -- ``replay.share``)
WeightClass = tuple[Tensor, int, Any, tuple[Any, Any]]


def runtime_bytes(t, stack: Stack) -> int:
    """The bytes the engine holds of ``t`` in its runtime format."""
    return get_format(stack.runtime_format(t.role, t.fmt)).nbytes(t.shape)


def read_bytes(t, stack: Stack) -> int:
    """The bytes a kernel streams of ``t``: its runtime bytes less what the engine holds unread (``Format.unread``)."""
    return get_format(stack.runtime_format(t.role, t.fmt)).read_nbytes(t.shape)


def absorbed_copy_bytes(t, stack: Stack) -> int:
    """The bytes of the absorbed-MLA copies (W_UK / W_UV) the engine makes of ``t`` at load and holds beside it,
    whole tensor (``Stack.absorbed_copy_format``): 0 unless ``t`` is an MLA layer's kv_b_proj and the engine
    holds copies apart from it. Same params as ``t``, split as ``t`` is (by heads over TP); decode reads them
    instead of ``t`` (``step.ops.weight_ops``), prefill's MHA path reads ``t``."""
    if leaf_name(t) != ABSORBED_LEAF:
        return 0
    fmt = stack.absorbed_copy_format(t.role, t.fmt)
    if fmt is None:
        return 0
    nbytes = get_format(fmt).nbytes(t.shape)
    ac = stack.absorbed_copies
    if ac is not None and ac.scales == "f32_per_head_axis1":
        nbytes += 4 * _per_head_axis1_scales(t)
    return nbytes


def _per_head_axis1_scales(t) -> int:
    """The float32 scales quantize_tensor(..., axis=1) leaves on W_UK_T [N, P, L] (N x L) and W_UV [N, L, V]
    (N x V), from kv_b_proj's logical (heads N, P + V, kv_lora L). kv_b_proj does not say where P ends: the
    bundled MLA checkpoints all have qk_nope_head_dim = v_head_dim (128), so V = (P + V) / 2."""
    heads, head_dim, latent = t.logical_shape
    if head_dim % 2:
        raise ValueError(f"{t.name}: per-head absorbed scales read where qk_nope_head_dim = v_head_dim only")
    return heads * (latent + head_dim // 2)


def absorbed_replaces(t, stack: Stack) -> bool:
    """The engine holds ``t``'s absorbed copies in its place (AbsorbedCopies.replaces_source): kv_b_proj deleted."""
    ac = stack.absorbed_copies
    return ac is not None and ac.replaces_source and absorbed_copy_bytes(t, stack) > 0


def device_bytes(nbytes, shards, num=1):
    """One tensor's bytes a device: exact when the shards divide it, the larger piece otherwise;
    ``num`` / ``shards`` the fullest device's share when a split is uneven (13 / 896 of an expert
    tensor at ep 72)."""
    return -(-(nbytes * num) // shards)


def weight_terms(classes: Iterable[WeightClass], *, stack: Stack, multi) -> WeightTerms:
    """``multi``: the mesh has more than one device (bool, or a bool array per mesh)."""
    total = per_device = replicated = 0
    # the engine's TP-split expert shards padded by the model's rule (Stack.expert_pad): num / den of the even share
    pad_num, pad_den = (stack.expert_pad[0], stack.expert_pad[1]) if stack.expert_pad is not None else (1, 1)
    # the routed experts held more than once a rank (Stack.expert_copies): held, the kernels reading one copy
    held_copies = stack.expert_copies[0] if stack.expert_copies is not None else 1
    by_role: dict[HeldRole, Any] = {}
    copies: Any = None  # the absorbed-MLA copies a device, where the engine holds any
    streamed = {k: 0.0 for k in ("dense_bytes", "expert_bytes", "dense_params", "expert_params")}
    whole = {"dense": 0, "expert": 0}
    for t, count, shards, (num, den) in classes:
        fmt = get_format(stack.runtime_format(t.role, t.fmt))
        nbytes, read = fmt.nbytes(t.shape), fmt.read_nbytes(t.shape)  # held, and streamed (Format.unread)
        if t.role == "expert" and pad_den != pad_num:  # each shard padded: held, and streamed by the expert kernels
            num, den = num * pad_num, den * pad_den
        copy = absorbed_copy_bytes(t, stack)
        if copy and absorbed_replaces(t, stack):
            nbytes = read = 0  # kv_b_proj deleted once its copies are made: a device holds the copies alone
        dev = count * device_bytes(nbytes, den, num)
        if t.role == "expert" and held_copies != 1:
            dev = dev * held_copies
        total += count * (nbytes or copy)
        per_device = per_device + dev
        replicated = replicated + where((shards == 1) & multi, dev, 0)
        by_role[t.role] = by_role.get(t.role, 0) + dev
        if copy:
            held = count * device_bytes(copy, den, num)
            per_device = per_device + held
            replicated = replicated + where((shards == 1) & multi, held, 0)
            copies = held if copies is None else copies + held
        if row_gather(t):
            continue  # the decode step gathers the embedding's (and tid2eid's) rows; it does not stream the table
        kind = "expert" if t.role == "expert" else "dense"
        # the fullest device's; decode reads the absorbed copies where the engine holds them, never what it holds unread
        streamed[f"{kind}_bytes"] += count * ((copy or read) * num / den)
        streamed[f"{kind}_params"] += count * (t.params * num / den)
        whole[kind] += count * (read or copy)
    if copies is not None:
        by_role["mla_absorbed"] = copies  # step.ops.MLA_ABSORBED, the role it runs as
    return WeightTerms(
        runtime_weight_bytes=total,
        weights_bytes=per_device,
        replicated_bytes=replicated,
        by_role=by_role,
        dense_total_bytes=whole["dense"],
        expert_total_bytes=whole["expert"],
        **streamed,
    )


def plan_classes(
    *, inventory: TensorInventory, plan: ShardingPlan, tensors: Iterable[Tensor] | None = None
) -> tuple[list[WeightClass], dict[str, WeightClass]]:
    """The tensors (default every text tensor) grouped by what their bytes a device depend on (role,
    format, shape, partition: layers repeat the same few dozen), each with its shards on the plan's
    mesh; and the class of each tensor a fallback names."""
    groups: dict[tuple, list] = {}
    fallen = {f.tensor for f in plan.fallbacks}
    of_fallback: dict[str, list] = {}
    uneven = plan.shares  # ``plan.share`` without its per-tensor shard count: fit groups ~2,900 tensors 6 times
    for t in inventory.text if tensors is None else tensors:
        spec = plan.specs[t.name]
        part = uneven.get(t.name) if uneven else None  # None: every split even, (1, shards) from the partition
        key = (t.role, t.fmt, t.shape, spec.partition, part)
        g = groups.get(key)
        if g is None:
            shards = spec.shards(plan.mesh)
            g = groups[key] = [t, 0, shards, part or (1, shards)]
        g[1] += 1
        if t.name in fallen:
            of_fallback[t.name] = g
    return [(g[0], g[1], g[2], g[3]) for g in groups.values()], {
        n: (g[0], g[1], g[2], g[3]) for n, g in of_fallback.items()
    }


def weight_budget(*, inventory: TensorInventory, plan: ShardingPlan, stack: Stack, tensors=None) -> WeightBudget:
    """``tensors``: the ones a device builds (a pipeline stage's, step/stages.py); default all text tensors."""
    classes, of_fallback = plan_classes(inventory=inventory, plan=plan, tensors=tensors)
    w = weight_terms(classes, stack=stack, multi=plan.mesh.size(tuple(plan.mesh.axes)) > 1)
    fallbacks = []
    for f in plan.fallbacks:
        if f.tensor in of_fallback:  # a tensor this device builds
            t, _, _, (num, den) = of_fallback[f.tensor]
            extra = _extra_bytes(f, plan, device_bytes(runtime_bytes(t, stack), den, num))
            fallbacks.append(replace(f, bytes_replicated=extra))
    by_role = dict(w.by_role)
    vision = 0
    if stack.vision_whole:  # the engine builds the vision tower, whole on every device (Stack.vision_whole)
        vision = sum(t.nbytes for t in inventory.of_kind("vision"))
        by_role["vision"] = by_role.get("vision", 0) + vision
    multi = plan.mesh.size(tuple(plan.mesh.axes)) > 1
    extra = whole = 0
    # what the serve command's engine holds with the weights beside the model's tensors (Stack.extra_weights)
    for name, n, _ in stack.extra_weights:
        role = cast("HeldRole", name)  # checked by RoleBytes
        by_role[role] = by_role.get(role, 0) + n
        extra += n
        whole += n if name == "rope_tables" and multi else 0  # the same tables on every device
    return WeightBudget(
        runtime_weight_bytes=w.runtime_weight_bytes,
        weights_bytes=w.weights_bytes + vision + extra,
        replicated_weights_bytes=w.replicated_bytes + (vision if multi else 0) + whole,
        by_role=tuple(RoleBytes(role=r, bytes=n) for r, n in by_role.items()),
        fallbacks=tuple(fallbacks),
    )


def _extra_bytes(f: Fallback, plan: ShardingPlan, per_device: int) -> int:
    """What a device holds beyond its share because dim ``f.dim`` was not split: zero when the
    mesh axes it asked for ended up splitting another dim of the same tensor."""
    asked = set(plan.mesh.expand(f.mesh_axis)) if f.mesh_axis in (*plan.mesh.axes, *plan.mesh.aliases) else set()
    if asked & plan.specs[f.tensor].mesh_axes():
        return 0
    return per_device - per_device // f.mesh_size
