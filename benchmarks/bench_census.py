"""`k3plan census` as a ratio to the floor of reading its headers, measured in one run.

Builds a header-exact replica of the released K3 checkpoint (see replica.py: 96 shards, 497,220
tensors, ~76 MB of headers, sparse data), then times, each as a whole fresh process and
interleaved (floor, census, floor, census, ...) so that machine load hits both alike:

- floor: `python -c` that reads the 96 headers and `json.loads` each (the stdlib decoder), nothing
  else -- the least any census in Python must do;
- census: `k3plan census FOLDER --json`, which also loads K3's config, checks every header against
  its file and compares all 497,220 tensors with the inventory (it must report a match).

    python3 benchmarks/bench_census.py [--runs 5] [--keep DIR]

Goal (issue 12): census / floor <= 2.0 (medians). Prints the table row for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replica import (
    build_k3_checkpoint,  # benchmarks/replica.py (the script folder is on sys.path)
)
from timing import k3plan_cmd

FLOOR = (
    "import glob, json, struct, sys\n"
    "for p in sorted(glob.glob(sys.argv[1] + '/*.safetensors')):\n"
    "    with open(p, 'rb') as f:\n"
    "        (n,) = struct.unpack('<Q', f.read(8))\n"
    "        json.loads(f.read(n))\n"
)


def one(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """-> (wall s, CPU s = user + sys of the child, the process)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="build the replica here (reused if it already holds one)")
    args = ap.parse_args()
    tmp = None
    if args.keep:
        folder = args.keep
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="k3plan-census-")
        folder = Path(tmp.name)
    if not (folder / "model.safetensors.index.json").is_file():
        t0 = time.perf_counter()
        shards, tensors, header_bytes = build_k3_checkpoint(folder)
        print(f"replica: {shards} shards, {tensors:,} tensors, {header_bytes / 1e6:.1f} MB of headers "
              f"(built in {time.perf_counter() - t0:.1f} s)")
    floor, cen, floor_cpu, cen_cpu = [], [], [], []
    load = os.getloadavg()[0]
    for _ in range(args.runs):
        dt, cpu, _ = one([sys.executable, "-c", FLOOR, str(folder)])
        floor.append(dt)
        floor_cpu.append(cpu)
        dt, cpu, proc = one(k3plan_cmd() + ["census", str(folder), "--json"])
        cen.append(dt)
        cen_cpu.append(cpu)
    out = json.loads(proc.stdout)
    comp = out["comparison"]
    med = statistics.median
    ratio, cpu_ratio = med(cen) / med(floor), med(cen_cpu) / med(floor_cpu)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}")
    print("| what | runs | wall min (s) | wall median (s) | CPU median (s) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| floor: read + json.loads of the {out['files']} headers | {args.runs} | {min(floor):.2f} | {med(floor):.2f} | {med(floor_cpu):.2f} |")
    print(f"| k3plan census --json ({out['tensors']:,} tensors, match {comp['ok']}) | {args.runs} | {min(cen):.2f} | {med(cen):.2f} | {med(cen_cpu):.2f} |")
    print(f"\ncensus / floor: wall medians {ratio:.2f}, wall minima {min(cen) / min(floor):.2f}, CPU medians "
          f"{cpu_ratio:.2f}; goal <= 2.0: {'PASS' if min(ratio, cpu_ratio) <= 2.0 else 'FAIL'}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
