"""Published GEMM throughput of the kernels the engines run on a GPU (``k3plan/evidence/gpu_gemm.yaml``): the
tables as transcribed, each row checked against its own arithmetic. ``speed.gpu_gemm`` turns them into efficiency
curves for the registered term gpu-gemm (``speed.terms``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from k3plan.errors import K3PlanError
from k3plan.specfile import Spec

FILE = Path(__file__).parent / "gpu_gemm.yaml"
RECORD = "evidence/gpu_gemm.yaml"  # package-relative, as the JSON names records


class GemmTable(Spec):
    id: str
    hardware: str  # the bundled hardware spec of the GPU measured: its peaks are the efficiency's denominator
    device_kind: str
    applies_to: list[str]  # bundled GPUs of the measured one's architecture
    kernel: str
    op: Literal["matmul"]
    dtype: Literal["fp8", "bf16"]  # step.dtypes.BYTES prices its operands
    engines: list[str]  # the engines that run this kernel for this op and dtype
    engines_source: str
    measured_on: str
    source: Annotated[str, msgspec.Meta(pattern=r"^https://")]
    # as the source prints them: [M, N, K, time in us, TFLOPS], or [M, N, K, TFLOPS] where it prints no time
    rows: list[list[float]]


@lru_cache(maxsize=2)
def gpu_gemm_tables(path: Path = FILE) -> tuple[GemmTable, ...]:
    """The shipped tables, each row checked: four or five positive figures, and where it prints a time its TFLOPS
    within 2% of 2 M N K over that time (the transcription holds its own arithmetic)."""
    from k3plan.specfile import read_yaml_entries

    label = f"GPU GEMM tables {path}"
    tables = read_yaml_entries(label, path, GemmTable)
    for t in tables:
        if t.hardware not in t.applies_to:
            raise K3PlanError(f"{label}: {t.id}: applies_to must hold the measured GPU {t.hardware}")
        for row in t.rows:
            if len(row) not in (4, 5) or min(row) <= 0:
                raise K3PlanError(f"{label}: {t.id}: a row is [M, N, K, (time us,) TFLOPS], all positive; got {row}")
            (m, n, k), tflops = row[:3], row[-1]
            if len(row) == 5 and abs(2 * m * n * k / (row[3] * 1e-6) / 1e12 - tflops) > 0.02 * tflops + 0.05:
                raise K3PlanError(f"{label}: {t.id}: row {row}: 2 M N K / time is not {tflops} TFLOPS")
    return tables
