"""Tier: one level below HBM, resolved from the hardware spec's optional ``memory_tiers`` block.

Figures are per host (a host's DRAM, its SSDs, its NICs); ``bw_bytes_per_s_per_host`` is one-way,
tier -> the HBM of the host's accelerators, all their links together. A spec without the block
has no tiers (an empty tuple), and every consumer says so rather than guess.
"""

from __future__ import annotations

from typing import Literal

from k3plan.errors import K3PlanError, require
from k3plan.hardware.schema import TierFile
from k3plan.hardware.spec import HardwareSpec
from k3plan.structs import Frozen
from k3plan.units import parse_bytes, parse_duration_s, parse_rate

TierName = Literal["host_dram", "local_ssd", "remote"]
TIER_ORDER: tuple[TierName, ...] = ("host_dram", "local_ssd", "remote")
OFFLOAD_CHOICES = {"host": "host_dram", "ssd": "local_ssd", "remote": "remote"}  # --offload spelling


class Tier(Frozen):
    name: TierName
    size_bytes_per_host: int | None  # None: no capacity limit known (remote storage)
    bw_bytes_per_s_per_host: float
    latency_s: float = 0.0
    source: str  # where the size and bandwidth come from (the spec's sources, joined)


def _tier(name: TierName, f: TierFile, *, hw: str) -> Tier:
    bw = parse_rate(f.bw_to_hbm_per_host.value, what=f"{hw}: memory_tiers.{name}.bw_to_hbm_per_host")
    require(bw > 0, f"{hw}: memory_tiers.{name}.bw_to_hbm_per_host must be > 0")
    size = (
        None
        if f.size_per_host is None
        else parse_bytes(f.size_per_host.value, what=f"{hw}: memory_tiers.{name}.size_per_host")
    )
    parts = [f"size: {f.size_per_host.source}"] if f.size_per_host else []
    parts.append(f"bandwidth: {f.bw_to_hbm_per_host.source}")
    latency = 0.0
    if f.latency is not None:
        latency = parse_duration_s(f.latency.value, what=f"{hw}: memory_tiers.{name}.latency")
        parts.append(f"latency: {f.latency.source}")
    return Tier(
        name=name, size_bytes_per_host=size, bw_bytes_per_s_per_host=bw, latency_s=latency, source="; ".join(parts)
    )


def memory_tiers(hw: HardwareSpec) -> tuple[Tier, ...]:
    """The spec's tiers, nearest first; () when the spec has no memory_tiers block."""
    block = hw.file.memory_tiers
    if block is None:
        return ()
    return tuple(_tier(n, getattr(block, n), hw=hw.name) for n in TIER_ORDER if getattr(block, n) is not None)


def offload_tier(hw: HardwareSpec, choice: str) -> Tier:
    """--offload host|ssd|remote -> the tier, or a one-line error naming what the spec has."""
    name = OFFLOAD_CHOICES.get(choice)
    if name is None:
        raise K3PlanError(f"--offload {choice!r}: expected one of {', '.join(OFFLOAD_CHOICES)}")
    tiers = {t.name: t for t in memory_tiers(hw)}
    if name not in tiers:
        have = ", ".join(k for k, v in OFFLOAD_CHOICES.items() if v in tiers) or "none"
        raise K3PlanError(f"--offload {choice}: {hw.name} has no {name} tier in {hw.path} (tiers: {have})")
    return tiers[name]
