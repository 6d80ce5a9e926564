"""The tensor inventory: the one source of truth for parameters, bytes and sharding.

One ``Tensor`` per weight per layer. The routed experts of a layer are ONE entry whose leading axis
is ``expert``; its checkpoint name is a template with ``{e}``. ``shape`` is the checkpoint's shape
(for experts with the expert axis prepended); ``logical_shape``/``axes`` split flattened dims
(12288 -> heads 96 x head_dim 128) so that sharding sees heads, not their product.
"""

from __future__ import annotations

import math
from collections import defaultdict
from functools import cached_property
from typing import Iterator, Literal, Optional

from k3plan.models.formats import FORMATS, get_format
from k3plan.structs import Frozen

Kind = Literal["kda", "mla", "dense", "moe", "global", "vision", "mtp", "engram"]
Role = Literal[
    "embed",
    "lm_head",
    "attn",
    "norm",
    "router",
    "latent_proj",
    "shared_expert",
    "expert",
    "dense_mlp",
    "vision",
    "mtp",
    "engram",
]


KINDS: frozenset[str] = frozenset(Kind.__args__)  # type: ignore[attr-defined]
ROLES: frozenset[str] = frozenset(Role.__args__)  # type: ignore[attr-defined]


class Tensor(Frozen):
    # a msgspec Struct (issue 33: no pydantic class on fit's path); families build their ~3,000 tensors through
    # ``Tensor.checked``, which is this constructor: its checks run once, in __post_init__
    __coerce__ = False  # values kept as given (the families pass ints and strs)

    name: str
    shape: tuple[int, ...]
    logical_shape: tuple[int, ...]
    axes: tuple[str, ...]
    fmt: str
    layer: Optional[int] = None  # 0-indexed decoder layer, None for globals
    kind: Kind
    role: Role
    active: float = 1.0  # fraction of this tensor one token activates (experts: k / E)

    def __post_init__(self) -> None:
        """The shapes agree, the format is known, kind and role are one of KINDS / ROLES, ``active`` is in
        [0, 1]: a ValueError naming the tensor otherwise."""
        if self.fmt not in FORMATS:
            get_format(self.fmt)  # raises, naming the known formats
        name, kind, role, active = self.name, self.kind, self.role, self.active
        problem = _problem(name, self.shape, self.logical_shape, self.axes)
        if kind not in KINDS or role not in ROLES:
            problem = f"{name}: kind {kind!r} / role {role!r} not one of {sorted(KINDS)} / {sorted(ROLES)}"
        if not 0.0 <= active <= 1.0:
            problem = f"{name}: active fraction {active} outside [0, 1]"
        if problem:
            raise ValueError(problem)

    @classmethod
    def checked(
        cls,
        *,
        name: str,
        shape: tuple[int, ...],
        logical_shape: tuple[int, ...],
        axes: tuple[str, ...],
        fmt: str,
        kind: str,
        role: str,
        layer: int | None = None,
        active: float = 1.0,
    ) -> "Tensor":
        """A Tensor from values the caller built (ints, strs), checked (``__post_init__``); ``active`` a float."""
        return cls(
            name=name,
            shape=shape,
            logical_shape=logical_shape,
            axes=axes,
            fmt=fmt,
            layer=layer,
            kind=kind,  # type: ignore[arg-type]  # checked in __post_init__
            role=role,  # type: ignore[arg-type]
            active=float(active),
        )

    @property
    def params(self) -> int:
        return math.prod(self.shape)

    @property
    def active_params(self) -> float:
        return self.params * self.active

    @property
    def nbytes(self) -> int:
        """Bytes in the checkpoint's storage format."""
        return get_format(self.fmt).nbytes(self.shape)

    @property
    def n_experts(self) -> int:
        return self.logical_shape[self.axes.index("expert")] if "expert" in self.axes else 1

    def checkpoint_tensors(self) -> Iterator[tuple[str, str, tuple[int, ...]]]:
        """(name, safetensors dtype, shape) of every checkpoint tensor this entry stands for."""
        fmt = get_format(self.fmt)
        if "{e}" in self.name:
            per = self.shape[1:]
            for e in range(self.shape[0]):
                base = self.name.format(e=e)
                for suffix, dtype, shape_fn in fmt.parts:
                    yield base + suffix, dtype, shape_fn(per)
        else:
            for suffix, dtype, shape_fn in fmt.parts:
                yield self.name + suffix, dtype, shape_fn(self.shape)


def _problem(name: str, shape: tuple[int, ...], logical: tuple[int, ...], axes: tuple[str, ...]) -> str:
    if len(axes) != len(logical):
        return f"{name}: {len(axes)} axes for logical shape {logical}"
    if math.prod(shape) != math.prod(logical):
        return f"{name}: shape {shape} != logical {logical}"
    for d in shape:
        if type(d) is not int or d <= 0:
            return f"{name}: non-positive or non-integer dimension in {shape}"
    return ""


def by_key(tensors, key: str) -> dict[str, dict[str, float]]:
    """Group params / active params / bytes / count by a Tensor attribute (role, kind, fmt)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"params": 0, "active_params": 0, "bytes": 0, "tensors": 0})
    for t in tensors:
        row = out[str(getattr(t, key))]
        row["params"] += t.params
        row["active_params"] += t.active_params
        row["bytes"] += t.nbytes
        row["tensors"] += 1
    return dict(out)


class TensorInventory(Frozen, dict=True):  # dict: room for the cached properties below
    """All tensors of a model. ``text`` excludes vision, MTP and Engram's n-gram memory (DeepSeek-V4.1: kind
    ``engram``, a memory tier of its own, ``engram_params`` / ``engram_bytes``); totals are over ``text``."""

    __coerce__ = False

    @classmethod
    def of(cls, tensors: tuple[Tensor, ...]) -> "TensorInventory":
        """From Tensors already checked (``Tensor.checked``): no second pass over them."""
        if not all(type(t) is Tensor for t in tensors):
            raise TypeError("TensorInventory.of takes Tensor instances")
        return cls(tensors=tuple(tensors))

    tensors: tuple[Tensor, ...]

    @cached_property
    def text(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.kind not in ("vision", "mtp", "engram"))

    @cached_property
    def role_formats(self) -> frozenset[tuple[str, str]]:
        """The distinct (role, checkpoint format) pairs of ``text``: what a stack's runtime formats are read at
        (``Stack.runtime_format`` depends on a tensor only through these two)."""
        return frozenset((t.role, t.fmt) for t in self.text)

    def of_kind(self, kind: str) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.kind == kind)

    @cached_property
    def total_params(self) -> int:
        return sum(t.params for t in self.text)

    @cached_property
    def active_params(self) -> int:
        return round(sum(t.active_params for t in self.text))

    @cached_property
    def checkpoint_bytes(self) -> int:
        return sum(t.nbytes for t in self.text)

    @property
    def vision_params(self) -> int:
        return sum(t.params for t in self.of_kind("vision"))

    @property
    def mtp_params(self) -> int:
        return sum(t.params for t in self.of_kind("mtp"))

    @property
    def engram_params(self) -> int:
        return sum(t.params for t in self.of_kind("engram"))

    @property
    def engram_bytes(self) -> int:
        return sum(t.nbytes for t in self.of_kind("engram"))

    def breakdown(self, key: str, *, include_extra: bool = False) -> dict[str, dict[str, float]]:
        return by_key(self.tensors if include_extra else self.text, key)

    def get(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def checkpoint_table(inventory: TensorInventory) -> dict[str, tuple[str, list[int]]]:
    """checkpoint name -> (safetensors dtype, shape as a list) for every checkpoint tensor, experts
    expanded. Built for the census of ~500k names: the (dtype, shape) value of a part is one object
    shared by all experts, and names are concatenated rather than formatted."""
    out: dict[str, tuple[str, list[int]]] = {}
    for t in inventory.tensors:
        fmt = get_format(t.fmt)
        if "{e}" in t.name:
            head, tail = t.name.split("{e}", 1)
            parts = [(tail + suffix, (dtype, list(shape_fn(t.shape[1:])))) for suffix, dtype, shape_fn in fmt.parts]
            for e in range(t.shape[0]):
                base = head + str(e)
                for suffix, value in parts:
                    out[base + suffix] = value
        else:
            for suffix, dtype, shape_fn in fmt.parts:
                out[t.name + suffix] = (dtype, list(shape_fn(t.shape)))
    return out
