"""HardwareSpec: a spec file resolved into plain numbers, the unit in every field name.

``HardwareFile`` (schema.py) is what the YAML says, strings with units and sources;
``HardwareSpec`` is what the budget/roofline/plan code reads: bytes as ints, rates per second,
everything per JAX device except links (one-way, per chip). ``spec.file`` keeps the sourced
original, so ``sources()`` and the alternatives stay one attribute away.
"""

from __future__ import annotations

from typing import Literal, Optional

from k3plan.errors import K3PlanError, require
from k3plan.hardware.schema import HardwareFile, LinkFile, Scalar
from k3plan.safeparse import MAX_INT
from k3plan.structs import Frozen
from k3plan.units import parse_bytes, parse_duration_s, parse_flops, parse_rate

DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
    "float4": "fp4",
}


_Frozen = Frozen


class Link(_Frozen):
    name: str
    kind: Literal["torus3d", "torus2d", "switch", "fullmesh", "network"]
    bw_bytes_per_s: float  # one-way, per chip
    latency_s: float  # per collective call (default; see the spec's source)
    domain_chips: Optional[int] = None  # scale-up: its domain; scale-out: the most chips a deployment joins


class HardwareSpec(_Frozen):
    name: str
    kind: Literal["tpu", "gpu"]
    vendor: str
    device_kind: str
    devices_per_chip: int
    hbm_bytes_per_device: int
    usable_bytes_per_device: int
    hbm_bw_bytes_per_s_per_device: float
    scale_up: Link
    scale_out: Link
    chips_per_host: int
    max_chips: int
    wraparound_min: Optional[tuple[int, ...]]  # TPU only
    topology_form: Literal["grid3d", "grid2d", "gpus"]
    standard_topologies: tuple[str, ...]
    price_usd_per_chip_hour: Optional[float]
    path: str  # the YAML it came from
    file: HardwareFile
    # (key, source) of the figures a probe record replaced (k3plan.roofline.latency.measured_hardware), so
    # that sources() names the record, not the YAML, for them
    measured_sources: tuple[tuple[str, str], ...] = ()

    def flops_per_s_per_device(self, dtype: str) -> float:
        """Dense FLOP/s a device for `dtype` (bf16, fp8, fp4, int8; bfloat16/float8/mxfp4 ok).

        A dtype the spec marks `no_gain` runs at the bf16 rate; one it lacks or marks
        `unsupported` is an error naming the dtype.
        """
        key = DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
        entry = self.file.flops_per_device.get(key)
        if entry is None:
            raise K3PlanError(
                f"{self.name}: no FLOP/s figure for dtype {dtype!r}; known: {', '.join(self.file.flops_per_device)}"
            )
        if entry.unsupported:
            raise K3PlanError(f"{self.name}: dtype {dtype!r} is not a supported matmul type ({entry.source})")
        if entry.no_gain:
            return self.flops_per_s_per_device("bf16")
        assert entry.value is not None  # FlopsEntry's validator: exactly one of value, no_gain, unsupported
        return parse_flops(entry.value, what=f"flops_per_device.{key}")

    def flops_table(self) -> dict[str, Optional[float]]:
        """dtype -> FLOP/s a device (None where unsupported)."""
        return {
            d: None if e.unsupported else self.flops_per_s_per_device(d) for d, e in self.file.flops_per_device.items()
        }

    def sources(self) -> dict[str, str]:
        return {**self.file.sources(), **dict(self.measured_sources)}

    @property
    def devices_per_host(self) -> int:
        return self.chips_per_host * self.devices_per_chip


def resolve(file: HardwareFile, *, path: str) -> HardwareSpec:
    """Parse every unit string once; a bad unit or an inconsistency raises K3PlanError."""
    hbm = _size(file.hbm_per_device.value, what="hbm_per_device")
    usable = _size(file.usable_hbm_per_device.value, what="usable_hbm_per_device")
    require(usable <= hbm, "usable_hbm_per_device exceeds hbm_per_device")
    require("bf16" in file.flops_per_device, "flops_per_device: a bf16 entry is required")
    is_grid = file.topology.form != "gpus"
    require(is_grid == (file.kind == "tpu"), f"topology.form {file.topology.form!r} does not suit kind {file.kind!r}")
    wrap = None
    if is_grid:
        if file.wraparound_min is None:
            raise K3PlanError("wraparound_min is required for a TPU")
        wrap = tuple(_count(d, what="wraparound_min") for d in str(file.wraparound_min.value).split("x"))
        rank = 3 if file.topology.form == "grid3d" else 2
        require(len(wrap) == rank, f"wraparound_min: expected {rank} dims like {'x'.join(['4'] * rank)}")
    scale_up = _link(file.scale_up, what="scale_up")
    require(scale_up.domain_chips is not None, "scale_up.domain (chips) is required")
    scale_out = _link(file.scale_out, what="scale_out")
    require(
        scale_out.domain_chips is not None or not is_grid,
        "scale_out.domain (the most chips a deployment joins over it) is required for a TPU: it bounds N*slice topologies",
    )
    spec = HardwareSpec(
        name=file.name,
        kind=file.kind,
        vendor=file.vendor,
        device_kind=str(file.device_kind.value),
        devices_per_chip=_count(file.devices_per_chip.value, what="devices_per_chip"),
        hbm_bytes_per_device=hbm,
        usable_bytes_per_device=usable,
        hbm_bw_bytes_per_s_per_device=parse_rate(file.hbm_bw_per_device.value, what="hbm_bw_per_device"),
        scale_up=scale_up,
        scale_out=scale_out,
        chips_per_host=_count(file.chips_per_host.value, what="chips_per_host"),
        max_chips=_count(file.max_chips.value, what="max_chips"),
        wraparound_min=wrap,
        topology_form=file.topology.form,
        standard_topologies=file.topology.standard,
        price_usd_per_chip_hour=None if file.price is None else file.price.usd_per_chip_hour,
        path=path,
        file=file,
    )
    require(spec.hbm_bw_bytes_per_s_per_device > 0, "hbm_bw_per_device must be > 0")
    for dtype, flops in spec.flops_table().items():  # every figure parses; a rate divides work
        require(flops is None or flops > 0, f"flops_per_device.{dtype} must be > 0 (or unsupported: true)")
    return spec


def _size(value: Scalar, *, what: str) -> int:
    """A capacity > 0 bytes and below 2^63, as every reader bounds a size (safeparse.MAX_INT): a device with no
    memory is a typo, and one past int64 would overflow the budget's arithmetic."""
    n = parse_bytes(value, what=what)
    if not 0 < n <= MAX_INT:
        got = "0 bytes" if n <= 0 else "2^63 bytes or more"
        raise K3PlanError(f"{what}: {value!r} is {got}; expected a size > 0 and below 2^63 bytes")
    return n


# A link's latency is the time of one collective call over it (the roofline adds it to every chained call of a
# step: 280 a K3 decode step at tp 8). The figures it stands for are microseconds (ICI 9.88 us measured on
# v7x; a data-center network's tens of us, the specs' sources) -- a second or more is no latency but a unit
# typo ('50s' for '50us'), and would price a decode step in minutes.
MAX_LINK_LATENCY_S = 1.0


def _link(link: LinkFile, *, what: str) -> Link:
    bw = parse_rate(link.bw_per_chip.value, what=f"{what}.bw_per_chip")
    require(bw > 0, f"{what}.bw_per_chip must be > 0 (collectives divide their bytes by it)")
    return Link(
        name=link.name,
        kind=link.kind,
        bw_bytes_per_s=bw,
        latency_s=parse_duration_s(
            link.latency.value,
            what=f"{what}.latency",
            at_most_s=MAX_LINK_LATENCY_S,
            why="the time of one collective call over a link: microseconds, never seconds",
        ),
        domain_chips=None if link.domain is None else _count(link.domain.value, what=f"{what}.domain"),
    )


def _count(value: Scalar, *, what: str) -> int:
    """A whole number >= 1 (ints, or strings of digits)."""
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or len(text) > 18 or int(text) < 1:
        raise K3PlanError(f"{what}: expected a whole number >= 1, got {value!r}")
    return int(text)
