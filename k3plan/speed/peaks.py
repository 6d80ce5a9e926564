"""Peaks: the roofs one device kind is measured against (FLOP/s by dtype, HBM bytes/s, the links).

Efficiency is always ceiling time / measured time at a probed point, so the peaks used to turn a
record into an efficiency must be the same ones the ceiling of an op uses; both read this object.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from k3plan.errors import K3PlanError
from k3plan.hardware.spec import DTYPE_ALIASES


class LinkPeak(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bw_bytes_per_s: float = Field(gt=0, description="one-way, per chip")
    latency_s: float = Field(ge=0, description="per collective call")


class Peaks(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    device_kind: str = Field(description="as JAX reports it (TPU7x, NVIDIA H200, cpu)")
    hardware: str = Field(description="the hardware spec name these came from (or 'hand-made' in tests)")
    flops_per_s_by_dtype: dict[str, float] = Field(description="dense FLOP/s a device; bf16 required")
    hbm_bw_bytes_per_s: float = Field(gt=0)
    scale_up: LinkPeak
    scale_out: LinkPeak

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
