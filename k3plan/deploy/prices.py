"""Prices a chip-hour: the hardware spec's dated list price, or the user's ``--price HW=USD``.

The spec's ``price`` block (hardware_specs/*.yaml) is an on-demand list price with its source and
date, or ``null`` with the reason none is public. ``--price`` overrides it for one run; the result
says which figure was used and where it came from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np

from k3plan.errors import K3PlanError
from k3plan.hardware.loader import near_names
from k3plan.hardware.spec import HardwareSpec
from k3plan.structs import Frozen

# list prices run to tens of dollars a chip-hour; a million is a typo (1e308 overflowed $/hour to "inf")
MAX_USD_PER_CHIP_HOUR = 1e6


class Price(Frozen):
    """The price used for one accelerator, and where it came from."""

    hardware: str
    usd_per_chip_hour: float | None  # None: unpriced (no public figure and no override)
    origin: Literal["override", "spec", "none"]
    source: str  # the spec's source and date, "--price", or why there is none


def parse_price_overrides(texts: Sequence[str], *, known: Iterable[str]) -> dict[str, float]:
    """``["nvidia-b200=5.5", "tpu-v7x=4"]`` -> ``{"nvidia-b200": 5.5, "tpu-v7x": 4.0}``.

    Each text is HW=USD (a chip-hour, > 0); HW must be a known hardware name; a name given twice is
    an error. Anything else raises K3PlanError in one line naming the bad text.
    """
    names = set(known)
    out: dict[str, float] = {}
    for text in texts:
        hw, sep, usd = str(text).partition("=")
        hw, usd = hw.strip(), usd.strip()
        if not sep or not hw or not usd:
            raise K3PlanError(f"--price {text!r}: expected HW=USD a chip-hour, e.g. nvidia-b200=5.50")
        if hw not in names:
            near = near_names(hw, sorted(names))
            raise K3PlanError(
                f"--price {text!r}: unknown hardware {hw!r}; "
                + (f"did you mean {' or '.join(near)}? " if near else "")
                + f"known: {', '.join(sorted(names))}"
            )
        try:
            value = float(usd.removeprefix("$"))
        except ValueError:
            raise K3PlanError(f"--price {text!r}: {usd!r} is not a number of US dollars") from None
        if not math.isfinite(value) or not 0 < value <= MAX_USD_PER_CHIP_HOUR:
            raise K3PlanError(
                f"--price {text!r}: expected a price > 0 and at most {MAX_USD_PER_CHIP_HOUR:,.0f} US dollars a chip-hour"
            )
        if hw in out:
            raise K3PlanError(f"--price {text!r}: {hw} is priced twice")
        out[hw] = value
    return out


def price_for(hw: HardwareSpec, overrides: Mapping[str, float]) -> Price:
    """The override if given, else the spec's dated list price, else unpriced with the reason."""
    if hw.name in overrides:
        return Price(hardware=hw.name, usd_per_chip_hour=overrides[hw.name], origin="override", source="--price")
    block = hw.file.price
    if block is None:
        return Price(
            hardware=hw.name, usd_per_chip_hour=None, origin="none", source="no price block in the hardware spec"
        )
    if block.usd_per_chip_hour is None:
        return Price(hardware=hw.name, usd_per_chip_hour=None, origin="none", source=block.note or block.source)
    return Price(
        hardware=hw.name,
        usd_per_chip_hour=block.usd_per_chip_hour,
        origin="spec",
        source=f"{block.source} ({block.date})",
    )


def price_column(hardware_names: Sequence[str], prices: Mapping[str, Price]) -> np.ndarray:
    """USD a chip-hour for each row's hardware; NaN where unpriced (so cost columns are NaN too)."""
    by_name = {n: (np.nan if p.usd_per_chip_hour is None else p.usd_per_chip_hour) for n, p in prices.items()}
    try:
        return np.array([by_name[n] for n in hardware_names], dtype=float)
    except KeyError as err:
        raise K3PlanError(f"no price looked up for hardware {err.args[0]!r}") from None
