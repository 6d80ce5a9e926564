"""The `k3plan` command (its console script and `python -m k3plan`): every run is a fresh process that
goes to the typer app (k3plan.cli.app.main); no background process, no cache of answers."""

from __future__ import annotations

import os
import sys


def _cli(args: list[str]) -> None:
    from k3plan.cli.app import main as cli_main

    cli_main(args)


def _whole_writes() -> None:
    """Under `python -u` (PYTHONUNBUFFERED) stdout and stderr are a text layer straight on the file, which drops
    the rest of a write the system took part of (a write to a pipe interrupted by a signal: Ctrl-Z then `fg` gave
    the reader 65,536 of 3,882,954 bytes, exit 0). A buffered layer between them writes all of it (it writes
    again until done); flushed at each line, as near to unbuffered as a line."""
    import io

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        raw = getattr(stream, "buffer", None)
        if type(stream) is io.TextIOWrapper and isinstance(raw, io.RawIOBase) and os.name == "posix":
            encoding, errors = stream.encoding, stream.errors
            stream.flush()
            stream.detach()  # the old layer lets go of the file: its end does not close it under the new one
            whole = io.TextIOWrapper(
                io.BufferedWriter(raw), encoding=encoding, errors=errors, newline="\n", line_buffering=True
            )
            if getattr(sys, f"__{name}__") is stream:
                setattr(sys, f"__{name}__", whole)
            setattr(sys, name, whole)


def main() -> None:
    _whole_writes()
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # closed by the shell (`>&-`): the answer goes nowhere, the exit code tells
            setattr(sys, name, open(os.devnull, "w"))  # the process's stream, closed at its exit
    try:
        try:  # Ctrl-C while the CLI imports: one line and exit 130, as during a command
            _cli(sys.argv[1:])
        finally:  # a write error at the end (buffered output) here, not in the interpreter's exit
            sys.stdout.flush()
    except KeyboardInterrupt:
        from k3plan.errors import interrupted

        interrupted()
    except BrokenPipeError:  # the reader left (`| head -1`) before or while the answer was written
        from k3plan.errors import reader_gone

        reader_gone()
    except OSError as err:  # the stream refused the answer (`> /dev/full`): one line, exit 74, not 1
        from k3plan.errors import WRITE_ERRNOS, output_unwritable

        if err.errno not in WRITE_ERRNOS:
            raise
        output_unwritable(err)


if __name__ == "__main__":
    main()
