"""An engine's kernel file (``probe ... --kernel FILE``), imported guarded: whatever its top level does (a syntax
error, an exception, ``sys.exit(0)``) is one line naming the file, exit 2 -- never a traceback, nor an exit 0
with nothing measured."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from k3plan.errors import K3PlanError, require


def load_module(path: Path, module_name: str, *, label: str) -> ModuleType:
    """``path`` run as module ``module_name``; ``label`` (``--kernel FILE``) names it in an error."""
    require(Path(path).is_file(), f"{label}: no such file; expected the kernel's .py file")
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    require(spec is not None and spec.loader is not None, f"{label}: not a Python file")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's file runs here: anything can happen
        raise K3PlanError(f"{label}: cannot load the kernel: {_why(err)}") from None
    return module


def _why(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r}) as it was imported; expected a module that defines the kernel"
    if isinstance(err, SyntaxError):
        return f"syntax error in {err.filename} line {err.lineno}: {err.msg}"
    text = " ".join(str(err).split())
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
