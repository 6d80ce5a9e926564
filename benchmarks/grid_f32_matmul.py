"""Issue 50: ``probe matmul --dtype float32`` at the dense shapes of the grid's jax-native step (the scaled K3-width
model the grid ran, TP=1 on the v5e: decode at 1, 16 and 64 rows, prefill chunks of 1,024 and 4,096 tokens), as
``--from-plan`` would sweep them but from the grid's own model (its vocabulary, not K3's: the full lm_head in f32
is a 4.7 GB operand the grid never runs). From the checkout's top, after the device prelude:

    python3 benchmarks/grid_f32_matmul.py OUTDIR [--dtype float32]
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POINTS = ((1, 1024), (16, 1024), (64, 4096))  # (decode batch, prefill chunk)


def shapes():
    from k3plan.probes.op_shapes import PlanShapes, plan_shapes
    from k3plan.probes.step.probe import StepParams, step_setup

    sp = StepParams(width="k3", layers=2, experts=16, stack="jax-native", expert_format="bf16")
    setup = step_setup(sp, hardware="tpu-v5e")
    seen: dict = {}
    for batch, chunk in POINTS:
        for m in plan_shapes(setup, batch=batch, context=8192, chunk=chunk).matmuls:
            prev = seen.get((m.m, m.n, m.k))
            seen[(m.m, m.n, m.k)] = m if prev is None else prev
    return PlanShapes(
        source="the grid's jax-native step (k3 width, 2 layers, 16 experts, TP=1 on tpu-v5e): decode at "
        + ", ".join(str(b) for b, _ in POINTS)
        + " rows, prefill chunks of "
        + ", ".join(str(c) for _, c in POINTS)
        + " tokens (benchmarks/grid_f32_matmul.py)",
        matmuls=tuple(seen[k] for k in sorted(seen)),
        grouped=(),
    )


def main(argv: list[str]) -> int:
    from k3plan.cli.probe import _common, _execute
    from k3plan.probes.matmul import MatmulParams, run

    dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "float32"
    plan = shapes()
    if "--list" in argv:
        for m in plan.matmuls:
            print(m.m, m.n, m.k, round(m.size), m.ops)
        return 0
    params = MatmulParams(dtypes=(dtype,), plan=plan)
    params.check()
    _execute(
        _common(out=Path(argv[0]), timeout=float(argv[argv.index("--timeout") + 1]) if "--timeout" in argv else None),
        partial(run, params=params),
        False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
