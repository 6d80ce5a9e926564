"""What a serve command's flags are worth as its engines read them: a whole number within what the engines' int32
tensors hold (k3plan.engines.serve and each engine's own reader, engines/<engine>/serve.py)."""

from __future__ import annotations

from k3plan.errors import K3PlanError

# the most sequences or tokens a flag may ask for: an int the engines' C++ / int32 tensors hold
MAX_FLAG_INT = 2**31 - 1


def flag_int(flag: str, value: str, *, lo: int = 1) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a whole number") from None
    if n < lo:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a {'positive' if lo == 1 else 'non-negative'} number")
    if n > MAX_FLAG_INT:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected at most {MAX_FLAG_INT:,}")
    return n
