"""The typed results of a capacity report (report/capacity.py fills them, capacity_doc/plots/findings
render them). Field order is the `report --json` key order; a context where nothing fits dumps its
setup, per_device, decode and prefill as {} (as the dict fields did)."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.budget.curve import CurvePoint
from k3plan.budget.result import Provenance
from k3plan.structs import Frozen, dump, fields
from k3plan.tiers.sessions import TierSessions


class RowSetup(Frozen):
    """The smallest viable (topology, split) at one context."""

    topology: str
    chips: int
    devices: int
    hosts: int
    tp: int
    ep: int
    dp: int
    stack: str
    pp: int = 1  # pipeline stages (issue 18): the split reads tp/ep/dp, then "pp N" when > 1

    @property
    def split(self) -> str:
        return f"{self.tp}/{self.ep}/{self.dp}" + (f" pp{self.pp}" if self.pp > 1 else "")


class RowTerms(Frozen):
    """Bytes a device by term, from the pick's fit (the memory plot's bars, in this order)."""

    weights_bytes: int
    kv_bytes: int
    state_bytes: int
    temp_bytes: int
    reserve_bytes: int
    free_bytes: int

    def items(self) -> list[tuple[str, int]]:
        """(term, bytes) in field order: the rows of a table, the segments of a bar."""
        return [(k, getattr(self, k)) for k in fields(self)]


class DecodeAt(Frozen):
    """The decode roofline bound at one batch."""

    batch: int
    tokens_per_s: float
    tokens_per_s_per_chip: float
    tpot_s: float
    binding: str
    comm_share: float
    latency_source: str
    usd_per_mtok: Optional[float]
    expected_tpot_s: Optional[float] = None  # issue 17: the step's ops at measured efficiency (else ceiling)
    expected_measured: Optional[bool] = None  # did any op use a probe record
    # issue 38: tpot_s is the figure fit, plan and roofline stand behind (a serving benchmark's, measured or
    # transferred, where one speaks for the configuration; else the bound), ceiling_tpot_s the bound
    tpot_source: str = "ceiling"
    tpot_label: str = ""
    ceiling_tpot_s: Optional[float] = None


class RowDecode(Frozen):
    concurrency: DecodeAt  # at the requested concurrency
    full: Optional[DecodeAt] = None  # at the most sequences that fit, when that is more

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        if out.get("full") is None:
            out.pop("full", None)
        return out

    @property
    def most(self) -> DecodeAt:
        """At the most sequences that fit (the requested concurrency when no more do)."""
        return self.full or self.concurrency

    def points(self) -> list[tuple[str, DecodeAt]]:
        return [("concurrency", self.concurrency)] + ([("full", self.full)] if self.full is not None else [])


class PrefillAt(Frozen):
    """The prefill roofline bound of one prompt of the row's context."""

    prompt_tokens: int
    chunk_tokens: int
    ttft_s: float
    tokens_per_s: float
    feasible: bool
    note: str
    link_share: float
    usd_per_mtok: Optional[float]
    expected_ttft_s: Optional[float] = None  # issue 17, as DecodeAt's
    expected_measured: Optional[bool] = None
    ttft_source: str = "ceiling"  # issue 38, as DecodeAt's tpot_source
    ttft_label: str = ""
    ceiling_ttft_s: Optional[float] = None


class RowProvenance(Provenance):
    """What each number of a row comes from: the fit's provenance, then what the report adds."""

    expected: str  # the efficiency records the expected times use, or why none
    hbm_bw: str
    flops: str
    collective_latency: str
    efficiency: str

    def lines(self) -> list[str]:
        """``name: source`` for every field, in the JSON's order."""
        return [f"{k}: {v}" for k, v in dump(self, "python").items()]


def _empty(v: Optional[Frozen]) -> Any:
    """A part of a row that nothing fitting leaves out dumps as {} (as the dict fields did)."""
    return {} if v is None else v


class ContextRow(Frozen):
    __dump_with__ = {name: _empty for name in ("setup", "per_device", "decode", "prefill", "provenance")}

    context_tokens: int
    fits: bool
    reason: str = ""
    setup: Optional[RowSetup] = None  # None: nothing fits at this context (so for the next three)
    per_device: Optional[RowTerms] = None
    usable_bytes_per_device: int = 0
    max_context_tokens: int = 0
    max_sequences: int = 0
    model_max_context_tokens: int | None = None
    decode: Optional[RowDecode] = None
    prefill: Optional[PrefillAt] = None
    provenance: Optional[RowProvenance] = None  # None: nothing fits at this context
    warnings: list[str] = []
    notes: list[str] = []  # what the pick's every figure rests on (an uneven expert placement: fit's note)


class RooflinePoint(Frozen):
    """One decode step on the roofline plot."""

    batch: int
    intensity: float  # FLOP / HBM byte, a device
    flops_per_s: float  # attained, a device
    binding: str


class Roof(Frozen):
    """A device's roof: MFU-scaled and peak FLOP/s, efficiency-scaled HBM bytes/s."""

    flops_per_s: float
    peak_flops_per_s: float
    hbm_bytes_per_s: float


class ContextAdvice(Frozen):
    """k3plan.advice's rules at one viable context (report/capacity_advice.py)."""

    context_tokens: int
    verdict: str
    headroom_fraction: float
    warnings: list[str]
    suggestions: list[str]
    alternatives: list[str]


class PlatformReport(Frozen):
    hardware: str
    kind: str
    stack: str
    price_usd_per_chip_hour: Optional[float]
    price_source: str
    candidates_tried: int
    rows: list[ContextRow]
    curve: list[CurvePoint] = []
    curve_setup: str = ""
    roofline_points: list[RooflinePoint] = []  # decode at growing batch
    roof: Roof
    advice: list[ContextAdvice] = []  # per viable context
    tiers: list[TierSessions] = []  # suspended sessions per memory tier (specs with memory_tiers)
    tiers_setup: str = ""


class ReportOutput(Frozen):
    """`report --json`: the files written (markdown, plots, HTML) and each platform's report."""

    written: list[str]
    platforms: list[PlatformReport]
