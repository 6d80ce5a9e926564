"""Calibration files: temporaries measured by compiling the real graphs (validate, or a real slice).

Format (see ../shared/data/calibration/*.yaml): model, hardware, topology, tp, stack, backend,
available_hbm_gib, argument_gib, prefill [{tokens, temp_gib, fits?}], decode [{context, temp_gib}],
notes. Sizes are per device in GiB. Points are combined as an upper envelope, never a fitted slope.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from k3plan.errors import K3PlanError
from k3plan.specfile import describe, read_yaml_mapping
from k3plan.units import GiB


class _F(BaseModel):
    # strict: "64" is not a token count, 1 is not `true`; floats finite (no .nan/.inf)
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


_GIB_MAX = 2.0**20  # a sanity bound: a pebibyte a device is a typo, not a measurement


class PrefillPoint(_F):
    tokens: int = Field(gt=0)
    temp_gib: float = Field(ge=0, le=_GIB_MAX)
    fits: bool = True


class DecodePoint(_F):
    context: int = Field(gt=0)
    temp_gib: float = Field(ge=0, le=_GIB_MAX)
    batch: Optional[int] = Field(None, gt=0)
    fits: bool = True


class Calibration(_F):
    model: str
    hardware: str
    topology: str
    tp: int = Field(gt=0)
    ep: Optional[int] = Field(None, gt=0)
    dp: int = Field(1, gt=0)
    stack: str
    backend: str
    device_kind: Optional[str] = None
    jax_version: Optional[str] = None
    libtpu_version: Optional[str] = None
    date: Optional[str] = None
    source: Optional[str] = None
    available_hbm_gib: Optional[float] = Field(None, gt=0, le=_GIB_MAX)
    argument_gib: Optional[float] = Field(None, gt=0, le=_GIB_MAX)  # the weights: never zero
    prefill: list[PrefillPoint] = Field(min_length=1)  # every calibration measures prefill
    decode: list[DecodePoint] = []
    notes: list[str] = []
    path: str = ""


@lru_cache(maxsize=16)
def load_calibration(path_text: str) -> Calibration:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise K3PlanError(
            f"--calibration {path_text}: "
            + ("a folder; expected a calibration YAML file" if path.is_dir() else "no such file")
        )
    data = read_yaml_mapping(f"--calibration {path}", path)
    try:
        cal = Calibration.model_validate({**data, "path": str(path)})
    except ValidationError as err:
        raise K3PlanError(f"--calibration {path}: {describe(err)}") from None
    return cal


class EnvelopeValue(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    temp_bytes: Optional[int]  # None: refused or not covered
    status: str  # "measured", "refused", "outside"
    detail: str


def envelope(points: list[tuple[int, float, bool]], x: int, *, what: str) -> EnvelopeValue:
    """Upper envelope of measured (size, temp GiB, fits) at ``x``: the largest temp among the
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
        temp_bytes=int(temp * GiB), status="measured", detail=f"envelope of measured points up to {what} {upto:,}"
    )
