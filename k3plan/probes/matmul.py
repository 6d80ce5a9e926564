"""Matmul probe: achieved dense FLOP/s a device by dtype ([M,K] x [K,N], fp32 accumulation).

Default: square sizes. ``shapes`` (``probe matmul --from-plan``, probes/op_shapes.py): the distinct
(M, N, K) of a planned step's matmul ops, each point naming its ops and keyed for the curve by
(M N K)^(1/3) (``size``), scaled down on CPU by a power of two the record's notes state."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional

from k3plan.errors import require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Stats, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.loop import CPU_TARGET_S, TARGET_S, chained, dispatch_floor_s, time_loop
from k3plan.probes.peak import refuse_above_peak
from k3plan.probes.timing import stats

if TYPE_CHECKING:
    from k3plan.probes.op_shapes import PlanShapes

DTYPES = ("bfloat16", "float32", "float16", "float8_e4m3fn", "float8_e5m2", "int8")
BASELINE = (
    "none needed: N dependent matmuls in one compiled program (probes/loop.py), the marginal cost between "
    "two N; the dispatch floor and the program's fixed cost are params.floor_s"
)


FULL_SIZES = (256, 512, 1024, 2048, 4096, 8192)  # K3's decode matmuls are small, its prefill ones large
CPU_SIZES = (256, 1024)  # a CPU run checks the probe; an 8192^3 f32 matmul takes ~10 s a call there


@dataclass(frozen=True)
class MatmulParams:
    sizes: Optional[tuple[int, ...]] = None  # None: sized to the backend (FULL_SIZES, or CPU_SIZES)
    dtypes: tuple[str, ...] = ("bfloat16", "float32")
    plan: Optional[PlanShapes] = None  # --from-plan: the step's shapes instead of square sizes

    def points(self) -> int:
        """Sweep points without --from-plan (a size in one dtype): what the progress bar counts."""
        return len(self.dtypes) * len(self.sizes or FULL_SIZES)

    def check(self) -> None:
        require(all(d in DTYPES for d in self.dtypes), f"--dtype: expected some of {', '.join(DTYPES)}")
        require(all(n >= 8 for n in self.sizes or FULL_SIZES), "--size: every size must be >= 8")


def _xla_factory(*, m: int, n: int, k: int, dtype: str):
    def make():
        import jax
        import jax.numpy as jnp
        import numpy as np

        acc = jnp.int32 if dtype == "int8" else jnp.float32
        dev = jax.local_devices()[0]
        a = jax.device_put((np.arange(m * k).reshape(m, k) % 7 - 3).astype(dtype), dev)
        b = jax.device_put((np.arange(k * n).reshape(k, n) % 5 - 2).astype(dtype), dev)
        fn = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=acc)).lower(a, b).compile()
        return fn, a, b

    return make


IMPLEMENTATIONS = {"xla-dot": _xla_factory}


def _peak(spec, dtype: str) -> float:
    key = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "int8": "int8"}.get(dtype, "fp8")
    return spec.flops_per_s_per_device(key)


def _require_fits(ctx: ProbeContext, shapes: list, dtypes: tuple[str, ...], *, flag: str) -> None:
    """Bad input before allocating: A [M,K], B [K,N] in the dtype, the [M,N] accumulator (4 B), and the
    host's int64 ramps A and B are drawn from."""
    import numpy as np

    itemsize = max(np.dtype(d).itemsize for d in dtypes)
    for m, n, k, _, _ in shapes:
        ctx.require_fits((m * k + k * n) * (itemsize + 8) + m * n * 4, what=f"{flag} {m}x{n}x{k}")


def run(*, ctx: ProbeContext, params: MatmulParams) -> list[ProbeRecord]:
    params.check()
    sizes = params.sizes
    record_params: dict = {}
    if params.plan is not None:
        from k3plan.probes.op_shapes import cpu_factor, scaled

        factor = cpu_factor(params.plan) if ctx.is_cpu else 1
        plan = scaled(params.plan, factor)
        shapes = [(s.m, s.n, s.k, s.size, list(s.ops)) for s in plan.matmuls]
        sizes = ()
        ctx.notes.append(f"shapes of the step's matmul ops: {plan.source}")
        if factor > 1:
            ctx.notes.append(f"CPU run: every M, N, K divided by {factor} (rounded up) so the sweep runs in seconds")
        record_params = {"from_plan": plan.source, "cpu_scale_factor": factor, "shapes": [s[:3] for s in shapes]}
    else:
        if sizes is None:
            sizes = CPU_SIZES if ctx.is_cpu else FULL_SIZES
            params = replace(params, sizes=sizes)
            if ctx.is_cpu:
                ctx.notes.append(f"CPU run: quick sweep (sizes {','.join(map(str, CPU_SIZES))}); --size for others")
        shapes = [(n, n, n, float(n), []) for n in sizes]
    _require_fits(ctx, shapes, params.dtypes, flag="--size" if params.plan is None else "--from-plan shape")
    ctx.plan(len(params.dtypes) * len(shapes))
    floor = stats(dispatch_floor_s())
    points: list[ProbePoint] = []
    attempts: list[Attempt] = []
    checks: list[Verification] = []
    for dtype in params.dtypes:
        for m, n, k, size, ops in shapes:
            if ctx.deadline.expired():
                break
            ctx.progress(f"matmul {dtype} {m}x{n}x{k}")
            key: dict = {"dtype": dtype, "size": n} if not ops else {"dtype": dtype, "m": m, "n": n, "k": k}
            try:
                d = dispatch(implementations={"xla-dot": _xla_factory(m=m, n=n, k=k, dtype=dtype)}, order=["xla-dot"])
            except NoImplementation as err:
                attempts += [
                    Attempt(implementation=f"{a.implementation}[{dtype}]", ok=False, reason=a.reason)
                    for a in err.attempts
                ]
                points.append(ProbePoint(params=key, notes=[f"{dtype} not runnable here: {err}"]))
                break
            fn, a, b = d.value
            if not checks or (checks[-1].detail or "").split(":")[0] != dtype:
                checks.append(_verify(fn, a, b, dtype))
            acc = jnp_acc(dtype)
            program = chained(lambda x, y, acc=acc: _dot(x, y, acc))
            lt = time_loop(
                program,
                (a, b),
                warmup=ctx.warmup,
                repeats=ctx.repeats,
                deadline=ctx.deadline,
                target_s=CPU_TARGET_S if ctx.is_cpu else TARGET_S,
            )
            st = stats(lt.per_iter_s)
            flops = 2.0 * m * n * k
            if ops:  # the curve's axis is (M N K)^(1/3): ``size``
                key = {**key, "size": size, "ops": ops}
            expected = None
            if ctx.hardware.spec is not None:
                try:
                    expected = _peak(ctx.hardware.spec, dtype)
                except Exception:
                    expected = None
            points.append(
                ProbePoint(
                    params={**key, "flops": flops, **lt.params()},
                    samples_s={"per_iter": lt.per_iter_s, **lt.samples()},
                    stats=st,
                    value=flops / st.p50,
                    unit="flop/s",
                    expected=expected,
                )
            )
    attempts = attempts or [Attempt(implementation="xla-dot", ok=True)]
    expectation = expect(
        ctx.hardware,
        unit="flop/s",
        formula="flops_per_s_per_device(dtype) (first dtype shown)",
        compute=lambda hw: _peak(hw, params.dtypes[0]),
    )
    refused = refuse_above_peak(points, what="matmul")
    ok = (any(pt.value is not None for pt in points) or not points) and refused is None
    return [
        ctx.record(
            probe="matmul",
            params={
                "sizes": list(sizes),
                "dtypes": list(params.dtypes),
                **record_params,
                "warmup": ctx.warmup,
                "repeats": ctx.repeats,
                "dispatch_floor_s": floor.p50,
            },
            implementation="xla-dot",
            attempts=attempts,
            points=points,
            baseline=BASELINE,
            verification=checks,
            verified=all(c.ok for c in checks) if checks else None,
            expectation=expectation,
            ok=ok,
            error=refused or (None if ok else "no dtype could run"),
            notes=[_floor_note(floor)],
        )
    ]


def jnp_acc(dtype: str):
    import jax.numpy as jnp

    return jnp.int32 if dtype == "int8" else jnp.float32


def _dot(x, y, acc):
    import jax.numpy as jnp

    return jnp.dot(x, y, preferred_element_type=acc)


def _floor_note(floor: Stats) -> str:
    return (
        f"dispatch floor (an empty jitted call, dispatch to result on the host): p50 {floor.p50 * 1e6:.0f} us, "
        f"min {floor.min * 1e6:.0f} us over {floor.n} calls; not in the values, which are device time a matmul"
    )


def _verify(fn, a, b, dtype: str) -> Verification:
    import numpy as np

    got = np.asarray(fn(a, b), dtype=np.float64)[:8, :8]
    want = np.asarray(a, dtype=np.float64)[:8] @ np.asarray(b, dtype=np.float64)[:, :8]
    ok = bool(np.allclose(got, want, rtol=2e-2, atol=1e-2 * max(1.0, float(np.abs(want).max()))))
    return Verification(
        check="numerics", ok=ok, detail=f"{dtype}: 8x8 corner vs numpy {'matches' if ok else 'DIFFERS'} (rtol 2e-2)"
    )
