"""A small helper that families use to list tensors without repeating shape arithmetic.

A tensor is described by groups of named axes; each group is one checkpoint dimension (the
product of its sizes), so ``[[("heads", 96), ("head_dim", 128)], [("embed", 7168)]]`` is a
checkpoint [12288, 7168] whose logical shape is (96, 128, 7168).
"""

from __future__ import annotations

from typing import Optional, Sequence

from k3plan.models.inventory import Tensor, TensorInventory

Axis = tuple[str, int]
Group = Sequence[Axis]


class InventoryBuilder:
    def __init__(self) -> None:
        self.tensors: list[Tensor] = []

    def add(
        self,
        name: str,
        dims: Sequence[Group],
        *,
        fmt: str,
        kind: str,
        role: str,
        layer: Optional[int] = None,
        active: float = 1.0,
        lead: Optional[Axis] = None,
    ) -> None:
        # one pass over the axes (fit builds ~3,000 tensors): a group's checkpoint dimension is the
        # product of its sizes, as math.prod would give it
        shape: list[int] = []
        axes: list[str] = []
        logical: list[int] = []
        for g in ((lead,), *dims) if lead is not None else dims:
            n = 1
            for axis, size in g:
                axes.append(axis)
                logical.append(size)
                n *= size
            shape.append(n)
        self.tensors.append(
            Tensor.checked(
                name=name,
                shape=tuple(shape),
                logical_shape=tuple(logical),
                axes=tuple(axes),
                fmt=fmt,
                layer=layer,
                kind=kind,
                role=role,
                active=active,
            )
        )

    def inventory(self) -> TensorInventory:
        return TensorInventory.of(tuple(self.tensors))

    def linear(self, name: str, out: Group, inp: Group, **kw) -> None:
        self.add(name, [out, inp], **kw)

    def vector(self, name: str, dim: Group, **kw) -> None:
        self.add(name, [dim], **kw)
