"""A small helper that families use to list tensors without repeating shape arithmetic.

A tensor is described by groups of named axes; each group is one checkpoint dimension (the
product of its sizes), so ``[[("heads", 96), ("head_dim", 128)], [("embed", 7168)]]`` is a
checkpoint [12288, 7168] whose logical shape is (96, 128, 7168).
"""

from __future__ import annotations

import math
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
        groups = [list(g) for g in dims]
        if lead is not None:
            groups.insert(0, [lead])
        shape = tuple(math.prod(size for _, size in g) for g in groups)
        axes = tuple(axis for g in groups for axis, _ in g)
        logical = tuple(size for g in groups for _, size in g)
        self.tensors.append(
            Tensor.checked(
                name=name,
                shape=shape,
                logical_shape=logical,
                axes=axes,
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
