"""Cost columns, with every expected figure worked by hand here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from k3plan.deploy.cost import (
    tokens_per_usd,
    usd_per_hour,
    usd_per_million_input_tokens,
    usd_per_million_output_tokens,
)


def test_usd_per_hour():
    # 8 chips x $2.99 = $23.92 an hour
    assert float(usd_per_hour(chips=8, usd_per_chip_hour=2.99)) == pytest.approx(23.92)


def test_per_million_output_tokens_by_hand():
    # $23.92/h over 1,000 tok/s = 3.6 M tokens an hour -> 23.92 / 3.6 = $6.6444 a million
    got = usd_per_million_output_tokens(chips=8, usd_per_chip_hour=2.99, output_tokens_per_s=1000)
    assert float(got) == pytest.approx(23.92 / 3.6)


def test_per_million_input_tokens_over_columns():
    # 64 chips x $4.54 = $290.56/h; 50,000 prompt tok/s = 180 M/h -> $1.6142/M; 25,000 -> twice that
    got = usd_per_million_input_tokens(
        chips=np.array([64, 64]), usd_per_chip_hour=4.54, input_tokens_per_s=np.array([50_000.0, 25_000.0])
    )
    assert got == pytest.approx([290.56 / 180, 2 * 290.56 / 180])


def test_unpriced_is_nan_and_serving_nothing_is_never_free():
    got = usd_per_million_output_tokens(
        chips=np.array([8, 8, 8]),
        usd_per_chip_hour=np.array([np.nan, 2.0, np.nan]),
        output_tokens_per_s=np.array([100.0, 0.0, 0.0]),
    )
    assert math.isnan(got[0]) and got[1] == math.inf and math.isnan(got[2])


def test_tokens_per_usd():
    # 1,000 tok/s x 3,600 s = 3.6 M tokens for $23.92 -> 150,501.7 tokens a dollar
    assert float(tokens_per_usd(chips=8, usd_per_chip_hour=2.99, tokens_per_s=1000)) == pytest.approx(3.6e6 / 23.92)
    assert math.isnan(float(tokens_per_usd(chips=8, usd_per_chip_hour=np.nan, tokens_per_s=1000)))
