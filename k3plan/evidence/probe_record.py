"""ProbeRecord: what one probe run measured, on what, and how sure it is (JSON, jax-free).

Times are seconds (``*_s``), sizes bytes, rates per second. ``points`` hold the raw samples of
every sweep point; ``value`` of a point is the figure the planner uses (net per-call seconds for a
collective, bytes/s for hbm, FLOP/s for matmul, seconds a token for kda), its unit in ``unit``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Optional

import msgspec

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
