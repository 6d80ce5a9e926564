"""What the benchmark scripts share: how to run k3plan as a fresh process and time it.

Children run with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from their environment), as
an installed k3plan does (pip compiles it at install; the floor's site-packages are compiled too):
otherwise each fresh process would recompile k3plan's ~300 modules from source (~0.15 s CPU) while
the floor loads ready .pyc files. The first (warm-up) run writes the __pycache__ folders.
"""

from __future__ import annotations

import atexit
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
# Children run in an empty folder: `python -c` (the floors) puts the current folder first on sys.path,
# and its first import lists that folder. Run from a folder of 14,000 entries (a busy /tmp), that one
# listing counted ~0.28 G instructions, a third of the floor, and flattered every ratio; the console
# script lists its own bin/ folder instead. Every command's paths are absolute.
CHILD_CWD = tempfile.mkdtemp(prefix="k3plan-bench-cwd-")
atexit.register(shutil.rmtree, CHILD_CWD, ignore_errors=True)


def timed(cmd: list[str], runs: int) -> tuple[list[float], subprocess.CompletedProcess]:
    """Wall times of ``runs`` fresh processes; exits if the command fails (0 and 1 are verdicts)."""
    times, proc = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=CHILD_ENV, cwd=CHILD_CWD)
        times.append(time.perf_counter() - t0)
        if proc.returncode not in (0, 1):
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return times, proc


def k3plan_cmd() -> list[str]:
    """This worktree's k3plan as a fresh process (the installed script may point at another tree)."""
    exe = shutil.which("k3plan")
    return [exe] if exe and not os.environ.get("PYTHONPATH") else [sys.executable, "-m", "k3plan"]


def one(cmd: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, subprocess.CompletedProcess]:
    """-> (wall s, CPU s = user + sys of the child, the finished process); exits if it failed."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=CHILD_ENV, cwd=CHILD_CWD)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), proc


def ratio_to_floor(cmd: list[str], floor: list[str], runs: int, ok: tuple[int, ...] = (0,)) -> dict:
    """Run floor and cmd alternately `runs` times each (so machine load hits both alike), after one
    untimed warm-up of each -> medians/minima of wall and CPU seconds and the ratios cmd / floor,
    plus cmd's last process."""
    wall: dict[str, list[float]] = {"floor": [], "cmd": []}
    cpu: dict[str, list[float]] = {"floor": [], "cmd": []}
    one(floor, ok)
    proc = one(cmd, ok)[2]
    for _ in range(runs):
        for key, c in (("floor", floor), ("cmd", cmd)):
            w, u, p = one(c, ok)
            wall[key].append(w)
            cpu[key].append(u)
            if key == "cmd":
                proc = p
    med = statistics.median
    return {
        "runs": runs, "proc": proc, "wall": wall, "cpu": cpu,
        "wall_ratio": med(wall["cmd"]) / med(wall["floor"]),
        "wall_min_ratio": min(wall["cmd"]) / min(wall["floor"]),
        "cpu_ratio": med(cpu["cmd"]) / med(cpu["floor"]),
        "load": os.getloadavg()[0],
    }


def ratio_table(r: dict, floor_label: str, cmd_label: str) -> str:
    med = statistics.median
    rows = ["| what | runs | wall min (s) | wall median (s) | CPU median (s) |", "|---|---:|---:|---:|---:|"]
    for key, label in (("floor", floor_label), ("cmd", cmd_label)):
        rows.append(f"| {label} | {r['runs']} | {min(r['wall'][key]):.3f} | {med(r['wall'][key]):.3f} | {med(r['cpu'][key]):.3f} |")
    rows.append(f"\nratio to the floor: wall medians {r['wall_ratio']:.2f}, wall minima {r['wall_min_ratio']:.2f}, "
                f"CPU medians {r['cpu_ratio']:.2f} (load average {r['load']:.1f})")
    return "\n".join(rows)


def verdicts(r: dict, goal: float) -> str:
    """The goal checked on each measure apart (none stands in for another): wall medians, wall minima
    (the least disturbed runs) and CPU medians (user + sys: load-steady, but it counts the floor's
    numpy/OpenBLAS start-up threads, which a command that does not import numpy never pays)."""
    parts = [f"{name} {r[key]:.2f} {'PASS' if r[key] <= goal else 'FAIL'}"
             for name, key in (("wall medians", "wall_ratio"), ("wall minima", "wall_min_ratio"),
                               ("CPU medians", "cpu_ratio"))]
    return f"goal <= {goal}: " + ", ".join(parts)
