"""Frozen values that k3plan computes (results, internal figures): msgspec Structs, dumped once.

The files k3plan reads (hardware and stack YAML, calibrations, probe records, serving benchmarks,
config.json) are checked against Structs too (k3plan.specfile.Spec, through msgspec.convert). A pydantic
model class costs ~0.85 ms to build at import (its schema and validator) and the first one ~60 ms of
pydantic's machinery, a Struct class ~0.14 ms (issue 33: a fresh ``k3plan fit`` within 1.5x the import
floor; a fit that fits imports no pydantic). plan's results are Structs too (a PlanRow's extensions are
dumped once set: PlanRow.extended), as are every other command's; k3plan's results import no pydantic.

What the pydantic results did that a Struct does not, kept here so the JSON stays byte-identical:

- coercion at construction: a ``float`` field given an int (or a numpy scalar) holds a float (it prints
  ``3.0``, not ``3``), an ``int`` field given a numpy integer (or an integral float) an int, a ``bool``
  field a bool, a ``tuple[...]`` field given a list a tuple -- read from the annotation's text, per class,
  on first use (:func:`_coercers`);
- ``__computed__``: properties dumped after the fields (pydantic's ``computed_field``);
- ``__exclude__``: fields left out of the dump (``Field(exclude=True)``);
- ``__dump_with__``: a field's value dumped through a function (an ``Annotated`` ``PlainSerializer``);
- ``_dump_extra(out)``: a hook that edits the dumped dict (a ``model_serializer(mode="wrap")``);
- ``__coerce__ = False``: no coercion (a converted frozen dataclass, which kept values as given);

:func:`dump` is ``model_dump``: ``mode="json"`` gives what ``model_dump(mode="json")`` gave (tuples as
lists, enums as their values, paths as text; non-finite floats stay floats, as pydantic left them);
:func:`replace` is ``model_copy(update=...)``, re-coerced.
"""

from __future__ import annotations

import enum
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, cast

import msgspec
from msgspec.structs import force_setattr


class _Meta(type(msgspec.Struct)):  # type: ignore[misc]  # msgspec's StructMeta, typed as `type`
    """Every Frozen subclass takes keyword-only fields (as a pydantic model did), so a field without a
    default may follow one with a default, and no call passes fields by position."""

    def __new__(mcls, name, bases, namespace, **kwargs):
        kwargs.setdefault("kw_only", True)
        return super().__new__(mcls, name, bases, namespace, **kwargs)


if TYPE_CHECKING:  # what mypy sees: a frozen, keyword-only dataclass-like base (the metaclass above says so)
    from typing_extensions import dataclass_transform

    @dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(msgspec.field,))
    class _Base:
        __struct_fields__: ClassVar[tuple[str, ...]]

else:
    _Base = msgspec.Struct


class Frozen(_Base, metaclass=_Meta, frozen=True, forbid_unknown_fields=True):
    """The base of k3plan's computed values: immutable, keyword-only, hashable."""

    __computed__: ClassVar[tuple[str, ...]] = ()
    __exclude__: ClassVar[tuple[str, ...]] = ()
    __dump_with__: ClassVar[dict[str, Any]] = {}  # field -> the function its value dumps through (PlainSerializer)
    __coerce__: ClassVar[bool] = True  # False: values kept as given (what a frozen dataclass did)

    def __post_init__(self) -> None:
        cls = type(self)
        coerce = _FAST.get(cls) or _fast(cls)
        coerce(self)

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        """Edit the dumped fields (a subclass's model_serializer(mode="wrap")); ``out`` is this dump's own."""
        return out


def fields(obj: Frozen | type[Frozen]) -> tuple[str, ...]:
    """The field names in declared order (a base's first), as pydantic's ``model_fields`` keys."""
    return (obj if isinstance(obj, type) else type(obj)).__struct_fields__


def replace(obj: Frozen, **update: Any) -> Any:
    """``obj`` with ``update`` applied, coerced as a new value is (pydantic's ``model_copy(update=...)``,
    which did not validate, is a subset of this)."""
    return msgspec.structs.replace(cast(Any, obj), **update)


def dump(obj: Any, mode: str = "json") -> Any:
    """``obj`` as plain values: a Struct as a dict of its fields (``__exclude__`` left out) then its
    ``__computed__`` properties, through its ``_dump_extra``; with
    ``mode="json"`` tuples and sets as lists, enums as values, paths as text, numpy scalars as Python ones."""
    json = mode == "json"
    if isinstance(obj, Frozen):
        cls = type(obj)
        skip, using = cls.__exclude__, cls.__dump_with__
        out = {
            name: dump(using[name](getattr(obj, name)) if name in using else getattr(obj, name), mode)
            for name in cls.__struct_fields__
            if name not in skip and getattr(obj, name) is not msgspec.UNSET  # unset: absent, as msgspec encodes it
        }
        for name in cls.__computed__:
            out[name] = dump(getattr(obj, name), mode)
        return obj._dump_extra(out)
    if obj is None or isinstance(obj, (str, int, float)):
        if json and isinstance(obj, enum.Enum):
            return obj.value
        return obj
    if isinstance(obj, dict):
        return {(dump(k, mode) if json else k): dump(v, mode) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [dump(v, mode) for v in obj]
        return items if json or isinstance(obj, list) else tuple(items)
    if json:
        if isinstance(obj, (set, frozenset)):
            return [dump(v, mode) for v in obj]
        if isinstance(obj, enum.Enum):
            return obj.value
        if isinstance(obj, PurePath):
            return str(obj)
        if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
            return obj.item()
    return obj


# --- coercion, read from each class's annotations (text under `from __future__ import annotations`) ---

_PLANS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _to_float(v: Any) -> Any:
    if type(v) is float or v is None or isinstance(v, bool):
        return v
    if isinstance(v, int) or (hasattr(v, "dtype") and hasattr(v, "item")):
        return float(v)
    return v


def _to_int(v: Any) -> Any:
    if type(v) is int or v is None or isinstance(v, bool):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else v
    if hasattr(v, "dtype") and hasattr(v, "item"):  # numpy integer
        return v.item() if isinstance(v.item(), int) else v
    return v


def _to_bool(v: Any) -> Any:
    if type(v) is bool or v is None:
        return v
    if hasattr(v, "dtype") and hasattr(v, "item"):  # numpy bool
        return bool(v)
    return v


_SCALAR = {"float": _to_float, "int": _to_int, "bool": _to_bool}


def _tuple_of(each: Any) -> Any:
    def coerce(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            items = tuple(v) if each is None else tuple(each(x) for x in v)
            return v if type(v) is tuple and all(a is b for a, b in zip(items, v)) else items
        return v

    return coerce


def _list_of(each: Any) -> Any:
    def coerce(v: Any) -> Any:
        if isinstance(v, (list, tuple)) and any(each(x) is not x for x in v):
            return [each(x) for x in v]
        return v

    return coerce


def _dict_of(each: Any) -> Any:
    def coerce(v: Any) -> Any:
        if isinstance(v, dict) and any(each(x) is not x for x in v.values()):
            return {k: each(x) for k, x in v.items()}
        return v

    return coerce


def _coercer(text: str) -> Any:
    """The coercion for one annotation's text, or None: ``float``, ``int``, ``bool`` (each maybe ``| None``),
    ``tuple[X, ...]`` / ``tuple[X, X]`` and ``dict[str, X]`` of those."""
    t = text.replace(" ", "").replace("typing.", "")
    if t.startswith("Optional[") and t.endswith("]"):
        t = t[len("Optional[") : -1]
    parts = [p for p in t.split("|") if p != "None"] if "[" not in t else [t]
    if len(parts) == 1 and parts[0] in _SCALAR:
        return _SCALAR[parts[0]]
    if t.endswith("|None"):
        t = t[: -len("|None")]
    if t.startswith("tuple[") and t.endswith("]"):
        inner = [x for x in t[len("tuple[") : -1].split(",") if x != "..."]
        kinds = set(inner)
        return _tuple_of(_SCALAR.get(inner[0]) if len(kinds) == 1 else None)
    if t.startswith("list[") and t.endswith("]"):
        each = _SCALAR.get(t[len("list[") : -1])
        return _list_of(each) if each is not None else None
    if t.startswith("dict[str,") and t.endswith("]"):
        each = _SCALAR.get(t[len("dict[str,") : -1])
        return _dict_of(each) if each is not None else None
    return None


_FAST: dict[type, Any] = {}
_EXACT = {_to_float: "float", _to_int: "int", _to_bool: "bool"}


def _noop(obj: Any) -> None:
    return None


def _fast(cls: type) -> Any:
    """``cls``'s coercion as one function (built once a class): each field's check inline, a scalar's coercer
    called only when the value is neither None nor of its exact type (both of which the coercer returns unchanged), so a
    value built of the right types costs a type test a field, not a call. The same result as calling each of
    :func:`_coercers`'s functions and setting what changed."""
    plan = _coercers(cls)
    if not plan:
        _FAST[cls] = _noop
        return _noop
    env: dict[str, Any] = {"_set": force_setattr, "float": float, "int": int, "bool": bool}
    lines = ["def coerce(self):"]
    for i, (name, fn) in enumerate(plan):
        env[f"c{i}"] = fn
        lines.append(f"    v = self.{name}")
        exact = _EXACT.get(fn)
        pad = "    "
        if exact is not None:
            lines.append(f"    if v is not None and type(v) is not {exact}:")
            pad = "        "
        lines.append(f"{pad}n = c{i}(v)")
        lines.append(f"{pad}if n is not v:")
        lines.append(f"{pad}    _set(self, {name!r}, n)")
    exec("\n".join(lines), env)  # noqa: S102 -- field names are a Struct's own identifiers
    fn = _FAST[cls] = env["coerce"]
    return fn


def _coercers(cls: type) -> tuple[tuple[str, Any], ...]:
    plan = _PLANS.get(cls)
    if plan is None and not getattr(cls, "__coerce__", True):
        plan = _PLANS[cls] = ()
    if plan is None:
        texts: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            texts.update(getattr(klass, "__annotations__", {}))
        out = []
        for name in cls.__struct_fields__:  # type: ignore[attr-defined]
            ann = texts.get(name)
            text = ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))
            coerce = _coercer(text)
            if coerce is not None:
                out.append((name, coerce))
        plan = _PLANS[cls] = tuple(out)
    return plan
