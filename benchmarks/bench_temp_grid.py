"""Compile a grid of SCALED-DOWN K3 models and test the op-level temp model on it (issue 15 item 3).

    python3 benchmarks/bench_temp_grid.py --target tpu7x          # the k3lanes grid, deviceless tpu7x, fit, print
    python3 benchmarks/bench_temp_grid.py --fit-only reports/validation/temp-grid-k3lanes-tpu7x.json
    python3 benchmarks/bench_temp_grid.py --target tpu7x --point vllm-tpu:32:decode:1:16:4096   # one point
    XLA_FLAGS=--xla_dump_to=/tmp/dump python3 benchmarks/bench_temp_grid.py --target tpu7x --point ...
        # + the compiler's buffer assignment (*-buffer-assignment.txt, *-live-range.txt: the values live
        #   at the peak, which is what a live rule in k3plan/step/live.py must cite)
    python3 benchmarks/bench_temp_grid.py --grid toy --fit-only reports/validation/temp-grid-tpu7x.json  # history

Grids (``GRIDS``):
- ``k3lanes`` (default): K3 itself with 4 layers (KDA with the dense MLP, 2 scanned KDA, MLA) and 128 routed
  experts (``k3lanes_config``): every per-device lane dim is K3's, and the buffers that decide the temp are
  100 MiB to GiBs (out of the TPU's VMEM). 12 points (``K3LANES_POINTS`` x both stacks): prefill chunks 2,048 /
  8,192 at TP16 and TP32, decode b16 c4096 (TP32) and b64 c16384 (TP16). Held out: the odd positions of each
  (stack, stage) group in that order, fixed before compiling.
- ``toy`` (history, 2026-12-01): K3's structure at toy size (hidden 1024, 32 heads of 64, 64 experts top-8 in
  a 512 latent) over 8 points a (stack, TP); its records split by order of appearance, as published.

Each compile's ``memory_analysis().temp_size_in_bytes`` is recorded with backend, device, jax / libtpu version,
date, the expert form and the process CPU time in ``reports/validation/temp-grid-<grid>-<backend>.json`` (the
toy's: ``temp-grid-<backend>.json``). Then (``fit_record``) the candidate model forms (``CANDIDATES``: named
coefficients or one for the live total, a set a stack or shared) are scored by leave-one-out on the FIT half
alone, the best is picked, fitted on the fit half and its error printed on the held-out half (median, worst);
the other candidates' held-out errors are printed and kept too, never used to pick.

Backends: ``--target tpu7x`` compiles deviceless with libtpu for tpu7x:2x2x2 (TP16) / tpu7x:2x2x4 (TP32): on the
shared 2-core machine a k3lanes point took 140-480 s of CPU on 2026-12-01, so the grid is grown a few points at a
time (``--point``; a point already in the record is never compiled again, and every recorded point is kept).
``--target cpu`` uses XLA's CPU backend with fake devices: its temp is the CPU compiler's, not the TPU's.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "reports" / "validation"
TOPOLOGY = {16: "2x2x2", 32: "2x2x4"}
STACKS = ("vllm-tpu", "jax-native")
# (stage, tokens, batch, context): prefill = one chunk of `tokens` into one sequence's cache of `context`.
# Order matters to the split (temp_fit.split_half: even positions of a (stack, tp, stage) group fit, odd
# ones are held out).
# The first grid (2026-12-01, history: reports/validation/temp-grid-tpu7x.json / -cpu.json): each stage's
# smallest and largest point fit, the two between are held out.
TOY_POINTS = (
    ("prefill", 256, 1, 1024),
    ("prefill", 1024, 1, 2048),
    ("prefill", 2048, 1, 4096),
    ("prefill", 512, 1, 1024),
    ("decode", 1, 8, 1024),
    ("decode", 1, 32, 2048),
    ("decode", 1, 128, 4096),
    ("decode", 1, 64, 2048),
)
# The K3-lanes grid (issue 15 item 3, second attempt), each point (tp, stage, tokens, batch, context) for each
# stack; a prefill is one chunk into an empty cache of the chunk's size (as the real slice measured it). Fixed
# before any model error was seen: a first plan of 6 points a (stack, TP) was cut to these 12 when its first
# point took 458 s of compile (454 s CPU) on the shared machine. Held out: the odd positions of each (stack,
# stage) group in this order -- each stack's TP32 8,192-token and TP16 2,048-token prefills and its TP16 decode
# at batch 64, context 16,384; fitted: TP32 prefill 2,048, TP16 prefill 8,192, TP32 decode b16 c4096. So each
# held-out point is a configuration (TP, size) the fit never saw.
K3LANES_POINTS = (
    (32, "prefill", 2048, 1, 2048),
    (32, "prefill", 8192, 1, 8192),
    (16, "prefill", 8192, 1, 8192),
    (16, "prefill", 2048, 1, 2048),
    (32, "decode", 1, 16, 4096),
    (16, "decode", 1, 64, 16384),
)


def toy_config() -> dict:
    """The first grid's model: K3's structure at toy size (its dims are not K3's per device)."""
    from k3plan.models.loader import BUNDLED_DIR

    raw = copy.deepcopy(json.loads((BUNDLED_DIR / "kimi-k3" / "config.json").read_text()))
    raw.pop("vision_config", None)
    t = raw["text_config"]
    t.update(
        hidden_size=1024, num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=32, num_experts=64,
        num_experts_per_token=8, routed_expert_hidden_size=512, moe_intermediate_size=256, intermediate_size=2048,
        vocab_size=8192, q_lora_rank=256, kv_lora_rank=128, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64,
    )  # fmt: skip
    t["linear_attn_config"].update(kda_layers=[1, 2, 3], full_attn_layers=[4], num_heads=32, head_dim=64)
    return raw


def k3lanes_config() -> dict:
    """K3 itself with 4 layers (KDA with the dense MLP, KDA, KDA, MLA) and 128 routed experts instead of
    896: every per-device lane dim is K3's (hidden 7168; 96 MLA and KDA heads = 6 a device at TP16, 3 at
    TP32; MLA entry 512 + 64 = 576, head dims 128; KDA head dim 128; expert latent 3584, intermediate 3072,
    top-16; dense intermediate 33792; vocab 163840); local experts 8 (TP16) / 4 (TP32) instead of 56 / 28."""
    from k3plan.models.loader import BUNDLED_DIR

    raw = copy.deepcopy(json.loads((BUNDLED_DIR / "kimi-k3" / "config.json").read_text()))
    raw.pop("vision_config", None)
    t = raw["text_config"]
    t.update(num_hidden_layers=4, num_experts=128)
    t["linear_attn_config"].update(kda_layers=[1, 2, 3], full_attn_layers=[4])
    return raw


GRIDS = {
    "k3lanes": (k3lanes_config, K3LANES_POINTS),
    "toy": (toy_config, tuple((tp, *q) for tp in TOPOLOGY for q in TOY_POINTS)),
}


def _prepare_cpu(devices: int) -> None:
    flag = "--xla_force_host_platform_device_count"
    flags = re.sub(flag + r"=\S*", "", os.environ.get("XLA_FLAGS", "")).strip()
    os.environ["XLA_FLAGS"] = f"{flags} {flag}={devices}".strip()


def _key(q: dict) -> tuple:
    return (q["stack"], q["tp"], q["stage"], q["tokens"], q["batch"], q["context"])


def parse_point(text: str) -> tuple:
    """``stack:tp:stage:tokens:batch:context`` (e.g. ``jax-native:32:decode:1:16:2048``) -> a grid key."""
    parts = text.split(":")
    if len(parts) != 6 or parts[0] not in STACKS or parts[2] not in ("prefill", "decode"):
        raise SystemExit(f"--point {text!r}: expected STACK:TP:STAGE:TOKENS:BATCH:CONTEXT, stack one of {STACKS}")
    stack, tp, stage, tokens, batch, context = parts
    if int(tp) not in TOPOLOGY:
        raise SystemExit(f"--point {text!r}: tp must be one of {sorted(TOPOLOGY)}")
    return (stack, int(tp), stage, int(tokens), int(batch), int(context))


def compile_grid(
    grid: str, target: str, only: int | None, every: int, out: Path, extra: list[tuple] | None = None
) -> dict:
    """Compile the grid's points (or only ``extra``, when given) not already in the record at ``out``; every
    point already recorded (same model) is kept, compiled or not in this run."""
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if target == "cpu":
        _prepare_cpu(32)
    from k3plan.setup import make_setup
    from k3plan.step.live import form_for
    from k3plan.structs import dump
    from k3plan.validate.run import Job, validate
    from k3plan.validate.targets import parse_target, prepare

    grid_config, grid_points = GRIDS[grid]
    cfg = Path(tempfile.mkdtemp()) / "config.json"
    cfg.write_text(json.dumps(grid_config()))
    env = None
    done: dict[tuple, dict] = {}
    keep: dict = {}
    if out.exists():  # resume: a point already in the record (same model) is not compiled again
        old = json.loads(out.read_text())
        if old.get("model_config") == grid_config()["text_config"]:
            env = old.get("environment")
            done = {_key(q): q for q in old.get("points", [])}
            keep = {k: old[k] for k in ("what", "backend_note") if k in old}
    points: list[dict] = list(done.values())

    def record() -> dict:
        return {
            "what": f"compiled temp of a scaled-down K3 (bench_temp_grid.{grid}_config) over a grid, issue 15 item 3",
            "grid": grid,
            "model_config": grid_config()["text_config"],
            "environment": env,
            "backend_note": (
                "CPU backend with fake devices: the CPU compiler's temp, not representative of TPU"
                if target == "cpu"
                else "deviceless TPU compile (libtpu)"
            ),
            **keep,
            "points": points,
        }

    todo: list[tuple] = []
    n = 0
    for stack in STACKS:
        for tp, stage, tokens, batch, context in grid_points:
            n += 1
            if extra is None and not ((only is not None and n > only) or (n - 1) % every):
                todo.append((stack, tp, stage, tokens, batch, context))
    todo += extra or []
    setups: dict = {}
    for key in todo:
        if key in done:
            continue
        stack, tp, stage, tokens, batch, context = key
        topo = TOPOLOGY[tp]
        if (stack, tp) not in setups:
            setups[stack, tp] = make_setup(model=str(cfg), hardware="tpu-v7x", topology=topo, tp=tp, stack=stack)
        setup = setups[stack, tp]
        tgt = parse_target("cpu" if target == "cpu" else f"{target}:{topo}")
        prepare(tgt, devices=setup.topology.devices)
        t0, c0 = time.perf_counter(), time.process_time()
        res = validate(setup=setup, target=tgt, jobs=[Job(stage, tokens, batch, context)])
        r = res.results[0]
        env = dump(res.environment)  # the last compile's (date: when the grid was last grown)
        temp = None if r.memory is None else r.memory.temp_bytes
        q = {
            "stack": stack, "tp": tp, "topology": topo, "ep": setup.parallel.ep, "dp": setup.parallel.dp,
            "stage": stage, "tokens": tokens, "batch": batch, "context": context, "form": form_for(stack),
            "temp_bytes": temp, "compile_s": round(r.compile_s, 2),
            "process_cpu_s": round(time.process_time() - c0, 1), "date": env.get("date"),
            "target": env.get("target"),
        }  # fmt: skip
        points.append(q)
        done[key] = q
        out.write_text(json.dumps(record(), indent=1) + "\n")  # after each point: a stopped run keeps its compiles
        print(
            f"{stack:10} tp{tp} {stage:7} tokens {tokens:5} batch {batch:3} context {context:5}: "
            f"temp {temp / 2**20:9.2f} MiB  ({time.perf_counter() - t0:.1f} s wall, "
            f"{q['process_cpu_s']} s CPU)",
            flush=True,
        )
    return record()


def grid_points(record: dict, cfg_path: Path) -> list:
    """The record's compiled points as temp_fit.GridPoints (their live model from the grid's setups), in the
    grid's order, each with its grid position where the grid splits by position."""
    points_order = GRIDS[record.get("grid", "toy")][1]
    from k3plan.setup import make_setup
    from k3plan.validate.temp_fit import GridPoint

    setups: dict = {}

    def setup_of(p: dict):
        key = (p["stack"], p["tp"])
        if key not in setups:
            setups[key] = make_setup(model=str(cfg_path), hardware="tpu-v7x", topology=p["topology"], tp=p["tp"],
                                     stack=p["stack"])  # fmt: skip
        return setups[key]

    # the split (even positions of a group fit) runs in the grid's order whatever order the points were compiled
    # in; a point outside the grid (an earlier spot check) comes after the group's grid points
    def grid_order(p: dict) -> int:
        q = (p["tp"], p["stage"], p["tokens"], p["batch"], p["context"])
        return points_order.index(q) if q in points_order else len(points_order)

    def position(p: dict) -> int | None:
        """The point's place among its stage's grid points, any TP (None: outside the grid, after them)."""
        stage = [q for q in points_order if q[1] == p["stage"]]
        q = (p["tp"], p["stage"], p["tokens"], p["batch"], p["context"])
        return stage.index(q) if q in stage else None

    ordered = sorted((p for p in record["points"] if p["temp_bytes"] is not None), key=grid_order)
    # the first grid's records (no "grid" key) split by order of appearance, as published; the k3lanes grid
    # by grid position, fixed before its points were compiled (a point not compiled moves no other)
    by_position = "grid" in record
    return [GridPoint.from_record(p, setup_of(p), position(p) if by_position else None) for p in ordered]


# The candidate fits and the rule that picks one, fixed before the k3lanes grid's held-out points were compiled:
# (form, one coefficient set a stack?); the pick is the lowest worst leave-one-out |error| on the FIT half alone
# (ties: the lower median), so the held-out half judges the picked model and never chooses it.
CANDIDATES = (("named", True), ("named", False), ("total", True), ("total", False))


def choose_form(pts: list) -> tuple[tuple[str, bool], list[dict]]:
    from k3plan.validate.temp_fit import leave_one_out, split_half

    train, _ = split_half(pts)
    rows = []
    for form, per_stack in CANDIDATES:
        loo = leave_one_out(train, per_stack=per_stack, form=form)
        rows.append({"form": form, "per_stack": per_stack, "loo_median": float(statistics.median(loo)) if loo
                     else None, "loo_worst": max(loo) if loo else None, "loo_n": len(loo)})  # fmt: skip
        print(f"fit-half leave-one-out, form {form:5} {'per stack' if per_stack else 'shared':9}: "
              f"median {rows[-1]['loo_median']:.1%}, worst {rows[-1]['loo_worst']:.1%} ({len(loo)} points)")  # fmt: skip
    best = min(rows, key=lambda r: (r["loo_worst"], r["loo_median"]))
    print(f"picked: form {best['form']}, {'per stack' if best['per_stack'] else 'shared'}")
    return (best["form"], best["per_stack"]), rows


def fit_and_print(record: dict, cfg_path: Path, per_stack: bool = True, form: str = "named") -> dict:
    from k3plan.validate.temp_fit import evaluate, split_half

    pts = grid_points(record, cfg_path)
    train, held = split_half(pts)
    ev = evaluate(train=train, held_out=held, per_stack=per_stack, form=form)
    print(f"\nform {form}, {'per stack' if per_stack else 'shared'}: coefficients (fit on {len(train)} points): "
          + ", ".join(f"{k} = {v:.4g}" for k, v in ev.coef.items()))  # fmt: skip
    print(f"{'':4}{'point':58} {'compiled MiB':>12} {'model MiB':>10} {'error':>7}")
    for row in ev.rows:
        print(
            f"{'fit ' if row.train else 'HELD'}{row.label:58} {row.compiled_bytes / 2**20:12.2f} "
            f"{row.predicted_bytes / 2**20:10.2f} {row.error:+7.1%}"
        )
    print(f"held-out ({len(held)} points): median |error| {ev.held_median:.1%}, worst {ev.held_worst:.1%}")
    print(f"fit half ({len(train)} points): median |error| {ev.train_median:.1%}, worst {ev.train_worst:.1%}")
    return {"per_stack": per_stack, "form": form, **ev.to_dict()}


def fit_record(record: dict, cfg: Path) -> None:
    """The first grid: its published fits (per stack, and shared), named form. The k3lanes grid: the candidate
    picked on the fit half (``choose_form``) is ``fit``; every candidate's held-out error is kept too."""
    if "grid" not in record:
        record["fit_shared"] = fit_and_print(record, cfg, per_stack=False)
        record["fit"] = fit_and_print(record, cfg)
        return
    (form, per_stack), rows = choose_form(grid_points(record, cfg))
    record["candidates"] = []
    for row in rows:
        if (row["form"], row["per_stack"]) != (form, per_stack):
            ev = fit_and_print(record, cfg, per_stack=row["per_stack"], form=row["form"])
            record["candidates"].append({**row, "held_out_median_abs_error": ev["held_out_median_abs_error"],
                                         "held_out_worst_abs_error": ev["held_out_worst_abs_error"]})  # fmt: skip
    print("\n=== the picked model")
    record["fit"] = {**fit_and_print(record, cfg, per_stack=per_stack, form=form),
                     "picked_by": "lowest worst leave-one-out |error| on the fit half", "candidates_loo": rows}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", default="k3lanes", choices=tuple(GRIDS), help="the model and points (toy: history)")
    p.add_argument("--target", default="cpu", choices=("cpu", "tpu7x"))
    p.add_argument("--only", type=int, help="compile only the first N points (a quick look)")
    p.add_argument("--every", type=int, default=1, help="compile every K-th point of the grid (1, 1+K, ...)")
    p.add_argument(
        "--point",
        action="append",
        type=parse_point,
        help="compile this point instead of the grid's: STACK:TP:STAGE:TOKENS:BATCH:CONTEXT (repeatable)",
    )
    p.add_argument("--fit-only", help="a grid record JSON: skip compiling, fit, print and write the fit into it")
    p.add_argument(
        "--ship",
        action="store_true",
        help="then write the record's fit and its error band as the shipped temp model (k3plan/evidence/temp_model.yaml)",
    )
    p.add_argument("--out", help="where to write the record (default reports/validation/temp-grid-<target>.json)")
    a = p.parse_args()
    cfg = Path(tempfile.mkdtemp()) / "config.json"
    if a.fit_only:
        src = Path(a.fit_only)
        record = json.loads(src.read_text())
        cfg.write_text(json.dumps({**GRIDS[record.get("grid", "toy")][0](), "text_config": record["model_config"]}))
        fit_record(record, cfg)
        dest = Path(a.out) if a.out else src
        dest.write_text(json.dumps(record, indent=1) + "\n")
        if a.ship:
            ship(record, dest)
        return
    name = f"temp-grid-{a.target}.json" if a.grid == "toy" else f"temp-grid-{a.grid}-{a.target}.json"
    out = Path(a.out) if a.out else OUT_DIR / name
    record = compile_grid(a.grid, a.target, a.only, a.every, out, a.point)
    cfg.write_text(json.dumps(GRIDS[a.grid][0]()))
    fit_record(record, cfg)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    if a.ship:
        ship(record, out)


def ship(record: dict, path: Path) -> None:
    """The record's fit and its error band (k3plan.budget.temp_model.build_model) as the shipped temp model."""
    import yaml

    from k3plan.budget.temp_model import MODEL_FILE, build_model

    rel = path.resolve().relative_to(ROOT).as_posix()
    body = yaml.safe_dump(build_model(record, rel), sort_keys=False, width=1000)
    MODEL_FILE.write_text(
        "# The temp model fit / plan / curve / report / check use where no measured or compiled calibration\n"
        "# matches (k3plan/budget/temp_model.py). Written by benchmarks/bench_temp_grid.py --ship; do not edit.\n" + body
    )
    band = ", ".join(f"{b['stack']} {b['low_error']:+.1%} .. {b['high_error']:+.1%}" for b in build_model(record, rel)["bands"])
    print(f"wrote {MODEL_FILE} (bands: {band})", file=sys.stderr)


if __name__ == "__main__":
    main()
