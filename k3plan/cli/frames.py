"""``--csv`` of plan, curve and report: the table k3plan.api hands a notebook as a DataFrame, written as CSV to a
file or ('-') to stdout instead of the terminal table. Declared once here so the three spell it alike."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from k3plan.errors import K3PlanError


def csv_option(what: str, example: str) -> Any:
    """The --csv option (typer.Option) of a command whose table is ``what``."""
    return typer.Option(
        "--csv",
        metavar="FILE",
        help=f"Write {what} as CSV to FILE, or to stdout with '-' (instead of the table): the columns of "
        f"k3plan.api's DataFrame, one a field, a nested one as outer.inner, units in the names. E.g. {example}.",
    )


def to_stdout(csv: Optional[Path]) -> bool:
    return csv is not None and str(csv) == "-"


def check_csv(csv: Optional[Path], *, json_out: bool) -> None:
    """Before the work: `--csv -` and --json both want stdout; a FILE that cannot be written fails now."""
    if to_stdout(csv) and json_out:
        raise K3PlanError("--csv - and --json both write to stdout: give one, or --csv FILE")
    if csv is not None and not to_stdout(csv):
        from k3plan.io_safe import check_target

        check_target(csv, label="--csv")


def write_csv(table: Any, csv: Path) -> Optional[str]:
    """``table`` (a k3plan.api Table) as CSV to ``csv``; the path written, None for stdout."""
    if to_stdout(csv):
        sys.stdout.write(table.to_csv())
        return None
    table.to_csv(csv)
    return str(csv)
