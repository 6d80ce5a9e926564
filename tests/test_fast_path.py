"""Issue 33, a fresh process fast by construction: `k3plan fit --json` builds no pydantic model class for
what it reads (hardware and stack YAML, calibrations, probe records, serving benchmarks, config.json: msgspec
Specs, k3plan.specfile) nor for what it computes (k3plan.structs: msgspec Structs); a fit that fits imports
no pydantic at all (its model machinery costs a process ~60 ms), and fit --json imports no rich (rich only
draws tables). A fresh process each (the modules a test run imported must not count). No timing here:
benchmarks/bench_fit.py times it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# the modules whose pydantic classes fit may build: none of k3plan's (its input schemas are msgspec Specs)
INPUT_SCHEMAS = {
    "pydantic.main",  # BaseModel itself
}
# computed values still pydantic on fit's path, each with why; the goal is none (shrink it, never grow it)
_PLAN = "plan's search, which the advice runs for other splits only where the fit fails (issue 36)"
NOT_CONVERTED_YET: dict[str, str] = {}

PROBE = """
import contextlib, io, json, sys
import pydantic._internal._model_construction as mc

built = []
new = mc.ModelMetaclass.__new__


def counting(mcs, name, bases, namespace, *args, **kwargs):
    built.append(namespace.get("__module__", "?") + "." + name)
    return new(mcs, name, bases, namespace, *args, **kwargs)


mc.ModelMetaclass.__new__ = counting
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
print(json.dumps({"built": built, "rich": sorted(m for m in sys.modules if m == "rich" or m.startswith("rich.")),
                  "code": code}))
"""


def fresh_fit(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", PROBE, "fit", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [
    ("--topology", "2x2x4", "--tp", "32", "--json"),  # issue 33's benchmark (bench_fit.py)
    ("--topology", "2x2x2", "--tp", "16", "--context", "1048576", "--json"),  # does not fit: the advice's paths
])
def test_fit_json_builds_pydantic_classes_only_for_its_input_schemas_and_imports_no_rich(args):
    got = fresh_fit(*args)
    assert got["code"] in (0, 1)
    allowed = INPUT_SCHEMAS | set(NOT_CONVERTED_YET)
    computed = sorted({c for c in got["built"] if c.rsplit(".", 1)[0] not in allowed})
    assert computed == [], f"pydantic classes built for computed values (use k3plan.structs.Frozen): {computed}"
    assert got["rich"] == [], "fit --json imported rich (k3plan.cli.common builds its consoles on first use)"


def test_not_converted_yet_names_only_modules_fit_still_builds_classes_in():
    """The list shrinks as the values are converted: a module no longer building a class leaves it."""
    modules = set()
    for args in (("--topology", "2x2x4", "--tp", "32"), ("--topology", "2x2x2", "--tp", "16", "--context", "1048576")):
        modules |= {c.rsplit(".", 1)[0] for c in fresh_fit(*args, "--json")["built"]}
    assert sorted(set(NOT_CONVERTED_YET) - modules) == []


NO_PYDANTIC = """
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
json.loads(out.getvalue())
print(json.dumps({"code": code, "pydantic": sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic",
                  "pydantic_core"))}))
"""


@pytest.mark.parametrize("where", ["empty", "checkout"])
def test_a_fit_that_fits_imports_no_pydantic(where, tmp_path):
    """From an empty folder (issue 33's benchmark) and from the checkout (which has reports/probes, read by
    default): the input schemas are msgspec Specs, so pydantic is never imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    cwd = tmp_path if where == "empty" else ROOT
    args = ["--topology", "2x2x4", "--tp", "32", "--json"]
    run = subprocess.run([sys.executable, "-c", NO_PYDANTIC, "fit", *args], capture_output=True, text=True,
                         cwd=cwd, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["code"] == 0
    assert got["pydantic"] == [], f"a fit imported pydantic: {got['pydantic']}"
