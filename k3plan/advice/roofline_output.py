"""`roofline --json`: the decode and prefill bounds of one setup, the expected time beside them, the long-context
crossover, the advice on them and the prefix-cache TTFT (k3plan.app.roofline answers it, k3plan.report.roofline_table
renders it). Field order is the `roofline --json` key order."""

from __future__ import annotations

from typing import Optional

from k3plan.advice.rules import Advice
from k3plan.advice.wiring import SpecDecodeReport
from k3plan.roofline.bounds import DecodeBound, Efficiency, PrefillBound
from k3plan.roofline.result import LongContext
from k3plan.sharding.mesh import Parallel
from k3plan.speed.serving import ServingComparison
from k3plan.speed.stage import ExpectedSpeed
from k3plan.structs import Frozen
from k3plan.tiers.prefix import PrefixHit


class RooflineResult(Frozen):
    model: str
    hardware: str
    topology: str
    chips: int
    parallel: Parallel
    stack: str
    efficiency: Efficiency
    decode: DecodeBound
    prefill: PrefillBound
    expected: ExpectedSpeed
    long_context: LongContext
    notes: list[str]
    probes: list[str]
    # issue 46: every probe record a figure here used (efficiencies and kernel times of the expected times and of the
    # model a serving benchmark is transferred by, measured HBM bandwidth, collective latency), package-relative
    records_used: list[str] = []
    fits: bool
    fit_reason: str
    spec_decode: Optional[SpecDecodeReport]
    advice: Advice
    prefix_hit: Optional[PrefixHit] = None
    serving: Optional[ServingComparison] = None  # ceiling / model / measured, the gap named (issue 38)
