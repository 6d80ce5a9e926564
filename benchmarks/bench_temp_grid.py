"""Compile a grid of SCALED-DOWN K3-shaped models and test the op-level temp model on it (issue 15 item 3).

    python3 benchmarks/bench_temp_grid.py                          # compile the grid (CPU backend), fit, print
    python3 benchmarks/bench_temp_grid.py --target tpu7x           # deviceless TPU compiles (minutes a point here)
    python3 benchmarks/bench_temp_grid.py --fit-only reports/validation/temp-grid-cpu.json
    python3 benchmarks/bench_temp_grid.py --target tpu7x --point vllm-tpu:16:decode:1:32:2048   # one point
    XLA_FLAGS=--xla_dump_to=/tmp/dump python3 benchmarks/bench_temp_grid.py --target tpu7x --point ...
        # + the compiler's buffer assignment (*-buffer-assignment.txt: which buffers make the temp)

The model is K3's structure at toy size (``grid_config``): 4 layers (KDA x3 with layer 1 dense, MLA),
hidden 1024, 32 MLA and KDA heads, 64 experts top-8 in a 512-wide latent, MXFP4 experts as in K3's
quantization_config. The grid: stacks vllm-tpu and jax-native x TP 16 (tpu-v7x 2x2x2, 16 devices) and
TP 32 (2x2x4, 32 devices) x 4 prefill points (chunk x context) and 4 decode points (batch x context) =
32 compiles (a stopped run resumes from its record). Each compile's ``memory_analysis().temp_size_in_bytes`` is recorded with backend, device,
jax version and date in ``reports/validation/temp-grid-<backend>.json``; then the temp model's named
coefficients (k3plan.validate.temp_fit) are set from the points of the ``fit`` half only and its
error printed on the ``held-out`` half (median and worst): one coefficient set a stack (the shared
set is printed too). The split alternates within each (stack, tp, stage) group in POINTS order, so the
held-out points lie between fitted ones (interpolation; a split that holds out the extremes is
extrapolation and is reported in reports/validation/README.md).

Backends: ``--target cpu`` (default) uses XLA's CPU backend with fake devices: seconds a point, but its
temp is the CPU compiler's buffer assignment, not the TPU's (said in the record). ``--target tpu7x``
compiles deviceless with libtpu for tpu7x:2x2x2 / tpu7x:2x2x4; on the shared 2-core machine a toy point
took 28-338 s of compile wall time (21-266 s CPU) on 2026-12-01, so the grid there is grown a few points at a time
(``--point``, or ``--every``; a point already in the record is never compiled again, and every recorded point
is kept).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
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
        env = res.environment.model_dump(mode="json")  # the last compile's (date: when the grid was last grown)
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


def fit_and_print(record: dict, cfg_path: Path, per_stack: bool = True) -> dict:
    points_order = GRIDS[record.get("grid", "toy")][1]
    from k3plan.setup import make_setup
    from k3plan.validate.temp_fit import GridPoint, evaluate, split_half

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
    pts = [GridPoint.from_record(p, setup_of(p), position(p) if by_position else None) for p in ordered]
    train, held = split_half(pts)
    ev = evaluate(train=train, held_out=held, per_stack=per_stack)
    print(f"\ncoefficients (fit on {len(train)} points): " + ", ".join(f"{k} = {v:.4g}" for k, v in ev.coef.items()))
    print(f"{'':4}{'point':58} {'compiled MiB':>12} {'model MiB':>10} {'error':>7}")
    for row in ev.rows:
        print(
            f"{'fit ' if row.train else 'HELD'}{row.label:58} {row.compiled_bytes / 2**20:12.2f} "
            f"{row.predicted_bytes / 2**20:10.2f} {row.error:+7.1%}"
        )
    print(f"held-out ({len(held)} points): median |error| {ev.held_median:.1%}, worst {ev.held_worst:.1%}")
    print(f"fit half ({len(train)} points): median |error| {ev.train_median:.1%}, worst {ev.train_worst:.1%}")
    return {"per_stack": per_stack, **ev.to_dict()}


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
    p.add_argument("--out", help="where to write the record (default reports/validation/temp-grid-<target>.json)")
    a = p.parse_args()
    cfg = Path(tempfile.mkdtemp()) / "config.json"
    if a.fit_only:
        src = Path(a.fit_only)
        record = json.loads(src.read_text())
        cfg.write_text(json.dumps({**GRIDS[record.get("grid", "toy")][0](), "text_config": record["model_config"]}))
        record["fit_shared"] = fit_and_print(record, cfg, per_stack=False)
        record["fit"] = fit_and_print(record, cfg)
        (Path(a.out) if a.out else src).write_text(json.dumps(record, indent=1) + "\n")
        return
    name = f"temp-grid-{a.target}.json" if a.grid == "toy" else f"temp-grid-{a.grid}-{a.target}.json"
    out = Path(a.out) if a.out else OUT_DIR / name
    record = compile_grid(a.grid, a.target, a.only, a.every, out, a.point)
    cfg.write_text(json.dumps(GRIDS[a.grid][0]()))
    record["fit"] = fit_and_print(record, cfg)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
