"""The dtype a weight matmul computes in on one machine: the stack's declaration (``Stack.compute_dtype``,
by runtime weight format and platform, cited to the engine's kernel) checked against the hardware spec's
FLOP/s table. A dtype the spec has no figure for, or marks unsupported (fp4 on Hopper, int8 on TPU v7x),
falls back to the bf16 peak, and the op says so (``OpDtype.note``, in its efficiency label); one the spec
marks ``no_gain`` (fp8 on v6e) keeps its name and runs at the rate the spec gives it (the bf16 one).
"""

from __future__ import annotations

from typing import Any, Callable

from k3plan.hardware.spec import DTYPE_ALIASES
from k3plan.models.inventory import Tensor
from k3plan.structs import Frozen


class OpDtype(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    __coerce__ = False

    dtype: str  # a hardware spec flops_per_device key
    note: str | None = None  # set where the declared dtype has no peak on this hardware


def op_dtype(stack: Any, hw: Any, fmt: str, role: str | None = None) -> OpDtype:
    """The compute dtype of a matmul over weights held in runtime format ``fmt`` (``stack``: a Stack,
    ``hw``: a HardwareSpec); ``role``: the op's compute role (``Op.compute_role``: mla_absorbed), which the
    stack may declare apart from the format (``ComputeDtype.roles``)."""
    declared, why = stack.compute_dtype.of(fmt, hw, role)
    key = DTYPE_ALIASES.get(declared, declared)
    entry = hw.file.flops_per_device.get(key)
    if entry is not None and not entry.unsupported:
        return OpDtype(dtype=key)
    reason = "no entry" if entry is None else f"unsupported: {entry.source}"
    return OpDtype(
        dtype="bf16",
        note=f"stack {stack.name} computes {why}; {hw.name} has no {key} FLOP/s figure ({reason}): the bf16 peak used",
    )


def dtype_of_setup(setup: Any) -> Callable[[Tensor, str | None], OpDtype]:
    """(Tensor, compute role) -> OpDtype for one Setup's stack and hardware (the runtime format from the
    tensor's checkpoint format and role, ``Stack.runtime_format``), worked out once a format and role."""
    held: dict[tuple[str, str | None], OpDtype] = {}
    stack, hw = setup.stack, setup.hardware

    def of(t: Tensor, role: str | None = None) -> OpDtype:
        key = (stack.runtime_format(t.role, t.fmt), role)
        if key not in held:
            held[key] = op_dtype(stack, hw, key[0], role)
        return held[key]

    return of
