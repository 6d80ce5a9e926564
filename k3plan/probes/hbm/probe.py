"""Run the HBM probe: achieved bytes/s a device for copy (read + write) or reduce (read)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Optional

from k3plan.errors import require
from k3plan.evidence.probe_record import ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.hbm import pallas, xla
from k3plan.probes.loop import CPU_TARGET_S, TARGET_S, chained, time_loop
from k3plan.probes.peak import refuse_above_peak
from k3plan.probes.timing import stats

COLS = 1024
BASELINE = (
    "none needed: N dependent ops in one compiled program (probes/loop.py), the marginal cost between two N; "
    "the dispatch floor and the program's fixed cost are each point's params.floor_s"
)


FULL_SIZES = (4 * 2**20, 16 * 2**20, 64 * 2**20, 256 * 2**20, 1024 * 2**20)  # K3's ops move MiBs to GiBs
CPU_SIZES = (16 * 2**20, 64 * 2**20)


@dataclass(frozen=True)
class HbmParams:
    sizes_bytes: Optional[tuple[int, ...]] = None  # None: sized to the backend (FULL_SIZES, or CPU_SIZES)
    ops: tuple[str, ...] = ("copy", "reduce")
    impl: str = "xla"
    dtype: str = "float32"
    block_rows: int = 512

    def points(self) -> int:
        """Sweep points (a size for one op): what the progress bar counts."""
        return len(self.ops) * len(self.sizes_bytes or FULL_SIZES)

    def check(self) -> None:
        require(self.impl in ("xla", "pallas"), f"--impl {self.impl!r}: expected xla or pallas")
        require(set(self.ops) <= {"copy", "reduce"}, "--op: expected copy, reduce or both")
        require(
            self.block_rows >= 8 and self.block_rows % 8 == 0,
            f"--block-rows {self.block_rows}: expected a multiple of 8",
        )


def _order(impl: str, op: str) -> list[str]:
    if impl == "pallas":
        return ["pallas", "pallas-interpret", "xla"] if op == "copy" else ["pallas-reduce", "xla"]
    return ["xla"]


def run(*, ctx: ProbeContext, params: HbmParams) -> list[ProbeRecord]:
    params.check()
    sizes = params.sizes_bytes
    if sizes is None:
        sizes = CPU_SIZES if ctx.is_cpu else FULL_SIZES
        params = replace(params, sizes_bytes=sizes)
        if ctx.is_cpu:
            ctx.notes.append("CPU run: quick sweep (16 and 64 MiB); --size for others")
    from k3plan.units import fmt_gib

    for size in sizes:  # the array and the copy's output (or the rotated buffers), on one device
        padded = _padded_bytes(size, params)
        ctx.require_fits(padded * (2 + (0 if ctx.is_cpu else rotation(padded))), what=f"--size {fmt_gib(size)}")
    ctx.plan(params.points())
    return [_run_op(ctx=ctx, params=params, sizes=sizes, op=op) for op in params.ops]


def _rows(*, size: int, dtype: str, block_rows: int) -> int:
    """Rows of COLS elements holding ``size`` bytes, padded to whole Pallas blocks (or to 8 rows)."""
    import numpy as np

    rows = max(-(-size // (COLS * np.dtype(dtype).itemsize)), 1)
    return -(-rows // block_rows) * block_rows if rows > block_rows else max(8, -(-rows // 8) * 8)


def _padded_bytes(size: int, params: HbmParams) -> int:
    import numpy as np

    return _rows(size=size, dtype=params.dtype, block_rows=params.block_rows) * COLS * np.dtype(params.dtype).itemsize


ROTATE_BYTES = 512 * 2**20  # above any TPU's on-chip memory (v5e VMEM 128 MiB): no buffer stays on chip


def rotation(size: int) -> int:
    """Buffers a loop of ``size``-byte transfers rotates through so that their sum is >= ROTATE_BYTES: XLA's
    memory-space assignment keeps a small buffer that one loop touches again and again in VMEM (a 64 MiB
    copy then reads 1.3 TB/s on a v5e, above its 819 GB/s), which a step's weights never are."""
    return max(1, -(-ROTATE_BYTES // max(size, 1)))


def _stacked(x, k: int):
    import jax.numpy as jnp

    return x[None] if k == 1 else jnp.broadcast_to(x, (k, *x.shape)) + jnp.zeros((k, 1, 1), x.dtype)


def rotating(op: str, k: int):
    """jit(program(n, xs)): iteration i reads buffer i mod k of the stack xs [k, rows, cols]; copy writes it back
    in place (read + write in HBM), reduce adds its sum to the carry (read)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def program(n, xs):
        def body(i, carry):
            xs, acc = carry
            j = i % k
            x = lax.dynamic_index_in_dim(xs, j, 0, keepdims=False)
            if op == "copy":
                return lax.dynamic_update_index_in_dim(xs, x * 1.0001, j, 0), acc
            # the carry in the summand: with k = 1 (i mod 1 = 0) the sum is otherwise loop-invariant, hoisted
            return xs, acc + jnp.sum(x + acc * 1e-30, dtype=jnp.float32)

        return lax.fori_loop(0, n, body, (xs, jnp.float32(0)))

    return jax.jit(program)  # not donated: every timed call reads the same stack (its copy-in cancels in the marginal)


def _array(*, size: int, dtype: str, block_rows: int):
    import jax
    import numpy as np

    rows = _rows(size=size, dtype=dtype, block_rows=block_rows)
    x = jax.device_put(np.ones((rows, COLS), dtype=dtype), jax.local_devices()[0])
    return x, min(block_rows, rows)


def _run_op(*, ctx: ProbeContext, params: HbmParams, sizes: tuple[int, ...], op: str) -> ProbeRecord:
    """One op's sweep over `sizes` (params.sizes_bytes resolved to the backend's default by run)."""
    record_params = {
        "op": op,
        "impl": params.impl,
        "dtype": params.dtype,
        "sizes_bytes": list(sizes),
        "block_rows": params.block_rows,
        "warmup": ctx.warmup,
        "repeats": ctx.repeats,
    }
    points, dispatched = [], None
    checks: list[Verification] = []
    for size in sizes:
        if ctx.deadline.expired():
            break
        ctx.progress(f"hbm {op} {params.impl} {size} B")
        x, br = _array(size=size, dtype=params.dtype, block_rows=params.block_rows)
        factories = _factories(ctx=ctx, op=op, block_rows=br)
        try:
            d = dispatch(
                implementations={k: partial(f, x) for k, f in factories.items()},
                order=_order(params.impl, op),
            )
        except NoImplementation as err:
            return ctx.record(probe="hbm", op=op, params=record_params, ok=False, error=str(err), attempts=err.attempts)
        dispatched = dispatched or d
        k = 1 if ctx.is_cpu or d.name != "xla" else rotation(int(x.nbytes))
        stack = _stacked(x, k)
        lt = time_loop(
            rotating(op, k) if d.name == "xla" else chained(_loop_op(ctx=ctx, name=d.name, op=op, block_rows=br)),
            (stack,) if d.name == "xla" else (x,),
            warmup=ctx.warmup,
            repeats=ctx.repeats,
            deadline=ctx.deadline,
            target_s=CPU_TARGET_S if ctx.is_cpu else TARGET_S,
        )
        moved = x.nbytes * (2 if op == "copy" else 1)
        st = stats(lt.per_iter_s)
        points.append(
            ProbePoint(
                params={
                    "bytes": int(x.nbytes),
                    "bytes_moved": int(moved),
                    "implementation": d.name,
                    "buffers_rotated": k,
                    **lt.params(),
                },
                samples_s={"per_iter": lt.per_iter_s, **lt.samples()},
                stats=st,
                value=moved / st.p50 if st.p50 > 0 else None,  # a marginal at or below 0: noise, not a rate
                unit="bytes/s",
            )
        )
        del stack
        if len(checks) == 0:
            checks.append(_verify(d.name, d.value, x, op))
    expectation = expect(
        ctx.hardware,
        unit="bytes/s",
        formula="hbm_bw_bytes_per_s_per_device",
        compute=lambda hw: hw.hbm_bw_bytes_per_s_per_device,
    )
    for pt in points:
        pt.expected = expectation.value
    refused = refuse_above_peak(points, what=f"hbm {op}")
    interp = dispatched is not None and dispatched.name == "pallas-interpret"
    return ctx.record(
        probe="hbm",
        op=op,
        params=record_params,
        dispatched=dispatched,
        points=points,
        baseline=BASELINE,
        verification=checks,
        verified=all(c.ok for c in checks) if checks else None,
        expectation=expectation,
        ok=refused is None,
        error=refused,
        extra_label="Pallas interpret mode: no kernel runs, timing meaningless" if interp else None,
    )


def _loop_op(*, ctx: ProbeContext, name: str, op: str, block_rows: int) -> Callable[[Any], Any]:
    """The traced op the dispatcher chose, for probes/loop.py's program (not a compiled callable)."""
    import jax.numpy as jnp

    if name in ("pallas", "pallas-interpret"):
        return lambda a: pallas.stream_copy(a, block_rows=block_rows, interpret=name == "pallas-interpret")
    return (lambda a: a * 1.0001) if op == "copy" else (lambda a: jnp.sum(a, dtype=jnp.float32))


def _factories(*, ctx: ProbeContext, op: str, block_rows: int) -> dict[str, Callable[[Any], Any]]:
    def pallas_reduce(x):
        raise NotImplementedError("the Pallas stream probe implements copy only")

    return {
        "pallas": lambda x: pallas.build(x=x, block_rows=block_rows, interpret=False, backend=ctx.backend),
        "pallas-interpret": lambda x: pallas.build(x=x, block_rows=block_rows, interpret=True, backend=ctx.backend),
        "pallas-reduce": pallas_reduce,
        "xla": lambda x: xla.build(op=op, x=x),
    }


def _verify(name: str, compiled, x, op: str) -> Verification:
    import numpy as np

    out = np.asarray(compiled(x))
    want = np.asarray(x, dtype=np.float64) * 1.0001 if op == "copy" else np.float64(x.size)
    ok = bool(np.allclose(np.asarray(out, dtype=np.float64), want, rtol=1e-2))
    detail = f"{name}: output matches numpy (rtol 1e-2)" if ok else f"{name}: output differs from numpy"
    if name == "pallas":
        found = pallas.kernel_in_hlo(compiled.as_text())
        ok, detail = (
            ok and found,
            detail
            + (
                "; Pallas kernel custom call found in HLO"
                if found
                else "; NO Pallas custom call in the HLO: the kernel did not run"
            ),
        )
    elif name == "pallas-interpret":
        detail += "; interpret mode: the kernel body runs as XLA ops (correctness only)"
    return Verification(check="output", ok=ok, detail=detail)
