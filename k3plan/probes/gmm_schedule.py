"""gmm-schedule: an engine's grouped-matmul kernel (gmm_v2, loaded as probe gmm loads it) compiled for a TPU
without one, and its time a call read from the compiler's static schedule (issue 38). Not a measurement: a
record of what the target's compiler issues, for a chip no probe here can run (TPU7x; and fp4 weights, which
Mosaic on TPU v5 lite refuses).

    python -m k3plan.probes.gmm_schedule --target tpu7x:2x2x1 --hardware tpu-v7x \\
        --kernel PATH/gmm_v2.py --weight float4_e2m1fn --points 256x28,16x2 --out k3plan/evidence/probes

Each point compiles in a child process (libtpu reads its dump flags once, at load) and is read back by
``k3plan.probes.llo_schedule``::

    cycles a call = outside + num_n x sum over fill_metadata's visits of step bundles(the visit's bucket)
    seconds       = cycles x seconds a cycle
    seconds a cycle = (2 x 4096^3 / the spec's bf16 peak) / the static cycles of XLA's own 4096^3 bf16 dot

-- the clock is not published; it is calibrated by the same compiler's schedule of a dot taken at the spec's peak
(on TPU v5 lite that schedule is 97% of the peak and the chip measured 97.5%, the shipped matmul records in
k3plan/evidence/probes).
The grid, tiles and buckets are the kernel's own (its name carries tm, tk, tn; ``k3plan.step.gmm`` the rest,
checked against the name). A kernel with more than one K step a visit is refused: its bodies are not read here.
Minutes a point on a 2-core machine: kept out of CI; the records are committed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from k3plan.errors import K3PlanError, require

DOT_N = 4096  # the calibrating dot: large enough to run at the MXU's pace in the compiler's schedule
DUMP = "--xla_jf_dump_to={d} --xla_jf_dump_llo_text=true --xla_jf_dump_llo_pass_label_regex=final_bundles"
PROFILE = "--xla_jf_dump_static_llo_profile_to={d}"
LABEL = "the compiler's static schedule (deviceless compile), not a measurement"


def _worker(spec: dict) -> None:
    """In a child process: compile one thing for the target (its dump flags already in the environment)."""
    from k3plan.libtpu_env import quiet_libtpu

    quiet_libtpu()
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    dev: Any = topologies.get_topology_desc(platform="tpu", topology_name=spec["target"]).devices[0]
    sh = SingleDeviceSharding(dev)

    def arg(shape, dtype):
        return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=sh)

    if spec["what"] == "dot":
        n = spec["n"]
        jax.jit(lambda a, b: a @ b).lower(arg((n, n), jnp.bfloat16), arg((n, n), jnp.bfloat16)).compile()
    else:
        import jax.experimental.pallas.tpu as pltpu
        from jax._src.pallas.mosaic import tpu_info

        # the kernel asks pltpu for the default device's TPU; deviceless, that is the target's
        info = tpu_info.get_tpu_info_for_chip(tpu_info.chip_version_from_device_kind(dev.device_kind), 1)
        pltpu.get_tpu_info = lambda: info
        tpu_info.get_tpu_info = lambda: info
        from k3plan.probes.gmm import engine_call, load_kernel

        kernel, _ = load_kernel(Path(spec["kernel"]))
        e, k, n, fmt, fused = spec["experts"], spec["k"], spec["n"], spec["weight"], spec["fused"]
        scale = None if fmt == "bfloat16" else arg((e, k // 32, 1, n), jnp.float32)

        lhs, w = arg((spec["rows"], k), jnp.bfloat16), arg((e, k, n), fmt)
        op = engine_call(kernel, fmt=fmt, fused=fused)
        jax.jit(op).lower(lhs, w, arg((e,), jnp.int32), scale).compile()
    print(json.dumps({"device_kind": dev.device_kind, "jax": jax.__version__}))


def _compile(spec: dict, flags: str, out: Path) -> dict:
    env = {**os.environ, "LIBTPU_INIT_ARGS": flags.format(d=out), "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    cmd = [sys.executable, "-m", "k3plan.probes.gmm_schedule", "--worker", json.dumps(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if spec["what"] == "dot" and not lines and any(out.glob("*.textproto")):
        # libtpu 0.0.42.1 for TPU7x aborts after writing the static profile (an LLO check on a scalar branch of
        # another program): the dot's profile is written by then, and the device kind is the target's
        return {"device_kind": spec.get("device_kind"), "jax": None, "aborted_after_profile": True}
    if done.returncode != 0 or not lines:
        tail = [ln for ln in done.stderr.splitlines() if ln.strip()][-3:]
        raise K3PlanError(f"gmm-schedule: the compile of {spec['what']} failed: {' | '.join(tail)}")
    return json.loads(lines[-1])


def _name_tiles(name: str) -> tuple[int, int, int]:
    m = re.search(r"-tm_(\d+)-tk_(\d+)-tn_(\d+)", name)
    require(m is not None, f"gmm-schedule: kernel {name}: expected tm_, tk_, tn_ in its name")
    assert m is not None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def visit_buckets(sizes: list[int], *, tile_m: int, base: int) -> list[int]:
    """The bucket each of fill_metadata's visits takes (inner_kernel: m_end_local // bucket_base, the last bucket
    at most), the visits as ``k3plan.step.gmm.visit_ends`` walks them."""
    from k3plan.step.gmm import visit_ends

    return [min(end // base, tile_m // base - 1) for end in visit_ends(sizes, tile_m)]


def _same_kind(hw, hardware: str, seen: str | None) -> None:
    require(
        seen == hw.device_kind, f"--hardware {hardware}: its device kind {hw.device_kind} is not the target's {seen}"
    )


def run(
    *,
    target: str,
    hardware: str,
    kernel: Path,
    weight: str,
    points: list[tuple[int, int]],
    projections: tuple[str, ...] = ("w13", "w2"),
    out: Path,
) -> Path:
    from k3plan.evidence.probe_record import ProbePoint, ProbeRecord
    from k3plan.hardware.loader import load_hardware
    from k3plan.probes.gmm import (
        BITS,
        K3_D_IN,
        K3_INTERMEDIATE,
        K3_LOCAL_EXPERTS,
        QUANT_BLOCK,
        load_kernel,
        touched_bytes,
    )
    from k3plan.probes.kernel_point import source_line
    from k3plan.probes.llo_schedule import parse_bundles, profile_cycles
    from k3plan.probes.store import write_record
    from k3plan.step.gmm import VMEM_BYTES, VMEM_SHARE, gmm_v2_tiles
    from k3plan.validate.targets import libtpu_version

    require(kernel.is_file(), f"--kernel {kernel}: no such file")
    hw = load_hardware(hardware)
    require(
        hw.device_kind in VMEM_BYTES,
        f"--hardware {hardware}: gmm_v2's tiling is known for {', '.join(VMEM_BYTES)} (k3plan.step.gmm.VMEM_BYTES), "
        f"not {hw.device_kind}",
    )
    peak = hw.flops_per_s_per_device("bf16")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "dot"
        seen = _compile({"what": "dot", "target": target, "n": DOT_N, "device_kind": hw.device_kind}, PROFILE, d)
        _same_kind(hw, hardware, seen["device_kind"])
        dot_cycles = profile_cycles("".join(p.read_text() for p in d.glob("*.textproto")))
    s_cycle = 2.0 * DOT_N**3 / peak / dot_cycles
    _, info = load_kernel(kernel)
    pts = []
    for rows, groups in points:
        for proj in projections:
            fused = proj == "w13"
            k, n = (K3_D_IN, 2 * K3_INTERMEDIATE) if fused else (K3_INTERMEDIATE, K3_D_IN)
            print(f"gmm-schedule {proj} {weight} {rows}x{groups} on {target}", file=sys.stderr, flush=True)
            spec = {
                "what": "gmm",
                "target": target,
                "kernel": str(kernel),
                "experts": K3_LOCAL_EXPERTS,
                "k": k,
                "n": n,
                "rows": rows,
                "weight": weight,
                "fused": fused,
            }
            with tempfile.TemporaryDirectory() as tmp:
                ran = _compile(spec, DUMP, Path(tmp))
                _same_kind(hw, hardware, ran["device_kind"])
                seen = {**seen, "jax": ran.get("jax")}
                files = [p for p in Path(tmp).glob("*gmm_v2*final_bundles.txt") if "schedule-analysis" not in p.name]
                require(len(files) == 1, f"gmm-schedule: expected one gmm_v2 bundle dump, found {len(files)}")
                try:
                    sched = parse_bundles(files[0].read_text())
                except ValueError as err:
                    raise K3PlanError(f"gmm-schedule: {files[0].name}: {err}") from None
            tm, tk, tn = _name_tiles(sched.kernel or "")
            bits = BITS[weight]
            tiles = gmm_v2_tiles(
                size_m=rows,
                size_k=k,
                size_n=n,
                rhs_bits=bits,
                quant_block=None if weight == "bfloat16" else QUANT_BLOCK,
                fused=fused,
                vmem_limit=int(VMEM_BYTES[hw.device_kind] * VMEM_SHARE),
            )
            require(
                (tiles.tile_m, tiles.tile_k, tiles.tile_n) == (tm, tk, tn),
                f"gmm-schedule: the kernel tiled {tm}x{tk}x{tn}, k3plan.step.gmm says "
                f"{tiles.tile_m}x{tiles.tile_k}x{tiles.tile_n}",
            )
            require(tk == k, f"gmm-schedule: {k // tk} K steps a visit: their bodies are not read here")
            per_rhs = n // 2 if fused else n
            num_n = -(-per_rhs // tn)
            sizes = [rows // groups + (1 if g < rows % groups else 0) for g in range(groups)]
            buckets = visit_buckets(sizes, tile_m=tm, base=tiles.base)
            cycles = sched.outside + num_n * sum(sched.step_bundles(b) for b in buckets)
            seconds = cycles * s_cycle
            moved = touched_bytes(weight=weight, k=k, n=n, groups=groups, rows=rows, fused=fused)
            pts.append(
                ProbePoint(
                    params={
                        "path": f"{proj} {weight} {rows}x{groups}",
                        "projection": proj,
                        "weight_dtype": weight,
                        "fuse_act": "silu" if fused else None,
                        "rows": rows,
                        "groups": groups,
                        "experts": K3_LOCAL_EXPERTS,
                        "k": k,
                        "n": n,
                        **moved,
                        "touched_bytes": sum(moved.values()),
                        "kernel_name": sched.kernel,
                        "grid_steps": num_n * len(buckets),
                        "step_bundles": sorted({sched.step_bundles(b) for b in buckets}),
                        "outside_bundles": sched.outside,
                        "bucket_bodies": [b.bundles for b in sched.bodies],
                        "cycles": cycles,
                        "seconds_a_cycle": s_cycle,
                    },
                    value=seconds,
                    unit="s",
                    notes=[
                        f"{cycles:,} cycles a call ({num_n} x {len(buckets)} grid steps of "
                        f"{', '.join(str(sched.step_bundles(b)) for b in sorted(set(buckets)))} bundles, "
                        f"{sched.outside} outside the grid) x {s_cycle * 1e9:.4f} ns = {seconds * 1e6:,.1f} us"
                    ],
                )
            )
    record = ProbeRecord(
        probe="gmm-schedule",
        op=weight,
        params={
            "kernel": info,
            "weight_dtype": weight,
            "quant_block": QUANT_BLOCK if weight != "bfloat16" else None,
            "target": target,
            "hardware": hardware,
            "dot_n": DOT_N,
            "dot_cycles": dot_cycles,
            "seconds_a_cycle": s_cycle,
            "call": "as gmm_wrapper: zero_initialize=False, fuse_act='silu' for w13, maybe_quantize_lhs=not fp4",
            "group_sizes": "rows spread evenly over the first `groups` local experts",
        },
        backend="tpu",
        device_kind=hw.device_kind,
        device_count=1,
        jax_version=seen.get("jax"),
        libtpu_version=libtpu_version(),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        implementation=f"gmm_v2 {weight}, compiled deviceless for {target}",
        label=LABEL,
        points=pts,
        baseline=(
            f"seconds a cycle from the same compiler's static schedule of XLA's {DOT_N}^3 bf16 dot "
            f"({dot_cycles:,} cycles) at the spec's bf16 peak ({peak:.4g} FLOP/s, hardware_specs/{hardware}.yaml)"
        ),
        source=source_line(info),
        notes=[
            "issue slots only: a DMA wait or a bank conflict is not in a static schedule, so a call bound by its "
            "weight DMA takes longer (docs/device.md sets this record beside the measured calls of TPU v5 lite)"
        ],
    )
    return write_record(record=record, out_dir=out)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m k3plan.probes.gmm_schedule",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples (no TPU needed; 2-4 minutes a 256-row point on 2 cores):\n"
            "  python -m k3plan.probes.gmm_schedule --kernel .devtree-ext/gmm_v2.py\n"
            "  python -m k3plan.probes.gmm_schedule --target v5e:2x2 --hardware tpu-v5e --weight int4 \\\n"
            "      --kernel .devtree-ext/gmm_v2.py --points 256x28,16x2 --out k3plan/evidence/probes\n"
            "prints the record's path; a bad argument or a failed compile is one line, exit 2"
        ),
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--target", default="tpu7x:2x2x1", help="a TPU topology libtpu compiles for (default %(default)s)")
    p.add_argument("--hardware", default="tpu-v7x", help="its hardware spec (default %(default)s)")
    p.add_argument("--kernel", type=Path, help="a Python file defining gmm_v2 (as probe gmm)")
    p.add_argument("--weight", default="float4_e2m1fn", choices=("float4_e2m1fn", "int4", "bfloat16"))
    p.add_argument("--points", default="256x28,16x2", help="rows x groups, comma-separated (default %(default)s)")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("k3plan/evidence/probes"),
        help="where the record goes (default %(default)s: shipped)",
    )
    a = p.parse_args(argv)
    if a.worker:
        _worker(json.loads(a.worker))
        return 0
    try:
        require(a.kernel is not None, "--kernel: expected a Python file defining gmm_v2")
        pts = []
        for item in a.points.split(","):
            m = re.fullmatch(r"\s*(\d+)x(\d+)\s*", item)
            require(m is not None, f"--points {item!r}: expected ROWSxGROUPS, e.g. 256x28")
            assert m is not None
            pts.append((int(m.group(1)), int(m.group(2))))
        path = run(target=a.target, hardware=a.hardware, kernel=a.kernel, weight=a.weight, points=pts, out=a.out)
    except K3PlanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
