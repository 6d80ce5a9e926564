"""Whole-process timings of the k3plan CLI (not a timed test; see benchmarks/README.md).

1. `k3plan models show kimi-k3 --json` run N times as a fresh process: min / median wall time,
   and whether importing the CLI (or running the command) pulls in jax.
2. `k3plan census` on a synthetic K3 checkpoint: 96 shards holding the ~497k tensor headers the
   K3 inventory expands to (one decoder layer a shard, then globals, projector, vision, as in the
   release), data sections as sparse holes so the files have their true sizes but no blocks.

    python3 benchmarks/bench_startup.py [--runs 10] [--census-runs 3] [--importtime] [--skip-census]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replica import (
    build_k3_checkpoint,  # benchmarks/replica.py (the script folder is on sys.path)
)
from timing import timed

CLI_PROBE = "import sys, k3plan.cli.app; print('jax' in sys.modules)"
RUN_PROBE = (
    "import sys, contextlib, io\n"
    "from k3plan.cli.app import app\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    app(['models', 'show', 'kimi-k3', '--json'], standalone_mode=False)\n"
    "print('jax' in sys.modules)"
)


def k3plan_cmd() -> list[str]:
    exe = shutil.which("k3plan")
    return [exe] if exe else [sys.executable, "-m", "k3plan.cli.app"]


def probe(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def importtime_top(n: int = 8) -> list[tuple[int, str]]:
    """The n slowest cumulative imports of one `models show` run (python -X importtime)."""
    cmd = [sys.executable, "-X", "importtime", "-c",
           "from k3plan.cli.app import main; import sys; sys.argv=['k3plan','models','show','kimi-k3','--json']; main()"]
    err = subprocess.run(cmd, capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cum, name = (p.strip() for p in line[len("import time:"):].split("|"))
            rows.append((int(cum), name.strip()))
    return sorted(rows, reverse=True)[:n]


def row(label: str, times: list[float], extra: str = "") -> str:
    return f"| {label:<44} | {len(times):>4} | {min(times):>7.3f} | {statistics.median(times):>7.3f} | {extra} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--census-runs", type=int, default=3)
    ap.add_argument("--importtime", action="store_true", help="also list the slowest imports")
    ap.add_argument("--skip-census", action="store_true")
    args = ap.parse_args()

    cmd = k3plan_cmd()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, cmd: {' '.join(cmd)}")
    rows = ["| what                                         | runs | min (s) | med (s) | notes |",
            "|----------------------------------------------|-----:|--------:|--------:|-------|"]
    t_py, _ = timed([sys.executable, "-c", "pass"], args.runs)
    rows.append(row("python -c pass (interpreter floor)", t_py))
    t_show, proc = timed(cmd + ["models", "show", "kimi-k3", "--json"], args.runs)
    total = json.loads(proc.stdout)["total_params"]
    rows.append(row("k3plan models show kimi-k3 --json", t_show,
                    f"total_params {total:,}; target < 0.5 s: {'PASS' if statistics.median(t_show) < 0.5 else 'FAIL'}"))
    t_list, _ = timed(cmd + ["models", "--json"], args.runs)
    rows.append(row("k3plan models --json (4 models)", t_list))
    jax_import, jax_run = probe(CLI_PROBE), probe(RUN_PROBE)

    if not args.skip_census:
        with tempfile.TemporaryDirectory(prefix="k3plan-bench-") as tmp:
            folder = Path(tmp)
            t0 = time.perf_counter()
            shards, n_tensors, header_bytes = build_k3_checkpoint(folder)
            t_gen = time.perf_counter() - t0
            apparent = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
            t_census, proc = timed(cmd + ["census", str(folder), "--json"], args.census_runs)
            comp = json.loads(proc.stdout)["comparison"]
            rows.append(row(f"k3plan census ({shards} shards, {n_tensors:,} tensors)", t_census,
                            f"headers {header_bytes / 1e6:.1f} MB, files {apparent / 1e12:.3f} TB sparse; "
                            f"matches inventory: {comp['ok']} ({comp['matched']:,}/{comp['expected_tensors']:,}); "
                            f"generating took {t_gen:.1f} s"))
    print("\n".join(rows))
    print(f"\njax in sys.modules after `import k3plan.cli.app`: {jax_import}; "
          f"after running `models show kimi-k3 --json` in-process: {jax_run}")
    if args.importtime:
        print("\nslowest imports (cumulative us) of one `models show kimi-k3 --json`:")
        for us, name in importtime_top():
            print(f"  {us:>9,}  {name}")


if __name__ == "__main__":
    main()
