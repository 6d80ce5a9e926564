"""Comma-separated option values (``-H tpu-v7x,nvidia-b200``, ``--chunks 2048,8192``): one parser for every
command. An empty item (``a,,b``, a trailing comma) is bad input, not silently dropped: it is most often a
value the user meant to type. An item given twice (``-c 131072,131072``) is bad input too: the command ran it
twice (report wrote every section twice, plan ranked each configuration twice)."""

from __future__ import annotations

from k3plan.errors import K3PlanError
from k3plan.tokencount import parse_tokens


def items(flag: str, text: str) -> list[str]:
    """The stripped items of ``text``; K3PlanError naming ``flag`` when there is none or one is empty."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise K3PlanError(f"{flag} {text!r}: expected one or more values separated by commas")
    if not all(parts):
        raise K3PlanError(
            f"{flag} {text!r}: an empty item (two commas or a comma at an end); expected values separated by single commas"
        )
    twice = next((p for i, p in enumerate(parts) if p in parts[:i]), None)
    if twice is not None:
        raise K3PlanError(f"{flag} {text!r}: {twice!r} is listed twice; expected each value once")
    return parts


def whole_numbers(flag: str, text: str, *, minimum: int = 1, example: str = "4096,16384") -> list[int]:
    """Whole numbers of at least ``minimum``, e.g. ``example``."""
    out = []
    for p in items(flag, text):
        try:
            v = parse_tokens(p)  # 131072, 128k, 1M (issue 36: counts as people write them)
        except ValueError:
            raise K3PlanError(
                f"{flag} {text!r}: {p!r} is not a whole number; expected e.g. {example} (k = 1,024, M = 1,048,576)"
            ) from None
        if v < minimum:
            raise K3PlanError(f"{flag} {text!r}: {v:,} is below {minimum:,}; expected whole numbers >= {minimum:,}")
        if v in out:  # 8192 and 8_192 or 08192: the same number spelt twice
            raise K3PlanError(f"{flag} {text!r}: {v:,} is listed twice; expected each value once")
        out.append(v)
    return out


def names(flag: str, text: str, *, allowed: tuple[str, ...]) -> list[str]:
    """Names each one of ``allowed``."""
    got = items(flag, text)
    bad = [n for n in got if n not in allowed]
    if bad:
        raise K3PlanError(f"{flag} {text!r}: {bad[0]!r} is not one of {', '.join(allowed)}")
    return got
