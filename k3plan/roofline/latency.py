"""Measured numbers from probe records replace the hardware spec's defaults.

``measured_hardware``: the spec with the probed HBM bandwidth substituted, and a line naming the
record used (or why none was). The records are an Evidence value's (the shipped ones plus the --probes
folders, k3plan.evidence.value); a record's figure replaces the spec's only where the question gave --probes.
The per-call latency of a collective is not substituted here: it
depends on which collective the stack issues, and ``latency`` below is the one
place that picks it (so a record of one collective never stands in for another). Records from the
CPU backend are never applied to an accelerator unless ``allow_cpu`` (and then it is said).
"""

from __future__ import annotations

from k3plan.evidence.value import Evidence, evidence_of, measures_hardware
from k3plan.hardware import HardwareSpec
from k3plan.step.collective import Collective
from k3plan.structs import replace


def latency(hw, *, op: Collective, link: str, evidence: Evidence | None, allow_cpu: bool = False) -> tuple[float, str]:
    """(seconds a call, source) of ``op`` on ``link`` ("scale_up" | "scale_out"). Probes run
    inside one slice, so they describe the scale-up link only; a record's latency replaces the spec's only
    where the question gave --probes (``measures_hardware``)."""
    spec_link = hw.scale_out if link == "scale_out" else hw.scale_up
    default = (spec_link.latency_s, f"{hw.name} spec: {spec_link.name} latency a call")
    if not measures_hardware(evidence) or link != "scale_up" or op.probe_op is None:
        return default
    from k3plan.evidence.probe_records import describe, latest_latency

    found = latest_latency(
        evidence_of(evidence).records,
        device_kind=hw.device_kind,
        op=op.probe_op,
        mode="chained",
        allow_cpu=allow_cpu,
    )
    if found is None:
        return default
    seconds, record, path = found
    return seconds, describe(record, path)


def collective_latency(
    hw: HardwareSpec, *, op: str, link: str, evidence: Evidence | None, allow_cpu: bool = False
) -> tuple[float, str] | None:
    """(seconds a call, source) from a probe record of ``op`` on ``link``, or None: the spec's."""
    if not measures_hardware(evidence) or link != "scale_up":
        return None
    found = latency(hw, op=Collective(op), link=link, evidence=evidence, allow_cpu=allow_cpu)
    return None if found[1].startswith(f"{hw.name} spec:") else found


def measured_hardware(
    hw: HardwareSpec, *, evidence: Evidence | None, allow_cpu: bool = False
) -> tuple[HardwareSpec, list[str]]:
    """``hw`` with the probed HBM bandwidth a device substituted (only where the question gave --probes); plus one
    line saying so, or why not."""
    if not measures_hardware(evidence):
        return hw, []
    from k3plan.evidence.probe_records import describe, effective_bandwidth

    ev = evidence_of(evidence)
    bw = effective_bandwidth(ev.records, device_kind=hw.device_kind, probe="hbm", allow_cpu=allow_cpu)
    if bw is None:
        records = [r for r, _ in ev.records if r.probe == "hbm"]  # issue 36: the HBM records, not all
        kinds = sorted({r.device_kind for r in records})
        cpu = any(r.backend == "cpu" for r in records)
        return hw, [
            f"HBM bandwidth: the {hw.name} spec's ({ev.shown()} hold no HBM record of device kind "
            f"{hw.device_kind!r}; its HBM records: {', '.join(kinds) or 'none'}"
            + (", CPU ones applied to an accelerator only with --allow-cpu-probes" if cpu and not allow_cpu else "")
            + ")"
        ]
    notes = [f"HBM bandwidth {bw[0] / 1e12:.3f} TB/s a device from {describe(bw[1], bw[2])}"]
    if allow_cpu:
        notes.append("--allow-cpu-probes: CPU-backend measurements may stand in for the accelerator's")
    measured = (*hw.measured_sources, ("hbm_bw_per_device", f"probe: {notes[0]}"))
    return replace(hw, hbm_bw_bytes_per_s_per_device=bw[0], measured_sources=measured), notes
