"""Spec files (hardware, stacks, calibrations, serving benchmarks, config.json): one way to read YAML, one
base for the schemas a file is checked against, and one way to turn a validation error into a one-line
message naming the file and the key.

The schemas every command reads (fit's path) are msgspec Structs (:class:`Spec`), checked by
:func:`convert`: a pydantic model class costs a fit ~0.85 ms to build and its first model ~60 ms of
pydantic's machinery to import (issue 33: a fresh ``k3plan fit`` within 1.5x the import floor), a Struct
~0.14 ms and nothing (probe records too: every fit reads the shipped probe records; check's baseline
too).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from k3plan.errors import K3PlanError
from k3plan.safeparse import MAX_YAML_BYTES, parse_yaml, read_text
from k3plan.structs import Frozen

T = TypeVar("T")
_NONE: Any = object()  # describe_spec without the data converted


class Spec(Frozen, forbid_unknown_fields=True):
    """The base of a schema a spec file is checked against: frozen, keyword-only, unknown keys refused.
    A rule goes in ``__post_init__`` (call the base's first) and raises ValueError, which :func:`convert`
    reports at the key of the object that broke it, or at a field's key where the message starts with the
    field's name and a colon (``"name: ' x': expected ..."``). Values are kept as msgspec converted
    them (no Frozen coercion: the types are already checked)."""

    __coerce__ = False


def convert(cls: type[T], data: Any, label: str, *, strict: bool = True) -> T:
    """``data`` (a YAML mapping) checked against ``cls`` (a :class:`Spec`); K3PlanError naming ``label``
    and the key if it does not hold. ``strict=False`` also reads a number or a bool from a string."""
    try:
        return msgspec.convert(data, cls, strict=strict)
    except msgspec.ValidationError as err:
        raise K3PlanError(f"{label}: {describe_spec(err, cls, data, strict=strict)}") from None


_AT = re.compile(r"^(?P<msg>.*?)(?: - at (?P<inkey>`key` in )?`\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<key>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<key>[^`]*)`$")
_FIELD = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*): ")


def _keys(path: str) -> list[str]:
    """msgspec's ``$.a.b[0].c`` / ``$.d[...].e`` -> ["a", "b", "0", "c"] / ["d", "*", "e"]."""
    out: list[str] = []
    for part in re.findall(r"\.([^.\[]+)|\[([^\]]*)\]", path):
        out.append(part[0] or ("*" if part[1] == "..." else part[1]))
    return out


def _struct_at(cls: Any, keys: list[str]) -> Any:
    """The Struct type at ``keys`` below ``cls`` (through Optional, tuples, lists and dicts), or None."""
    t: Any = cls
    for key in keys:
        t = _below(t, key)
        if t is None:
            return None
    t = _unwrap(t)
    return t if isinstance(t, type) and issubclass(t, msgspec.Struct) else None


def _unwrap(t: Any) -> Any:
    """``t`` without Annotated and Optional (a union of None and one other type, or of one container or Struct
    and scalars: the one a nested key can be in)."""
    while True:
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Annotated:
            t = args[0]
            continue
        if origin in (typing.Union, types.UnionType):
            inner = [a for a in args if a is not type(None)]
            nested = [
                a
                for a in inner
                if typing.get_origin(a) in (dict, list, tuple)
                or (isinstance(a, type) and issubclass(a, msgspec.Struct))
            ]
            pick = inner if len(inner) == 1 else nested
            if len(pick) == 1:
                t = pick[0]
                continue
        return t


def _below(t: Any, key: str) -> Any:
    """The type at ``key`` below the type ``t`` ("*": a dict's values; a number: a sequence's items), or None."""
    t = _unwrap(t)
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is dict and args:
        return args[1] if key == "*" else None
    if origin in (list, tuple) and args:
        return args[0] if key.isdigit() else None
    if isinstance(t, type) and issubclass(t, msgspec.Struct) and key != "*":
        names = dict(zip(t.__struct_encode_fields__, t.__struct_fields__))  # a key as written -> its field
        try:
            return typing.get_type_hints(t, include_extras=True).get(names.get(key, key))
        except Exception:  # noqa: BLE001 - a hint that does not resolve: the key stays unnamed
            return None
    return None


def _fails(value: Any, t: Any, strict: bool) -> bool:
    try:
        msgspec.convert(value, t, strict=strict)
    except Exception:  # noqa: BLE001 - any refusal: this is the entry that broke
        return True
    return False


def _named(keys: list[str], cls: Any, data: Any, strict: bool) -> tuple[list[str], Any, Any]:
    """``keys`` with each "*" (a dict's value, which msgspec does not name) replaced by the first key of ``data``
    there whose value alone does not convert, and the data and type at the end (None where not found)."""
    out: list[str] = []
    t, node = cls, data
    for i, key in enumerate(keys):
        below = _below(t, key)
        if key == "*" and isinstance(node, dict) and below is not None:
            bad = next((k for k, v in node.items() if _fails(v, below, strict)), None)
            if bad is None:
                return out + keys[i:], None, None
            key = str(bad)
            node = node[bad]
        elif isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, (list, tuple)) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            node = None
        out.append(key)
        t = below
    return out, node, t


def describe_spec(err: msgspec.ValidationError, cls: Any = None, data: Any = _NONE, *, strict: bool = True) -> str:
    """msgspec's error as one line: ``unknown key 'a.b'`` (with a did-you-mean
    from the schema's keys there), ``missing key 'a.b'``, or ``a.b: what was expected``. msgspec stops at
    the first problem, so one is named. With ``data`` (what was converted, with ``strict`` as it was) a dict's
    key msgspec leaves unnamed (``a[...].b``) is named: the first whose value is refused alone."""
    m = _AT.match(str(err))
    msg, path = (m["msg"], m["path"] or "") if m else (str(err), "")
    keys = shape = _keys(path)  # shape: the schema's path ("*" for a dict's value), keys: as named
    node: Any = None
    if data is not _NONE and cls is not None and ("*" in keys or (m and m["inkey"])):
        keys, node, t = _named(keys, cls, data, strict)
        if m and m["inkey"] and isinstance(node, dict):  # a key of the mapping at ``keys`` is refused: name it
            kt = typing.get_args(_unwrap(t))[:1]
            bad = next((k for k in node if kt and _fails(k, kt[0], strict)), None)
            if bad is not None:
                msg = f"key {bad!r}: {msg}"
    where = ".".join(keys)
    unknown, missing = _UNKNOWN.match(msg), _MISSING.match(msg)
    if unknown or missing:
        key = (unknown or missing)["key"]  # type: ignore[index]
        full = ".".join([*keys, key])
        if missing:
            return f"missing key {full!r}"
        at = _struct_at(cls, shape) if cls is not None else None
        known = [f for f in getattr(at, "__struct_encode_fields__", ()) if f != key]  # keys as written
        near = difflib.get_close_matches(key, known, n=1)
        return f"unknown key {full!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
    field = _FIELD.match(msg)  # a rule of one field (``__post_init__``'s "name: ..."): named at its key
    at = _struct_at(cls, shape) if cls is not None else None
    if field and field["key"] in getattr(at, "__struct_encode_fields__", ()):
        return ".".join([*keys, field["key"]]) + msg[len(field["key"]) :]
    return f"{where or 'top level'}: {msg}"


def error_at(err: msgspec.ValidationError, cls: Any = None) -> tuple[list[str], str]:
    """msgspec's error as (the keys of the value it is about, what is wrong with it), for a reader that words
    its own line (config.json's quantization_config): a missing or unknown key's own key last, with
    ``"missing key"`` / ``"unknown key"``; a ``__post_init__`` rule ``"name: ..."`` at that field."""
    m = _AT.match(str(err))
    msg, path = (m["msg"], m["path"] or "") if m else (str(err), "")
    keys = _keys(path)
    unknown, missing = _UNKNOWN.match(msg), _MISSING.match(msg)
    if unknown or missing:
        return [*keys, (unknown or missing)["key"]], "missing key" if missing else "unknown key"  # type: ignore[index]
    field = _FIELD.match(msg)
    at = _struct_at(cls, keys) if cls is not None else None
    if field and field["key"] in getattr(at, "__struct_encode_fields__", ()):
        return [*keys, field["key"]], msg[len(field["key"]) + 2 :]
    return keys, msg


def read_yaml_mapping(label: str, path: Path) -> dict:
    """A YAML file that must be a mapping, read through the one guard (k3plan.safeparse)."""
    raw = parse_yaml(label, read_text(label, path, MAX_YAML_BYTES))  # a 50 MB file: refused at its first MiB
    if not isinstance(raw, dict):
        raise K3PlanError(f"{label}: expected a mapping of keys at the top level")
    return raw


def read_yaml_entries(label: str, path: Path, spec: type[T]) -> tuple[T, ...]:
    """A shipped YAML list of transcribed entries, each validated as ``spec``; a bad file is one line."""
    raw = parse_yaml(label, read_text(label, path))
    if not isinstance(raw, list):
        raise K3PlanError(f"{label}: expected a list of entries")
    return tuple(convert(spec, x, label, strict=False) for x in raw)
