"""Run the KDA probe: per-token cost vs sequence length for the chunked and the recurrent path,
each checked numerically against the other reference path."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from k3plan.errors import require
from k3plan.evidence.probe_record import ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.kda import base, tokamax_impl
from k3plan.probes.timing import sample_s, stats
from k3plan.step.kda import kda_flops_per_token

ORDERS = {
    ("chunked", "auto"): ["tokamax-mosaic", "tokamax-xla", "reference-chunked"],
    ("chunked", "tokamax"): ["tokamax-mosaic", "tokamax-xla"],
    ("chunked", "reference"): ["reference-chunked"],
    # k3plan validate's own chunked form (validate/layers.py gdr_chunked): the graph `probe step` times, whose op
    # list prices its KDA prefill on this implementation's own curve (speed.curves VALIDATE_KDA, issue 50)
    ("chunked", "validate"): ["validate-chunked"],
    ("recurrent", "auto"): ["reference-recurrent"],
    ("recurrent", "tokamax"): ["reference-recurrent"],
    ("recurrent", "reference"): ["reference-recurrent"],
    ("recurrent", "validate"): ["reference-recurrent"],
}


FULL_SEQ_LENS = (1024, 4096, 16384)
FULL_HEADS = 96  # K3: 96 heads x 128 (k3-facts §1)
# The CPU backend's quick sweep: a CPU run checks the probe end to end (both paths, numerics, records)
# and measures nothing a planner uses. The reference chunked path at 96 heads and T=1024 took 77 s on
# 2 CPU cores (issue 12); at 4 heads the reference chunked path costs ~1-2 ms a token there (T=1024:
# 1.8 s a call at load 6, 36 s for the run), so the quick sweep stops at 512 tokens (2 and 8 chunks).
CPU_SEQ_LENS = (128, 512)
CPU_HEADS = 4
# Bytes an element of [batch, T, heads, head_dim] a point holds at its peak: the host's float64
# draws of q, k, v, g (4 x 8 B) and their float32 copies (4 x 4 B), on the device the four inputs
# and the output (5 x 4 B) -- chunked intermediates come on top; an allocation failure is caught.
BYTES_AN_ELEMENT = 4 * 8 + 4 * 4 + 5 * 4


@dataclass(frozen=True)
class KdaParams:
    """Sweep settings; seq_lens and heads left None are sized to the backend by ``for_backend``."""

    seq_lens: Optional[tuple[int, ...]] = None
    batch: int = 1
    heads: Optional[int] = None
    head_dim: int = 128
    chunk: int = 64
    paths: tuple[str, ...] = ("chunked", "recurrent")
    impl: str = "auto"
    quick_sweep: bool = False  # set by for_backend: the CPU default, not K3's shapes

    def for_backend(self, *, is_cpu: bool) -> tuple["KdaParams", list[str]]:
        """Fill the fields left None: K3's shapes on TPU/GPU, the quick sweep on CPU (with a note)."""
        seq_lens = self.seq_lens or (CPU_SEQ_LENS if is_cpu else FULL_SEQ_LENS)
        heads = self.heads or (CPU_HEADS if is_cpu else FULL_HEADS)
        notes = []
        quick = is_cpu and (self.seq_lens is None or self.heads is None)
        if quick:
            notes.append(
                f"CPU run: quick sweep ({heads} heads, T {','.join(map(str, seq_lens))}; K3 has {FULL_HEADS} heads "
                f"and the full sweep T {','.join(map(str, FULL_SEQ_LENS))}); the full sweep runs on TPU/GPU or with "
                "--heads/--seq-lens"
            )
        return replace(self, seq_lens=seq_lens, heads=heads, quick_sweep=quick), notes

    def points(self) -> int:
        """Sweep points (a length on one path): what the progress bar counts."""
        return len(self.paths) * len(self.seq_lens or FULL_SEQ_LENS)

    def check(self) -> None:
        require(
            self.impl in ("auto", "tokamax", "reference", "validate"),
            f"--impl {self.impl!r}: expected auto, tokamax, reference or validate",
        )
        require(set(self.paths) <= {"chunked", "recurrent"}, "--path: expected chunked, recurrent or both")
        require(
            min(self.batch, self.heads or 1, self.head_dim, self.chunk) >= 1,
            "--batch, --heads, --head-dim, --chunk must be >= 1",
        )
        require(
            all(t >= self.chunk and t % self.chunk == 0 for t in self.seq_lens or FULL_SEQ_LENS),
            f"--seq-lens: every length must be a multiple of --chunk {self.chunk}",
        )


def _implementations(*, args: tuple, scale: float, chunk: int) -> dict:
    import jax

    def ref(fn, **kw):
        return lambda: jax.jit(lambda *a: fn(*a, scale=scale, **kw)[0]).lower(*args).compile()

    def validate_chunked():
        import jax.numpy as jnp

        from k3plan.validate.layers import gdr_chunked

        def fn(q, k, v, g, beta):
            b, _, h, d = q.shape
            return gdr_chunked(q * scale, k, v, g, beta, jnp.zeros((b, h, d, v.shape[-1]), jnp.float32), chunk=chunk)[0]

        return jax.jit(fn).lower(*args).compile()

    return {
        "validate-chunked": validate_chunked,
        "tokamax-mosaic": lambda: tokamax_impl.build(implementation="mosaic", args=args, scale=scale),
        "tokamax-xla": lambda: tokamax_impl.build(implementation="xla", args=args, scale=scale),
        "reference-chunked": ref(base.chunked, chunk=chunk),
        "reference-recurrent": ref(base.recurrent),
    }


def run(*, ctx: ProbeContext, params: KdaParams) -> list[ProbeRecord]:
    params.check()
    params, notes = params.for_backend(is_cpu=ctx.is_cpu)
    ctx.notes.extend(notes)
    assert params.seq_lens is not None and params.heads is not None, "KdaParams not resolved by for_backend"
    t = max(params.seq_lens)
    ctx.require_fits(
        BYTES_AN_ELEMENT * params.batch * t * params.heads * params.head_dim,
        what=f"--seq-lens {t} (--batch {params.batch}, --heads {params.heads}, --head-dim {params.head_dim})",
    )
    ctx.plan(params.points())
    return [_run_path(ctx=ctx, params=params, path=p) for p in params.paths]


def _run_path(*, ctx: ProbeContext, params: KdaParams, path: str) -> ProbeRecord:
    """One path's sweep (params resolved to the backend by run)."""
    import jax

    assert params.seq_lens is not None and params.heads is not None, "KdaParams not resolved by for_backend"
    scale = params.head_dim**-0.5
    record_params = {
        "path": path,
        "impl": params.impl,
        "batch": params.batch,
        "heads": params.heads,
        "head_dim": params.head_dim,
        "chunk": params.chunk,
        "seq_lens": list(params.seq_lens),
        "cpu_quick_sweep": params.quick_sweep,
        "warmup": ctx.warmup,
        "repeats": ctx.repeats,
    }
    points, dispatched = [], None
    checks: list[Verification] = []
    for t in params.seq_lens:
        if ctx.deadline.expired():
            break
        ctx.progress(f"kda {path} T={t}")
        args = tuple(
            jax.device_put(a, jax.local_devices()[0])
            for a in base.inputs(batch=params.batch, seq_len=t, heads=params.heads, head_dim=params.head_dim)
        )
        impls = _implementations(args=args, scale=scale, chunk=params.chunk)
        try:
            d = dispatch(implementations=impls, order=ORDERS[(path, params.impl)])
        except NoImplementation as err:
            return ctx.record(
                probe="kda", mode=path, params=record_params, ok=False, error=str(err), attempts=err.attempts
            )
        dispatched = dispatched or d
        if not checks:
            other = "reference-recurrent" if d.name != "reference-recurrent" else "reference-chunked"
            checks.append(_compare(d.name, d.value, other, impls[other](), args))
        samples = sample_s(d.value, *args, warmup=ctx.warmup, repeats=ctx.repeats, deadline=ctx.deadline)
        st = stats(samples)
        tokens = params.batch * t
        points.append(
            ProbePoint(
                params={"seq_len": t, "tokens": tokens, "implementation": d.name},
                samples_s={"op": samples},
                stats=st,
                value=st.p50 / tokens,
                unit="s/token",
            )
        )
    fpt = kda_flops_per_token(path=path, heads=params.heads, dk=params.head_dim, dv=params.head_dim, chunk=params.chunk)
    expectation = expect(
        ctx.hardware,
        unit="s/token",
        formula=f"{fpt:.4g} FLOP a token / flops_per_s_per_device(bf16)",
        compute=lambda hw: fpt / hw.flops_per_s_per_device("bf16"),
    )
    for pt in points:
        pt.expected = expectation.value
    return ctx.record(
        probe="kda",
        mode=path,
        params=record_params,
        dispatched=dispatched,
        points=points,
        baseline="none: the whole KDA call is timed",
        verification=checks,
        verified=all(c.ok for c in checks) if checks else None,
        expectation=expectation,
    )


def _compare(name: str, fn, other_name: str, other, args: tuple) -> Verification:
    import numpy as np

    got, want = np.asarray(fn(*args), np.float64), np.asarray(other(*args), np.float64)
    err = float(np.max(np.abs(got - want)))
    tol = 1e-3 * max(1.0, float(np.max(np.abs(want))))
    return Verification(
        check="numerics", ok=err <= tol, detail=f"{name} vs {other_name}: max abs error {err:.3g} (tolerance {tol:.3g})"
    )
