"""The console script's start-up: what it leaves out of a run and that nothing is lost by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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
    # a user's own PYDANTIC_DISABLE_PLUGINS naming one plugin is kept; a fit builds no pydantic model (issue
    # 33: its schemas are msgspec Specs), so not even the real loader imports importlib.metadata
    real = json.loads(_run(code, PYDANTIC_DISABLE_PLUGINS="logfire"))
    assert real["metadata"] is False
    assert lean["fit"] == real["fit"]


def test_a_pydantic_model_built_after_a_command_keeps_the_users_plugin_setting():
    """A pydantic model built in the process (roofline's results are Structs now, issue 33, so the test builds
    one after it): with plugins disabled the stand-in loader answers (no importlib.metadata); with the user's
    own PYDANTIC_DISABLE_PLUGINS naming one plugin the real loader runs."""
    code = RUN_FIT.replace("'fit', ", "'roofline', ") + (
        "from pydantic import BaseModel\n"
        "class M(BaseModel):\n"
        "    x: int = 1\n"
        "import json\n"
        "print(json.dumps({'metadata': 'importlib.metadata' in sys.modules, 'out': out.getvalue()}))\n"
    )
    lean = json.loads(_run(code))
    real = json.loads(_run(code, PYDANTIC_DISABLE_PLUGINS="logfire"))
    assert lean["metadata"] is False and real["metadata"] is True
    assert lean["out"] == real["out"] and json.loads(lean["out"])["fits"] is True


def test_the_stand_in_loader_hands_any_other_name_to_the_real_one():
    code = RUN_FIT + (
        "loader = sys.modules['pydantic.plugin._loader']\n"
        "print(loader.get_plugins(), 'importlib.metadata' in sys.modules, loader._plugins,"
        " 'importlib.metadata' in sys.modules, sys.modules['pydantic.plugin._loader'].__file__.endswith('_loader.py'))\n"
    )
    assert _run(code).split() == ["()", "False", "None", "True", "True"]


def _shell(redirect: str, *args: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ)
    cmd = " ".join([sys.executable, "-m", "k3plan", *args]) + " " + redirect
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=environ, timeout=120, check=False)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_an_output_the_system_refuses_is_one_line_and_exit_74_not_a_traceback_and_1():
    """Was: `k3plan fit ... > /dev/full` printed rich's OSError traceback and exited 1 ("does not fit")."""
    r = _shell("> /dev/full", "fit", "-t", "2x2x4", "--tp", "32")
    assert r.returncode == 74
    assert r.stderr == "error: cannot write the output: No space left on device\n"


def test_a_closed_stdout_still_answers_by_the_exit_code():
    """Was: `k3plan fit ... >&-` died importing the CLI (sys.stdout None: an AttributeError traceback, exit 1)."""
    fits, does_not = _shell(">&-", "fit", "-t", "2x2x4", "--tp", "32"), _shell(">&-", "fit", "-t", "2x2x2", "--tp", "16")
    assert (fits.returncode, fits.stderr) == (0, "")
    assert (does_not.returncode, does_not.stderr) == (1, "")
