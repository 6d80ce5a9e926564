"""Write a validation sweep as a calibration file that ``fit --calibration`` reads.

Format: k3plan/budget/calibration.py (model, hardware, topology, tp, ep, dp, stack, backend,
device_kind, jax_version, libtpu_version, date, source, available_hbm_gib, argument_gib,
prefill [{tokens, temp_gib, fits}], decode [{context, temp_gib, batch, fits}], notes). Sizes per
device in GiB. A point the compiler refused is written with fits: false and the temp it asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from k3plan.errors import K3PlanError
from k3plan.io_safe import write_text
from k3plan.units import GiB
from k3plan.validate.result import JobResult, ValidationResult


def _temp_gib(r: JobResult) -> Optional[float]:
    if r.oom:
        need = r.oom.required_bytes
        return round(need / GiB, 4) if need is not None else None
    temp = None if r.memory is None else r.memory.temp_bytes
    return None if temp is None else round(temp / GiB, 4)


def _weights_gib(results: list[JobResult]) -> Optional[float]:
    for r in results:
        for t in r.terms:
            if t.name == "weights" and t.compiled_bytes is not None:
                return round(t.compiled_bytes / GiB, 4)
    return None


def calibration_dict(result: ValidationResult, *, usable_bytes: int) -> dict:
    """The calibration file's content (a YAML mapping, k3plan/budget/calibration.py's format)."""
    env = result.environment
    results = result.results
    available = next(
        (r.oom.available_bytes for r in results if r.oom is not None and r.oom.available_bytes), usable_bytes
    )
    prefill, decode = [], []
    for r in results:
        temp = _temp_gib(r)
        if temp is None:
            continue
        if r.stage == "prefill":
            prefill.append({"tokens": r.tokens, "temp_gib": temp, "fits": bool(r.fits)})
        else:
            decode.append({"context": r.context, "temp_gib": temp, "batch": r.batch, "fits": bool(r.fits)})
    if not prefill and not decode:
        raise K3PlanError("--save-calibration: no compiled point to write (memory_analysis() gave no temp)")
    notes = [f"k3plan validate --target {env.target}: {result.layer_plan}", *result.notes]
    if env.backend == "cpu":
        notes.insert(0, "CPU backend compile: temp is not representative of TPU")
    return {
        "model": result.model,
        "hardware": result.hardware,
        "topology": result.topology,
        "tp": result.parallel.tp,
        "ep": result.parallel.ep,
        "dp": result.parallel.dp,
        "stack": result.stack,
        "backend": env.backend,
        "device_kind": env.devices.device_kind,
        "jax_version": env.jax_version,
        "libtpu_version": env.libtpu_version,
        "date": env.date,
        "source": f"k3plan validate ({'deviceless TPU compile' if env.backend == 'tpu' else 'fake CPU devices'}), "
        f"{result.layers} layers",
        "available_hbm_gib": round(available / GiB, 4),
        "argument_gib": _weights_gib(results),
        "prefill": prefill,
        "decode": decode,
        "notes": notes,
    }


def write_calibration(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(
            path,
            "# written by k3plan validate; sizes per device, GiB = 2^30 B\n"
            + yaml.safe_dump(data, sort_keys=False, width=110),
            label="--save-calibration",
        )
    except OSError as err:
        raise K3PlanError(f"--save-calibration {path}: cannot write: {err}") from None


_SAME = (
    "model",
    "hardware",
    "topology",
    "tp",
    "ep",
    "dp",
    "stack",
    "backend",
    "device_kind",
    "jax_version",
    "libtpu_version",
)


def merge_calibrations(parts: list[dict]) -> dict:
    """Points compiled in separate runs (one process a point) as one calibration: every run must
    describe the same configuration and toolchain; the date is the last run's, points are sorted."""
    if not parts:
        raise K3PlanError("merge: no calibration to merge")
    first = parts[0]
    for p in parts[1:]:
        diff = [k for k in _SAME if p.get(k) != first.get(k)]
        if diff:
            raise K3PlanError(f"merge: runs differ in {', '.join(diff)}; a calibration describes one configuration")
    out = dict(first)
    out["date"] = max(p["date"] for p in parts)
    out["available_hbm_gib"] = min(p["available_hbm_gib"] for p in parts)
    out["argument_gib"] = next((p["argument_gib"] for p in parts if p.get("argument_gib") is not None), None)
    out["prefill"] = sorted((pt for p in parts for pt in p["prefill"]), key=lambda pt: pt["tokens"])
    out["decode"] = sorted(
        (pt for p in parts for pt in p["decode"]), key=lambda pt: (pt["context"], pt.get("batch") or 0)
    )
    out["notes"] = list(dict.fromkeys(n for p in parts for n in p["notes"]))
    return out
