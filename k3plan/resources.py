"""Where k3plan's shipped data lives; every loader of bundled files asks here, nowhere else.

Installed (a wheel, ``pip install .``, pipx) every data folder is inside the package, read through
``importlib.resources``: ``k3plan/models/bundled``, ``k3plan/engines/<engine>/stack.yaml`` and
``k3plan/hardware_specs`` (the build maps the repository's top-level ``hardware_specs/`` there, see
``setup.py``). Run from a checkout (editable install, ``PYTHONPATH``) a folder the build maps in
from the top of the repository is found there instead.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

# folders the build maps into the package from the top of the repository (setup.py: package_dir)
FROM_REPO_TOP = frozenset({"hardware_specs"})


def data_dir(name: str) -> Path:
    """The folder ``k3plan/<name>`` (e.g. "models/bundled", "hardware_specs") as a file-system path."""
    package = Path(str(files("k3plan")))  # pip unpacks a wheel: the package is always a real folder
    packaged = package / name
    if name in FROM_REPO_TOP and not packaged.is_dir() and (package.parent / name).is_dir():
        return package.parent / name  # a checkout: the folder is still at the top of the repository
    return packaged
