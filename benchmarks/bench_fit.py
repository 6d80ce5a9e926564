"""Whole-process timing of `k3plan fit --topology 2x2x4 --tp 32 --json` (issue 3: under 0.5 s,
without importing jax; issue 33: a fresh process within 1.5x the import floor of its dependencies).
Not a test: it prints a table and asserts nothing.

    python3 benchmarks/bench_fit.py [--runs 10] [--importtime 10] [--typer-floor] [--parts]

The import floor is issue 33's: a fresh ``python -c "import numpy, pydantic, yaml, typer, rich.console,
rich.table"``. It is run alternately with fit (interleaved in one run), so machine load hits both alike;
the ratio is fit / floor. Every fit is a fresh process: k3plan keeps no server and no answer cache.

Reports min / median / max wall time of N fresh processes, whether jax, pandas, numpy or
matplotlib end up in sys.modules on the same path (run in-process through the CLI app), and,
with --importtime, the slowest cumulative imports (python -X importtime). --typer-floor also times,
against the same floor, a typer command declaring fit's options that does nothing (what typer costs
any CLI with these options); --parts counts with callgrind where fit's instructions go beyond the
floor: k3plan's modules, the pydantic classes they build, and the run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import (  # benchmarks/timing.py (the script folder is on sys.path)
    CHILD_CWD,
    CHILD_ENV,
    ratio_table,
    ratio_to_floor,
    timed,
    verdicts,
)
from timing import k3plan_cmd as timing_k3plan_cmd

ARGS = ["fit", "--topology", "2x2x4", "--tp", "32", "--json"]
HEAVY = ("jax", "jaxlib", "pandas", "numpy", "matplotlib", "scipy", "torch")
MODULES_PROBE = (
    "import sys, contextlib, io\n"
    "from k3plan.cli.app import app\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try:\n"
    f"        app({ARGS!r}, standalone_mode=False)\n"
    "    except SystemExit:\n"
    "        pass\n"
    f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules) or '-')\n"
)
FLOOR = "import numpy, pydantic, yaml, typer, rich.console, rich.table"
RUN_MAIN = f"import sys; sys.argv = ['k3plan', *{ARGS!r}]; from k3plan.cli.app import main; main()"


def typer_floor_source() -> str:
    """A script holding the import floor plus a typer command that declares fit's options (same
    names, types and defaults, read from fit's own typer command) and returns at once: what the
    installed typer costs any CLI with these options (typer 0.29 builds a pydantic TypeAdapter per
    parameter on each run, which is why pyproject.toml keeps typer below 0.29), before k3plan does anything."""
    import typer

    from k3plan.cli.app import _new_app, _register

    app = _new_app()
    _register(app, [ARGS[0]])
    group = typer.main.get_command(app)
    command = group.commands[ARGS[0]] if isinstance(group, typer.core.TyperGroup) else group
    params = []
    click_kinds = {"integer": "int", "float": "float", "boolean": "bool", "text": "str", "path": "Path"}
    for p in command.params:
        if hasattr(p, "type_descriptor"):  # typer 0.29
            ann = p.type_descriptor.annotation
            kind = "Path" if ann is Path else ann.__name__
        else:  # typer <= 0.28: the click type it made from the annotation
            kind = click_kinds.get(p.type.name, "str")
            ann = bool if kind == "bool" else None
        kind = kind if p.default is not None or ann is bool else f"{kind} | None"
        params.append(f"    {p.name}: Annotated[{kind}, typer.Option(*{list(p.opts)!r})] = {p.default!r},")
    return "\n".join([
        "from pathlib import Path",
        "from typing import Annotated",
        FLOOR,
        "",
        "app = typer.Typer(add_completion=False)",
        "",
        "@app.command()",
        "def fit(",
        *params,
        ") -> None:",
        "    pass",
        "",
        "@app.command()",
        "def other() -> None:",
        "    pass",
        "",
        "app()",
        "",
    ])


MODULES_OF_FIT = (
    "import contextlib, io, sys\n"
    f"base = set(sys.modules)\n{FLOOR}\nfloor = set(sys.modules)\n"
    f"sys.argv = ['k3plan', *{ARGS!r}]\n"
    "from k3plan.cli.app import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try:\n        main()\n    except SystemExit:\n        pass\n"
    "print(' '.join(m for m in sys.modules if m not in floor and m.startswith('k3plan')))\n"
)
# the same imports with pydantic's BaseModel a plain class (no schema, no validator): what the modules cost
# without building their pydantic model classes (the input schemas', ~70; a measurement only: nothing runs on them)
PLAIN_BASEMODEL = (
    "import pydantic\n"
    "class _Plain:\n"
    "    model_fields: dict = {}\n"
    "    def __init_subclass__(cls, **kw): pass\n"
    "    def __class_getitem__(cls, item): return cls\n"
    "def _same(*a, **k):\n"
    "    return a[0] if a and callable(a[0]) and not k else (lambda f: f)\n"
    "pydantic.BaseModel = _Plain\n"
    "for _n in ('model_validator', 'field_validator', 'computed_field', 'model_serializer', 'field_serializer'):\n"
    "    setattr(pydantic, _n, _same)\n"
)


def instructions(cmd: list[str]) -> float:
    """Instructions of one fresh process (valgrind's callgrind): independent of machine load."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
                         capture_output=True, text=True, env=CHILD_ENV, cwd=CHILD_CWD).stderr
    return float(next(x for x in out.splitlines() if "refs:" in x).split()[-1].replace(",", ""))


def parts(typer_script: Path) -> None:
    """Where fit's instructions go beyond the floor, each a fresh process counted with callgrind."""
    mods = subprocess.run([sys.executable, "-c", MODULES_OF_FIT], capture_output=True, text=True, env=CHILD_ENV,
                          check=True).stdout.split()
    imports = "import importlib, os\nos.environ.setdefault('PYDANTIC_DISABLE_PLUGINS', '__all__')\n" + FLOOR + "\n"
    imports += "from k3plan.cli.app import _no_plugin_loader\n_no_plugin_loader()\n"
    load = f"for _m in {mods!r}:\n    importlib.import_module(_m)\n"
    rows = [
        ("import floor", [sys.executable, "-c", FLOOR]),
        ("+ a typer command with fit's options (does nothing)", [sys.executable, str(typer_script), *ARGS]),
        (f"floor + fit's {len(mods)} k3plan modules, BaseModel a plain class", [sys.executable, "-c", imports + PLAIN_BASEMODEL + load]),
        (f"floor + fit's {len(mods)} k3plan modules", [sys.executable, "-c", imports + load]),
        ("k3plan " + " ".join(ARGS), python_cmd(k3plan_cmd())),
    ]
    counts = [instructions(cmd) for _, cmd in rows]
    floor = counts[0]
    print(f"{'instructions (callgrind), fresh processes':62} {'G':>6} {'/ floor':>8}")
    for (label, _), n in zip(rows, counts):
        print(f"{label:62} {n / 1e9:6.3f} {n / floor:8.2f}")
    typer_cost, plain, full, fit = counts[1] - floor, counts[2] - floor, counts[3] - floor, counts[4] - floor
    print(f"fit beyond the floor: {fit / floor:.2f} of it = k3plan's modules without their classes "
          f"{plain / floor:.2f} + building the pydantic classes {(full - plain) / floor:.2f} + the run, typer's "
          f"runtime included {(fit - full) / floor:.2f} (typer alone, for fit's options: {typer_cost / floor:.2f})")
    print(f"fit / floor if its pydantic classes cost nothing to build: {(floor + fit - (full - plain)) / floor:.2f}; "
          f"if typer's runtime also cost nothing: {(floor + fit - (full - plain) - typer_cost) / floor:.2f} at best "
          "(typer's pydantic imports are counted in both; goal 1.3)")


def k3plan_cmd() -> list[str]:
    """fit as a fresh process: the installed console script, or with PYTHONPATH set (to time a worktree,
    PYTHONPATH=$PWD python3 benchmarks/bench_fit.py) ``python -m k3plan`` from that path."""
    return [*timing_k3plan_cmd(), *ARGS]


def python_cmd(cmd: list[str]) -> list[str]:
    """``cmd`` with the interpreter first (callgrind counts the Python process, not a script's shebang)."""
    return cmd if cmd[0] == sys.executable else [sys.executable, *cmd]


def importtime_top(n: int) -> list[tuple[int, str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", RUN_MAIN], capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():  # "import time: self [us] | cumulative | imported package"
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cum_us, name = line.split(":", 1)[1].split("|")
        rows.append((int(cum_us), name.rstrip()))
    top = [r for r in rows if not r[1].startswith("  ")]  # imported at the top level
    return sorted(top, reverse=True)[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--importtime", type=int, default=10, metavar="N", help="show the N slowest imports (0: skip)")
    ap.add_argument("--typer-floor", action="store_true",
                    help="also time a typer command with fit's options that does nothing, against the same floor")
    ap.add_argument("--parts", action="store_true",
                    help="also count where fit's instructions go (valgrind's callgrind; ~2 min)")
    args = ap.parse_args()

    cmd = k3plan_cmd()
    timed(cmd, 1)  # warm the page cache and __pycache__
    times, _ = timed(cmd, args.runs)
    base, _ = timed([sys.executable, "-c", "pass"], args.runs)
    heavy = subprocess.run([sys.executable, "-c", MODULES_PROBE], capture_output=True, text=True, check=True).stdout.strip()

    print(f"python {sys.version.split()[0]}; {cmd[0]} {' '.join(ARGS)}; {args.runs} runs")
    print(f"{'what':42} {'min s':>7} {'median s':>9} {'max s':>7}")
    print(f"{'k3plan ' + ' '.join(ARGS):42} {min(times):7.3f} {statistics.median(times):9.3f} {max(times):7.3f}")
    print(f"{'python -c pass (interpreter floor)':42} {min(base):7.3f} {statistics.median(base):9.3f} {max(base):7.3f}")
    print(f"heavy modules imported on the fit path: {heavy}")
    floor = [sys.executable, "-c", FLOOR]
    label = "import floor: numpy, pydantic, yaml, typer, rich.console, rich.table"
    r = ratio_to_floor(cmd, floor, args.runs, ok=(0, 1))
    print()
    print(ratio_table(r, label, "k3plan " + " ".join(ARGS) + " (a fresh process)"))
    print(f"fit, a fresh process / floor, {verdicts(r, 1.5)}")
    if args.typer_floor or args.parts:
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "typer_floor.py"
            script.write_text(typer_floor_source())
            if args.typer_floor:
                t = ratio_to_floor([sys.executable, str(script), *ARGS], [sys.executable, "-c", FLOOR], args.runs)
                print()
                print("the same import floor vs a typer command declaring fit's options that returns at once (what")
                print("typer costs any CLI with these options, before k3plan runs):")
                print(ratio_table(t, "import floor", "import floor + typer command with fit's options"))
            if args.parts:
                print()
                parts(script)
    if args.importtime:
        print("slowest cumulative imports (python -X importtime, one run):")
        for cum, name in importtime_top(args.importtime):
            print(f"  {cum / 1e6:7.3f} s  {name}")


if __name__ == "__main__":
    main()
