"""What `k3plan validate` answers, typed: per compiled job the budget, the abstract model's bytes,
the compiler's memory analysis, the term-by-term comparison and the HLO collectives; for the run
the setup and the environment. Field order is the `validate --json` key order (the files under
reports/validation/ are this JSON); ``from_json`` reads one back (benchmarks/compile_point.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Optional

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from k3plan.step.terms import TermBytes, term_map
from k3plan.validate.collective_check import CollectiveCheck
from k3plan.validate.compile import MemoryStats


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _entries(key: str):
    """A {name: value} mapping (the JSON's form) -> entries with the name under ``key``."""

    def read(v: Any) -> Any:
        if isinstance(v, Mapping):
            return tuple({key: k, **x} if isinstance(x, Mapping) else {key: k, "bytes": x} for k, x in v.items())
        return v

    return read


class JobBudget(_Frozen):
    """fit's per-device figures for the job's workload (the prediction)."""

    weights_bytes: int
    kv_bytes: int
    state_bytes: int
    temp_bytes: Optional[int]  # the stage's temp (None: the calibration refuses the graph)
    # the stage's analytic temp terms, dumped as {name: bytes}
    temp_terms: Annotated[
        tuple[TermBytes, ...],
        BeforeValidator(_entries("name")),
        PlainSerializer(term_map, return_type=dict[str, int]),
    ]


class JobAbstract(_Frozen):
    """Bytes of the abstract model's arrays, a device."""

    weights_bytes: int
    cache_bytes: int
    inputs_bytes: int


class OomReport(_Frozen):
    required_bytes: Optional[int]
    available_bytes: Optional[int]
    message: str


class TermReason(_Frozen):
    why: str
    bytes: int


class TermReport(_Frozen):
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


class OpCount(_Frozen):
    """One collective kind in the compiled HLO (validate.hlo_census.OpStats)."""

    op: str
    count: int
    bytes: int
    in_loop: int
    executed: int
    executed_bytes: int


def _ops_map(entries: tuple[OpCount, ...]) -> dict[str, dict[str, int]]:
    return {e.op: e.model_dump(exclude={"op"}) for e in entries}


class CensusReport(_Frozen):
    # dumped as {op: {count, bytes, in_loop, executed, executed_bytes}}
    ops: Annotated[tuple[OpCount, ...], BeforeValidator(_entries("op")), PlainSerializer(_ops_map, return_type=dict)]
    while_loops: int


class LocalRun(_Frozen):
    """--target local: the compiled step run once on the attached chip with real arrays (when it fits)."""

    measured_step_s: Optional[float]  # p50 of the timed calls (None: not run, ``note`` says why)
    samples_s: list[float]
    fit_fits: bool  # fit's verdict for the same configuration
    agrees: bool  # fit's verdict == the compiled verdict
    note: str


class OomBoundary(_Frozen):
    """--target local: the workload doubled (decode: batch; prefill: tokens) until the compiled step no
    longer fits the chip: the last size that fits, the first that does not, and why."""

    axis: str  # "batch" or "tokens"
    fits_at: Optional[int]
    refused_at: Optional[int]
    verdict: str  # the refusing compile's verdict line (or why the search stopped)


class JobResult(_Frozen):
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

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        for key in ("collectives", "local_run", "oom_boundary"):
            if getattr(self, key) is None:
                out.pop(key, None)
        return out


class Split(_Frozen):
    tp: int
    ep: int
    dp: int


class Devices(_Frozen):
    count: int
    platform: str
    device_kind: str


class Environment(_Frozen):
    target: str
    backend: str
    jax_version: str
    libtpu_version: Optional[str]
    devices: Devices
    date: str  # UTC, ISO 8601


class ValidationResult(_Frozen):
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

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if self.calibration_file is None:
            out.pop("calibration_file", None)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ValidationResult:
        """A saved `validate --json` (keys the model does not know, e.g. a benchmark's wall_s, ignored)."""
        return cls.model_validate({k: v for k, v in data.items() if k in cls.model_fields})
