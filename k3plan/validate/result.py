"""What `k3plan validate` answers, typed: per compiled job the budget, the abstract model's bytes,
the compiler's memory analysis, the term-by-term comparison and the HLO collectives; for the run
the setup and the environment. Field order is the `validate --json` key order (the files under
reports/validation/ are this JSON); ``from_json`` reads one back (benchmarks/compile_point.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import msgspec

from k3plan.step.terms import TermBytes, term_map
from k3plan.structs import Frozen, dump
from k3plan.validate.collective_check import CollectiveCheck
from k3plan.validate.compile import MemoryStats


def _entries(v: Any, key: str) -> Any:
    """A {name: value} mapping (the JSON's form) -> entries with the name under ``key``."""
    if isinstance(v, Mapping):
        return [{key: k, **x} if isinstance(x, Mapping) else {key: k, "bytes": x} for k, x in v.items()]
    return v


class JobBudget(Frozen):
    """fit's per-device figures for the job's workload (the prediction)."""

    __dump_with__ = {"temp_terms": term_map}  # the stage's analytic temp terms, dumped as {name: bytes}

    weights_bytes: int
    kv_bytes: int
    state_bytes: int
    temp_bytes: Optional[int]  # the stage's temp (None: the calibration refuses the graph)
    temp_terms: tuple[TermBytes, ...]


class JobAbstract(Frozen):
    """Bytes of the abstract model's arrays, a device."""

    weights_bytes: int
    cache_bytes: int
    inputs_bytes: int


class OomReport(Frozen):
    required_bytes: Optional[int]
    available_bytes: Optional[int]
    message: str


class TermReason(Frozen):
    why: str
    bytes: int


class TermReport(Frozen):
    """One term, predicted vs compiled (validate.compare.Term with its derived figures)."""

    name: str
    predicted_bytes: Optional[int]
    compiled_bytes: Optional[int]
    reasons: list[TermReason]
    note: str
    must_match: bool
    delta_bytes: Optional[int]
    delta_pct: Optional[float]
    unexplained_bytes: Optional[int]


class OpCount(Frozen):
    """One collective kind in the compiled HLO (validate.hlo_census.OpStats)."""

    op: str
    count: int
    bytes: int
    in_loop: int
    executed: int
    executed_bytes: int


def _ops_map(entries: tuple[OpCount, ...]) -> dict[str, dict[str, int]]:
    return {e.op: {k: v for k, v in dump(e).items() if k != "op"} for e in entries}


class CensusReport(Frozen):
    __dump_with__ = {"ops": _ops_map}  # dumped as {op: {count, bytes, in_loop, executed, executed_bytes}}

    ops: tuple[OpCount, ...]
    while_loops: int


class LocalRun(Frozen):
    """--target local: the compiled step run once on the attached chip with real arrays (when it fits)."""

    measured_step_s: Optional[float]  # p50 of the timed calls (None: not run, ``note`` says why)
    samples_s: list[float]
    fit_fits: bool  # fit's verdict for the same configuration
    agrees: bool  # fit's verdict == the compiled verdict
    note: str


class OomBoundary(Frozen):
    """--target local: the workload doubled (decode: batch; prefill: tokens) until the compiled step no
    longer fits the chip: the last size that fits, the first that does not, and why."""

    axis: str  # "batch" or "tokens"
    fits_at: Optional[int]
    refused_at: Optional[int]
    verdict: str  # the refusing compile's verdict line (or why the search stopped)


class JobResult(Frozen):
    stage: str
    label: str
    tokens: int
    batch: int
    context: int
    cache_capacity_tokens: int
    lower_s: float
    compile_s: float
    budget: JobBudget
    abstract: JobAbstract
    fits: bool
    oom: Optional[OomReport]  # the compiler refused the graph (then no memory, terms, census)
    memory: Optional[MemoryStats]  # the compiler's memory_analysis(), a device
    terms: list[TermReport]
    census: Optional[CensusReport]
    unexplained_bytes: Optional[int]
    verdict: str
    # the op list's collectives vs the compiled HLO's, kind by kind (None: no HLO text, or a record
    # written before the check existed: then the key is left out, so such records read back unchanged)
    collectives: Optional[CollectiveCheck] = None
    local_run: Optional[LocalRun] = None  # --target local only
    oom_boundary: Optional[OomBoundary] = None  # --target local only

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        for key in ("collectives", "local_run", "oom_boundary"):
            if getattr(self, key) is None:
                out.pop(key, None)
        return out


class Split(Frozen):
    tp: int
    ep: int
    dp: int


class Devices(Frozen):
    count: int
    platform: str
    device_kind: str


class Environment(Frozen):
    target: str
    backend: str
    jax_version: str
    libtpu_version: Optional[str]
    devices: Devices
    date: str  # UTC, ISO 8601


class ValidationResult(Frozen):
    model: str
    hardware: str
    topology: str
    parallel: Split
    stack: str
    layers: int
    layer_plan: str
    environment: Environment
    results: list[JobResult]
    fits: bool
    notes: list[str]
    calibration_file: Optional[str] = None  # --save-calibration: absent from the JSON otherwise

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.calibration_file is None:
            out.pop("calibration_file", None)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ValidationResult:
        """A saved `validate --json` (keys the model does not know, e.g. a benchmark's wall_s, ignored): the
        mappings the JSON dumps (temp terms, census ops) read back as entries, the collective check's computed
        keys dropped (recomputed)."""
        known = set(cls.__struct_fields__)
        out = {k: v for k, v in data.items() if k in known}
        out["results"] = [_job(j) for j in out.get("results", [])]
        return msgspec.convert(out, cls)


def _job(job: Any) -> Any:
    """One dumped JobResult as the Structs read it."""
    if not isinstance(job, Mapping):
        return job
    job = dict(job)
    if isinstance(job.get("budget"), Mapping):
        job["budget"] = {**job["budget"], "temp_terms": _entries(job["budget"].get("temp_terms"), "name")}
    if isinstance(job.get("census"), Mapping):
        job["census"] = {**job["census"], "ops": _entries(job["census"].get("ops"), "op")}
    if isinstance(job.get("collectives"), Mapping):
        job["collectives"] = CollectiveCheck.read(job["collectives"])
    return job
