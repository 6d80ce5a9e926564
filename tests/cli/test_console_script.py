"""The console script's start-up: what it leaves out of a run and that nothing is lost by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

RUN_FIT = (
    "import contextlib, io, sys\n"
    "sys.argv = ['k3plan', 'fit', '-t', '2x2x4', '--tp', '32', '--context', '32768', '--json']\n"
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


def test_fit_runs_without_importing_importlib_metadata_or_setting_pydantic_plugins():
    """A fit imports neither importlib.metadata (with email and csv, ~20 ms a run) nor pydantic (issue 33: its
    schemas and results are msgspec Structs), and leaves the environment its children inherit as it was: the
    console script no longer sets PYDANTIC_DISABLE_PLUGINS or stands in for pydantic's plugin loader."""
    code = RUN_FIT + (
        "import json, os\n"
        "print(json.dumps({'metadata': 'importlib.metadata' in sys.modules, 'email': 'email' in sys.modules,"
        " 'pydantic': any(m.split('.')[0] == 'pydantic' for m in sys.modules),"
        " 'env': os.environ.get('PYDANTIC_DISABLE_PLUGINS'), 'fit': json.loads(out.getvalue())['fits']}))\n"
    )
    got = json.loads(_run(code))
    assert got == {"metadata": False, "email": False, "pydantic": False, "env": None, "fit": True}


def _shell(redirect: str, *args: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ)
    cmd = " ".join([sys.executable, "-m", "k3plan", *args]) + " " + redirect
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=environ, timeout=120, check=False)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_an_output_the_system_refuses_is_one_line_and_exit_74_not_a_traceback_and_1():
    """Was: `k3plan fit ... > /dev/full` printed rich's OSError traceback and exited 1 ("does not fit")."""
    r = _shell("> /dev/full", "fit", "-t", "2x2x4", "--tp", "32", "--context", "8192")
    assert r.returncode == 74
    assert r.stderr == "error: cannot write the output: No space left on device\n"


def test_a_closed_stdout_still_answers_by_the_exit_code():
    """Was: `k3plan fit ... >&-` died importing the CLI (sys.stdout None: an AttributeError traceback, exit 1)."""
    fits, does_not = (
        _shell(">&-", "fit", "-t", "2x2x4", "--tp", "32", "--context", "8192"),
        _shell(">&-", "fit", "-t", "2x2x2", "--tp", "16"),
    )
    assert (fits.returncode, fits.stderr) == (0, "")
    assert (does_not.returncode, does_not.stderr) == (1, "")
