"""Cold start: load time and host RAM on a v7x 2x2x4 worked by hand."""

from __future__ import annotations

import pytest

from k3plan.deploy.coldstart import (
    cold_start,
    devices_per_busiest_host,
    load_bytes_per_s,
    load_time_s,
)
from k3plan.errors import K3PlanError
from k3plan.hardware.loader import load_hardware
from k3plan.hardware.topology import parse_topology

GiB = 2**30


def test_v7x_2x2x4_by_hand():
    hw = load_hardware("tpu-v7x")
    topo = parse_topology(hw, "2x2x4")
    # 16 chips, 4 chips a host -> 4 hosts; 2 devices a chip -> 32 devices, 8 a host
    assert devices_per_busiest_host(topo) == 8
    cs = cold_start(
        weight_bytes_per_device=50 * GiB, topology=topo, hw=hw, load_gbps=100, checkpoint_bytes=1_500_000_000_000
    )
    assert cs.hosts == 4 and cs.devices_per_host == 8
    # 8 x 50 GiB = 400 GiB = 429,496,729,600 B a host, staged in RAM at once
    assert cs.sharded_read_bytes_per_host == cs.host_ram_bytes_per_host == 429_496_729_600
    # 100 Gb/s = 12.5e9 B/s -> 429,496,729,600 / 12.5e9 = 34.36 s
    assert cs.sharded_load_s == pytest.approx(34.359738368)
    # a whole-tensor loader reads up to the 1.5 TB checkpoint: 1.5e12 / 12.5e9 = 120 s
    assert cs.whole_tensor_read_bytes_per_host == 1_500_000_000_000
    assert cs.whole_tensor_load_s == pytest.approx(120.0)


def test_whole_tensor_read_is_never_below_the_shards():
    hw = load_hardware("tpu-v7x")
    cs = cold_start(
        weight_bytes_per_device=10, topology=parse_topology(hw, "2x2x4"), hw=hw, load_gbps=8, checkpoint_bytes=5
    )
    assert cs.whole_tensor_read_bytes_per_host == 80  # max(5, 10 x 8)
    assert (
        cold_start(
            weight_bytes_per_device=10, topology=parse_topology(hw, "2x2x4"), hw=hw, load_gbps=8
        ).whole_tensor_load_s
        is None
    )


def test_columns_and_bad_bandwidth():
    assert load_bytes_per_s(8) == 1e9  # 8 Gb/s = 1 GB/s
    assert load_time_s(bytes_per_host=[1e9, 4e9], load_gbps=8).tolist() == [1.0, 4.0]
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(K3PlanError, match="--load-gbps"):
            load_bytes_per_s(bad)


def test_topology_of_another_machine_is_refused():
    v7x, h100 = load_hardware("tpu-v7x"), load_hardware("nvidia-h100-sxm")
    with pytest.raises(K3PlanError, match="not nvidia-h100-sxm"):
        cold_start(weight_bytes_per_device=1, topology=parse_topology(v7x, "2x2x4"), hw=h100, load_gbps=10)
