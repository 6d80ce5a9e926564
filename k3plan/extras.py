"""Optional extras (pyproject [project.optional-dependencies]): which one a missing module belongs to, and
the command that installs it for this install (issue 36: pip or pipx, never the checkout's ``-e``).

Ground layer: k3plan.cli.app turns a ModuleNotFoundError of an extra's module into one line and exit 2;
report writes its Markdown without plots when matplotlib is missing and says so.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

# top-level module -> the extra that installs it
EXTRA_OF = {"jax": "jax", "jaxlib": "jax", "libtpu": "tpu", "matplotlib": "plot"}


def _pipx() -> bool:
    """Whether this interpreter is a pipx venv (pipx keeps them under .../pipx/venvs/<name>)."""
    parts = os.path.normpath(sys.prefix).split(os.sep)
    return "pipx" in parts and "venvs" in parts


def install_command(extra: str) -> str:
    """The command that adds ``extra`` to this install of k3plan."""
    spec = f"'k3plan[{extra}]'"
    if _pipx():
        return f"pipx install --force {spec}"
    return f"pip install {spec}" + (" (on a TPU host: pip install 'k3plan[tpu]')" if extra == "jax" else "")


def missing_extra(err: BaseException) -> Optional[str]:
    """The extra a ModuleNotFoundError's module belongs to, else None (a genuine bug: let it raise)."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    return EXTRA_OF.get(err.name.split(".")[0])


def missing_extra_line(err: BaseException, command: str) -> Optional[str]:
    """One line for a missing extra's module: what needs it, the extra, and its install command."""
    extra = missing_extra(err)
    if extra is None:
        return None
    module = getattr(err, "name", "") or extra
    return f"k3plan {command} needs the optional extra '{extra}' ({module} is not installed): {install_command(extra)}"


def installed(module: str) -> bool:
    """Whether ``module`` is installed, without importing it (a module set to None in sys.modules counts as
    missing). The jax check before validate/probe must not import jax: the cpu target's fake-device count
    goes into XLA_FLAGS after it, and XLA reads XLA_FLAGS once, when jax starts (issue 50)."""
    import importlib.util

    top = module.split(".")[0]
    if top in sys.modules:
        return sys.modules[top] is not None
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def have(module: str) -> bool:
    """Whether ``module`` imports (a module set to None in sys.modules counts as missing, as in the tests)."""
    try:
        __import__(module)
    except ImportError:
        return False
    return True
