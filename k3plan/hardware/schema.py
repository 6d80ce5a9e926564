"""The schema of hardware_specs/<name>.yaml: what a spec file may say, checked strictly.

Every number is a ``Sourced`` value: the figure as written (with its unit, e.g. "96GiB",
"3.69TB/s", "9.88us"), a non-empty ``source`` and, where sources disagree, ``alternatives``
(recorded, not used). Units are parsed later, by k3plan.units only (see spec.py).

Conventions: capacities, bandwidths and FLOP/s are per JAX device (v7x: 2 devices a chip);
link bandwidths are one-way per chip; ``domain`` counts chips.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Optional, Union

import msgspec

from k3plan.specfile import Spec

# A figure as written: a number or a string with its unit; finite, within int64, short, and not a bool
# (``true`` is not 1), which _check_scalar refuses in words. Units are parsed later, by k3plan.units.
Scalar = Union[bool, int, float, Annotated[str, msgspec.Meta(max_length=200)]]


def _check_scalar(value: object) -> None:
    if isinstance(value, bool):
        raise ValueError(f"value: {value!r} is not a figure; expected a number or a string with its unit like '96GiB'")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"value: {value!r}: expected a finite number")
    if isinstance(value, int) and abs(value) > 2**63 - 1:
        raise ValueError("value: an integer of more than 19 digits; expected one below 2^63")


class _HasSource(Spec):
    source: str

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ValueError("source: must not be empty: every number needs a source")
        value = getattr(self, "value", None)
        if value is not None:
            _check_scalar(value)


class Alternative(_HasSource):
    """A figure another source gives; recorded, not used."""

    value: Scalar
    note: Optional[str] = None


class Sourced(_HasSource):
    """A value as written in the spec, with where it comes from."""

    value: Scalar
    note: Optional[str] = None
    alternatives: tuple[Alternative, ...] = ()


class FlopsEntry(_HasSource):
    """Dense FLOP/s a device for one dtype: a figure, or `no_gain: true` (runs at the bf16 rate,
    so a planner may use bf16's figure), or `unsupported: true` (no matmul path for it)."""

    value: Optional[Scalar] = None
    no_gain: bool = False
    unsupported: bool = False
    note: Optional[str] = None
    alternatives: tuple[Alternative, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if sum([self.value is not None, self.no_gain, self.unsupported]) != 1:
            raise ValueError("give exactly one of value, no_gain: true, unsupported: true")


class LinkFile(Spec):
    """A scale-up (ICI, NVLink, xGMI) or scale-out (DCN, InfiniBand/RoCE) link as written."""

    name: str
    kind: Literal["torus3d", "torus2d", "switch", "fullmesh", "network"]
    bw_per_chip: Sourced  # one-way, per chip
    latency: Sourced  # per collective call: a default; probes measure the real figure
    # chips reachable over this link: scale-up, its domain (required); scale-out, the most chips a deployment
    # joins over it (required for a TPU, whose N*slice topologies nothing else bounds)
    domain: Optional[Sourced] = None


class PriceFile(_HasSource):
    """On-demand list price a chip-hour, dated; ``usd_per_chip_hour: null`` records that no public
    figure was found, and then ``note`` must say why (the planner treats it as unpriced)."""

    usd_per_chip_hour: Optional[Annotated[float, msgspec.Meta(gt=0)]] = None
    date: str
    note: str | None = None
    alternatives: tuple[Alternative, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.usd_per_chip_hour is not None and not math.isfinite(self.usd_per_chip_hour):
            raise ValueError(f"usd_per_chip_hour: {self.usd_per_chip_hour!r}: expected a finite number")
        if self.usd_per_chip_hour is None and not (self.note or "").strip():
            raise ValueError("usd_per_chip_hour: null needs a note saying why no price is given")


class TierFile(Spec):
    """A memory tier below HBM (host DRAM, local SSD, remote storage), per host as written.
    ``size_per_host`` may be omitted for remote storage (no capacity limit the planner knows)."""

    size_per_host: Optional[Sourced] = None
    bw_to_hbm_per_host: Sourced  # one-way, tier -> the host's accelerators' HBM, all links together
    latency: Optional[Sourced] = None  # first byte, per restore


class MemoryTiersFile(Spec):
    """Optional: the tiers below HBM that hold suspended sessions' KV and state (issue 14)."""

    host_dram: Optional[TierFile] = None
    local_ssd: Optional[TierFile] = None
    remote: Optional[TierFile] = None


class TopologyRules(_HasSource):
    """How topology strings read for this hardware, and the standard shapes a search tries."""

    form: Literal["grid3d", "grid2d", "gpus"]
    standard: tuple[str, ...]


class HardwareFile(Spec):
    """One hardware_specs/*.yaml, key for key."""

    name: str
    kind: Literal["tpu", "gpu"]
    vendor: str
    description: str = ""
    device_kind: Sourced  # the string jax reports as device.device_kind (best effort for GPUs)
    devices_per_chip: Sourced
    hbm_per_device: Sourced
    usable_hbm_per_device: Sourced
    hbm_bw_per_device: Sourced
    flops_per_device: dict[str, FlopsEntry]
    scale_up: LinkFile
    scale_out: LinkFile
    chips_per_host: Sourced
    max_chips: Sourced
    wraparound_min: Optional[Sourced] = None  # TPU: smallest grid with torus wraparound, "4x4x4"
    topology: TopologyRules
    price: Optional[PriceFile] = None
    memory_tiers: Optional[MemoryTiersFile] = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """The name is printed in every result's first line and matched by --hardware and --price: not blank
        or padded."""
        if not self.name.strip() or self.name != self.name.strip():
            raise ValueError(
                f"name: {self.name!r}: expected a name such as 'tpu-v7x', without leading or trailing spaces"
            )

    def sources(self) -> dict[str, str]:
        """field path -> source, for every sourced figure in the file."""
        out: dict[str, str] = {}
        for field in (
            "device_kind",
            "devices_per_chip",
            "hbm_per_device",
            "usable_hbm_per_device",
            "hbm_bw_per_device",
            "chips_per_host",
            "max_chips",
            "wraparound_min",
        ):
            value = getattr(self, field)
            if value is not None:
                out[field] = value.source
        for dtype, entry in self.flops_per_device.items():
            out[f"flops_per_device.{dtype}"] = entry.source
        for link_name in ("scale_up", "scale_out"):
            link = getattr(self, link_name)
            for field in ("bw_per_chip", "latency", "domain"):
                value = getattr(link, field)
                if value is not None:
                    out[f"{link_name}.{field}"] = value.source
        out["topology"] = self.topology.source
        if self.price is not None:
            out["price"] = f"{self.price.source} ({self.price.date})"
        return out
