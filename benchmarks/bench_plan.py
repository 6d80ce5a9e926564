"""Speed of `k3plan plan` (not a timed test; see benchmarks/README.md).

A configuration is (hardware, standard topology, tp, ep, stack, KV dtype, prefill chunk), with
dp = devices / tp and ep = tp or all devices. Two searches for K3 at 128K context:
  default  every bundled hardware, topologies up to 1024 chips, every split, the matching stacks,
           each stack's KV dtype, chunk 8192                                     (6,060 configs)
  wide     the same over every standard topology (--max-chips 18432), KV dtypes bf16 / fp8 /
           fp8_ds_mla / fp32 and chunks 1K..64K                                 (121,408 configs)
Each is timed in-process (plan(): cold = first call in a fresh interpreter, which loads the model
and the 14 hardware YAMLs; warm = median of later calls; eval = the search itself: space,
evaluation, reasons, ranking) and as a whole process (`k3plan plan ... --json`).

Then issue 13's done-when command, as a fresh process (bytecode cached, as installed), alternated
with the import floor of fit's bench (numpy, yaml, typer, rich.console, pydantic.BaseModel):

    k3plan plan --ttft-ms 2000 --tpot-ms 50 --isl 4000 --osl 500 --request-rate 2 --plot pareto.png

min / median wall and CPU seconds of each, the ratio, and the goal (under 2 s, all bundled hardware).

    python3 benchmarks/bench_plan.py [--runs 5] [--done-when-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from timing import CHILD_ENV, k3plan_cmd, ratio_table, ratio_to_floor  # benchmarks/timing.py

# seven chunk sizes: with the splits and KV dtypes the engines do not run left out (dp-attention on GPUs runs
# ep = tp x dp only, SGLang takes no fp8_ds_mla...), five (2K..32K) left 88,320 configurations, under issue 10's 100k
WIDE_CHUNKS = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
SEARCHES = {
    "default": {"args": [], "kw": {}},
    "wide": {"args": ["--max-chips", "18432", "--kv-dtypes", "all", "--chunks", ",".join(map(str, WIDE_CHUNKS))],
             "kw": {"max_chips": 18432, "kv_dtypes": ["all"], "chunks": WIDE_CHUNKS}},
}
IN_PROCESS = """
import json, statistics, sys, time
t0 = time.perf_counter()
from k3plan.plan import plan
from k3plan.structs import dump
kw = json.loads(sys.argv[1]); runs = int(sys.argv[2])
t1 = time.perf_counter(); r = plan(context=131072, **kw); cold = time.perf_counter() - t1
warm, evals = [], [r.evaluate_s]
for _ in range(runs):
    t = time.perf_counter(); r = plan(context=131072, **kw); warm.append(time.perf_counter() - t); evals.append(r.evaluate_s)
print(json.dumps({"configs": r.configurations, "feasible": r.feasible, "import": t1 - t0, "cold": cold,
                  "warm": statistics.median(warm), "eval": statistics.median(evals[1:]),
                  "recommended": {k: v for k, v in dump(r.recommended).items() if k != "per_device"},
                  "jax": "jax" in sys.modules, "pandas": "pandas" in sys.modules}))
"""


DONE_WHEN = ["plan", "--ttft-ms", "2000", "--tpot-ms", "50", "--isl", "4000", "--osl", "500", "--request-rate", "2"]
FLOOR = "import numpy, yaml, typer, rich.console; from pydantic import BaseModel"
GOAL_S = 2.0


def whole_process(args: list[str], runs: int) -> tuple[float, float, int]:
    times, configs = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(k3plan_cmd() + ["plan", "--context", "131072", "--json", *args], capture_output=True,
                           text=True, env=CHILD_ENV)
        times.append(time.perf_counter() - t0)
        if p.returncode not in (0, 1):
            sys.exit(f"k3plan plan {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        configs = json.loads(p.stdout)["configurations"]
    return min(times), statistics.median(times), configs


def done_when(runs: int) -> None:
    """Issue 13's done-when command with --plot, fresh processes, against the import floor."""
    with tempfile.TemporaryDirectory() as tmp:
        png = os.path.join(tmp, "pareto.png")
        cmd = k3plan_cmd() + [*DONE_WHEN, "--plot", png]
        r = ratio_to_floor(cmd, [sys.executable, "-c", FLOOR], runs, ok=(0,))
        size = os.path.getsize(png)
    label = "k3plan " + " ".join(DONE_WHEN) + " --plot pareto.png"
    print(f"\nissue 13 done-when, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    print(ratio_table(r, "import floor: numpy, yaml, typer, rich.console, pydantic.BaseModel", label))
    med = statistics.median(r["wall"]["cmd"])
    print(f"pareto.png: {size:,} bytes; goal < {GOAL_S} s wall: median {med:.2f} s, min {min(r['wall']['cmd']):.2f} s, "
          f"CPU median {statistics.median(r['cpu']['cmd']):.2f} s: {'PASS' if med < GOAL_S else 'FAIL'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--done-when-only", action="store_true", help="skip the two searches; time issue 13's command")
    a = ap.parse_args()
    if not a.done_when_only:
        searches(a.runs)
    done_when(a.runs)


def searches(runs: int) -> None:
    rows, recs = [], {}
    for name, s in SEARCHES.items():
        out = subprocess.run([sys.executable, "-c", IN_PROCESS, json.dumps(s["kw"]), str(runs)],
                             capture_output=True, text=True, check=True, env=CHILD_ENV).stdout
        d = json.loads(out)
        recs[name] = d
        n = d["configs"]
        for what, sec in (("plan() eval", d["eval"]), ("plan() warm", d["warm"]), ("plan() cold", d["cold"])):
            rows.append((name, what, n, sec))
        lo, med, n2 = whole_process(s["args"], runs)
        assert n2 == n
        rows.append((name, "whole process (min)", n, lo))
        rows.append((name, "whole process (median)", n, med))
    print("| search  | what                   | configurations | seconds | configs/s  |")
    print("|---------|------------------------|---------------:|--------:|-----------:|")
    for name, what, n, sec in rows:
        print(f"| {name:<7} | {what:<22} | {n:>14,} | {sec:>7.3f} | {n / sec:>10,.0f} |")
    for name, d in recs.items():
        r = d["recommended"]
        print(f"\n{name}: {d['feasible']:,} feasible; recommended {r['hardware']} {r['topology']} tp/ep/dp "
              f"{r['tp']}/{r['ep']}/{r['dp']} {r['stack']} kv {r['kv_dtype']} chunk {r['chunk_tokens']}: "
              f"{r['free_gib_per_device']:.2f} GiB free, {r['max_sequences']} seqs, TPOT {r['tpot_ms']:.2f} ms; "
              f"import {d['import']:.3f} s; jax imported: {d['jax']}, pandas imported: {d['pandas']}")


if __name__ == "__main__":
    main()
