"""Write a validation sweep as a calibration file that ``fit --calibration`` reads.

Format: k3plan/evidence/calibration.py (model, hardware, topology, tp, ep, dp, stack, backend,
device_kind, jax_version, libtpu_version, date, source, available_hbm_bytes, argument_bytes,
prefill [{tokens, temp_bytes, fits, context}], decode [{context, temp_bytes, batch, fits}], notes). Sizes
are bytes a device, exact ints: temp_bytes is memory_analysis()'s temp (or, for a point the
compiler refused, written with fits: false, the bytes its OOM message asked for), available_hbm_bytes
the HBM the OOM message reports (else the hardware's usable bytes), argument_bytes the compiled
weights. Files written before this spelt them available_hbm_gib, argument_gib and temp_gib (GiB a
device, 4 decimals); those records (k3plan/evidence/calibrations/, ../shared/data/calibration) are
not rewritten, the reader takes both spellings and ``merge_calibrations`` merges parts of either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from k3plan.errors import K3PlanError
from k3plan.io_safe import write_text
from k3plan.units import GiB
from k3plan.validate.result import JobResult, ValidationResult


def _temp_bytes(r: JobResult) -> Optional[int]:
    if r.oom:
        return r.oom.required_bytes
    return None if r.memory is None else r.memory.temp_bytes


def _weights_bytes(results: list[JobResult]) -> Optional[int]:
    for r in results:
        for t in r.terms:
            if t.name == "weights" and t.compiled_bytes is not None:
                return t.compiled_bytes
    return None


def calibration_dict(result: ValidationResult, *, usable_bytes: int) -> dict:
    """The calibration file's content (a YAML mapping, k3plan/evidence/calibration.py's format)."""
    env = result.environment
    results = result.results
    available = next(
        (r.oom.available_bytes for r in results if r.oom is not None and r.oom.available_bytes), usable_bytes
    )
    prefill, decode = [], []
    for r in results:
        temp = _temp_bytes(r)
        if temp is None:
            continue
        if r.stage == "prefill":
            prefill.append({"tokens": r.tokens, "temp_bytes": int(temp), "fits": bool(r.fits), "context": r.context})
        else:
            decode.append({"context": r.context, "temp_bytes": int(temp), "batch": r.batch, "fits": bool(r.fits)})
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
        "source": f"k3plan validate ({_how(env)}), {result.layers} layers",
        "available_hbm_bytes": int(available),
        "argument_bytes": _weights_bytes(results),
        "prefill": prefill,
        "decode": decode,
        "notes": notes,
    }


def write_calibration(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(
            path,
            "# written by k3plan validate; sizes (*_bytes) are bytes a device, exact\n"
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


# each size's two spellings: bytes (written since issue 10) and GiB (older files)
_SIZES = (("available_hbm_bytes", "available_hbm_gib"), ("argument_bytes", "argument_gib"))


def _recorded(parts: list[dict], new: str, old: str) -> list[tuple[str, int | float]]:
    """(key, value) of each part that records this size, in the part's own spelling."""
    out = []
    for p in parts:
        has = [k for k in (new, old) if p.get(k) is not None]
        if len(has) > 1:
            raise K3PlanError(f"merge: a run gives both {new} and {old}; expected one size")
        if has:
            out.append((has[0], p[has[0]]))
    return out


def _merged_size(parts: list[dict], new: str, old: str) -> tuple[str, int | float | None]:
    """HBM: the smallest any run saw; arguments: the first run's that recorded them. Kept in the
    parts' spelling when they agree on one; a mix of bytes and GiB parts is written in bytes
    (int(gib * GiB), as the reader converts the GiB spelling)."""
    got = _recorded(parts, new, old)
    if not got:  # recorded by none: null, under the first run's key
        return (old if old in parts[0] and new not in parts[0] else new), None
    if new == "argument_bytes":
        return got[0]
    if len({k for k, _ in got}) == 1:
        return got[0][0], min(v for _, v in got)
    return new, min(int(v) if k == new else int(v * GiB) for k, v in got)


def merge_calibrations(parts: list[dict]) -> dict:
    """Points compiled in separate runs (one process a point) as one calibration: every run must
    describe the same configuration and toolchain; the date is the last run's, points are sorted.
    Parts may be of either spelling (bytes or the older GiB): each point is kept as written, and
    available_hbm / argument as ``_merged_size`` says (never refused for mixing spellings)."""
    if not parts:
        raise K3PlanError("merge: no calibration to merge")
    first = parts[0]
    for p in parts[1:]:
        diff = [k for k in _SAME if p.get(k) != first.get(k)]
        if diff:
            raise K3PlanError(f"merge: runs differ in {', '.join(diff)}; a calibration describes one configuration")
    sizes = {pair: _merged_size(parts, *pair) for pair in _SIZES}
    out: dict = {}
    for k, v in first.items():  # the first run's key order, each size once in its merged spelling
        pair = next((pr for pr in _SIZES if k in pr), None)
        if pair is None:
            out[k] = v
        elif sizes[pair][0] not in out:
            out[sizes[pair][0]] = sizes[pair][1]
    for key, value in sizes.values():
        out.setdefault(key, value)
    out["date"] = max(p["date"] for p in parts)
    out["prefill"] = sorted((pt for p in parts for pt in p["prefill"]), key=lambda pt: pt["tokens"])
    out["decode"] = sorted(
        (pt for p in parts for pt in p["decode"]), key=lambda pt: (pt["context"], pt.get("batch") or 0)
    )
    out["notes"] = list(dict.fromkeys(n for p in parts for n in p["notes"]))
    return out


def _how(env) -> str:
    """How the temps were taken: on the attached chip (--target local), a deviceless TPU compile, or CPU."""
    if env.target == "local":
        return f"compiled on the attached {env.devices.device_kind} (--target local)"
    return "deviceless TPU compile" if env.backend == "tpu" else "fake CPU devices"
