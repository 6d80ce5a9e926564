"""ProbeContext: what every probe needs to know about where it runs (imports jax: probe-only)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, Optional

from k3plan.evidence.probe_record import CPU_LABEL, ProbeRecord
from k3plan.probes.dispatch import Dispatched
from k3plan.probes.store import utc_now_iso
from k3plan.validate.targets import HardwareRef

# A CPU run is a correctness check; without --timeout it stops here so that a probe run as
# documented on a laptop or CI box finishes within a minute (jax's own start-up comes on top).
CPU_DEFAULT_TIMEOUT_S = 40.0


@dataclass
class Deadline:
    """--timeout: probes check `expired()` between sweep points and stop there."""

    timeout_s: Optional[float]
    start: float = field(default_factory=time.monotonic)
    source: str = "--timeout"  # what set it: the flag, or the CPU run's default

    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def expired(self) -> bool:
        return self.timeout_s is not None and self.elapsed_s() >= self.timeout_s


@dataclass
class ProbeContext:
    backend: str
    device_kind: str
    device_count: int
    local_device_count: int
    process_count: int
    process_index: int
    versions: dict[str, Optional[str]]
    deadline: Deadline
    hardware: HardwareRef
    warmup: int = 1
    repeats: int = 5
    progress: Callable[[str], None] = lambda text: None  # called as each sweep point starts
    plan: Callable[[int], None] = lambda total: None  # how many sweep points the probe will run
    notes: list[str] = field(default_factory=list)
    memory_bytes: Optional[int] = None  # one device's memory (the host's on CPU); None: unknown
    memory_source: str = "unknown"
    # write a record now (the runner's store), so that a long run killed from outside keeps what it measured
    emit: Callable[[ProbeRecord], None] = lambda record: None

    @property
    def is_cpu(self) -> bool:
        return self.backend == "cpu"

    def require_fits(self, nbytes: float, *, what: str, devices: int = 1) -> None:
        """Bad input before allocating: ``nbytes`` a device (``devices`` of them; CPU fake devices all
        share the host's memory) must fit in ``memory_bytes``; ``what`` names the flag and its value."""
        from k3plan.errors import K3PlanError
        from k3plan.units import fmt_gib

        need = nbytes * (devices if self.is_cpu else 1)
        if self.memory_bytes is not None and need > self.memory_bytes:
            raise K3PlanError(
                f"{what}: needs {fmt_gib(need)} of memory, more than the {fmt_gib(self.memory_bytes)} of "
                f"{self.memory_source}; expected a smaller size"
            )

    def record(
        self,
        *,
        probe: str,
        params: dict[str, Any],
        dispatched: Optional[Dispatched] = None,
        extra_label: Optional[str] = None,
        **fields: Any,
    ) -> ProbeRecord:
        """A ProbeRecord with the environment, dispatch and label filled in."""
        label = fields.pop("label", None)
        if label is None and self.is_cpu:
            label = CPU_LABEL + (f"; {extra_label}" if extra_label else "")
        elif label is None:
            label = extra_label
        if dispatched is not None:
            fields.setdefault("implementation", dispatched.name)
            fields.setdefault("attempts", dispatched.attempts)
            fields.setdefault("fallback", dispatched.fallback)
            fields.setdefault("fallback_reasons", dispatched.fallback_reasons)
        cut = self.deadline.expired()
        fields.setdefault("cut_short", cut)
        if cut:
            fields.setdefault(
                "cut_short_reason",
                f"{self.deadline.source} {self.deadline.timeout_s:g}s reached; later sweep points skipped",
            )
        if "points" in fields:
            _measured_or_not_ok(fields, cut_reason=fields.get("cut_short_reason"))
        return ProbeRecord(
            probe=probe,
            params=params,
            backend=self.backend,
            device_kind=self.device_kind,
            device_count=self.device_count,
            local_device_count=self.local_device_count,
            process_count=self.process_count,
            jax_version=self.versions.get("jax"),
            jaxlib_version=self.versions.get("jaxlib"),
            libtpu_version=self.versions.get("libtpu"),
            date=utc_now_iso(),
            label=label,
            elapsed_s=round(self.deadline.elapsed_s(), 3),
            notes=list(self.notes) + list(fields.pop("notes", [])),
            **fields,
        )


def _measured_or_not_ok(fields: dict[str, Any], *, cut_reason: Optional[str]) -> None:
    """A sweep's record says ok only if it measured something: a point whose value no measurement can give
    (a marginal time at or below 0 on a noisy CPU made a negative rate) loses its value, with a note, as the
    reader would refuse it (k3plan.evidence.probe_record.check_values); a sweep left with no valued point
    (the deadline passed before the first one ended: `probe hbm` on CPU wrote an ok record of 0 points) is
    not ok, and says why."""
    import math

    points = fields["points"]
    for pt in points:
        if pt.value is not None and not (math.isfinite(pt.value) and pt.value > 0):
            pt.notes.append(
                f"dropped: value {pt.value!r} {pt.unit or ''} is no measurement (timing noise at or below 0)"
            )
            pt.params = {**pt.params, "refused_value": pt.value if math.isfinite(pt.value) else str(pt.value)}
            pt.value = None
    if fields.get("ok", True) and not any(pt.value is not None for pt in points):
        fields["ok"] = False
        what = "no sweep point ran" if not points else "no point has a value"
        failed = [v.detail for v in fields.get("verification") or () if not getattr(v, "ok", True)]
        fields["error"] = fields.get("error") or f"measured nothing: {what}" + (
            f" ({cut_reason})" if cut_reason else ""
        ) + "".join(f"; {d}" for d in failed)  # the failed checks' own reasons (an HLO without the op)


def build_context(
    *,
    timeout_s: Optional[float],
    hardware_name: Optional[str],
    warmup: int,
    repeats: int,
    progress: Callable[[str], None],
    notes: list[str],
    plan: Callable[[int], None] = lambda total: None,
) -> ProbeContext:
    import jax

    from k3plan.validate.targets import find_hardware

    devices = jax.devices()
    kind = devices[0].device_kind
    backend = jax.default_backend()
    deadline = Deadline(timeout_s)
    if timeout_s is None and backend == "cpu":
        deadline = Deadline(CPU_DEFAULT_TIMEOUT_S, source="the CPU run's default timeout (--timeout)")
        notes = [*notes, f"CPU run: stops after {CPU_DEFAULT_TIMEOUT_S:g} s unless --timeout says otherwise"]
    return ProbeContext(
        backend=backend,
        device_kind=kind,
        device_count=len(devices),
        local_device_count=jax.local_device_count(),
        process_count=jax.process_count(),
        process_index=jax.process_index(),
        versions=_versions(),
        deadline=deadline,
        hardware=find_hardware(name=hardware_name, device_kind=kind),
        warmup=warmup,
        repeats=repeats,
        progress=progress,
        plan=plan,
        notes=notes,
        **device_memory(devices[0], is_cpu=backend == "cpu"),
    )


def device_memory(device: Any, *, is_cpu: bool) -> dict[str, Any]:
    """-> memory_bytes, memory_source: jax's bytes_limit of the device, or on CPU the host's physical
    memory (os.sysconf; every fake CPU device shares it); neither known: None."""
    if is_cpu:
        try:
            host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return {"memory_bytes": None, "memory_source": "unknown"}
        return {"memory_bytes": int(host), "memory_source": "the host's physical memory (CPU backend)"}
    try:
        limit = (device.memory_stats() or {}).get("bytes_limit")
    except Exception:  # a backend without memory_stats
        limit = None
    if not limit:
        return {"memory_bytes": None, "memory_source": "unknown"}
    return {"memory_bytes": int(limit), "memory_source": f"{device.device_kind} device memory (jax bytes_limit)"}


def _versions() -> dict[str, Optional[str]]:
    out: dict[str, Optional[str]] = {}
    for dist in ("jax", "jaxlib", "libtpu"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    if out["libtpu"] is None:
        try:
            out["libtpu"] = metadata.version("libtpu-nightly")
        except metadata.PackageNotFoundError:
            pass
    return out
