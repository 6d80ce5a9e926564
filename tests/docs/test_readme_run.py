"""Issue 48 item 6: the README run top to bottom from a fresh clone, from another folder and from an installed wheel
(benchmarks/readme_run.py) answers alike: ~10 minutes on 2 cores (a wheel build and ~190 fresh processes), so listed
in tests/conftest.py's SLOW_MODULES and marked `packaging`. The committed transcript's checks are
tests/docs/test_readme_transcript.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.packaging
def test_the_readme_run_agrees_from_the_checkout_another_folder_and_the_wheel(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "readme_run.py"), "--out", str(tmp_path / "t.md")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
