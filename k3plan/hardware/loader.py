"""Load a HardwareSpec from a bundled name (a file stem in hardware_specs/) or a YAML path."""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ValidationError

import k3plan
from k3plan.errors import K3PlanError
from k3plan.hardware.schema import HardwareFile
from k3plan.hardware.spec import HardwareSpec, resolve
from k3plan.hardware.topology import parse_topology

SPECS_DIR = Path(k3plan.__file__).parents[1] / "hardware_specs"
DEFAULT_HARDWARE = "tpu-v7x"


def list_hardware() -> list[str]:
    """The bundled hardware names (file stems of hardware_specs/*.yaml), sorted."""
    return sorted(p.stem for p in SPECS_DIR.glob("*.yaml"))


def resolve_path(ref: str) -> tuple[str, Path]:
    """-> (name to print in errors, YAML path)."""
    bundled = SPECS_DIR / f"{ref}.yaml"
    if "/" not in ref and bundled.is_file():
        return bundled.name, bundled
    path = Path(ref).expanduser()
    if path.is_file():
        return str(path), path
    if "/" in ref or ref.endswith((".yaml", ".yml")):
        raise K3PlanError(f"hardware {ref!r}: no such file")
    raise K3PlanError(f"unknown hardware {ref!r}; known: {', '.join(list_hardware())} (or a YAML path)")


def load_hardware(ref: str = DEFAULT_HARDWARE) -> HardwareSpec:
    """A bundled name (see list_hardware) or a YAML path -> HardwareSpec; K3PlanError if bad."""
    label, path = resolve_path(ref)
    return _load(label, path, path.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _load(label: str, path: Path, mtime_ns: int) -> HardwareSpec:  # mtime: an edited file reloads
    raw = _read_yaml(label, path)
    try:
        file = HardwareFile.model_validate(raw)
    except ValidationError as err:
        raise K3PlanError(f"{label}: {describe(err)}") from None
    try:
        spec = resolve(file, path=str(path))
        for shape in spec.standard_topologies:  # a bad standard shape fails at load, not in a search
            parse_topology(spec, shape)
    except K3PlanError as err:
        raise K3PlanError(f"{label}: {err}") from None
    return spec


def _read_yaml(label: str, path: Path) -> dict:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise K3PlanError(f"{label}: invalid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise K3PlanError(f"{label}: cannot read: {err}") from None
    if not isinstance(raw, dict):
        raise K3PlanError(f"{label}: expected a mapping of keys at the top level")
    return raw


def describe(err: ValidationError) -> str:
    """pydantic's errors as one line: unknown keys first (with a did-you-mean), then the rest."""
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    missing = {tuple(e["loc"]) for e in errors if e["type"] == "missing"}
    parts, named = [], set()
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
