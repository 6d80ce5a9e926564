"""`k3plan census` as a ratio to the floor of reading its headers, measured in one run.

Builds a header-exact replica of the released K3 checkpoint (see replica.py: 96 shards, 497,220
tensors, ~76 MB of headers, sparse data), then times, each as a whole fresh process and
interleaved (floor, census, floor, census, ...) so that machine load hits both alike:

- floor: `python -c` that reads the 96 headers and `json.loads` each (the stdlib decoder), nothing
  else -- the least any census in Python must do;
- census: `k3plan census FOLDER --json`, which also loads K3's config, checks every header against
  its file and compares all 497,220 tensors with the inventory (it must report a match).

    python3 benchmarks/bench_census.py [--runs 5] [--keep DIR]

Goal (issue 12): census / floor <= 2.0. Prints the floor and census rows and the goal checked on each measure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from replica import (
    build_k3_checkpoint,  # benchmarks/replica.py (the script folder is on sys.path)
)
from timing import k3plan_cmd, ratio_table, ratio_to_floor, verdicts

FLOOR = (
    "import glob, json, struct, sys\n"
    "for p in sorted(glob.glob(sys.argv[1] + '/*.safetensors')):\n"
    "    with open(p, 'rb') as f:\n"
    "        (n,) = struct.unpack('<Q', f.read(8))\n"
    "        json.loads(f.read(n))\n"
)


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
    r = ratio_to_floor(k3plan_cmd() + ["census", str(folder), "--json"], [sys.executable, "-c", FLOOR, str(folder)],
                       args.runs)
    out = json.loads(r["proc"].stdout)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    print(ratio_table(r, f"floor: read + json.loads of the {out['files']} headers",
                      f"k3plan census --json ({out['tensors']:,} tensors, match {out['comparison']['ok']})"))
    print(f"census / floor, {verdicts(r, 2.0)}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
