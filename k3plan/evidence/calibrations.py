"""The one registry of shipped temp calibrations, and the rule that picks the best one.

The files live in ``k3plan/evidence/calibrations/`` (package data) and are read with
``k3plan.evidence.calibration.load_calibration``; ``index.yaml`` there adds what a file does not say
itself: its kind (``measured`` on a real device, or ``compiled`` deviceless by ``k3plan validate``)
and the KV-cache dtype it was taken with. A configuration matches a file when model, hardware,
topology, tp, dp, stack and KV dtype are equal and ep is equal or unrecorded (the file was taken
with the stack's default EP). Among matches a measured file beats a compiled one; ties go to the
file with more points, then the newer date. Callers: fit / curve / plan / report / check use the
result as their default temp evidence and name ``calibration.path`` and the kind in their output;
an explicit ``--calibration`` overrides it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from k3plan.errors import K3PlanError
from k3plan.evidence.calibration import BUNDLED_SHOWN, FOLDER, INDEX, Calibration, load_calibration
from k3plan.specfile import Spec, convert
from k3plan.structs import replace

Kind = Literal["measured", "compiled"]
RANK: dict[str, int] = {"measured": 0, "compiled": 1}  # lower is better evidence


class Entry(Spec):  # an index.yaml entry (a msgspec Struct, read not strictly, as pydantic's lax mode did)
    file: str
    kind: Kind
    kv_dtype: str
    origin: str = ""


class Evidence(Spec):
    """One shipped calibration with its index entry."""

    calibration: Calibration
    kind: Kind
    kv_dtype: str


def _read_index(folder: Path) -> list[Entry]:
    from k3plan.safeparse import parse_yaml, read_text

    path = folder / INDEX
    label = f"calibration registry {path}"
    raw = parse_yaml(label, read_text(label, path))
    if not isinstance(raw, list):
        raise K3PlanError(f"calibration registry {path}: expected a list of {{file, kind, kv_dtype}} entries")
    return [
        convert(Entry, item, f"calibration registry {path}: entry {i + 1}", strict=False) for i, item in enumerate(raw)
    ]


@lru_cache(maxsize=4)
def _index(folder: str | None) -> tuple[Entry, ...]:
    """The registry folder's index entries, every calibration file in it listed."""
    where = Path(folder) if folder else FOLDER
    entries = _read_index(where)
    listed = {e.file for e in entries}
    unlisted = sorted(p.name for p in where.glob("*.yaml") if p.name != INDEX and p.name not in listed)
    if unlisted:
        raise K3PlanError(
            f"calibration registry {where}: {', '.join(unlisted)} not in {INDEX} (kind and kv_dtype unknown)"
        )
    return tuple(entries)


@lru_cache(maxsize=64)
def _evidence(folder: str | None, entry: Entry) -> Evidence:
    """One indexed calibration, read and validated once a process."""
    where = Path(folder) if folder else FOLDER
    shown = BUNDLED_SHOWN if folder is None else str(where)  # the same name installed or not
    return Evidence(
        calibration=replace(load_calibration(str(where / entry.file)), path=f"{shown}/{entry.file}"),
        kind=entry.kind,
        kv_dtype=entry.kv_dtype,
    )


def registry(folder: str | None = None) -> tuple[Evidence, ...]:
    """Every calibration in the registry folder (default: the packaged one), as indexed."""
    return tuple(_evidence(folder, e) for e in _index(folder))


def same_stack(a: str, b: str) -> bool:
    """Two stack names for one stack: a calibration taken under an old name (an engine's ``Engine.aliases``:
    vllm-tpu's files, compiled with vLLM's model-code ShardSpecs) is evidence for the stack that name now loads
    (torchtpu-vllm)."""
    from k3plan.engines.registry import canonical

    return canonical(a) == canonical(b)


def _matches(
    cal: Calibration, *, model: str, hardware: str, topology: str, tp: int, ep: int | None, dp: int, stack: str
) -> bool:
    return (
        cal.model == model
        and cal.hardware == hardware
        and cal.topology == topology
        and cal.tp == tp
        and cal.dp == dp
        and same_stack(cal.stack, stack)
        and (cal.ep is None or ep is None or cal.ep == ep)
    )


def best_calibration(
    *,
    model: str,
    hardware: str,
    topology: str,
    tp: int,
    ep: int | None,
    dp: int,
    stack: str,
    kv_dtype: str,
    folder: str | None = None,
) -> tuple[Calibration, Kind] | None:
    """The best shipped evidence for this configuration, or None: measured > compiled, then the
    file with more points, then the newer date. ``kv_dtype`` is the effective KV-cache dtype (the
    stack's default or the --kv-dtype override)."""
    candidates = (_evidence(folder, e) for e in _index(folder) if e.kv_dtype == kv_dtype)  # read only these
    found = [
        ev
        for ev in candidates
        if _matches(ev.calibration, model=model, hardware=hardware, topology=topology, tp=tp, ep=ep, dp=dp, stack=stack)
    ]
    if not found:
        return None
    best = min(
        found,
        key=lambda ev: (
            RANK[ev.kind],
            -(len(ev.calibration.prefill) + len(ev.calibration.decode)),
            _neg_date(ev.calibration.date),
        ),
    )
    return best.calibration, best.kind


def _neg_date(date: str | None) -> tuple:
    """Sort key putting newer ISO dates first (a missing date last)."""
    return (date is None, tuple(-ord(c) for c in (date or "")))
