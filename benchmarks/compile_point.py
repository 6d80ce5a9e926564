"""Compile ONE full-size point deviceless (one process a point: a full K3 compile holds ~5 GB and
takes minutes on a 2-core machine) and write validate's result JSON; optionally list the largest
HLO results, the first place to look when attributing a temp.

    python3 benchmarks/compile_point.py --stack jax-native --stage decode --batch 32 --context 4096 \
        --out reports/validation/jax-native
    python3 benchmarks/compile_point.py --stack jax-native --stage prefill --tokens 4096 --top 30 \
        --out reports/validation/jax-native
    python3 benchmarks/compile_point.py --merge reports/validation/jax-native \
        --save-calibration reports/validation/k3-tpu7x-2x2x4-tp32-jax-native-compiled.yaml

A prefill point is one chunk into an empty cache sized to the chunk (context = tokens), as the
porting study measured it (``--prefill-context 8192``: the vllm-tpu sweep's max(8192, tokens)). Needs libtpu (pip install -e ".[tpu]").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

_ARR = re.compile(r"\b([a-z]+\d*[a-z0-9]*)\[([\d,]*)\]")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_INS = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([a-z][\w\-]*)\(")


def largest(hlo: str, top: int) -> list[str]:
    from k3plan.validate.hlo_census import _ITEM

    rows, comp = [], "?"
    for ln in hlo.splitlines():
        m = _COMP.match(ln)
        if m:
            comp = m.group(1)
            continue
        m = _INS.match(ln)
        if not m or m.group(3) in ("parameter", "get-tuple-element", "tuple", "bitcast", "constant"):
            continue
        b = sum(_ITEM.get(dt, 0) * math.prod(int(d) for d in dims.split(",") if d)
                for dt, dims in _ARR.findall(m.group(2)))
        meta = re.search(r'op_name="([^"]*)"', ln)
        rows.append((b, comp, m.group(3), m.group(2)[:60], meta.group(1)[-100:] if meta else ""))
    rows.sort(key=lambda r: -r[0])
    return [f"{b / 2**30:8.3f} GiB {c[:26]:26} {op:14} {s:60} {w}" for b, c, op, s, w in rows[:top]]


def compile_one(a) -> None:
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from k3plan.app.setup import setup_from
    from k3plan.structs import dump
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    if a.form:  # a control compile of another expert form for this stack (this process only)
        from k3plan.step.live import STACK_FORMS

        STACK_FORMS[a.stack] = a.form
    tgt = parse_target(a.target)
    setup = setup_from(model=a.model, hardware=tgt.hardware, topology=tgt.topology, tp=a.tp, ep=None, dp=None,
                       stack=a.stack)
    prepare_target(tgt, setup)
    import k3plan.validate.compile as compile_mod

    kept = {}
    step = compile_mod.compile_step

    def keep(*args, **kw):
        kept["r"] = step(*args, **kw)
        return kept["r"]

    compile_mod.compile_step = keep
    context = max(a.tokens, a.prefill_context or 0) if a.stage == "prefill" else a.context
    jobs = plan_jobs(setup=setup, stage=a.stage, tokens=[a.tokens], batch=a.batch, context=context)
    t0 = time.perf_counter()
    res = validate(setup=setup, target=tgt, jobs=jobs)
    wall_s = round(time.perf_counter() - t0, 1)
    name = f"{a.stack}-{a.stage}-" + (f"{a.tokens}" if a.stage == "prefill" else f"b{a.batch}-c{a.context}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # the validate JSON, then this run's wall time (ValidationResult.from_json ignores it)
    (out / f"{name}.json").write_text(json.dumps({**dump(res), "wall_s": wall_s}, indent=1) + "\n")
    r = res.results[0]
    temp = r.oom.required_bytes if r.oom else (None if r.memory is None else r.memory.temp_bytes)
    print(f"{name}: temp {temp / 2**30:.2f} GiB{' (OOM)' if r.oom else ''}, compile {r.compile_s:.0f} s, "
          f"wall {wall_s:.0f} s")
    if a.top and kept.get("r") is not None and kept["r"].hlo_text:
        print("\n".join(largest(kept["r"].hlo_text, a.top)))


def merge(a) -> None:
    from k3plan.validate.calibration_out import (
        calibration_dict,
        merge_calibrations,
        write_calibration,
    )

    parts = []
    from k3plan.validate.result import ValidationResult

    for f in sorted(Path(a.merge).glob("*.json")):
        res = ValidationResult.from_json(json.loads(f.read_text()))
        oom = res.results[0].oom
        usable = oom.available_bytes if oom is not None and oom.available_bytes else 94.75 * 2**30
        parts.append(calibration_dict(res, usable_bytes=int(usable)))
    merged = merge_calibrations(parts)
    merged["notes"] = list(dict.fromkeys([*merged["notes"], *(a.note or [])]))
    write_calibration(Path(a.save_calibration), merged)
    print(f"wrote {a.save_calibration} from {len(parts)} runs")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="kimi-k3")
    p.add_argument("--target", default="tpu7x:2x2x4")
    p.add_argument("--tp", type=int, default=32)
    p.add_argument("--stack", default="jax-native")
    p.add_argument("--stage", choices=("prefill", "decode"), default="prefill")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--prefill-context", type=int, default=None,
                   help="a prefill chunk's cache length if above --tokens (the vllm-tpu sweep used 8192)")
    p.add_argument("--form", choices=("layer", "ragged", "tiled"), help="override the stack's expert form")
    p.add_argument("--top", type=int, default=0, help="list the N largest HLO results")
    p.add_argument("--out", default="reports/validation/jax-native")
    p.add_argument("--merge", help="a folder of point JSONs to merge into --save-calibration")
    p.add_argument("--save-calibration")
    p.add_argument("--note", action="append", help="a note to add to the merged calibration (repeatable)")
    a = p.parse_args()
    if a.merge:
        if not a.save_calibration:
            sys.exit("--merge needs --save-calibration")
        merge(a)
    else:
        compile_one(a)


if __name__ == "__main__":
    main()
