"""The console script's start-up: what it leaves out of a run and that nothing is lost by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

RUN_FIT = (
    "import contextlib, io, sys\n"
    "sys.argv = ['k3plan', 'fit', '-t', '2x2x4', '--tp', '32', '--json']\n"
    "from k3plan.cli.app import main\n"
    "out = io.StringIO()\n"
    "with contextlib.redirect_stdout(out):\n"
    "    try:\n"
    "        main()\n"
    "    except SystemExit:\n"
    "        pass\n"
)


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environ).stdout


def test_fit_runs_without_importing_importlib_metadata_and_its_answer_is_unchanged():
    """With plugins disabled (the console script's default) pydantic's plugin loader is not imported,
    so importlib.metadata (email, csv) is not either; the fit's JSON is the same as through the real loader."""
    code = RUN_FIT + (
        "import json\n"
        "print(json.dumps({'metadata': 'importlib.metadata' in sys.modules, 'email': 'email' in sys.modules,"
        " 'fit': json.loads(out.getvalue())}))\n"
    )
    lean = json.loads(_run(code))
    assert lean["metadata"] is False and lean["email"] is False
    # a user's own PYDANTIC_DISABLE_PLUGINS naming one plugin is kept, and then the real loader runs
    real = json.loads(_run(code, PYDANTIC_DISABLE_PLUGINS="logfire"))
    assert real["metadata"] is True
    assert lean["fit"] == real["fit"]


def test_the_stand_in_loader_hands_any_other_name_to_the_real_one():
    code = RUN_FIT + (
        "loader = sys.modules['pydantic.plugin._loader']\n"
        "print(loader.get_plugins(), 'importlib.metadata' in sys.modules, loader._plugins,"
        " 'importlib.metadata' in sys.modules, sys.modules['pydantic.plugin._loader'].__file__.endswith('_loader.py'))\n"
    )
    assert _run(code).split() == ["()", "False", "None", "True", "True"]
