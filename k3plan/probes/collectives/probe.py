"""Run a collective probe: sweep message sizes, chained and/or unchained, baseline subtracted,
the compiled HLO checked for the requested op. One record a mode."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from k3plan.errors import K3PlanError, require
from k3plan.evidence.probe_record import ProbePoint, ProbeRecord, Verification
from k3plan.probes.collectives.ops import AXIS, OPS, expected_once, programs, wire_bytes
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.hlo import verify_collective
from k3plan.probes.timing import marginal_s, sample_s, stats

# 1792 B: K3's batch-1 dispatch a call a chip at EP=32 (k3-facts §5)
DEFAULT_SIZES = (64, 1792, 16384, 262144)
DEFAULT_CHAINED_N = (10, 100)
DEFAULT_UNCHAINED_N = (1, 10, 100, 1000)
# The CPU backend's quick sweep: a CPU run checks the probe end to end (numerics, HLO, records) and
# measures nothing a planner uses, so it keeps K3's 1792 B point and compiles small programs only
# (an unchained program of 1000 collectives takes minutes to compile on 2 CPU cores).
CPU_SIZES = (64, 1792)
CPU_UNCHAINED_N = (1, 4)
PROBE_NAMES = {"all-to-all": "a2a", "all-reduce": "allreduce", "all-gather": "allgather"}
BASELINE = "the same shard_map program with the collective replaced by a local flip*scale of the same shape"


@dataclass(frozen=True)
class CollectiveParams:
    """Sweep settings; a field left None is sized to the backend by ``for_backend``."""

    op: str
    sizes_bytes: Optional[tuple[int, ...]] = None
    modes: tuple[str, ...] = ("chained", "unchained")
    chained_n: Optional[tuple[int, ...]] = None
    unchained_n: Optional[tuple[int, ...]] = None
    axis_size: Optional[int] = None
    dtype: str = "float32"

    def for_backend(self, *, is_cpu: bool) -> tuple["CollectiveParams", list[str]]:
        """Fill the fields left None: the full sweep on TPU/GPU, the quick one on CPU (with a note)."""
        sizes = self.sizes_bytes or (CPU_SIZES if is_cpu else DEFAULT_SIZES)
        chained = self.chained_n or DEFAULT_CHAINED_N
        unchained = self.unchained_n or (CPU_UNCHAINED_N if is_cpu else DEFAULT_UNCHAINED_N)
        notes = []
        if is_cpu and (self.sizes_bytes is None or self.unchained_n is None):
            notes.append(
                f"CPU run: quick sweep ({', '.join(map(str, sizes))} B; unchained N "
                f"{','.join(map(str, unchained))}); the full sweep runs on TPU/GPU or with --bytes/--unchained-iters"
            )
        return replace(self, sizes_bytes=sizes, chained_n=chained, unchained_n=unchained), notes

    def points(self) -> int:
        """Sweep points (a size at one N, one mode): what the progress bar counts."""
        n = {
            "chained": len(self.chained_n or DEFAULT_CHAINED_N),
            "unchained": len(self.unchained_n or DEFAULT_UNCHAINED_N),
        }
        return len(self.sizes_bytes or DEFAULT_SIZES) * sum(n[m] for m in self.modes)

    def check(self) -> None:
        require(self.op in OPS, f"unknown collective {self.op!r}")
        require(all(b > 0 for b in self.sizes_bytes or DEFAULT_SIZES), "--bytes: every size must be > 0")
        require(set(self.modes) <= {"chained", "unchained"}, "--mode: expected chained, unchained or both")
        for name, ns in (("--iters", self.chained_n), ("--unchained-iters", self.unchained_n)):
            if ns is None:
                continue
            require(
                len(ns) >= 2 and all(a < b for a, b in zip(ns, ns[1:])) and ns[0] >= 1,
                f"{name} {','.join(map(str, ns))}: expected >= 2 increasing counts >= 1",
            )
        require(self.axis_size is None or self.axis_size >= 2, f"--axis-size {self.axis_size}: expected >= 2")


def _require_fits(ctx: ProbeContext, params: CollectiveParams, axis_size: int) -> None:
    """Bad input before allocating: the largest program's input, N messages a device (each of the
    axis's devices; on CPU they share the host), its output (all-gather's gathered buffer) and the
    host copy of the whole input it is sharded from."""
    assert params.sizes_bytes is not None, "CollectiveParams not resolved by for_backend"
    n = max(params.unchained_n or (1,)) if "unchained" in params.modes else 1  # chained: one message, looped
    out = axis_size if params.op == "all-gather" else 1
    for size in params.sizes_bytes:
        ctx.require_fits(
            n * size * (2 + out + 1), what=f"--bytes {size} (x {n} calls, {axis_size} devices)", devices=axis_size
        )


def _mesh_factory(ctx: ProbeContext, axis_size: int):
    def make():
        import jax
        import numpy as np
        from jax.sharding import Mesh

        if ctx.device_count < 2:
            raise NotImplementedError(f"a collective needs >= 2 devices; backend {ctx.backend} has {ctx.device_count}")
        if axis_size > ctx.device_count:
            raise NotImplementedError(f"--axis-size {axis_size} exceeds the {ctx.device_count} devices")
        return Mesh(np.array(jax.devices()[:axis_size]), (AXIS,))

    return make


def run(*, ctx: ProbeContext, params: CollectiveParams) -> list[ProbeRecord]:
    params.check()
    params, notes = params.for_backend(is_cpu=ctx.is_cpu)
    ctx.notes.extend(notes)
    axis_size = params.axis_size or ctx.device_count
    _require_fits(ctx, params, axis_size)
    ctx.plan(params.points())
    if ctx.process_count > 1 and axis_size != ctx.device_count:
        raise K3PlanError(
            f"--axis-size {axis_size}: with several processes the mesh must span all {ctx.device_count} devices"
        )
    return [_run_mode(ctx=ctx, params=params, mode=mode, axis_size=axis_size) for mode in params.modes]


def _run_mode(*, ctx: ProbeContext, params: CollectiveParams, mode: str, axis_size: int) -> ProbeRecord:
    probe = PROBE_NAMES[params.op]
    n_values = params.chained_n if mode == "chained" else params.unchained_n
    sizes = params.sizes_bytes
    # run() resolved params with for_backend, which fills every field left None
    assert sizes is not None and n_values is not None, "CollectiveParams not resolved by for_backend"
    record_params = {
        "op": params.op,
        "mode": mode,
        "axis_size": axis_size,
        "dtype": params.dtype,
        "sizes_bytes": list(sizes),
        "n_values": list(n_values),
        "warmup": ctx.warmup,
        "repeats": ctx.repeats,
    }
    implementations = {"xla-shard-map": _mesh_factory(ctx, axis_size)}
    try:
        dispatched = dispatch(implementations=implementations, order=list(implementations))
    except NoImplementation as err:
        return ctx.record(
            probe=probe,
            op=params.op,
            mode=mode,
            params=record_params,
            ok=False,
            error=str(err),
            attempts=err.attempts,
            implementation=None,
        )
    mesh = dispatched.value
    points: list[ProbePoint] = []
    checks: list[Verification] = []
    for size in sizes:
        if ctx.deadline.expired():
            break
        point, check = _measure_size(ctx=ctx, params=params, mode=mode, mesh=mesh, size=size, n_values=n_values)
        points.append(point)
        checks.extend(check)
    expectation = expect(
        ctx.hardware,
        unit="s/call",
        formula="scale_up.latency_s + wire_bytes / scale_up.bw_bytes_per_s",
        compute=lambda hw: (
            hw.scale_up.latency_s
            + wire_bytes(op=params.op, message_bytes=sizes[0], axis_size=axis_size) / hw.scale_up.bw_bytes_per_s
        ),
    )
    if expectation.value is not None:
        for pt in points:
            w = wire_bytes(op=params.op, message_bytes=pt.params["bytes"], axis_size=axis_size)
            pt.expected = ctx.hardware.spec.scale_up.latency_s + w / ctx.hardware.spec.scale_up.bw_bytes_per_s
    verified = all(c.ok for c in checks) if checks else None
    notes = [] if verified is not False else [f"VERIFICATION FAILED: {c.detail}" for c in checks if not c.ok]
    return ctx.record(
        probe=probe,
        op=params.op,
        mode=mode,
        params=record_params,
        dispatched=dispatched,
        points=points,
        baseline=BASELINE,
        verification=checks,
        verified=verified,
        expectation=expectation,
        notes=notes,
    )


def _measure_size(
    *, ctx: ProbeContext, params: CollectiveParams, mode: str, mesh: Any, size: int, n_values: tuple[int, ...]
) -> tuple[ProbePoint, list[Verification]]:
    import numpy as np

    axis_size = mesh.shape[AXIS]
    itemsize = np.dtype(params.dtype).itemsize
    elems = max(-(-size // itemsize), 1)
    elems = -(-elems // axis_size) * axis_size if params.op == "all-to-all" else elems
    progs = programs(op=params.op, mesh=mesh, elems=elems, dtype=params.dtype, chained=mode == "chained")
    samples: dict[str, list[float]] = {}
    checks: list[Verification] = [
        _check_numerics(progs=progs, op=params.op, axis_size=axis_size, label=f"{elems * itemsize} B")
    ]
    measured: list[int] = []
    for n in n_values:
        if ctx.deadline.expired():
            break
        ctx.progress(f"{PROBE_NAMES[params.op]} {mode} {elems * itemsize} B: n={n}")
        x = progs.make_input(n)
        compiled = progs.build(n).lower(x).compile()
        if ctx.deadline.expired():
            break
        baseline = progs.build_baseline(n).lower(x).compile()
        if n == n_values[-1] or n == n_values[0]:
            check = verify_collective(
                compiled.as_text(), expected_op=params.op, expected_calls=None if mode == "chained" else n
            )
            check.detail = f"{elems * itemsize} B, n={n}: {check.detail}"
            checks.append(check)
        samples[f"n={n}"] = sample_s(compiled, x, warmup=ctx.warmup, repeats=ctx.repeats, deadline=ctx.deadline)
        samples[f"baseline n={n}"] = sample_s(
            baseline, x, warmup=ctx.warmup, repeats=ctx.repeats, deadline=ctx.deadline
        )
        measured.append(n)
    point = ProbePoint(
        params={
            "bytes": elems * itemsize,
            "requested_bytes": size,
            "elems_per_device": elems,
            "wire_bytes_per_device": wire_bytes(op=params.op, message_bytes=elems * itemsize, axis_size=axis_size),
            "n_measured": measured,
        },
        samples_s=samples,
        unit="s/call",
    )
    if len(measured) < 2:
        point.notes.append("cut short before two N values: no per-call figure")
        return point, checks
    lo, hi = measured[-2], measured[-1]
    per_call = marginal_s(samples[f"n={lo}"], samples[f"n={hi}"], n_lo=lo, n_hi=hi)
    base = marginal_s(samples[f"baseline n={lo}"], samples[f"baseline n={hi}"], n_lo=lo, n_hi=hi)
    point.stats = stats(per_call)
    point.baseline_s = stats(base).p50
    net = point.stats.p50 - max(point.baseline_s, 0.0)
    if point.baseline_s < 0:
        point.notes.append("the baseline's marginal cost came out negative (noise): nothing subtracted")
    if net < 0:
        point.notes.append(
            f"baseline ({point.baseline_s:.3g} s) exceeds the collective's marginal cost: noise; clamped to 0"
        )
    point.value = max(net, 0.0)
    point.notes.append(f"per call = marginal cost between n={lo} and n={hi}, minus the baseline's")
    return point, checks


def _check_numerics(*, progs: Any, op: str, axis_size: int, label: str) -> Verification:
    """One call against numpy, shard by shard on this process's devices (placement check too)."""
    import numpy as np

    out = progs.build(1)(progs.make_input(1))
    expected = expected_once(op=op, full=progs.host_input(1), axis_size=axis_size)
    worst = 0.0
    for shard in out.addressable_shards:
        got = np.asarray(shard.data, dtype=np.float64)
        worst = max(worst, float(np.max(np.abs(got - expected[shard.index]))) if got.size else 0.0)
    tol = 1e-2 * max(1.0, float(np.max(np.abs(expected))))
    return Verification(
        check="numerics",
        ok=worst <= tol,
        expected_op=op,
        detail=f"{label}: one call vs numpy, max abs error {worst:.3g} (tolerance {tol:.3g}) "
        f"on {len(out.addressable_shards)} local shards",
    )
