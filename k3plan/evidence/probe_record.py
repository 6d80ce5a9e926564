"""ProbeRecord: what one probe run measured, on what, and how sure it is (JSON, jax-free).

Times are seconds (``*_s``), sizes bytes, rates per second. ``points`` hold the raw samples of
every sweep point; ``value`` of a point is the figure the planner uses (net per-call seconds for a
collective, bytes/s for hbm, FLOP/s for matmul, seconds a token for kda), its unit in ``unit``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Optional

import msgspec

from k3plan.errors import K3PlanError
from k3plan.structs import Frozen

SCHEMA_VERSION = 1
CPU_LABEL = "CPU backend: correctness only, not representative"


if TYPE_CHECKING:  # what mypy sees: a mutable, keyword-only dataclass-like base (Frozen, frozen=False, below)
    from typing_extensions import dataclass_transform

    @dataclass_transform(kw_only_default=True, field_specifiers=(msgspec.field,))
    class _Model:
        __struct_fields__: ClassVar[tuple[str, ...]]

else:

    class _Model(Frozen, frozen=False):
        """A msgspec Struct (issue 33: every fit reads the shipped probe records and builds no pydantic class),
        mutable as the pydantic model was (a probe fills a point in as it measures); unknown keys refused, values
        coerced at construction as pydantic's lax mode did (k3plan.structs.Frozen: an int given a float field holds a
        float). Read with k3plan.specfile.convert, written with k3plan.structs.dump."""


class Stats(_Model):
    """Order statistics of a list of samples (seconds, or whatever ``unit`` says)."""

    n: int
    min: float
    p50: float
    p90: float


class Attempt(_Model):
    """One implementation the dispatcher tried: ran, or why it could not."""

    implementation: str
    ok: bool
    reason: Optional[str] = None


class Verification(_Model):
    """A check that what ran is what was asked for (HLO op, numerics, path)."""

    check: str
    ok: bool
    expected_op: Optional[str] = None
    found_ops: dict[str, int] = msgspec.field(default_factory=dict)
    replaced_by: Optional[str] = None
    detail: Optional[str] = None


class Expectation(_Model):
    """What a hardware spec predicts for this probe, or why there is no prediction."""

    hardware: Optional[str] = None
    value: Optional[float] = None
    unit: Optional[str] = None
    formula: Optional[str] = None
    missing: Optional[str] = None


class ProbePoint(_Model):
    """One sweep point: its parameters, raw samples, stats, baseline and the derived value."""

    params: dict[str, Any]
    samples_s: dict[str, list[float]] = msgspec.field(default_factory=dict)
    stats: Optional[Stats] = None
    baseline_s: Optional[float] = None
    value: Optional[float] = None
    unit: Optional[str] = None
    expected: Optional[float] = None
    notes: list[str] = msgspec.field(default_factory=list)


class ProbeRecord(_Model):
    schema_version: int = SCHEMA_VERSION
    probe: str
    op: Optional[str] = None
    mode: Optional[str] = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    backend: str
    device_kind: str
    device_count: int
    local_device_count: Optional[int] = None
    process_count: int = 1
    jax_version: Optional[str] = None
    jaxlib_version: Optional[str] = None
    libtpu_version: Optional[str] = None
    date: str
    implementation: Optional[str] = None
    attempts: list[Attempt] = msgspec.field(default_factory=list)
    fallback: bool = False
    fallback_reasons: list[str] = msgspec.field(default_factory=list)
    label: Optional[str] = None
    ok: bool = True
    error: Optional[str] = None
    points: list[ProbePoint] = msgspec.field(default_factory=list)
    baseline: Optional[str] = None
    verification: list[Verification] = msgspec.field(default_factory=list)
    verified: Optional[bool] = None
    expectation: Optional[Expectation] = None
    cut_short: bool = False
    cut_short_reason: Optional[str] = None
    elapsed_s: Optional[float] = None
    source: Optional[str] = None
    notes: list[str] = msgspec.field(default_factory=list)

    @property
    def is_cpu(self) -> bool:
        return self.backend.lower() == "cpu"


# The sizes and counts a reader takes from a point's params (int(), float(), a curve's x): a number, finite and
# positive; a string ("8192", "abc"), a bool or a NaN there crashed fit/roofline/report or moved a curve silently.
POSITIVE_PARAMS = frozenset(
    {
        "bytes",
        "bytes_moved",
        "size",
        "rows",
        "tokens",
        "flops",
        "weight_bytes_touched",
        "state_bytes_moved",
        "wire_bytes_per_device",
        "touched_bytes",
        "heads",
        "head_dim",
        "seq_len",
        "m",
        "n",
        "k",
        "axis_size",
        "chunk",
    }
)
# counts that may be 0 (no context, no blocks)
COUNT_PARAMS = frozenset({"experts_touched", "blocks", "context", "queries_a_block", "pages_a_block", "page_size"})


def check_values(record: ProbeRecord, label: str) -> None:
    """Refuse a record whose figures no measurement can give, in one line naming the file and the key: a point's
    ``value`` that is not a positive finite number (a negative or 0 B/s rate, a "nan" a lax read made a float), a
    non-finite sample, stat, baseline or expectation, a size or count in ``params`` that is not a positive number.
    A rate above the spec's peak is a different check (k3plan.speed.curves: refused where applied)."""
    import math

    def bad(where: str, value: Any, expected: str) -> K3PlanError:
        return K3PlanError(f"{label}: {where} is {value!r}; expected {expected}")

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    def params(where: str, given: dict[str, Any]) -> None:
        for key, value in given.items():
            if key in POSITIVE_PARAMS or key in COUNT_PARAMS:
                if isinstance(value, list) or (value is None and where == "params"):  # a record's sweep: its points say
                    continue
                if not number(value) or value < 0 or (value == 0 and key in POSITIVE_PARAMS):
                    least = "positive" if key in POSITIVE_PARAMS else "non-negative"
                    raise bad(f"{where}.{key}", value, f"a {least} number")

    params("params", record.params)
    for i, pt in enumerate(record.points):
        at = f"points[{i}]"
        params(f"{at}.params", pt.params)
        if pt.value is not None and not (math.isfinite(pt.value) and pt.value > 0):
            raise bad(f"{at}.value", pt.value, f"a positive finite figure ({pt.unit or 'its unit'}) or none")
        if pt.baseline_s is not None and not math.isfinite(pt.baseline_s):  # a marginal: may be below 0
            raise bad(f"{at}.baseline_s", pt.baseline_s, "a finite number of seconds")
        if pt.expected is not None and not (math.isfinite(pt.expected) and pt.expected >= 0):
            raise bad(f"{at}.expected", pt.expected, "a finite number, 0 or above")
        if pt.stats is not None:
            for name in ("min", "p50", "p90"):
                if not math.isfinite(getattr(pt.stats, name)):
                    raise bad(f"{at}.stats.{name}", getattr(pt.stats, name), "a finite number")
        for name, samples in pt.samples_s.items():
            for j, s in enumerate(samples):
                if not math.isfinite(s):
                    raise bad(f"{at}.samples_s.{name}[{j}]", s, "a finite number of seconds")
