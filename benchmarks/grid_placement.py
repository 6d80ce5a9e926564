"""Issue 50: the compiler's placement of the MXFP4 tile intermediates at each timed grid point of the tiled form
(torchtpu-vllm MXFP4), read from the step compiled on the chip (not run): k3plan.probes.step.alternate. From the
checkout's top, after the device prelude:

    python3 benchmarks/grid_placement.py OUT.json [MODEL ...]                # on the chip
    python3 benchmarks/grid_placement.py OUT.json --deviceless [MODEL ...]   # libtpu here, compile-only: one device of v5e:2x2

Writes one JSON list: per point (model, stage, batch, context) the shares, the raw counts and the compile's
memory_analysis (to hold against the timed record's, which the same program reported when it ran).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEC = [(1, 2048), (1, 32768), (4, 2048), (8, 8192), (16, 8192), (64, 2048), (32, 32768), (64, 32768)]
POINTS = (  # (name, layers, [(stage, batch, context)]): the timed tiled points of the grid
    (
        "tt-mxfp4-2l16e",
        2,
        [
            ("decode", 1, 2048),
            ("decode", 4, 2048),
            ("decode", 16, 8192),
            ("decode", 64, 32768),
            ("prefill", 1, 1024),
            ("prefill", 1, 2048),
            ("prefill", 1, 8192),
        ],
    ),
    (
        "tt-mxfp4-4l16e",
        4,
        [("decode", b, c) for b, c in DEC if (b, c) != (4, 2048)] + [("prefill", 1, 1024), ("prefill", 1, 4096)],
    ),
    ("tt-mxfp4-8l16e", 8, [("decode", 1, 2048), ("decode", 16, 8192), ("prefill", 1, 1024)]),
)


def main(argv: list[str]) -> int:
    import jax

    from k3plan.probes.step.alternate import placements, shares
    from k3plan.probes.step.probe import StepParams, _memory, expert_form, jitted_point, step_setup

    deviceless = "--deviceless" in argv
    argv = [a for a in argv if a != "--deviceless"]
    if deviceless:
        from jax.experimental import topologies

        devices = list(topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices)[:1]
    else:
        devices = jax.devices()[:1]
    out = []
    only = set(argv[1:])
    for name, layers, pts in POINTS:
        if only and name not in only:
            continue
        sp = StepParams(width="k3", layers=layers, experts=16, stack="torchtpu-vllm", expert_format="runtime")
        setup = step_setup(sp, hardware="tpu-v5e")
        for stage, batch, context in pts:
            t0 = time.perf_counter()
            _, _, fn, args = jitted_point(
                setup, devices, stage=stage, batch=batch, context=context, tokens=context, form=expert_form(sp)
            )
            try:
                compiled = fn.lower(*args).compile()
            except Exception as err:
                print(name, stage, batch, context, "refused:", str(err)[:200], flush=True)
                continue
            hlo = compiled.as_text()
            row = {
                "point": [name, stage, batch, context],
                "layers": layers,
                "shares": shares(hlo),
                "counts": placements(hlo),
                "memory": _memory(compiled),
                "compile_s": round(time.perf_counter() - t0, 1),
                "compiled_on": "deviceless v5e:2x2, one device (libtpu here)"
                if deviceless
                else str(devices[0].device_kind),
            }
            out.append(row)
            print(json.dumps(row), flush=True)
            Path(argv[0]).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:2] + sys.argv[2:]))
