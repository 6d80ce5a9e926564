"""Shared pieces of the roofline tests: cached Setups, the study's figures, the aggregate bandwidth."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from k3plan.roofline.bounds import Efficiency, check_efficiency
from k3plan.setup import Setup, make_setup

REPO = Path(__file__).resolve().parents[2]
PROBES = REPO / "k3plan" / "evidence" / "probes"
PROBE_RECORD = PROBES / "tpu7x-a2a-chained-porting-study.json"

GB = 1e9
US = 1e-6
MS = 1e-3

# k3-facts.md §5, as published
STUDY_BATCH1_BYTES = 130.0e9
STUDY_ATTN_BYTES = 72.4e9
STUDY_EXPERT_BYTES = 25.8e9
STUDY_WEIGHT_TOTAL = 1.553e12
STUDY_STEP_X16_S = 1.10e-3
STUDY_TOK_S_X16 = 908
STUDY_STEP_B256_S = 13.15e-3
STUDY_STEP_X32_S = 0.55e-3
STUDY_PREFILL_30 = 53_144
STUDY_PREFILL_45 = 79_716
STUDY_DCN_BW = 50e9  # "Over DCN (50 GB/s one-way)"


@lru_cache(maxsize=None)
def setup(
    topology: str = "2x2x4",
    stack: str = "dp-attention",
    tp: int | None = None,
    ep: int | None = None,
    dp: int | None = None,
) -> Setup:
    return make_setup(topology=topology, stack=stack, tp=tp, ep=ep, dp=dp)


def eff(mfu: float = 0.3, bw: float = 1.0, dtype: str = "bf16") -> Efficiency:
    return check_efficiency(mfu=mfu, bw_efficiency=bw, compute_dtype=dtype)


def aggregate_hbm_bw(s: Setup) -> float:
    """The study's view: every chip's HBM bandwidth summed (v7x x16: 16 x 2 x 3.69 TB/s = 118.08 TB/s)."""
    hw = s.hardware
    return s.topology.chips * hw.devices_per_chip * hw.hbm_bw_bytes_per_s_per_device


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)
