"""Peaks: the roofs one device kind is measured against (FLOP/s by dtype, HBM bytes/s, the links).

Efficiency is always ceiling time / measured time at a probed point, so the peaks used to turn a
record into an efficiency must be the same ones the ceiling of an op uses; both read this object.
"""

from __future__ import annotations

from k3plan.errors import K3PlanError
from k3plan.hardware.spec import DTYPE_ALIASES
from k3plan.structs import Frozen


class LinkPeak(Frozen):
    bw_bytes_per_s: float  # one-way, per chip; > 0
    latency_s: float  # per collective call; >= 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.bw_bytes_per_s > 0 and self.latency_s >= 0):
            raise ValueError(f"link peak: bandwidth {self.bw_bytes_per_s} must be > 0, latency {self.latency_s} >= 0")


class Peaks(Frozen):
    device_kind: str  # "as JAX reports it (TPU7x, NVIDIA H200, cpu)"
    hardware: str  # "the hardware spec name these came from (or 'hand-made' in tests)"
    flops_per_s_by_dtype: dict[str, float]
    hbm_bw_bytes_per_s: float  # > 0
    scale_up: LinkPeak
    scale_out: LinkPeak

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.hbm_bw_bytes_per_s > 0:
            raise ValueError(f"peaks: HBM bandwidth {self.hbm_bw_bytes_per_s} must be > 0")

    def flops_per_s(self, dtype: str) -> float:
        key = DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
        try:
            return self.flops_per_s_by_dtype[key]
        except KeyError:
            raise K3PlanError(
                f"{self.hardware}: no FLOP/s figure for dtype {dtype!r}; known: {', '.join(self.flops_per_s_by_dtype)}"
            ) from None

    def link(self, name: str) -> LinkPeak:
        if name not in ("scale_up", "scale_out"):
            raise K3PlanError(f"link {name!r}: expected scale_up or scale_out")
        return self.scale_up if name == "scale_up" else self.scale_out

    @classmethod
    def from_hardware(cls, hw) -> Peaks:
        """From a k3plan.hardware HardwareSpec (dtypes it marks unsupported are left out)."""
        table = {d: f for d, f in hw.flops_table().items() if f is not None}
        return cls(
            device_kind=hw.device_kind,
            hardware=hw.name,
            flops_per_s_by_dtype=table,
            hbm_bw_bytes_per_s=hw.hbm_bw_bytes_per_s_per_device,
            scale_up=LinkPeak(bw_bytes_per_s=hw.scale_up.bw_bytes_per_s, latency_s=hw.scale_up.latency_s),
            scale_out=LinkPeak(bw_bytes_per_s=hw.scale_out.bw_bytes_per_s, latency_s=hw.scale_out.latency_s),
        )
