"""Load a HardwareSpec from a bundled name (a file stem in hardware_specs/) or a YAML path."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from k3plan.errors import K3PlanError
from k3plan.hardware.schema import HardwareFile
from k3plan.hardware.spec import HardwareSpec, resolve
from k3plan.hardware.topology import parse_topology
from k3plan.resources import data_dir
from k3plan.safeparse import not_a_file
from k3plan.specfile import convert, read_yaml_mapping

SPECS_DIR = data_dir("hardware_specs")
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
    if path.is_dir():
        raise K3PlanError(f"hardware {ref!r}: a folder; expected a hardware spec YAML file or a bundled name")
    if "/" in ref or ref.endswith((".yaml", ".yml")):
        raise K3PlanError(f"hardware {ref!r}: {not_a_file(path)}; expected a hardware spec YAML file")
    near = near_names(ref, list_hardware())
    raise K3PlanError(
        f"unknown hardware {ref!r}; "
        + (f"did you mean {' or '.join(near)}? " if near else "")
        + f"known: {', '.join(list_hardware())} (or a YAML path)"
    )


def near_names(ref: str, names: list[str]) -> list[str]:
    """The names ``ref`` is likely short for or a typo of: those holding it ('h200' -> nvidia-h200, 'v7x' ->
    tpu-v7x), else the close spellings; at most three."""
    import difflib

    key = ref.strip().lower()
    holding = [n for n in names if key and key in n.lower()]
    return (holding or difflib.get_close_matches(key, names, n=3, cutoff=0.6))[:3]


def load_hardware(ref: str = DEFAULT_HARDWARE) -> HardwareSpec:
    """A bundled name (see list_hardware) or a YAML path -> HardwareSpec; K3PlanError if bad."""
    label, path = resolve_path(ref)
    return _load(label, path, path.stat().st_mtime_ns)


def shown_path(path: Path) -> str:
    """A spec's path as outputs print it: a shipped spec by its path in the package (``k3plan/hardware_specs/<name>.yaml``,
    alike from the checkout, whose hardware_specs/ the build maps there, and from an installed wheel), a user's as
    given. issue 48: `hardware list --json` printed the checkout's or the environment's folder."""
    return f"k3plan/hardware_specs/{path.name}" if path.parent == SPECS_DIR else str(path)


@lru_cache(maxsize=64)
def _load(label: str, path: Path, mtime_ns: int) -> HardwareSpec:  # mtime: an edited file reloads
    raw = read_yaml_mapping(label, path)
    file = convert(HardwareFile, raw, label)
    try:
        spec = resolve(file, path=shown_path(path))
        for shape in spec.standard_topologies:  # a bad standard shape fails at load, not in a search
            parse_topology(spec, shape)
    except K3PlanError as err:
        raise K3PlanError(f"{label}: {err}") from None
    return spec
