"""Every logged case's `k3plan fit ... --serve "<command>" --json` output, one file per case, for a byte-for-byte
diff of a change that must move no figure (a speed change): run it before and after, then `diff -r BEFORE AFTER`.
Not a test; prints each case's wall time (slowest last) so the slow fits show.

    python3 benchmarks/fit_cases_dump.py OUTDIR [name-substring ...]

In-process through the CLI app (typer's CliRunner, as tests/engines/test_logged_cases.py calls it); each file holds
the exit code, then stdout, then stderr.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml
from typer.testing import CliRunner

from k3plan.cli.app import app

CASES = sorted((Path(__file__).resolve().parent.parent / "tests" / "engines" / "cases").glob("*.yaml"))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    want = sys.argv[2:]
    runner = CliRunner()
    times = []
    for path in CASES:
        if want and not any(w in path.stem for w in want):
            continue
        case = yaml.safe_load(path.read_text())
        serve = " ".join(case["serve"].split())
        release = ["--engine-version", str(case["engine_version"])] if "engine_version" in case else []
        args = ["fit", "-H", case["hardware"], "-t", str(case["topology"]), "--serve", serve, *release, "--json"]
        t0 = time.perf_counter()
        r = runner.invoke(app, args)
        times.append((time.perf_counter() - t0, path.stem))
        (out / f"{path.stem}.txt").write_text(f"exit {r.exit_code}\n{r.stdout}\n--- stderr\n{r.stderr}\n")
    for t, name in sorted(times)[-15:]:
        print(f"{t:7.2f} s  {name}")
    print(f"{sum(t for t, _ in times):7.2f} s  total, {len(times)} cases")


if __name__ == "__main__":
    main()
