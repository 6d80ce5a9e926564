"""The project's one user-facing error type.

Anything the user can fix (a bad flag, a missing file, a malformed config) raises ``K3PlanError``;
the CLI prints its message as one line on stderr and exits 2. Everything else is a bug.
"""

from __future__ import annotations


class K3PlanError(Exception):
    """Bad input: printed as one line, exit code 2."""

    exit_code = 2


def require(cond: bool, message: str) -> None:
    """Raise K3PlanError(message) unless cond holds."""
    if not cond:
        raise K3PlanError(message)
