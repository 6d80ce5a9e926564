"""Reading probe records for the planner (jax-free: `fit`, `roofline` and `plan` use it).

    load_records(dir)                                   every valid record under dir
    latest_latency(src, device_kind=, op=, mode=)       (seconds a call, record, path) or None
    effective_bandwidth(src, device_kind=, probe=)      (bytes/s, record, path) or None
    describe(record, path)                              "probed on TPU7x (...) <path>"

Rules: the newest record (by ``date``) that matches the device kind wins; records whose
verification failed (e.g. XLA replaced the collective) or that failed to run are skipped; a record
from the CPU backend is never applied to an accelerator unless ``allow_cpu`` (and then only when no
record of the device kind itself exists). ``src``: a folder, or the (record, name) pairs an
``Evidence`` value holds (the shipped records plus a user's --probes folders).
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Optional, Sequence, Union

from k3plan.errors import K3PlanError
from k3plan.safeparse import parse_json, read_text
from k3plan.specfile import convert

if TYPE_CHECKING:  # the schema is imported where a record is read: a fit without --probes builds none of it
    from k3plan.evidence.probe_record import ProbePoint, ProbeRecord

OP_ALIASES = {
    "a2a": "all-to-all",
    "all-to-all": "all-to-all",
    "alltoall": "all-to-all",
    "all_to_all": "all-to-all",
    "allreduce": "all-reduce",
    "all-reduce": "all-reduce",
    "all_reduce": "all-reduce",
    "psum": "all-reduce",
    "allgather": "all-gather",
    "all-gather": "all-gather",
    "all_gather": "all-gather",
}

PathLike = Union[str, PurePath]
Pairs = Sequence[tuple["ProbeRecord", PurePath]]  # (record, its name): Evidence.records, load_with_paths
Source = Union[PathLike, Pairs]


def record_pairs(src: Source) -> list[tuple[ProbeRecord, PurePath]]:
    """A folder's records, or the pairs as given (oldest first either way)."""
    if isinstance(src, (str, PurePath)):
        return list(load_with_paths(Path(src)))
    return list(src)


def canonical_op(op: str) -> str:
    try:
        return OP_ALIASES[op.lower()]
    except KeyError:
        raise K3PlanError(f"unknown collective {op!r}; expected one of a2a, allreduce, allgather") from None


def load_records(dir: PathLike, *, strict: bool = True) -> list[ProbeRecord]:
    """Every record in `dir` (recursively), oldest first. A file that is not a probe record
    (corrupt, binary, a list, the wrong keys) is a K3PlanError naming it; ``strict=False`` skips
    such files instead (for listing a folder of mixed files, never for planning)."""
    return [rec for rec, _ in load_with_paths(Path(dir), strict=strict)]


def load_with_paths(dir: Path, *, strict: bool = True, shipped: bool = False) -> list[tuple[ProbeRecord, Path]]:
    """``shipped``: the package's own records (k3plan/evidence/probes), read as the package's other data files are,
    without the hostile-input checks a user's file gets (a fit reads all of them: ~80 ms with the checks, ~15
    without); each is still checked against the record schema."""
    if not dir.is_dir():
        raise K3PlanError(f"--probes {dir}: not a folder of probe records")
    out = []
    for path in sorted(dir.rglob("*.json")):
        try:
            out.append((_read_record(path, shipped=shipped), path))
        except K3PlanError:
            if strict:
                raise
    out.sort(key=lambda rp: (rp[0].date, rp[1].name))
    return out


def _read_record(path: Path, *, shipped: bool = False) -> ProbeRecord:
    label = f"--probes {path}"
    if shipped:
        import json

        raw = json.loads(path.read_bytes())
    else:
        raw = parse_json(label, read_text(label, path))
    if not isinstance(raw, dict):
        raise K3PlanError(
            f"{label}: a JSON {type(raw).__name__}, not a probe record; expected an object "
            "written by `k3plan probe` (move other files out of the folder)"
        )
    from k3plan.evidence.probe_record import ProbeRecord, check_values

    # not strict: as pydantic's lax mode read a record ("8" is 8); then no figure a measurement cannot give
    record = convert(ProbeRecord, raw, f"{label}: not a probe record", strict=False)
    check_values(record, label)
    return record


def _matching(src: Source, *, device_kind: str, allow_cpu: bool, want) -> list[tuple[ProbeRecord, PurePath]]:
    usable = [(r, p) for r, p in record_pairs(src) if r.ok and r.verified is not False and want(r)]
    kind = device_kind.lower()
    exact = [(r, p) for r, p in usable if r.device_kind.lower() == kind and (not r.is_cpu or kind == "cpu")]
    if exact:
        return exact
    if allow_cpu:
        return [(r, p) for r, p in usable if r.is_cpu]
    return []


def _valued(record: ProbeRecord) -> list[ProbePoint]:
    return [pt for pt in record.points if pt.value is not None]


def latest_latency(
    src: Source,
    *,
    device_kind: str,
    op: str,
    mode: str = "chained",
    allow_cpu: bool = False,
    message_bytes: Optional[int] = None,
) -> Optional[tuple[float, ProbeRecord, PurePath]]:
    """Per-call latency (s) of collective `op` from the newest matching record: the point with the
    smallest message size, or the one for `message_bytes` (exact, else the smallest size above it,
    else the largest measured)."""
    name = canonical_op(op)
    found = _matching(
        src, device_kind=device_kind, allow_cpu=allow_cpu, want=lambda r: r.op == name and r.mode == mode and _valued(r)
    )
    if not found:
        return None
    record, path = found[-1]
    points = sorted(_valued(record), key=lambda pt: int(pt.params.get("bytes", 0)))
    point = points[0]
    if message_bytes is not None:
        above = [pt for pt in points if int(pt.params.get("bytes", 0)) >= message_bytes]
        point = above[0] if above else points[-1]
    assert point.value is not None  # _valued keeps only points with a value
    return float(point.value), record, path


def effective_bandwidth(
    src: Source, *, device_kind: str, probe: str = "hbm", allow_cpu: bool = False
) -> Optional[tuple[float, ProbeRecord, PurePath]]:
    """Achieved bytes/s a device from the newest matching `probe` record: the envelope (the best
    point measured), never an extrapolation."""
    found = _matching(
        src,
        device_kind=device_kind,
        allow_cpu=allow_cpu,
        want=lambda r: r.probe == probe and any(pt.unit == "bytes/s" for pt in _valued(r)),
    )
    if not found:
        return None
    record, path = found[-1]
    best = max(pt.value for pt in record.points if pt.value is not None and pt.unit == "bytes/s")
    return float(best), record, path


def record_named(source: str) -> Optional[str]:
    """The record a ``describe`` line (or a line ending in one: a measured HBM bandwidth's, a collective latency's
    source) names: its text after the last ": "; None for any other source (a spec's)."""
    if "probed on " not in source or ": " not in source:
        return None
    return source.rsplit(": ", 1)[1] or None


def records_named(*sources: Optional[str]) -> tuple[str, ...]:
    """The records the given figure sources name, each once, in order (issue 46: the JSON names every record)."""
    return tuple(dict.fromkeys(r for s in sources if s for r in [record_named(s)] if r))


def describe(record: ProbeRecord, path: Optional[PathLike] = None) -> str:
    """One line naming where a measured figure comes from."""
    what = f"probed on {record.device_kind} ({record.backend}, {record.device_count} devices"
    what += f", jax {record.jax_version}" if record.jax_version else ""
    what += f", {record.date})"
    if record.label or record.is_cpu:
        what += f" [{record.label or 'CPU backend'}]"
    return what + (f": {path}" if path is not None else "")
