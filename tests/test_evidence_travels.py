"""Issue 46 item 1: the evidence travels with the tool. The probe records the default answer reads ship in the
package (k3plan/evidence/probes), so roofline's speed figures are byte-identical from the checkout's top and from
an empty folder (a fresh process each, PYTHONPATH = the checkout, as the house check at stop runs them);
``--probes DIR`` adds records to the shipped ones, never replaces them; the JSON names every record used by its
package-relative name. The wheel-installed k3plan answers the same: tests/test_packaging.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOFLINE = ("roofline", "-t", "2x2x4", "--tp", "32", "--batch", "1", "--context", "8192", "--chunk", "512", "--json")
FIGURES = (("expected", "decode", "expected_s"), ("expected", "prefill", "expected_s"), ("decode", "tpot_s"),
           ("prefill", "ttft_s"))


def _k3plan(cwd: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    r = subprocess.run([sys.executable, "-m", "k3plan", *args], cwd=cwd, env={**env, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def figures(d: dict) -> tuple[str, ...]:
    """The four figures as JSON prints them (byte-identical, not approximately equal)."""
    out = []
    for path in FIGURES:
        v = d
        for k in path:
            v = v[k]
        out.append(json.dumps(v))
    return tuple(out)


def test_speed_figures_are_the_same_from_the_checkout_and_from_an_empty_folder(tmp_path):
    root = _k3plan(REPO, *ROOFLINE)
    empty = tmp_path / "empty"
    empty.mkdir()
    elsewhere = _k3plan(empty, *ROOFLINE)
    assert figures(root) == figures(elsewhere)
    assert root["expected"] == elsewhere["expected"]
    # the default answer has measured records (the shipped ones), named by their package path
    used = root["expected"]["records_used"]
    assert used and all(p.startswith("k3plan/evidence/probes/") for p in used)
    assert root["expected"]["decode"]["expected_s"] != root["expected"]["decode"]["ceiling_s"]
    assert not any(str(REPO) in json.dumps(d) for d in (root, elsewhere))


def test_the_shipped_records_are_package_data():
    shipped = sorted(p.name for p in (REPO / "k3plan" / "evidence" / "probes").glob("*.json"))
    assert shipped and not any("-cpu-" in n for n in shipped)  # CPU records never price an accelerator
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"evidence/probes/*.json"' in pyproject
