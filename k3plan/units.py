"""Units, decided in one place.

Bytes are ints; rates are per second. GB = 1e9 B and GiB = 2**30 B: every printed figure says
which, and memory prints in GiB (fmt_gib). Token counts print exact, with thousands separators
(fmt_tokens: 131,072); where space is short (a plot axis) they are shortened with K = 1,000, never
1,024, and the axis says so (tokens_k, TOKENS_K_AXIS). Spec files may write "96GiB", "7.38TB/s", "100Gb/s", "2307TFLOP/s"; they are parsed here
and nowhere else.
"""

from __future__ import annotations

import math
import re

from k3plan.errors import K3PlanError

# The workload every command assumes when none is given (fit, roofline, curve, plan alike).
DEFAULT_CONTEXT_TOKENS = 131072
# vLLM V1's default max_num_batched_tokens for online serving: the prefill chunk when none is given.
DEFAULT_PREFILL_CHUNK_TOKENS = 8192

KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
TOKENS_PER_K = 1_000  # a shortened token count: K = 1,000 (2**17 tokens plot at 131.072, never as "128K")
TOKENS_K_AXIS = "thousand tokens (K = 1,000)"

_BYTE_UNITS = {
    "B": 1,
    "KB": KB,
    "MB": MB,
    "GB": GB,
    "TB": TB,
    "KIB": KiB,
    "MIB": MiB,
    "GIB": GiB,
    "TIB": TiB,
}
_PREFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


def parse_bytes(text: str | int | float, *, what: str = "size") -> int:
    """'96GiB' -> 103079215104; a bare number is bytes, and a whole one: '0.5' (bytes) is refused, not
    rounded to 0 (a figure where 0 means something else, --draft-bytes 0's n-gram drafting, would switch
    silently). A size with a unit rounds to the nearest byte, unless it is under one byte ('1e-12GB')."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _whole_bytes(_non_negative(text, text, what), text, what, unit=False)
    m = re.fullmatch(_NUM + r"\s*([KMGT]i?B|B)?", str(text).strip(), flags=re.IGNORECASE)
    if not m:
        raise K3PlanError(
            f"{what}: cannot read {text!r} as a size; expected e.g. '96GiB', '141GB' or a number of bytes"
        )
    scale = _BYTE_UNITS[(m.group(2) or "B").upper()]
    value = float(m.group(1)) * scale
    return _whole_bytes(_non_negative(value, text, what), text, what, unit=scale > 1)


def _whole_bytes(value: float, text, what: str, *, unit: bool) -> int:
    """``value`` bytes as an int: a count of bytes must be whole, a size with a unit at least one byte (or 0)."""
    if not unit and value != int(value):
        raise K3PlanError(
            f"{what}: {text!r} is not a whole number of bytes; expected an integer or a size with a unit (e.g. '30GB')"
        )
    if 0 < value < 1:
        raise K3PlanError(f"{what}: {text!r} is above 0 but less than one byte; expected a whole number of bytes")
    return int(round(value))


def parse_rate(text: str | int | float, *, what: str = "bandwidth") -> float:
    """Bytes per second from '7.38TB/s', '1200GB/s' or '100Gb/s' (bits: divided by 8)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(_non_negative(float(text), text, what))
    m = re.fullmatch(_NUM + r"\s*([KMGTP]?)(B|b)/s", str(text).strip())
    if not m:
        raise K3PlanError(f"{what}: cannot read {text!r} as a rate; expected e.g. '7.38TB/s', '450GB/s' or '100Gb/s'")
    value = float(m.group(1)) * _PREFIX[m.group(2)]
    if m.group(3) == "b":
        value /= 8
    return _non_negative(value, text, what)


def parse_flops(text: str | int | float, *, what: str = "compute") -> float:
    """FLOP/s from '2307TFLOP/s' or a bare number."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(_non_negative(float(text), text, what))
    m = re.fullmatch(_NUM + r"\s*([KMGTP]?)FLOP/s", str(text).strip(), flags=re.IGNORECASE)
    if not m:
        raise K3PlanError(f"{what}: cannot read {text!r} as FLOP/s; expected e.g. '2307TFLOP/s'")
    return _non_negative(float(m.group(1)) * _PREFIX[m.group(2).upper()], text, what)


def parse_duration_s(
    text: str | int | float, *, what: str = "latency", at_most_s: float | None = None, why: str = ""
) -> float:
    """Seconds from '9.88us', '1.2ms', '3s' or a bare number of seconds; above ``at_most_s`` (when given) it
    is refused, the message saying ``why`` that bound holds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(_non_negative(float(text), text, what))
    else:
        m = re.fullmatch(_NUM + r"\s*(ns|us|µs|ms|s)", str(text).strip())
        if not m:
            raise K3PlanError(f"{what}: cannot read {text!r} as a duration; expected e.g. '9.88us' or '1.5ms'")
        scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
        value = _non_negative(float(m.group(1)) * scale, text, what)
    if at_most_s is not None and value > at_most_s:
        raise K3PlanError(f"{what}: {text!r} is above {at_most_s:g} s; expected at most {at_most_s:g} s ({why})")
    return value


def _non_negative(value, text, what):
    if value != value or value in (float("inf"), float("-inf")):  # 1e400 reads as inf
        raise K3PlanError(f"{what}: {text!r} is not a finite number; expected a finite value")
    if value < 0:
        raise K3PlanError(f"{what}: {text!r} is negative; expected a value >= 0")
    return value


def fmt_gib(n_bytes: float, digits: int = 2) -> str:
    """Bytes as the house prints them: 59_893_973_504 -> '55.78 GiB'."""
    return f"{n_bytes / GiB:,.{digits}f} GiB"


def fmt_gib_sig(n_bytes: float, sig: int = 3) -> str:
    """Bytes in GiB with at least ``sig`` significant digits (at least 2 decimals), so a small
    figure never prints as 0.00 GiB: 12_939_428 -> '0.0121 GiB', 3 * GiB -> '3.00 GiB'."""
    gib = abs(n_bytes) / GiB
    digits = 2 if gib == 0 else max(2, sig - 1 - math.floor(math.log10(gib)))
    return fmt_gib(n_bytes, digits)


def fmt_tokens(n: int) -> str:
    """A token count as every text output prints it: exact, 131_072 -> '131,072' (never '128K').
    Where space is short (a plot axis), plot tokens_k(n) under tokens_k_axis(...) instead."""
    return f"{int(n):,}"


def tokens_k(n: float) -> float:
    """A token count on a K = 1,000 axis (label it with TOKENS_K_AXIS): 344_064 -> 344.064."""
    return n / TOKENS_PER_K


def tokens_k_axis(what: str) -> str:
    """The label of an axis of tokens_k values: 'longest context, thousand tokens (K = 1,000)'."""
    return f"{what}, {TOKENS_K_AXIS}"


def fmt_count(n: float) -> str:
    """2779484478208 -> '2.779 T'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:,.3f} {suffix}"
    return f"{n:,.0f}"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural but for one: "1 host", "8 chips" (was "1 hosts")."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
