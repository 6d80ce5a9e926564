"""The speed model's score against every public serving benchmark k3plan ships (issue 46 item 3), and the admission
of its terms by that score (issue 46 item 4).

    python3 benchmarks/score_speed.py                  # the README table (Markdown), computed now
    python3 benchmarks/score_speed.py --frame          # the rows as a pandas DataFrame (k3plan.api.score())
    python3 benchmarks/score_speed.py --admit          # each term's held-out score with and without it
    python3 benchmarks/score_speed.py --admit --write  # ... and write k3plan/speed/admitted.json
    python3 benchmarks/score_speed.py --transfers      # the transfer rule, leave one out, case by case

The score and the admission are k3plan.app.score's (this script prints them): the model alone (no serving
benchmark in it) with the registered terms of k3plan/speed/terms.py that are ON, against each published TPOT, TTFT
and throughput (output, else total); the only fitted parameter, the TTFT floor (terms floor, engine-floor: one an
engine), refitted without each case for its held-out ratio. A term is ON only where the held-out score over the
whole set improves with it (--admit).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's k3plan, not an installed one

from k3plan.app.score import (  # noqa: E402  (re-exported: tests/docs/test_readme_score.py reads them here)
    BANDS,
    FLOOR_GRID_MS,
    Models,
    Row,
    admission_table,
    admit,
    better,
    fit_floor,
    markdown,
    score_frame,
    score_of,
    score_rows,
    transfer_rows,
    transfer_summary,
    write_admitted,
)

__all__ = [
    "BANDS",
    "FLOOR_GRID_MS",
    "Models",
    "Row",
    "admission_table",
    "admit",
    "better",
    "fit_floor",
    "markdown",
    "score_frame",
    "score_of",
    "score_rows",
    "transfer_rows",
    "transfer_summary",
    "write_admitted",
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frame", action="store_true", help="print the rows as a pandas DataFrame")
    p.add_argument("--admit", action="store_true", help="each scored term's held-out score with and without it")
    p.add_argument("--write", action="store_true", help="with --admit: write k3plan/speed/admitted.json")
    p.add_argument("--transfers", action="store_true", help="the transfer rule scored leave one out, case by case")
    a = p.parse_args(argv)
    if a.admit:
        models = Models()
        decisions = admit(models)
        print(admission_table(decisions), end="")
        if a.write:
            write_admitted(decisions, models=models)
    elif a.transfers:
        trows = transfer_rows(score_rows())
        print("| case | figure | measured ms | model alone | transferred | from |")
        print("|---|---|---:|---:|---:|---|")
        for t in trows:
            print(
                f"| {t.case} | {t.figure.upper()} | {t.measured_ms:,.2f} | {t.model_ratio:.2f}x | "
                f"{t.transferred_ratio:.2f}x | {t.source} |"
            )
        print("\n".join(["", *transfer_summary(trows)]))
    elif a.frame:
        import pandas as pd

        with pd.option_context("display.max_columns", None, "display.width", 200):
            print(score_frame())
    else:
        print(markdown(score_rows()), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
