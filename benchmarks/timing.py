"""What the benchmark scripts share: how to run k3plan as a fresh process and time it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time


def timed(cmd: list[str], runs: int) -> tuple[list[float], subprocess.CompletedProcess]:
    """Wall times of ``runs`` fresh processes; exits if the command fails (0 and 1 are verdicts)."""
    times, proc = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode not in (0, 1):
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return times, proc


def k3plan_cmd() -> list[str]:
    """This worktree's k3plan as a fresh process (the installed script may point at another tree)."""
    exe = shutil.which("k3plan")
    return [exe] if exe and not os.environ.get("PYTHONPATH") else [sys.executable, "-m", "k3plan.cli.app"]
