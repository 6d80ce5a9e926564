"""Reference expectations from a hardware spec (k3plan.hardware), guarded: when the spec or the
loader is missing, the record says what was missing instead of failing the probe. The spec is found
by k3plan.validate.targets.find_hardware (--target local resolves its hardware the same way)."""

from __future__ import annotations

from typing import Any, Callable

from k3plan.errors import K3PlanError
from k3plan.evidence.probe_record import Expectation
from k3plan.validate.targets import HardwareRef


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
