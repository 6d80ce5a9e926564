"""Matmul probe: achieved dense FLOP/s a device by dtype ([M,K] x [K,N], fp32 accumulation)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from k3plan.errors import require
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.timing import sample_s, stats

DTYPES = ("bfloat16", "float32", "float16", "float8_e4m3fn", "float8_e5m2", "int8")
BASELINE = "none: the whole matmul is timed (dispatch overhead is negligible at these sizes)"


FULL_SIZES = (1024, 4096, 8192)
CPU_SIZES = (256, 1024)  # a CPU run checks the probe; an 8192^3 f32 matmul takes ~10 s a call there


@dataclass(frozen=True)
class MatmulParams:
    sizes: Optional[tuple[int, ...]] = None  # None: sized to the backend (FULL_SIZES, or CPU_SIZES)
    dtypes: tuple[str, ...] = ("bfloat16", "float32")

    def check(self) -> None:
        require(all(d in DTYPES for d in self.dtypes), f"--dtype: expected some of {', '.join(DTYPES)}")
        require(all(n >= 8 for n in self.sizes or FULL_SIZES), "--size: every size must be >= 8")


def _xla_factory(*, n: int, dtype: str):
    def make():
        import jax
        import jax.numpy as jnp
        import numpy as np

        acc = jnp.int32 if dtype == "int8" else jnp.float32
        a = jax.device_put((np.arange(n * n).reshape(n, n) % 7 - 3).astype(dtype), jax.local_devices()[0])
        fn = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=acc)).lower(a, a).compile()
        return fn, a

    return make


IMPLEMENTATIONS = {"xla-dot": _xla_factory}


def _peak(spec, dtype: str) -> float:
    key = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "int8": "int8"}.get(dtype, "fp8")
    return spec.flops_per_s_per_device(key)


def run(*, ctx: ProbeContext, params: MatmulParams) -> list[ProbeRecord]:
    params.check()
    sizes = params.sizes
    if sizes is None:
        sizes = CPU_SIZES if ctx.is_cpu else FULL_SIZES
        params = replace(params, sizes=sizes)
        if ctx.is_cpu:
            ctx.notes.append(f"CPU run: quick sweep (sizes {','.join(map(str, CPU_SIZES))}); --size for others")
    ctx.plan(len(params.dtypes) * len(sizes))
    points: list[ProbePoint] = []
    attempts: list[Attempt] = []
    checks: list[Verification] = []
    for dtype in params.dtypes:
        for n in sizes:
            if ctx.deadline.expired():
                break
            ctx.progress(f"matmul {dtype} {n}x{n}x{n}")
            try:
                d = dispatch(implementations={"xla-dot": _xla_factory(n=n, dtype=dtype)}, order=["xla-dot"])
            except NoImplementation as err:
                attempts += [
                    Attempt(implementation=f"{a.implementation}[{dtype}]", ok=False, reason=a.reason)
                    for a in err.attempts
                ]
                points.append(
                    ProbePoint(params={"dtype": dtype, "size": n}, notes=[f"{dtype} not runnable here: {err}"])
                )
                break
            fn, a = d.value
            if not checks or (checks[-1].detail or "").split(":")[0] != dtype:
                checks.append(_verify(fn, a, dtype))
            samples = sample_s(fn, a, a, warmup=ctx.warmup, repeats=ctx.repeats, deadline=ctx.deadline)
            st = stats(samples)
            flops = 2.0 * n**3
            expected = None
            if ctx.hardware.spec is not None:
                try:
                    expected = _peak(ctx.hardware.spec, dtype)
                except Exception:
                    expected = None
            points.append(
                ProbePoint(
                    params={"dtype": dtype, "size": n, "flops": flops},
                    samples_s={"op": samples},
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
    ok = any(pt.value is not None for pt in points) or not points
    return [
        ctx.record(
            probe="matmul",
            params={
                "sizes": list(sizes),
                "dtypes": list(params.dtypes),
                "warmup": ctx.warmup,
                "repeats": ctx.repeats,
            },
            implementation="xla-dot",
            attempts=attempts,
            points=points,
            baseline=BASELINE,
            verification=checks,
            verified=all(c.ok for c in checks) if checks else None,
            expectation=expectation,
            ok=ok,
            error=None if ok else "no dtype could run",
        )
    ]


def _verify(fn, a, dtype: str) -> Verification:
    import numpy as np

    got = np.asarray(fn(a, a), dtype=np.float64)[:8, :8]
    x = np.asarray(a, dtype=np.float64)
    want = x[:8] @ x[:, :8]
    ok = bool(np.allclose(got, want, rtol=2e-2, atol=1e-2 * max(1.0, float(np.abs(want).max()))))
    return Verification(
        check="numerics", ok=ok, detail=f"{dtype}: 8x8 corner vs numpy {'matches' if ok else 'DIFFERS'} (rtol 2e-2)"
    )
