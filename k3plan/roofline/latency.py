"""Measured numbers from probe records replace the hardware spec's defaults.

``collective_latency``: per-call latency of the collective a step issues (chained mode: layers
depend on each other). ``measured_hardware``: the spec with the probed HBM bandwidth and collective
latency substituted, and a line naming each record used (or why none was). Records from the CPU
backend are never applied to an accelerator unless ``allow_cpu`` (and then it is said).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from k3plan.errors import K3PlanError
from k3plan.hardware import HardwareSpec

_PROBE_OP = {"all-to-all": "a2a", "all-reduce": "allreduce"}


def _check_dir(probes: Path) -> None:
    if not probes.is_dir():
        raise K3PlanError(f"--probes {probes}: not a folder of probe records")


def _describe(record, path: Path) -> str:
    from k3plan.probes.records import describe

    return describe(record, path)


def collective_latency(
    hw: HardwareSpec, *, op: str, link: str, probes: Optional[Path], allow_cpu: bool = False
) -> Optional[tuple[float, str]]:
    """(seconds a call, source) from ``probes``, or None to use the spec. Probes run inside one
    slice, so they describe the scale-up link only."""
    if probes is None or link != "scale_up":
        return None
    _check_dir(probes)
    from k3plan.probes.records import latest_latency

    found = latest_latency(probes, device_kind=hw.device_kind, op=_PROBE_OP.get(op, op), mode="chained",
                           allow_cpu=allow_cpu)
    if found is None:
        return None
    seconds, record, path = found
    return seconds, _describe(record, path)


def measured_hardware(
    hw: HardwareSpec, *, probes: Optional[Path], allow_cpu: bool = False, op: str = "a2a"
) -> tuple[HardwareSpec, list[str]]:
    """``hw`` with the probed HBM bandwidth a device and scale-up latency a call (``op``, falling
    back to all-reduce) substituted; plus one line per substitution or per record left unused."""
    if probes is None:
        return hw, []
    _check_dir(probes)
    from k3plan.probes.records import effective_bandwidth, latest_latency, load_records

    notes: list[str] = []
    update: dict = {}
    bw = effective_bandwidth(probes, device_kind=hw.device_kind, probe="hbm", allow_cpu=allow_cpu)
    if bw is not None:
        update["hbm_bw_bytes_per_s_per_device"] = bw[0]
        notes.append(f"HBM bandwidth {bw[0] / 1e12:.3f} TB/s a device from {_describe(bw[1], bw[2])}")
    lat = None
    for name in (op, "allreduce"):
        lat = latest_latency(probes, device_kind=hw.device_kind, op=name, mode="chained", allow_cpu=allow_cpu)
        if lat is not None:
            break
    if lat is not None:
        update["scale_up"] = hw.scale_up.model_copy(update={"latency_s": lat[0]})
        notes.append(f"{hw.scale_up.name} latency {lat[0] * 1e6:.2f} us a call from {_describe(lat[1], lat[2])}")
    if not update:
        kinds = sorted({r.device_kind for r in load_records(probes)})
        cpu = any(r.backend == "cpu" for r in load_records(probes))
        notes.append(f"no probe record in {probes} matches {hw.name} (device kind {hw.device_kind!r}; found: "
                     f"{', '.join(kinds) or 'none'})" + ("; CPU records are not applied to an accelerator "
                                                          "unless --allow-cpu-probes" if cpu and not allow_cpu else ""))
    elif allow_cpu:
        notes.append("--allow-cpu-probes: CPU-backend measurements may stand in for the accelerator's")
    return (hw.model_copy(update=update) if update else hw), notes
