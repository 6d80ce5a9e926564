"""Hand-made peaks and probe records with round numbers, so every efficiency is checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

from k3plan.speed.peaks import LinkPeak, Peaks

# FLOP/s 1e15 bf16, HBM 1e12 B/s, scale-up 10 us + 1e9 B/s: round numbers, not any real chip
PEAKS = Peaks(
    device_kind="TPU7x",
    hardware="hand-made",
    flops_per_s_by_dtype={"bf16": 1e15},
    hbm_bw_bytes_per_s=1e12,
    scale_up=LinkPeak(bw_bytes_per_s=1e9, latency_s=10e-6),
    scale_out=LinkPeak(bw_bytes_per_s=1e8, latency_s=20e-6),
)


def record(
    probe: str,
    points: list[tuple[dict, float, str]],
    *,
    backend: str = "tpu",
    device_kind: str = "TPU7x",
    date: str = "2026-11-30T00:00:00Z",
    implementation: str = "xla",
    op=None,
    mode=None,
    params: dict | None = None,
    label=None,
) -> dict:
    return {
        "probe": probe,
        "op": op,
        "mode": mode,
        "params": params or {},
        "backend": backend,
        "device_kind": device_kind,
        "device_count": 8,
        "date": date,
        "implementation": implementation,
        "label": label,
        "points": [{"params": p, "value": v, "unit": u} for p, v, u in points],
    }


def write(dir: Path, name: str, rec: dict) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    path.write_text(json.dumps(rec))
    return path


def matmul_record(**kw) -> dict:
    # efficiency 0.2 at 256^3, 0.8 at 4096^3 (FLOP/s / 1e15)
    return record(
        "matmul",
        [
            ({"dtype": "bfloat16", "size": 256, "flops": 2.0 * 256**3}, 2e14, "flop/s"),
            ({"dtype": "bfloat16", "size": 4096, "flops": 2.0 * 4096**3}, 8e14, "flop/s"),
        ],
        **kw,
    )


def a2a_record(**kw) -> dict:
    # ceiling a call = 10 us + 1000 B / 1e9 B/s = 11 us; measured 22 us -> 0.5; 44 us at 16 KiB -> 0.25
    return record(
        "a2a",
        [
            ({"bytes": 64, "wire_bytes_per_device": 1000}, 22e-6, "s/call"),
            ({"bytes": 16384, "wire_bytes_per_device": 1000}, 44e-6, "s/call"),
        ],
        op="all-to-all",
        mode="chained",
        params={"axis_size": 8},
        **kw,
    )
