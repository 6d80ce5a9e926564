"""Cold start and host memory: how long loading the checkpoint takes at a stated storage bandwidth
(``--load-gbps``, gigabits a second a host), and how much host RAM a host needs while it loads.

Two figures per host, because loaders differ:
- sharded: the host reads exactly its devices' shards (pre-sharded checkpoints, a loader that
  reads only the slices it needs) -- per-device weight bytes x devices on the host; the least any
  loader can read, and what a host stages in RAM when it holds all its shards at once.
- whole tensors: a loader that reads each tensor whole and slices it on the host reads every tensor
  any of its devices needs -- up to the whole checkpoint a host (given ``checkpoint_bytes``).
"""

from __future__ import annotations

import math

import numpy as np

from k3plan.errors import K3PlanError
from k3plan.hardware.spec import HardwareSpec
from k3plan.hardware.topology import Topology
from k3plan.structs import Frozen

BITS_PER_BYTE = 8
GIGA = 1e9
# a megabit a second (a checkpoint load of years) to a petabit (past any host's NICs and disks); outside it the
# figure is a typo: 1e-308 overflowed the load time to "inf s" with numpy's RuntimeWarning on stderr
LOAD_GBPS_RANGE = (1e-3, 1e6)


def load_bytes_per_s(load_gbps: float) -> float:
    """Gigabits a second (decimal, as storage and NICs are quoted) -> bytes a second."""
    lo, hi = LOAD_GBPS_RANGE
    if not (math.isfinite(load_gbps) and lo <= load_gbps <= hi):
        raise K3PlanError(f"--load-gbps {load_gbps!r}: expected {lo:g} to {hi:,.0f} gigabits a second a host")
    return load_gbps * GIGA / BITS_PER_BYTE


def load_time_s(*, bytes_per_host, load_gbps: float):
    """Seconds to read ``bytes_per_host`` (int or numpy column) at ``load_gbps`` a host; hosts read
    in parallel, so this is also the cluster's load time."""
    return np.divide(bytes_per_host, load_bytes_per_s(load_gbps), dtype=float)


def devices_per_busiest_host(topology: Topology) -> int:
    """Devices on the fullest host: ceil(devices / hosts) (a 2x2 v6e slice: 4 devices on 1 host)."""
    return math.ceil(topology.devices / topology.hosts)


class ColdStart(Frozen):
    """Per host: what it reads, how long that takes, and the RAM it stages."""

    hosts: int
    devices_per_host: int
    load_gbps: float
    sharded_read_bytes_per_host: int
    sharded_load_s: float
    whole_tensor_read_bytes_per_host: int | None  # None when checkpoint_bytes was not given
    whole_tensor_load_s: float | None
    host_ram_bytes_per_host: int  # the host's shards staged at once: a bound, streaming loaders hold less


def cold_start(
    *,
    weight_bytes_per_device: int,
    topology: Topology,
    hw: HardwareSpec,
    load_gbps: float,
    checkpoint_bytes: int | None = None,
) -> ColdStart:
    """Load time and host RAM for one deployment; ``weight_bytes_per_device`` is the budget's
    per-device weight bytes (the largest device), ``checkpoint_bytes`` the files' total size."""
    if weight_bytes_per_device < 0:
        raise K3PlanError(f"weight bytes per device {weight_bytes_per_device}: expected >= 0")
    if topology.hardware != hw.name:
        raise K3PlanError(f"topology {topology.text} is for {topology.hardware}, not {hw.name}")
    per_host = devices_per_busiest_host(topology)
    sharded = weight_bytes_per_device * per_host
    whole = None if checkpoint_bytes is None else max(int(checkpoint_bytes), sharded)
    return ColdStart(
        hosts=topology.hosts,
        devices_per_host=per_host,
        load_gbps=load_gbps,
        sharded_read_bytes_per_host=sharded,
        sharded_load_s=float(load_time_s(bytes_per_host=sharded, load_gbps=load_gbps)),
        whole_tensor_read_bytes_per_host=whole,
        whole_tensor_load_s=None if whole is None else float(load_time_s(bytes_per_host=whole, load_gbps=load_gbps)),
        host_ram_bytes_per_host=sharded,
    )
