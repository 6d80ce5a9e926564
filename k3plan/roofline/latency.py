"""Per-call collective latency: the hardware spec's default, or the newest matching probe record."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from k3plan.errors import K3PlanError
from k3plan.hardware import HardwareSpec

_PROBE_OP = {"all-to-all": "a2a", "all-reduce": "allreduce"}


def collective_latency(
    hw: HardwareSpec, *, op: str, link: str, probes: Optional[Path], allow_cpu: bool = False
) -> Optional[tuple[float, str]]:
    """(seconds a call, source) from ``probes`` (chained mode: layers depend on each other), or
    None to use the spec. Probe records describe the scale-up link only."""
    if probes is None or link != "scale_up":
        return None
    if not probes.is_dir():
        raise K3PlanError(f"--probes {probes}: not a folder of probe records")
    from k3plan.probes.records import latest_latency

    found = latest_latency(probes, device_kind=hw.device_kind, op=_PROBE_OP.get(op, op), mode="chained",
                           allow_cpu=allow_cpu)
    if found is None:
        return None
    seconds, record, path = found
    return seconds, f"probe record {path.name} ({getattr(record, 'backend', '?')}, {getattr(record, 'device_kind', '?')})"
