"""Prices: the --price parser (one-line errors), the spec's dated price, and every bundled spec
carrying a price block (a figure with a date, or null with the reason)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from k3plan.deploy.prices import parse_price_overrides, price_column, price_for
from k3plan.errors import K3PlanError
from k3plan.hardware.loader import list_hardware, load_hardware

KNOWN = list_hardware()


def test_parses_overrides():
    got = parse_price_overrides(["nvidia-b200=5.5", " tpu-v7x = $4 "], known=KNOWN)
    assert got == {"nvidia-b200": 5.5, "tpu-v7x": 4.0}
    assert parse_price_overrides([], known=KNOWN) == {}


@pytest.mark.parametrize(
    "text, says",
    [
        ("nvidia-b200", "expected HW=USD"),
        ("=3", "expected HW=USD"),
        ("nvidia-b200=", "expected HW=USD"),
        ("nvidia-b999=3", "unknown hardware 'nvidia-b999'"),
        ("nvidia-b200=cheap", "not a number"),
        ("nvidia-b200=0", "> 0"),
        ("nvidia-b200=-2", "> 0"),
        ("nvidia-b200=nan", "> 0"),
        ("nvidia-b200=inf", "> 0"),
    ],
)
def test_bad_override_is_one_line_naming_the_text(text, says):
    with pytest.raises(K3PlanError) as err:
        parse_price_overrides([text], known=KNOWN)
    msg = str(err.value)
    assert says in msg and repr(text) in msg and "\n" not in msg


def test_a_hardware_priced_twice_is_an_error():
    with pytest.raises(K3PlanError, match="priced twice"):
        parse_price_overrides(["nvidia-b200=5", "nvidia-b200=6"], known=KNOWN)


def test_override_beats_the_spec_and_unpriced_says_why():
    h100 = load_hardware("nvidia-h100-sxm")
    spec = price_for(h100, {})
    assert spec.origin == "spec" and spec.usd_per_chip_hour == 2.99
    assert "2026-05-18" in spec.source  # the date travels with the figure
    over = price_for(h100, {"nvidia-h100-sxm": 2.0})
    assert (over.origin, over.usd_per_chip_hour, over.source) == ("override", 2.0, "--price")
    v7x = price_for(load_hardware("tpu-v7x"), {})
    assert v7x.usd_per_chip_hour is None and v7x.origin == "none" and "no public" in v7x.source
    assert price_for(load_hardware("tpu-v7x"), {"tpu-v7x": 4.2}).usd_per_chip_hour == 4.2


def test_price_column_is_nan_where_unpriced():
    hws = {n: load_hardware(n) for n in ("nvidia-h100-sxm", "tpu-v7x")}
    prices = {n: price_for(h, {}) for n, h in hws.items()}
    col = price_column(["nvidia-h100-sxm", "tpu-v7x", "nvidia-h100-sxm"], prices)
    assert col[0] == col[2] == 2.99 and math.isnan(col[1])
    with pytest.raises(K3PlanError, match="nvidia-b200"):
        price_column(["nvidia-b200"], prices)
    assert isinstance(col, np.ndarray)


@pytest.mark.parametrize("name", KNOWN)
def test_every_bundled_accelerator_has_a_dated_sourced_price_or_the_reason(name):
    block = load_hardware(name).file.price
    assert block is not None, f"{name}: no price block"
    assert block.source.strip() and block.date.strip()
    assert any(ch.isdigit() for ch in block.date)  # a date, not a placeholder
    if block.usd_per_chip_hour is None:
        assert block.note and block.note.strip()
    else:
        assert 0.1 < block.usd_per_chip_hour < 100  # a chip-hour, not a node-hour or a typo
