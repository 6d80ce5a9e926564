"""Topology strings -> chips, devices, hosts, slices.

TPU (the chip grid, as GKE/XPK and the deviceless compiler spell it):
  ``AxBxC`` (v7x, v5p: 3D torus) or ``AxB`` (v5e, v6e: 2D), chips = product of dims;
  multi-slice is written ``N*AxBxC``: N identical slices joined over DCN (``2*2x2x4`` = 32 chips).
  A slice is one ICI domain; hosts = ceil(chips a slice / chips a host) a slice.
GPU:
  ``N`` GPUs (N <= GPUs a host, or a multiple of it) or ``HxG`` hosts x GPUs a host (G <= GPUs a
  host). Slices are the scale-up (NVLink/xGMI) domains the topology spans: one a host for HGX
  boxes, one per 72 GPUs for NVL72 racks; a topology must split evenly across them.
"""

from __future__ import annotations

import math
import re

from k3plan.errors import K3PlanError
from k3plan.hardware.spec import HardwareSpec
from k3plan.structs import Frozen


class Topology(Frozen):
    text: str  # normalised, e.g. "2x2x4" or "2*2x2x4"
    hardware: str
    dims: tuple[int, ...]  # TPU: chip grid of one slice; GPU: (hosts, GPUs a host)
    chips: int
    devices: int  # JAX devices = chips * devices_per_chip
    hosts: int
    slices: int
    chips_per_slice: int
    devices_per_slice: int
    wraparound: bool  # torus wraparound links (TPU grids >= wraparound_min)
    within_scale_up_domain: bool
    spans_slices: bool


# ASCII digits only (Python's \d and int() also take full-width and Arabic-Indic digits), at most
# 6 a number (the largest pod is 9,216 chips): "1" * 5000 is refused before int() sees it.
_N = r"[0-9]{1,6}"
_GRID = re.compile(rf"(?:({_N})\*)?({_N}(?:x{_N})*)")
_GPUS = re.compile(rf"({_N})(?:x({_N}))?")


def parse_topology(hw: HardwareSpec, text: str) -> Topology:
    """Read a topology string for `hw`; K3PlanError (one line, says what was expected) if bad."""
    norm = str(text).strip().lower().replace(" ", "")
    if hw.topology_form == "gpus":
        return _gpu(hw, norm, text)
    return _tpu(hw, norm, text)


def topologies_up_to(hw: HardwareSpec, max_chips: int) -> list[Topology]:
    """The spec's standard shapes (its `topology.standard` list) with at most `max_chips` chips,
    smallest first. Multi-slice shapes are not enumerated: compose them as N*shape."""
    shapes = [parse_topology(hw, s) for s in hw.standard_topologies]
    return sorted((t for t in shapes if t.chips <= max_chips), key=lambda t: (t.chips, t.dims))


def _expected(hw: HardwareSpec) -> str:
    if hw.topology_form == "grid3d":
        return "a chip grid AxBxC such as '2x2x4', or N*AxBxC for N slices over DCN such as '2*2x2x4'"
    if hw.topology_form == "grid2d":
        return "a chip grid AxB such as '4x4', or N*AxB for N slices over DCN such as '2*4x4'"
    return f"a GPU count such as '{hw.chips_per_host}' or hosts x GPUs a host such as '2x{hw.chips_per_host}'"


def _bad(hw: HardwareSpec, text: str, why: str) -> K3PlanError:
    if why == "cannot read it" and "-" in str(text):
        why = "dims must be positive whole numbers"
    if why == "cannot read it" and any(c.isdigit() and not c.isascii() for c in str(text)):
        why = "write the digits as ASCII 0-9"
    if why == "cannot read it" and re.search(r"[0-9]{7}", str(text)):
        per = "a slice" if hw.topology_form != "gpus" else "in all"
        why = f"a number of more than 6 digits ({hw.name}: at most {hw.max_chips:,} chips {per})"
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:37] + "...")
    return K3PlanError(f"topology {shown} on {hw.name}: {why}; expected {_expected(hw)}")


def _tpu(hw: HardwareSpec, norm: str, text: str) -> Topology:
    m = _GRID.fullmatch(norm)
    if not m:
        why = "write multi-slice as N*AxBxC, not with parentheses" if "(" in norm else "cannot read it"
        raise _bad(hw, text, why)
    slices = int(m.group(1)) if m.group(1) else 1
    dims = tuple(int(d) for d in m.group(2).split("x"))
    rank = 3 if hw.topology_form == "grid3d" else 2
    if len(dims) != rank:
        raise _bad(hw, text, f"{hw.name} takes {rank} dims, got {len(dims)}")
    if slices < 1 or min(dims) < 1:
        raise _bad(hw, text, "every dim and the slice count must be >= 1")
    per_slice = math.prod(dims)
    if per_slice > hw.max_chips:
        raise _bad(hw, text, f"{per_slice} chips a slice exceeds the largest {hw.name} slice ({hw.max_chips} chips)")
    reach = hw.scale_out.domain_chips  # required for a TPU (hardware.spec)
    # the chips joined over the scale-out network: one slice joins none (its chips are on ICI, max_chips bounds it)
    if reach is not None and slices > 1 and slices * per_slice > reach:
        raise _bad(
            hw,
            text,
            f"{slices:,} slices of {per_slice:,} chips = {slices * per_slice:,} chips exceed the most a deployment joins "
            f"over {hw.scale_out.name} ({reach:,} chips: scale_out.domain in {hw.name}'s spec, with its source)",
        )
    grid = "x".join(map(str, dims))
    if grid not in hw.standard_topologies:  # a 3x3x3 would be planned as 27 chips on 7 hosts
        listed = [s for s in hw.standard_topologies if sorted(map(int, s.split("x"))) == sorted(dims)]
        hint = f"write it as {listed[0]!r}; " if listed else ""
        raise K3PlanError(
            f"topology {text!r} on {hw.name}: {grid} is not a slice shape {hw.name} offers; {hint}"
            f"expected one of {', '.join(hw.standard_topologies)} (topology.standard in {hw.name}'s "
            f"spec), or N*shape for N slices"
        )
    wrap = hw.wraparound_min is not None and all(d >= w for d, w in zip(sorted(dims), sorted(hw.wraparound_min)))
    return _make(
        hw,
        text=f"{slices}*{grid}" if slices > 1 else grid,
        dims=dims,
        slices=slices,
        chips_per_slice=per_slice,
        hosts_per_slice=math.ceil(per_slice / hw.chips_per_host),
        wraparound=wrap,
    )


def _gpu(hw: HardwareSpec, norm: str, text: str) -> Topology:
    per_host = hw.chips_per_host
    m = _GPUS.fullmatch(norm)
    if not m:
        raise _bad(hw, text, "cannot read it")
    if m.group(2) is None:
        n = int(m.group(1))
        if n < 1:
            raise _bad(hw, text, "the GPU count must be >= 1")
        if n > per_host and n % per_host:
            raise _bad(hw, text, f"{n} GPUs is not a multiple of the {per_host} GPUs a host")
        hosts, gpus = (1, n) if n <= per_host else (n // per_host, per_host)
    else:
        hosts, gpus = int(m.group(1)), int(m.group(2))
        if hosts < 1 or gpus < 1:
            raise _bad(hw, text, "hosts and GPUs a host must be >= 1")
        if gpus > per_host:
            raise _bad(hw, text, f"{hw.name} has {per_host} GPUs a host, not {gpus}")
    chips = hosts * gpus
    if chips > hw.max_chips:
        raise _bad(hw, text, f"{chips} GPUs exceeds max_chips ({hw.max_chips}) for {hw.name}")
    hosts_per_domain = max(1, (hw.scale_up.domain_chips or per_host) // per_host)
    slices = math.ceil(hosts / hosts_per_domain)
    if hosts % slices:
        raise _bad(
            hw, text, f"{hosts} hosts do not split evenly over {slices} scale-up domains of {hosts_per_domain} hosts"
        )
    text = str(chips) if m.group(2) is None else f"{hosts}x{gpus}"  # keep the form the user chose
    return _make(
        hw,
        text=text,
        dims=(hosts, gpus),
        slices=slices,
        chips_per_slice=chips // slices,
        hosts_per_slice=hosts // slices,
        wraparound=False,
    )


def _make(
    hw: HardwareSpec,
    *,
    text: str,
    dims: tuple[int, ...],
    slices: int,
    chips_per_slice: int,
    hosts_per_slice: int,
    wraparound: bool,
) -> Topology:
    return Topology(
        text=text,
        hardware=hw.name,
        dims=dims,
        chips=chips_per_slice * slices,
        devices=chips_per_slice * slices * hw.devices_per_chip,
        hosts=hosts_per_slice * slices,
        slices=slices,
        chips_per_slice=chips_per_slice,
        devices_per_slice=chips_per_slice * hw.devices_per_chip,
        wraparound=wraparound,
        within_scale_up_domain=slices == 1,
        spans_slices=slices > 1,
    )
