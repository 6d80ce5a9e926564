"""Optional extras (pyproject [project.optional-dependencies]): which one a missing module belongs to, and
the command that installs it for this install (issue 36: pip or pipx, never the checkout's ``-e``).

Ground layer: k3plan.cli.app refuses probe and validate without jax in one line (exit 2), as ``pyplot`` and
``require_matplotlib`` do a plot without matplotlib; report writes its Markdown without plots then and says so.
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


def _matplotlib_config_dir() -> str:
    """Where matplotlib keeps its font cache when the user set no MPLCONFIGDIR: a folder of this user's under the
    temporary directory (kept between runs, so the cache is built once), never HOME. A folder there that is not
    this user's own (or is a link) is not used: a fresh one is made instead."""
    import stat
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.path.join(tempfile.gettempdir(), f"k3plan-matplotlib-{uid}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="k3plan-matplotlib-")
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != uid) or st.st_mode & 0o022:
        return tempfile.mkdtemp(prefix="k3plan-matplotlib-")
    return path


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no window), imported on first use (~1.5 s: only a command
    that draws pays it). Without MPLCONFIGDIR, its font cache goes to a temporary folder, not HOME. Not installed:
    a one-line K3PlanError naming the 'plot' extra's install command (exit 2)."""
    from k3plan.errors import K3PlanError

    if "MPLCONFIGDIR" not in os.environ:
        os.environ["MPLCONFIGDIR"] = _matplotlib_config_dir()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise K3PlanError(no_matplotlib_line("plots need")) from None
    return plt


def no_matplotlib_line(what: str) -> str:
    """``what`` (e.g. "--plot needs") matplotlib, and the 'plot' extra's install command for this install."""
    return f"{what} matplotlib (the 'plot' extra, not installed): {install_command('plot')}"


def require_matplotlib(flag: str) -> None:
    """Before the work a plot waits on: a one-line K3PlanError when matplotlib is not installed (looked up, not
    imported: the import is paid only when the plot is drawn)."""
    import importlib.util

    from k3plan.errors import K3PlanError

    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules (the tests' missing extra)
        found = False
    if not found:
        raise K3PlanError(no_matplotlib_line(f"{flag} needs"))
