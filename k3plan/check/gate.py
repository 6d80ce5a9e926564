"""Run the gate: recompute every configuration of a baseline and compare, or rewrite it (--update)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from k3plan.check.baseline import Baseline, load_baseline, save_baseline
from k3plan.check.compare import Finding, Tolerance, compare
from k3plan.check.measure import Measured, measure
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen, replace


class CheckResult(Frozen):
    __computed__ = ("passed",)  # in the JSON, after the findings

    baseline: str
    baseline_k3plan_version: str
    tolerance: str
    shardspecs: Optional[str]
    configurations: list[str]
    findings: list[Finding]

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.fail]

    @property
    def passed(self) -> bool:
        return not self.failed


def _measure(name: str, entry_config, shardspecs: Optional[str]) -> Measured:
    try:
        return measure(entry_config, shardspecs=shardspecs)
    except K3PlanError as err:
        raise K3PlanError(f"baseline configuration {name!r}: {err}") from None


def run_check(*, path: Path, tolerance: Tolerance, shardspecs: Optional[str] = None) -> CheckResult:
    base = load_baseline(path)
    findings: list[Finding] = []
    for entry in base.configurations:
        now = _measure(entry.name, entry.config, shardspecs)
        assert entry.expected is not None  # load_baseline without seed_ok refuses entries lacking it
        findings += compare(entry.name, entry.expected, now, tolerance=tolerance)
    return CheckResult(
        baseline=str(path),
        baseline_k3plan_version=base.k3plan_version,
        tolerance=tolerance.text,
        shardspecs=shardspecs,
        configurations=[e.name for e in base.configurations],
        findings=findings,
    )


def update(*, path: Path, shardspecs: Optional[str] = None) -> Baseline:
    """Recompute every configuration and rewrite the file (a seed without values is filled in)."""
    base = load_baseline(path, seed_ok=True)
    entries = [replace(e, expected=_measure(e.name, e.config, shardspecs).expected) for e in base.configurations]
    new = replace(base, configurations=entries)
    save_baseline(path, new)
    return new
