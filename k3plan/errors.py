"""The project's one user-facing error type.

Anything the user can fix (a bad flag, a missing file, a malformed config) raises ``K3PlanError``;
the CLI prints its message as one line on stderr and exits 2. Everything else is a bug.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import NoReturn

# the shell's status for a process that SIGINT ended (128 + 2); what k3plan exits with on Ctrl-C
EXIT_INTERRUPTED = 130
INTERRUPTED = "interrupted (Ctrl-C); no file was left half-written\n"


class K3PlanError(Exception):
    """Bad input: printed as one line, exit code 2."""

    exit_code = 2


def require(cond: bool, message: str) -> None:
    """Raise K3PlanError(message) unless cond holds."""
    if not cond:
        raise K3PlanError(message)


def interrupted() -> NoReturn:
    """Ctrl-C: one line on stderr, exit 130, no traceback (every write is atomic: k3plan.io_safe)."""
    sys.stderr.write(INTERRUPTED)
    sys.exit(EXIT_INTERRUPTED)


# the shell's status for a process that SIGPIPE ended (128 + 13), as `yes | head -1` reports it: 1 is k3plan's
# "does not fit" / "gate failed", which `check ... | head -1` under `set -o pipefail` must not claim
EXIT_BROKEN_PIPE = 141


def reader_gone() -> NoReturn:
    """stdout's reader closed the pipe: stop quietly with 141; stdout goes to /dev/null so that the
    interpreter's final flush does not print "Exception ignored ... BrokenPipeError"."""
    _stdout_to_devnull()
    sys.exit(EXIT_BROKEN_PIPE)


# sysexits.h EX_IOERR: the answer could not be written (a full disk, /dev/full, a quota, an I/O error). Not 1,
# which is k3plan's "does not fit" / "gate failed", nor 2, bad input
EXIT_UNWRITABLE = 74
# what writing the answer to a stream can fail with (BrokenPipeError, the reader gone, is reader_gone's)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EBADF})


class UnwritableFile(K3PlanError):
    """A file k3plan writes could not be written whole (a full disk, a quota, an I/O error): one line, exit 74,
    as a refused stdout; the old file, if any, is left as it was."""

    exit_code = EXIT_UNWRITABLE


def output_unwritable(err: OSError) -> NoReturn:
    """stdout (or stderr) refused the answer: one line on stderr where it can take it, exit 74; stdout goes to
    /dev/null so that the interpreter's final flush does not print "Exception ignored ... OSError"."""
    try:
        sys.stderr.write(f"error: cannot write the output: {err.strerror or err}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    _stdout_to_devnull()
    sys.exit(EXIT_UNWRITABLE)


def _stdout_to_devnull() -> None:
    """fd 1 onto /dev/null: what is left in stdout's buffer goes nowhere at the interpreter's exit instead of
    failing there ("Exception ignored ... BrokenPipeError / OSError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout (a test runner's): nothing left to flush
        pass
