"""A GPU's matmul efficiency from the published GEMM tables (``evidence.gpu_gemm``), as efficiency curves over the
same axis as a TPU's matmul probe ((M N K)^(1/3), ``speed.curves.AXES``), for the registered term gpu-gemm.

A row's efficiency is its measured TFLOPS over the measured GPU's spec peak for the dtype (the bundled hardware
spec: derived, never typed in), kept only where the row is compute-bound on that GPU (its FLOPs at the peak take at
least its bytes at the HBM peak): a memory-bound row times its launch and bytes, which the kernel-floor term and the
HBM ceiling already price. A table stands for the engines that run its kernel for its op and dtype (``engines``,
with the code that says so) on the GPUs of the measured one's architecture (``applies_to``); on another GPU than
the measured one its points are labelled transferred."""

from __future__ import annotations

from k3plan.errors import K3PlanError
from k3plan.evidence.gpu_gemm import RECORD, gpu_gemm_tables
from k3plan.step.dtypes import BYTES


def gemm_curves(hardware: str, *, device_kind: str, engine: str):
    """EfficiencyCurves of ``hardware`` (a bundled spec name) for the kernels ``engine`` runs on it, or None where
    no table applies. One table a curve key (op, dtype): two would be two kernels for one engine's op."""
    from k3plan.hardware.loader import load_hardware
    from k3plan.speed.curves import AXES, EfficiencyCurve, EfficiencyCurves, EfficiencyPoint, curve_key
    from k3plan.speed.peaks import Peaks

    out: dict[str, EfficiencyCurve] = {}
    for t in gpu_gemm_tables():
        if hardware not in t.applies_to or engine not in t.engines:
            continue
        key = curve_key(t.op, dtype=t.dtype)
        if key in out:
            raise K3PlanError(f"{RECORD}: two tables for {engine}'s {key} on {hardware}")
        peaks = Peaks.from_hardware(load_hardware(t.hardware))
        peak, bw = peaks.flops_per_s(t.dtype), peaks.hbm_bw_bytes_per_s
        moved = None if t.hardware == hardware else t.device_kind
        points: dict[float, EfficiencyPoint] = {}
        for row in t.rows:
            (m, n, k), tflops = row[:3], row[-1]
            flops = 2 * m * n * k
            moved_bytes = BYTES[t.dtype] * (m * k + k * n) + BYTES["bf16"] * m * n  # operands in, bf16 out
            if flops / peak < moved_bytes / bw:  # memory-bound on the measured GPU: not a tensor-core figure
                continue
            x = (m * n * k) ** (1.0 / 3.0)
            points[x] = EfficiencyPoint(
                x=x,
                efficiency=min(tflops * 1e12 / peak, 1.0),
                record_path=f"{RECORD}#{t.id}",
                record_label=t.kernel,
                detail=f"M {m:,.0f} N {n:,.0f} K {k:,.0f}: {tflops:g} TFLOPS on {t.device_kind} ({t.source})",
                transferred_from=moved,
                source_hardware=t.hardware,
            )
        if points:
            out[key] = EfficiencyCurve(key=key, axis=AXES[t.op], points=tuple(points[x] for x in sorted(points)))
    return EfficiencyCurves(device_kind=device_kind, hardware=hardware, curves=out) if out else None
