"""Topology strings -> chips, devices, hosts, slices; errors; properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware, parse_topology, topologies_up_to


def test_v7x_2x2x4():
    t = parse_topology(load_hardware("tpu-v7x"), "2x2x4")
    assert (t.chips, t.devices, t.hosts, t.slices) == (16, 32, 4, 1)
    assert t.wraparound is False and t.within_scale_up_domain and not t.spans_slices


def test_v7x_wraparound_from_4x4x4():
    hw = load_hardware("tpu-v7x")
    assert parse_topology(hw, "4x4x4").wraparound is True
    assert parse_topology(hw, "4x4x8").wraparound is True
    assert parse_topology(hw, "2x4x4").wraparound is False


def test_v7x_multislice():
    t = parse_topology(load_hardware("tpu-v7x"), "2*2x2x4")
    assert (t.chips, t.devices, t.hosts, t.slices, t.chips_per_slice, t.devices_per_slice) == (32, 64, 8, 2, 16, 32)
    assert t.spans_slices and not t.within_scale_up_domain


def test_v6e_4x4():
    t = parse_topology(load_hardware("tpu-v6e"), "4x4")
    assert (t.chips, t.devices, t.hosts) == (16, 16, 4)


def test_h200_2x8_spans_domains():
    t = parse_topology(load_hardware("nvidia-h200"), "2x8")
    assert (t.chips, t.devices, t.hosts, t.slices) == (16, 16, 2, 2)
    assert t.within_scale_up_domain is False and t.spans_slices


def test_gpu_counts():
    h200 = load_hardware("nvidia-h200")
    assert parse_topology(h200, "8").within_scale_up_domain
    assert parse_topology(h200, "4").hosts == 1
    nvl = load_hardware("nvidia-gb200-nvl72")
    t = parse_topology(nvl, "72")
    assert (t.chips, t.hosts, t.slices, t.within_scale_up_domain) == (72, 18, 1, True)
    assert parse_topology(nvl, "144").slices == 2


@pytest.mark.parametrize(
    "hw,text",
    [
        ("tpu-v7x", "2x2x"),
        ("tpu-v7x", "abc"),
        ("tpu-v7x", "0x2x2"),
        ("tpu-v7x", "-2x2x2"),
        ("tpu-v7x", "4x4"),
        ("tpu-v6e", "2x2x2"),
        ("tpu-v7x", "32x32x32"),
        ("tpu-v7x", "2x(2x2x4)"),
        ("tpu-v6e", "32x32"),
        ("nvidia-h200", "2x9"),
        ("nvidia-h200", "12"),
        ("nvidia-h200", "0"),
        ("nvidia-h200", "2x2x2"),
        ("nvidia-h200", "4096"),
        ("", ""),
    ],
)
def test_malformed(hw, text):
    with pytest.raises(K3PlanError) as err:
        parse_topology(load_hardware(hw or "tpu-v7x"), text)
    assert "expected" in str(err.value) and "\n" not in str(err.value)


def test_topologies_up_to():
    v7x = [t.text for t in topologies_up_to(load_hardware("tpu-v7x"), 64)]
    assert v7x[-1] == "4x4x4" and "2x2x4" in v7x and all(t.count("x") == 2 for t in v7x)
    v6e = [t.text for t in topologies_up_to(load_hardware("tpu-v6e"), 256)]
    assert v6e == ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"]
    h200 = topologies_up_to(load_hardware("nvidia-h200"), 16)
    assert [t.text for t in h200] == ["1", "2", "4", "8", "2x8"]
    assert "72" in [t.text for t in topologies_up_to(load_hardware("nvidia-gb300-nvl72"), 72)]


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["tpu-v7x", "tpu-v5p", "tpu-v6e", "tpu-v5e"]), data=st.data(), slices=st.integers(1, 4))
def test_grid_properties(name, data, slices):
    hw = load_hardware(name)
    dims = [int(d) for d in data.draw(st.sampled_from(hw.standard_topologies)).split("x")]
    text = ("" if slices == 1 else f"{slices}*") + "x".join(map(str, dims))
    t = parse_topology(hw, text)
    assert t.chips_per_slice == math.prod(dims)
    assert t.chips == t.chips_per_slice * slices
    assert t.devices == t.chips * hw.devices_per_chip
    assert t.hosts * hw.chips_per_host >= t.chips
    assert parse_topology(hw, t.text) == t  # the normalised text reads back the same


@settings(max_examples=100, deadline=None)
@given(
    name=st.sampled_from(["tpu-v7x", "tpu-v5p", "tpu-v6e", "tpu-v5e"]),
    dims=st.lists(st.integers(1, 16), min_size=3, max_size=3),
)
def test_grid_not_sold_is_refused(name, dims):
    """A grid the spec does not list (topology.standard) is not a slice one can rent: refused."""
    hw = load_hardware(name)
    text = "x".join(map(str, dims[: 3 if hw.topology_form == "grid3d" else 2]))
    if text in hw.standard_topologies:
        assert parse_topology(hw, text).text == text
        return
    with pytest.raises(K3PlanError, match="not a slice shape|exceeds the largest"):
        parse_topology(hw, text)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(["nvidia-h200", "nvidia-gb200-nvl72", "amd-mi355x"]),
    hosts=st.integers(1, 64),
    gpus=st.integers(1, 8),
)
def test_gpu_properties(name, hosts, gpus):
    hw = load_hardware(name)
    try:
        t = parse_topology(hw, f"{hosts}x{gpus}")
    except K3PlanError:
        assert (
            gpus > hw.chips_per_host
            or hosts * gpus > hw.max_chips
            or hosts % math.ceil(hosts / max(1, hw.scale_up.domain_chips // hw.chips_per_host))
        )
        return
    assert t.chips == t.devices == hosts * gpus
    assert t.hosts == hosts
    assert t.chips_per_slice * t.slices == t.chips
    assert t.within_scale_up_domain == (t.slices == 1)


@pytest.mark.parametrize("name", ["tpu-v7x", "tpu-v5p", "tpu-v6e", "tpu-v5e"])
def test_multislice_is_bounded_by_the_scale_out_reach(name):
    """N*slice has an upper bound: scale_out.domain (chips a deployment joins over DCN), sourced in the spec."""
    hw = load_hardware(name)
    reach = hw.scale_out.domain_chips
    assert reach == 1_000_000 and "one million" in hw.sources()["scale_out.domain"]
    # the smallest slice of more than one chip (a slice count is at most 6 digits: 1,000,000 x 1 chip is unreadable)
    grid = next(g for g in hw.standard_topologies if math.prod(int(d) for d in g.split("x")) > 1)
    per = math.prod(int(d) for d in grid.split("x"))
    n = reach // per
    assert parse_topology(hw, f"{n}*{grid}").chips == n * per <= reach  # at the bound: accepted
    with pytest.raises(K3PlanError, match=f"{n + 1:,} slices of {per:,} chips .* exceed the most a deployment joins"):
        parse_topology(hw, f"{n + 1}*{grid}")


def test_a_million_and_a_half_chips_is_exit_2(cli):
    from k3_testing import one_error_line

    line = one_error_line(cli("fit", "-t", "99999*2x2x4", "--tp", "32"))
    # 99,999 slices x 16 chips = 1,599,984 chips > 1,000,000 (tpu-v7x.yaml scale_out.domain)
    assert "99,999 slices of 16 chips = 1,599,984 chips exceed" in line and "1,000,000 chips" in line
    assert "scale_out.domain in tpu-v7x's spec" in line


@pytest.mark.parametrize(
    "hw,text", [("tpu-v7x", "99999999999x2x4"), ("nvidia-h200", "99999999999"), ("tpu-v7x", "1234567*2x2x4")]
)
def test_a_number_too_long_to_be_a_chip_count_says_so(hw, text):
    # it said "cannot read it" of a topology it read perfectly well: the number is what is wrong
    with pytest.raises(K3PlanError, match="more than 6 digits") as err:
        parse_topology(load_hardware(hw), text)
    assert "cannot read" not in str(err.value)
