"""What `k3plan hardware list` and `hardware show` answer, typed: one spec's resolved figures (units
in the field names), and for `show` every figure's source, the spec file as read and a topology.
Field order is the JSON key order."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.hardware.schema import HardwareFile
from k3plan.hardware.spec import HardwareSpec, Link
from k3plan.hardware.topology import Topology
from k3plan.structs import Frozen, dump, fields


class DtypeFlops(Frozen):
    dtype: str
    flops_per_s: Optional[float]  # None: the spec marks the dtype unsupported


class FigureSource(Frozen):
    figure: str  # the spec file's field path ("hbm_per_device", "flops_per_device.bf16", ...)
    source: str


def _flops_map(entries: tuple[DtypeFlops, ...]) -> dict[str, Optional[float]]:
    return {e.dtype: e.flops_per_s for e in entries}


def _source_map(entries: tuple[FigureSource, ...]) -> dict[str, str]:
    return {e.figure: e.source for e in entries}


def _no_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_none(v) for v in value]
    return value


def _file(f: HardwareFile) -> dict:
    """The spec file as read, absent (None) keys left out."""
    return _no_none(dump(f))


class HardwareSummary(Frozen):
    __dump_with__ = {"flops_per_s_per_device": _flops_map}  # dumped as {dtype: FLOP/s or None}

    name: str
    kind: str
    vendor: str
    device_kind: str
    devices_per_chip: int
    hbm_bytes_per_device: int
    usable_bytes_per_device: int
    hbm_bw_bytes_per_s_per_device: float
    flops_per_s_per_device: tuple[DtypeFlops, ...]
    scale_up: Link
    scale_out: Link
    chips_per_host: int
    max_chips: int
    wraparound_min: Optional[tuple[int, ...]]
    standard_topologies: list[str]
    price_usd_per_chip_hour: Optional[float]
    path: str


class HardwareShow(HardwareSummary):
    # sources dumped as {field path: source}; the file as read, absent keys left out
    __dump_with__ = {**HardwareSummary.__dump_with__, "sources": _source_map, "file": _file}

    sources: tuple[FigureSource, ...]
    file: HardwareFile
    topology: Optional[Topology]


def hardware_summary(hw: HardwareSpec) -> HardwareSummary:
    return HardwareSummary(**_summary_fields(hw))


def hardware_show(hw: HardwareSpec, topology: Optional[Topology]) -> HardwareShow:
    return HardwareShow(
        **_summary_fields(hw),
        sources=tuple(FigureSource(figure=k, source=v) for k, v in hw.sources().items()),
        file=hw.file,
        topology=topology,
    )


def _summary_fields(hw: HardwareSpec) -> dict:
    """HardwareSummary's fields from the spec (flops resolved per dtype)."""
    s = {k: getattr(hw, k) for k in fields(HardwareSummary) if k != "flops_per_s_per_device"}
    flops = tuple(DtypeFlops(dtype=d, flops_per_s=v) for d, v in hw.flops_table().items())
    return {**s, "flops_per_s_per_device": flops, "standard_topologies": list(hw.standard_topologies)}
