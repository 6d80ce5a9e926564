"""fit's path stays numpy-free (a startup-time goal): its weights go through the same rule replay and
byte sum as plan's columns (sharding/replay.py, budget/weights.weight_terms), with Python ints."""

from __future__ import annotations

import subprocess
import sys


def test_fit_imports_no_numpy():
    code = (
        "import sys; from typer.testing import CliRunner; from k3plan.cli.app import app; "
        "r = CliRunner().invoke(app, ['fit', '-t', '2x2x4', '--tp', '32', '--context', '8192', '--json']); "
        "assert r.exit_code == 0, r.output; "
        "print(r.stdout.count('weights_bytes') > 0, 'numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr
