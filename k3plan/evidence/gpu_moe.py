"""A GPU's whole routed-MoE call as an engine runs it, timed on its own (``k3plan/evidence/gpu_moe.yaml``:
aiconfigurator's SGLang collector): the tables as transcribed, each row held to the physical floor. The registered
term gpu-moe (``speed.terms``) prices a decode step's routed experts with them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from k3plan.errors import K3PlanError
from k3plan.specfile import Spec

FILE = Path(__file__).parent / "gpu_moe.yaml"
RECORD = "evidence/gpu_moe.yaml"  # package-relative, as the JSON names records


class MoeTable(Spec):
    id: str
    hardware: str  # the bundled hardware spec of the GPU measured (its HBM peak is the rows' floor)
    device_kind: str
    kernel: str
    engines: list[str]  # the engines that run this kernel for this shape and dtype
    engines_source: str
    version: str
    dtype: Literal["fp8_block"]
    hidden: int
    intermediate: int  # an expert's, before the TP split
    experts: int
    top_k: int
    moe_tp: int  # each expert split over this many GPUs, no all-to-all
    distribution: str
    measured_on: str
    source: Annotated[str, msgspec.Meta(pattern=r"^https://")]
    rows: list[list[float]]  # [tokens a call, latency ms], tokens rising

    def expert_bytes(self) -> int:
        """One expert's weights a GPU (w13 and w2, one byte a weight; the block scales' 1/16,384 left out)."""
        return 3 * self.hidden * self.intermediate // self.moe_tp


@lru_cache(maxsize=2)
def gpu_moe_tables(path: Path = FILE) -> tuple[MoeTable, ...]:
    """The shipped tables, each checked: rows [tokens, ms] with tokens rising, and no row faster than its top-k
    experts' weights read once at the measured GPU's HBM peak (a measurement above the physical peak is refused)."""
    from k3plan.hardware.loader import load_hardware
    from k3plan.specfile import read_yaml_entries

    label = f"GPU MoE tables {path}"
    tables = read_yaml_entries(label, path, MoeTable)
    for t in tables:
        bw = load_hardware(t.hardware).hbm_bw_bytes_per_s_per_device
        floor_s = t.top_k * t.expert_bytes() / bw
        last = 0.0
        for row in t.rows:
            if len(row) != 2 or row[0] <= last or row[1] <= 0:
                raise K3PlanError(f"{label}: {t.id}: a row is [tokens, latency ms], tokens rising; got {row}")
            if row[1] * 1e-3 < floor_s:
                raise K3PlanError(
                    f"{label}: {t.id}: row {row}: faster than its {t.top_k} experts' weights at the HBM peak "
                    f"({floor_s * 1e6:.1f} us): above the physical peak"
                )
            last = row[0]
    return tables
