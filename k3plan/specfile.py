"""Spec files (hardware, stacks, calibration, shardspecs): one way to read YAML and one way to turn
pydantic's validation errors into a one-line message naming the file and the key."""

from __future__ import annotations

import difflib
from pathlib import Path

from pydantic import ValidationError

from k3plan.errors import K3PlanError
from k3plan.safeparse import parse_yaml, read_text


def read_yaml_mapping(label: str, path: Path) -> dict:
    """A YAML file that must be a mapping, read through the one guard (k3plan.safeparse)."""
    raw = parse_yaml(label, read_text(label, path))
    if not isinstance(raw, dict):
        raise K3PlanError(f"{label}: expected a mapping of keys at the top level")
    return raw


def describe(err: ValidationError) -> str:
    """pydantic's errors as one line: unknown keys first (with a did-you-mean), then the rest."""
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    missing = {tuple(e["loc"]) for e in errors if e["type"] == "missing"}
    parts: list[str] = []
    named: set[tuple[int | str, ...]] = set()
    for e in errors:
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc)
        if e["type"] == "extra_forbidden":
            near = difflib.get_close_matches(str(loc[-1]), [str(m[-1]) for m in missing if m[:-1] == loc[:-1]], n=1)
            parts.append(f"unknown key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
            named.update(loc[:-1] + (n,) for n in near)
        elif e["type"] == "missing" and tuple(e["loc"]) in named:
            continue
        elif e["type"] == "missing":
            parts.append(f"missing key {key!r}")
        else:
            parts.append(f"{key or 'top level'}: {e['msg']}")
    first, rest = parts[0], len(parts) - 1
    return first + (f" (and {rest} more problem{'s' if rest > 1 else ''}: {'; '.join(parts[1:3])})" if rest else "")
