"""What every command shares: consoles, option types, JSON output.

Options are declared once here as Annotated aliases so that `fit`, `roofline`, `plan`, `curve`,
`check`, `validate` and `report` spell them identically.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Bundled model name, a config.json path, or a folder holding one."),
]


def to_jsonable(obj: Any) -> Any:
    """pydantic models, dataclasses, numpy scalars, paths -> plain JSON types."""
    if hasattr(obj, "model_dump"):
        return to_jsonable(obj.model_dump(mode="json"))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return obj.item()
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2) + "\n")
