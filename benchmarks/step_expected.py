"""A committed K3-width step record held against today's model (issue 35): measured / expected for each
stage, with the expected time by op kind, from the efficiency records the step ran with.

    python3 benchmarks/step_expected.py [STEP_RECORD.json ...]

Default: the v5e records of 2026-12-04 (k3plan/evidence/probes/step-*-tpu-v5-lite-20261204T0601*.json), priced on
the efficiency records of the same chip's first K3-width run (k3plan/evidence/probes/*-tpu-v5-lite-20261204T054*:
matmul, hbm copy and reduce, ragged-dot, kda, kda-decode; the step ran with --records on exactly these).
No device needed: the model is k3plan's (probes/step/probe.py step_op_costs, step/graph.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's k3plan, not an installed one
STEPS = (
    "step-decode-tpu-v5-lite-20261204T060103Z-bd6aea.json",
    "step-prefill-tpu-v5-lite-20261204T060121Z-cab1b1.json",
)
EFFICIENCY_GLOB = "*-tpu-v5-lite-20261204T054*.json"  # run 1's sub-probes: what run 2's --records held


def main(argv: list[str]) -> int:
    from k3plan.evidence.probe_records import load_with_paths
    from k3plan.probes.step.probe import reprice

    probes = REPO / "k3plan" / "evidence" / "probes"
    names = {p.name for p in probes.glob(EFFICIENCY_GLOB)}
    efficiency = [(r, p.relative_to(REPO)) for r, p in load_with_paths(probes) if p.name in names]
    by_path = {p.resolve(): r for r, p in load_with_paths(probes)}
    paths = [Path(a) for a in argv] or [probes / s for s in STEPS]
    for path in paths:
        rec = by_path.get(path.resolve()) or next(r for r, p in load_with_paths(path.parent) if p == path)
        t = reprice(rec, efficiency=efficiency, hardware="tpu-v5e")
        measured = float(rec.points[0].value or 0.0)
        kinds = ", ".join(f"{k} {v.expected_s * 1e3:.2f}" for k, v in t.by_kind.items() if v.expected_s)
        print(
            f"{rec.mode}: measured {measured * 1e3:.2f} ms ({path.name}), expected {t.expected_s * 1e3:.2f} ms "
            f"(ceiling {t.ceiling_s * 1e3:.2f}), measured/expected {measured / t.expected_s:.3f}; by kind (ms): {kinds}"
        )
    print(f"efficiency records: {len(efficiency)} files {EFFICIENCY_GLOB} in k3plan/evidence/probes; peaks: tpu-v5e spec")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
