"""Run the KDA decode probe: the Pallas step (native, else interpret, else the reference, all
visible) timed against the jnp one-step reference and checked against it numerically."""

from __future__ import annotations

from dataclasses import dataclass

from k3plan.errors import require
from k3plan.evidence.probe_record import ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.hbm.pallas import kernel_in_hlo
from k3plan.probes.kda import base
from k3plan.probes.kda_decode import pallas
from k3plan.probes.loop import CPU_TARGET_S, TARGET_S, chained, time_loop
from k3plan.probes.peak import refuse_below_bound
from k3plan.probes.timing import stats

F32_EPS = 2.0**-23
BASELINE = (
    "none needed: N dependent decode steps (the state threaded) in one compiled program (probes/loop.py), "
    "the marginal cost between two N; the dispatch floor and fixed cost are each point's params.floor_s"
)


def tolerance(head_dim: int) -> float:
    """fp32 mat-vecs of length Dk: rounding grows ~Dk x eps; x4 headroom. Relative to the reference's largest
    magnitude (atol) and to each element (rtol). Dk 128: 6.1e-5."""
    return 4 * head_dim * F32_EPS


@dataclass(frozen=True)
class KdaDecodeParams:
    heads: int = 96
    head_dim: int = 128
    heads_per_block: int = 8
    impl: str = "pallas"

    def check(self) -> None:
        require(self.impl in ("pallas", "reference"), f"--impl {self.impl!r}: expected pallas or reference")
        require(self.heads >= 1 and self.head_dim >= 1, "--heads and --head-dim must be >= 1")
        require(
            self.heads_per_block >= 1 and self.heads % self.heads_per_block == 0,
            f"--heads-per-block {self.heads_per_block}: must divide --heads {self.heads}",
        )


def _inputs(params: KdaDecodeParams):
    import jax
    import numpy as np

    q, k, v, g, beta = (a[0, 0] for a in base.inputs(batch=1, seq_len=1, heads=params.heads, head_dim=params.head_dim))
    rng = np.random.default_rng(1)
    state = (rng.standard_normal((params.heads, params.head_dim, params.head_dim)) * 0.1).astype("float32")
    return tuple(jax.device_put(a, jax.local_devices()[0]) for a in (state, q, k, v, g, beta))


def run(*, ctx: ProbeContext, params: KdaDecodeParams) -> list[ProbeRecord]:
    import jax

    params.check()
    state = 4 * params.heads * params.head_dim**2  # fp32 state: in, out, and the reference's out
    ctx.require_fits(3 * state, what=f"--heads {params.heads} x --head-dim {params.head_dim}")
    # points: the compile, then the implementation that runs and the reference beside it (planned again
    # below when the dispatch lands on the reference itself: one timing fewer)
    ctx.plan(3 if params.impl == "pallas" else 2)
    scale = params.head_dim**-0.5
    args = _inputs(params)
    ref_fn = lambda s, q, k, v, g, b: base.step(s, q, k, v, g, b, scale=scale)  # noqa: E731
    reference = jax.jit(ref_fn).lower(*args).compile()  # the jnp step as a jnp implementation runs it: timed
    with jax.default_matmul_precision("highest"):  # what every path is checked against: full fp32
        exact = jax.jit(ref_fn).lower(*args).compile()
    kw = dict(args=args, scale=scale, heads_per_block=params.heads_per_block, backend=ctx.backend)
    impls = {
        "pallas": lambda: pallas.build(interpret=False, **kw),
        "pallas-interpret": lambda: pallas.build(interpret=True, **kw),
        "reference": lambda: (reference, ref_fn),
    }
    order = ["pallas", "pallas-interpret", "reference"] if params.impl == "pallas" else ["reference"]
    record_params = {
        "impl": params.impl,
        "heads": params.heads,
        "head_dim": params.head_dim,
        "heads_per_block": params.heads_per_block,
        "state_dtype": "float32",
        "warmup": ctx.warmup,
        "repeats": ctx.repeats,
    }
    ctx.progress("kda-decode: compiling")
    try:
        d = dispatch(implementations=impls, order=order)
    except NoImplementation as err:
        return [ctx.record(probe="kda-decode", params=record_params, ok=False, error=str(err), attempts=err.attempts)]
    if d.name == "reference" and params.impl == "pallas":
        ctx.plan(2)
    compiled, traced = d.value
    tol = tolerance(params.head_dim)
    checks = [_compare(d.name, compiled, exact, args, tol=tol)]
    if d.name != "reference":
        checks.append(_compare("reference (default precision)", reference, exact, args, tol=tol, informative=True))
    if d.name == "pallas":
        found = kernel_in_hlo(compiled.as_text())
        checks.append(
            Verification(
                check="pallas-kernel",
                ok=found,
                detail="Pallas custom call in the HLO"
                if found
                else "NO Pallas custom call in the HLO: the kernel did not run",
            )
        )
    state_bytes = 2 * 4 * params.heads * params.head_dim**2  # fp32 state read + written
    expectation = expect(
        ctx.hardware,
        unit="s",
        formula=f"{state_bytes} B state read+write / hbm_bw_bytes_per_s_per_device",
        compute=lambda hw: state_bytes / hw.hbm_bw_bytes_per_s_per_device,
    )
    points = []
    timed = [(d.name, traced)] + ([("reference", ref_fn)] if d.name != "reference" else [])
    for name, fn in timed:  # the reference once, when it is what ran (it was skipped twice: no point)
        if ctx.deadline.expired():
            continue
        ctx.progress(f"kda-decode: timing {name}")
        program = chained(fn, feed=lambda a, out: (out[0], *a[1:]))  # the state threaded step to step
        lt = time_loop(
            program,
            args,
            warmup=ctx.warmup,
            repeats=ctx.repeats,
            deadline=ctx.deadline,
            target_s=CPU_TARGET_S if ctx.is_cpu else TARGET_S,
        )
        st = stats(lt.per_iter_s)
        points.append(
            ProbePoint(
                params={"path": name, "state_bytes_moved": state_bytes, **lt.params()},
                samples_s={"per_iter": lt.per_iter_s, **lt.samples()},
                stats=st,
                value=st.p50,
                unit="s",
                expected=expectation.value,
                notes=[f"achieved {state_bytes / st.p50 / 1e9:.3g} GB/s of state traffic"],
            )
        )
    # a 6 MiB state threaded through the loop can stay in VMEM: a point faster than the HBM bound is refused
    # (the record stays usable while any point is within it; the curves refuse efficiency > 1 as well)
    refused = refuse_below_bound(points, what="kda-decode")
    all_refused = bool(points) and all(p.value is None for p in points)
    interp = d.name == "pallas-interpret"
    return [
        ctx.record(
            probe="kda-decode",
            params=record_params,
            dispatched=d,
            points=points,
            baseline=BASELINE,
            verification=checks,
            verified=all(c.ok for c in checks if c.check != "numerics-info"),
            notes=_speed_notes(points) + refused,
            ok=not all_refused,
            error=refused[0] if all_refused else None,
            expectation=expectation,
            extra_label="Pallas interpret mode: correctness only" if interp else None,
        )
    ]


def _speed_notes(points: list[ProbePoint]) -> list[str]:
    """Whether the kernel is at least as fast as the jnp reference, said in the record."""
    by: dict[str, float] = {}
    for p in points:
        v = p.value if p.value is not None else p.params.get("refused_value")
        if v:
            by[str(p.params["path"])] = float(v)
    kernel = next((k for k in by if k != "reference"), None)
    if kernel is None or "reference" not in by:
        return []
    ratio = by["reference"] / by[kernel]
    verdict = "at least as fast as" if ratio >= 1 else "SLOWER than"
    why = (
        ""
        if ratio >= 1
        else "; why: not established -- both move the same fp32 state (state_bytes_moved); the kernel's per-head "
        "mat-vecs are one-row MXU passes, and --heads-per-block is untuned"
    )
    return [
        f"{kernel} is {verdict} the jnp reference ({by[kernel] * 1e6:.1f} us vs {by['reference'] * 1e6:.1f} us){why}"
    ]


def _compare(name: str, fn, exact, args: tuple, *, tol: float, informative: bool = False) -> Verification:
    """``fn``'s state and output against the reference run at HIGHEST precision (fp32 throughout)."""
    import numpy as np

    (s1, o1), (s2, o2) = fn(*args), exact(*args)
    pairs = [
        (np.asarray(s1, np.float64), np.asarray(s2, np.float64)),
        (np.asarray(o1, np.float64), np.asarray(o2, np.float64)),
    ]
    ok = all(np.allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max()))) for a, b in pairs)
    err = max(float(np.max(np.abs(a - b))) for a, b in pairs)
    scale = max(float(np.abs(b).max()) for _, b in pairs)
    return Verification(
        check="numerics-info" if informative else "numerics",
        ok=bool(ok),
        detail=f"{name} vs the jnp step at HIGHEST precision (fp32): max abs error {err:.3g} of values up to "
        f"{scale:.3g} (rtol {tol:.2g}, atol {tol:.2g} x max(1, |ref|max): fp32, Dk-long mat-vecs)"
        + ("; informative only" if informative else ""),
    )
