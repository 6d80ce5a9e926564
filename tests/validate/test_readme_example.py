"""Issue 50: the README's `k3plan validate` example runs as written in a fresh process, with no XLA_FLAGS
set by the user. The jax check before validate/probe must find jax without importing it: the cpu target's
fake-device count goes into XLA_FLAGS after that check, and XLA reads XLA_FLAGS once, when jax starts."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _readme_validate_example() -> list[str]:
    for line in (ROOT / "README.md").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("k3plan validate ") and "--target cpu" in line:
            return shlex.split(line)[1:]
    raise AssertionError("the README has no `k3plan validate ... --target cpu` example")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_jax_check_does_not_import_jax():
    code = (
        "import sys; from k3plan.extras import installed; "
        "assert installed('jax'); assert 'jax' not in sys.modules, 'the check imported jax'"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], env=_clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_readme_validate_example_runs_as_written():
    args = _readme_validate_example()
    r = subprocess.run(
        [sys.executable, "-m", "k3plan", *args], env=_clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    assert "fits" in r.stdout
