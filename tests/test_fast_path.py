"""Issue 33, a fresh process fast by construction: `k3plan fit --json` imports no pydantic (what it reads is
checked against msgspec Specs, k3plan.specfile; what it computes is msgspec Structs, k3plan.structs; pydantic's
model machinery alone cost a process ~60 ms) and no rich (rich only draws tables). A fit that does not fit, whose
advice runs plan's search, too. A fresh process each (the modules a test run imported must not count). No
timing here: benchmarks/bench_fit.py times it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import contextlib, io, json, sys
sys.argv = ["k3plan", *sys.argv[1:]]
from k3plan.cli.app import main

out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main()
    except SystemExit as e:
        code = e.code
    else:
        code = 0
json.loads(out.getvalue())  # the run printed its JSON
print(json.dumps({"code": code, "pydantic": sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic",
                  "pydantic_core")), "rich": sorted(m for m in sys.modules if m.split(".")[0] == "rich")}))
"""


def fresh_fit(*args: str, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-c", PROBE, "fit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("where", ["empty", "checkout"])
@pytest.mark.parametrize(
    "args, code",
    [
        (
            ("--topology", "2x2x4", "--tp", "32", "--context", "8192", "--json"),
            0,
        ),  # issue 33's benchmark (bench_fit.py)
        (("--topology", "2x2x2", "--tp", "16", "--context", "1048576", "--json"), 1),  # does not fit: plan's search
    ],
)
def test_fit_json_imports_neither_pydantic_nor_rich(where, args, code, tmp_path):
    """From an empty folder (issue 33's benchmark) and from the checkout (which has reports/probes, read by
    default)."""
    got = fresh_fit(*args, cwd=tmp_path if where == "empty" else ROOT)
    assert got["code"] == code
    assert got["pydantic"] == [], f"fit imported pydantic: {got['pydantic']}"
    assert got["rich"] == [], "fit --json imported rich (k3plan.cli.common builds its consoles on first use)"
