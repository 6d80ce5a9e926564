"""Cost over numpy columns: USD an hour, per million output tokens, per million input tokens.

Every function takes ints/floats or numpy arrays (broadcast together) and returns the same shape.
A NaN price (unpriced hardware) gives NaN cost; a zero rate gives +inf cost per token, so a row
that serves nothing never looks free.

Attribution: a deployment's chips serve prefill and decode at once. ``usd_per_million_*_tokens``
charges the whole hourly cost to the one token kind whose rate is given, so it is the cost of that
kind when it is the one being bought (decode-bound: output; prefill-bound: input); pass a pool's
own chips and rate for a disaggregated pool, where the split is exact.
"""

from __future__ import annotations

import numpy as np

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6


def usd_per_hour(*, chips, usd_per_chip_hour):
    """chips x price a chip-hour."""
    return np.multiply(chips, usd_per_chip_hour, dtype=float)


def usd_per_million_tokens(*, chips, usd_per_chip_hour, tokens_per_s):
    """USD an hour / (tokens an hour / 1e6)."""
    hourly = usd_per_hour(chips=chips, usd_per_chip_hour=usd_per_chip_hour)
    tokens_per_hour = np.multiply(tokens_per_s, SECONDS_PER_HOUR, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.divide(hourly * TOKENS_PER_MILLION, tokens_per_hour)
    return np.where(np.asarray(tokens_per_hour) > 0, out, np.where(np.isnan(hourly), np.nan, np.inf))


def usd_per_million_output_tokens(*, chips, usd_per_chip_hour, output_tokens_per_s):
    """Decode: output tokens a second over all the deployment's sequences."""
    return usd_per_million_tokens(chips=chips, usd_per_chip_hour=usd_per_chip_hour, tokens_per_s=output_tokens_per_s)


def usd_per_million_input_tokens(*, chips, usd_per_chip_hour, input_tokens_per_s):
    """Prefill: prompt tokens a second the deployment processes."""
    return usd_per_million_tokens(chips=chips, usd_per_chip_hour=usd_per_chip_hour, tokens_per_s=input_tokens_per_s)


def tokens_per_usd(*, chips, usd_per_chip_hour, tokens_per_s):
    """Tokens one US dollar buys (the Pareto front's 'per dollar' axis); NaN where unpriced."""
    hourly = usd_per_hour(chips=chips, usd_per_chip_hour=usd_per_chip_hour)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(np.multiply(tokens_per_s, SECONDS_PER_HOUR, dtype=float), hourly)
