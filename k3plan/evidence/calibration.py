"""Calibration files: temporaries measured by compiling the real graphs (validate, or a real slice).

Format (see k3plan/evidence/calibrations/*.yaml): model, hardware, topology, tp, ep, dp, stack,
backend, device_kind, jax_version, libtpu_version, date, source, available_hbm_bytes,
argument_bytes, prefill [{tokens, temp_bytes, fits?}], decode [{context, temp_bytes, batch?,
fits?}], notes. Sizes are bytes a device, exact ints (what ``k3plan validate --save-calibration``
writes since issue 10).

Files written before that spell every size in GiB a device (2^30 B), a float rounded to 4
decimals: available_hbm_gib, argument_gib, temp_gib. They are records of runs and are not
rewritten (the shipped ones under k3plan/evidence/calibrations/ and ../shared/data/calibration
among them): both spellings are read, exactly one a size (a point with temp_bytes and temp_gib,
or neither, is refused), and an old size is taken as ``int(gib * GiB)`` bytes. Everything past
this module reads the int-bytes properties (``temp_bytes``, ``available_hbm_bytes``,
``argument_bytes``), never the spelling. Points are combined as an upper envelope, never a
fitted slope.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Optional, Union

import msgspec

from k3plan.errors import K3PlanError
from k3plan.safeparse import not_a_file
from k3plan.specfile import Spec, convert, read_yaml_mapping
from k3plan.structs import Frozen
from k3plan.units import GiB

_GIB_MAX = 2.0**20  # a sanity bound: a pebibyte a device is a typo, not a measurement
_BYTES_MAX = 2**50  # the same bound in bytes

# input schemas (msgspec Structs, k3plan.specfile.Spec), converted strictly: "64" is not a token count, 1 is not
# `true`, 5.0 is not a byte count; floats finite (the bounds refuse .inf; _F refuses .nan)
# a byte count also reads a float, which _F refuses in words ("expected an integer"): 5.0 is not a byte count
Bytes = Union[Annotated[int, msgspec.Meta(ge=0, le=_BYTES_MAX)], float]
SomeBytes = Union[Annotated[int, msgspec.Meta(gt=0, le=_BYTES_MAX)], float]
Gib = Annotated[float, msgspec.Meta(ge=0, le=_GIB_MAX)]
SomeGib = Annotated[float, msgspec.Meta(gt=0, le=_GIB_MAX)]
Positive = Annotated[int, msgspec.Meta(gt=0)]


class _F(Spec):
    def __post_init__(self) -> None:
        super().__post_init__()
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, float) and name.endswith("_written"):  # a size in bytes (see Bytes)
                raise ValueError(f"{_key(type(self), name)}: {value!r}: expected an integer, bytes a device")
            if isinstance(value, float) and not math.isfinite(value):  # allow_inf_nan=False, as pydantic had it
                raise ValueError(f"{_key(type(self), name)}: {value!r}: expected a finite number")


def _key(cls: type, name: str) -> str:
    """A field's key in the file (its alias, where it has one)."""
    return cls.__struct_encode_fields__[cls.__struct_fields__.index(name)]  # type: ignore[attr-defined]


def _one_size(
    new: str, new_value: Optional[float], old: str, old_value: Optional[float], *, required: bool
) -> Optional[int]:
    """The size in bytes from whichever spelling the file used; both at once (or neither, when
    ``required``) is an error naming the two keys. ``new_value`` is an int (typed as the
    schema reads it: a float there is refused in words)."""
    if new_value is not None and old_value is not None:
        raise ValueError(
            f"both {new} and {old}; expected one size ({new}: int bytes a device, or {old} in older files)"
        )
    if new_value is not None:
        return int(new_value)  # an int: _F refused a float
    if old_value is not None:
        return int(old_value * GiB)  # as the envelope converted GiB before files stored bytes
    if required:
        raise ValueError(f"no size; expected {new} (int bytes a device) or, in older files, {old} (GiB a device)")
    return None


class _Point(_F):
    # the size as the file spells it (exactly one of the two); read ``temp_bytes``
    temp_bytes_written: Optional[Bytes] = msgspec.field(default=None, name="temp_bytes")
    temp_gib: Optional[Gib] = None  # files written before bytes

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_size("temp_bytes", self.temp_bytes_written, "temp_gib", self.temp_gib, required=True)

    @property
    def temp_bytes(self) -> int:
        """The point's temporaries, bytes a device (``int(temp_gib * GiB)`` in an older file)."""
        size = _one_size("temp_bytes", self.temp_bytes_written, "temp_gib", self.temp_gib, required=True)
        assert size is not None  # required: the validator refused a point without one
        return size


class PrefillPoint(_Point):
    tokens: Positive
    fits: bool = True
    # the cache the chunk read, tokens (validate's prefill job: max(--context, chunk)); unrecorded in files written
    # before issue 50: taken as the chunk (k3plan.budget.measured_range)
    context: Optional[Positive] = None


class DecodePoint(_Point):
    context: Positive
    batch: Optional[Positive] = None
    fits: bool = True


class Calibration(_F):
    model: str
    hardware: str
    topology: str
    tp: Positive
    ep: Optional[Positive] = None
    dp: Positive = 1
    stack: str
    backend: str
    device_kind: Optional[str] = None
    jax_version: Optional[str] = None
    libtpu_version: Optional[str] = None
    date: Optional[str] = None
    source: Optional[str] = None
    # each size as the file spells it, at most one of the two; read ``available_hbm_bytes`` / ``argument_bytes``
    available_hbm_bytes_written: Optional[SomeBytes] = msgspec.field(default=None, name="available_hbm_bytes")
    available_hbm_gib: Optional[SomeGib] = None  # files written before bytes
    argument_bytes_written: Optional[SomeBytes] = msgspec.field(default=None, name="argument_bytes")  # the weights
    argument_gib: Optional[SomeGib] = None  # files written before bytes
    # a calibration measures at least one stage: validate --save-calibration of one --stage writes the other's
    # list empty (the v5e decode calibration, issue 35); a stage without points has no calibrated temp
    # (budget.fit.calibrated_stage: None, the analytic model stands)
    prefill: list[PrefillPoint] = []
    decode: list[DecodePoint] = []
    notes: list[str] = []
    path: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.prefill and not self.decode:
            raise ValueError("no prefill and no decode point: nothing was measured")
        self._available()
        self._argument()

    def _available(self) -> Optional[int]:
        avail = "available_hbm_bytes", self.available_hbm_bytes_written, "available_hbm_gib", self.available_hbm_gib
        return _one_size(*avail, required=False)

    def _argument(self) -> Optional[int]:
        return _one_size(
            "argument_bytes", self.argument_bytes_written, "argument_gib", self.argument_gib, required=False
        )

    @property
    def available_hbm_bytes(self) -> Optional[int]:
        """HBM the compiler said a device has, bytes (None: not recorded)."""
        return self._available()

    @property
    def argument_bytes(self) -> Optional[int]:
        """The compiled arguments (the weights), bytes a device (None: not recorded)."""
        return self._argument()


FOLDER = Path(__file__).parent / "calibrations"  # the shipped calibrations (package data)
INDEX = "index.yaml"
BUNDLED_SHOWN = "k3plan/evidence/calibrations"  # how a shipped calibration's path prints, installed or not


def bundled_calibrations() -> list[str]:
    """The shipped calibrations' file names (package data, k3plan/evidence/calibrations/; not its index)."""
    return sorted(p.name for p in FOLDER.glob("*.yaml") if p.name != INDEX)


def resolve_calibration(path_text: str) -> tuple[Path, str]:
    """``--calibration``: a YAML path, else a shipped calibration's bare name (with or without .yaml, as -H
    takes a bundled hardware name), so that an example works from any folder and installed from the wheel
    -> (the file, the path to print)."""
    path = Path(path_text).expanduser()
    if path.is_file():
        return path, str(path)
    names = bundled_calibrations()
    name = path_text if path_text.endswith(".yaml") else f"{path_text}.yaml"
    if "/" not in path_text and name in names:
        return FOLDER / name, f"{BUNDLED_SHOWN}/{name}"
    raise K3PlanError(
        f"--calibration {path_text}: {not_a_file(path)}; expected a calibration YAML file or a shipped "
        f"calibration's name: {', '.join(names)}"
    )


@lru_cache(maxsize=16)
def load_calibration(path_text: str) -> Calibration:
    path, shown = resolve_calibration(path_text)
    data = read_yaml_mapping(f"--calibration {shown}", path)
    return convert(Calibration, {**data, "path": shown}, f"--calibration {shown}")


class EnvelopeValue(Frozen):  # computed from a calibration's points: a Struct
    temp_bytes: Optional[int]  # None: refused or not covered
    status: str  # "measured", "refused", "outside"
    detail: str


def envelope(points: list[tuple[int, int, bool]], x: int, *, what: str) -> EnvelopeValue:
    """Upper envelope of measured (size, temp bytes, fits) at ``x``: the largest temp among the
    measured points up to the first measured size >= x. A point that did not fit at or below that
    size refuses x; x beyond every measured size is 'outside' (never extrapolated)."""
    pts = sorted(points)
    covering = [p for p in pts if p[0] >= x]
    failed_below = [p for p in pts if not p[2] and p[0] <= x]
    if failed_below:
        return EnvelopeValue(
            temp_bytes=None,
            status="refused",
            detail=f"{what} {x:,}: the measured compile at {failed_below[-1][0]:,} ran out of memory",
        )
    if not covering:
        return EnvelopeValue(
            temp_bytes=None,
            status="outside",
            detail=f"{what} {x:,} is beyond the largest measured point ({pts[-1][0]:,})",
        )
    upto = covering[0][0]
    failed = [p for p in pts if not p[2] and p[0] <= upto]
    if failed:
        return EnvelopeValue(
            temp_bytes=None,
            status="refused",
            detail=f"{what} {x:,}: the measured compile at {failed[0][0]:,} ran out of memory",
        )
    temp = max(p[1] for p in pts if p[0] <= upto)
    return EnvelopeValue(
        temp_bytes=temp, status="measured", detail=f"envelope of measured points up to {what} {upto:,}"
    )
