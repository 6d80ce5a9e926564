"""Compile one point of the v5e grid's graph (issue 50: validate's step at K3 width, ``probe step --width k3``)
deviceless for a TPU v5e (libtpu, no chip) and print / record the compiler's memory_analysis: the same program the
chip compiled at its grid points, at points the chip never ran (other batch, context, chunk, layers).

    nice -n 10 python3 benchmarks/grid_temp_compile.py --stack torchtpu-vllm --expert-format bf16 --layers 2 \
        --experts 16 --point decode:4x4096 [--dump DIR] [--out reports/validation/grid-temp-v5e]

One process a point or several (``--point`` repeated); each point's record is a JSON file in ``--out`` holding the
point, the model's parameters and memory_analysis (the record the temp test reads, tests/step/test_graph_temp.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

TARGET = "v5e:1x1"  # one v5e chip (the grid's)


def compile_point(*, stack: str, expert_format: str, layers: int, experts: int, stage: str, batch: int, context: int):
    from k3plan.libtpu_env import quiet_libtpu
    from k3plan.probes.step.probe import StepParams, _memory, expert_form, jitted_point, step_setup

    sp = StepParams(width="k3", layers=layers, experts=experts, stack=stack, expert_format=expert_format)
    setup = step_setup(sp, hardware="tpu-v5e")
    quiet_libtpu()
    from jax.experimental import topologies

    # one chip: the named topology alone is refused ("not divisible by ... chips_per_host_bounds 2x2x1")
    devs = list(
        topologies.get_topology_desc(platform="tpu", topology_name=TARGET, chips_per_host_bounds=(1, 1, 1)).devices
    )
    _, _, fn, args = jitted_point(
        setup, devs, stage=stage, batch=batch, context=context, tokens=context, form=expert_form(sp)
    )
    t0 = time.perf_counter()
    try:
        compiled = fn.lower(*args).compile()
    except Exception as err:  # the compiler's HBM check: a refusal is a point too
        words = " ".join(str(err).split())
        return {"refused": "oom", "refusal": words[:2000], "compile_s": round(time.perf_counter() - t0, 2)}
    return {"memory_analysis": _memory(compiled), "compile_s": round(time.perf_counter() - t0, 2)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stack", required=True)
    ap.add_argument("--expert-format", default="bf16", choices=("bf16", "runtime"))
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--experts", type=int, required=True)
    ap.add_argument("--point", action="append", required=True, help="decode:BxC or prefill:T (repeatable)")
    ap.add_argument("--dump", help="XLA dump folder (buffer assignment)")
    ap.add_argument("--out", help="folder for one JSON record a point")
    a = ap.parse_args(argv)
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if a.dump:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={a.dump} --xla_dump_hlo_as_text"
        ).strip()
    import jax

    from k3plan.probes.step.probe import parse_grid

    for stage, batch, context in parse_grid(",".join(a.point)):
        got = compile_point(
            stack=a.stack, expert_format=a.expert_format, layers=a.layers, experts=a.experts,
            stage=stage, batch=batch, context=context,
        )  # fmt: skip
        rec = {
            "point": {"stage": stage, "batch": batch, "context": context},
            "params": {"stack": a.stack, "expert_format": a.expert_format, "layers": a.layers, "experts": a.experts},
            **got,
            "target": f"deviceless {TARGET}",
            "jax_version": jax.__version__,
            "source": "benchmarks/grid_temp_compile.py (validate's step at K3 width, probe step's graph)",
        }
        mem = got.get("memory_analysis", {})
        print(
            f"{a.stack} {a.expert_format} {a.layers}L {a.experts}E {stage} {batch}x{context}: "
            + (f"temp {mem['temp_bytes'] / 2**30:.3f} GiB" if mem else "REFUSED")
            + f" ({got['compile_s']} s)",
            flush=True,
        )
        if a.out:
            out = Path(a.out)
            out.mkdir(parents=True, exist_ok=True)
            name = f"{a.stack}-{a.expert_format}-{a.layers}l{a.experts}e-{stage}-{batch}x{context}.json"
            (out / name).write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
