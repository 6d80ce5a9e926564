"""`k3plan probe a2a` as documented (no sweep options) on this machine: wall and CPU seconds of
fresh processes, against the 60 s goal of issue 12 for a CPU-only machine, plus how many sweep
points ran and whether any record was cut short.

    python3 benchmarks/bench_probe.py [--runs 1] [--probe a2a]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from timing import k3plan_cmd, one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--probe", default="a2a")
    args = ap.parse_args()
    walls, cpus = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as out:
            wall, cpu, proc = one(k3plan_cmd() + ["probe", args.probe, "--out", out, "--json"], ok=(0, 1))
            files = os.listdir(out)
        walls.append(wall)
        cpus.append(cpu)
    records = json.loads(proc.stdout)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d')}")
    for r in records:
        print(f"  record {r['probe']} {r.get('mode') or ''}: backend {r['backend']}, {len(r['points'])} points, "
              f"elapsed {r['elapsed_s']:.1f} s, cut short: {r['cut_short']}, label: {r['label']}")
    print(f"k3plan probe {args.probe} (no options): wall {statistics.median(walls):.1f} s (min {min(walls):.1f}), "
          f"CPU {statistics.median(cpus):.1f} s, {len(files)} record file(s) written; goal < 60 s: "
          f"{'PASS' if statistics.median(walls) < 60 else 'FAIL'}")


if __name__ == "__main__":
    main()
