"""Reference expectations from a hardware spec (k3plan.hardware), guarded: when the spec or the
loader is missing, the record says what was missing instead of failing the probe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from k3plan.errors import K3PlanError
from k3plan.evidence.probe_record import Expectation


@dataclass(frozen=True)
class HardwareRef:
    """The spec the probe compares against (None) and why there is none."""

    spec: Any = None
    name: Optional[str] = None
    missing: Optional[str] = None


def find_hardware(*, name: Optional[str], device_kind: str) -> HardwareRef:
    """--hardware NAME, else the spec whose device_kind equals the backend's, else none."""
    try:
        import k3plan.hardware as hw

        load = hw.load_hardware
    except (ImportError, AttributeError):
        return HardwareRef(missing="k3plan.hardware.load_hardware is not available in this build")
    if name:
        return HardwareRef(spec=load(name), name=name)  # a bad name is the user's K3PlanError
    names = _bundled_names(hw)
    if names is None:
        return HardwareRef(missing="no hardware listing in k3plan.hardware; pass --hardware NAME")
    for candidate in names:
        try:
            spec = load(candidate)
        except K3PlanError:
            continue
        kind = getattr(getattr(spec, "device_kind", None), "value", getattr(spec, "device_kind", None))
        if str(kind).lower() == device_kind.lower():
            return HardwareRef(spec=spec, name=candidate)
    return HardwareRef(missing=f"no hardware spec has device_kind {device_kind!r}; pass --hardware NAME")


def _bundled_names(hw) -> Optional[list[str]]:
    for attr in ("bundled_hardware", "list_hardware", "hardware_names", "available_hardware"):
        fn = getattr(hw, attr, None)
        if callable(fn):
            try:
                return [getattr(x, "name", x) for x in fn()]
            except Exception:
                return None
    return None


def expect(ref: HardwareRef, *, unit: str, formula: str, compute: Callable[[Any], float]) -> Expectation:
    """Evaluate `compute(spec)`; any missing field becomes `missing`, never an exception."""
    if ref.spec is None:
        return Expectation(unit=unit, formula=formula, missing=ref.missing)
    try:
        value = float(compute(ref.spec))
    except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError, K3PlanError) as err:
        return Expectation(
            hardware=ref.name,
            unit=unit,
            formula=formula,
            missing=f"hardware spec {ref.name!r} lacks what the formula needs ({err})",
        )
    return Expectation(hardware=ref.name, value=value, unit=unit, formula=formula)
