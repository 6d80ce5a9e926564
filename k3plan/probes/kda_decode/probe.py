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
from k3plan.probes.timing import sample_s, stats

ATOL = RTOL = 1e-4  # fp32 throughout; the kernel and the reference do the same ops in the same order


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
    reference = jax.jit(lambda s, q, k, v, g, b: base.step(s, q, k, v, g, b, scale=scale)).lower(*args).compile()
    kw = dict(args=args, scale=scale, heads_per_block=params.heads_per_block, backend=ctx.backend)
    impls = {
        "pallas": lambda: pallas.build(interpret=False, **kw),
        "pallas-interpret": lambda: pallas.build(interpret=True, **kw),
        "reference": lambda: reference,
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
    checks = [_compare(d.name, d.value, reference, args)]
    if d.name == "pallas":
        found = kernel_in_hlo(d.value.as_text())
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
    timed = [(d.name, d.value)] + ([("reference", reference)] if d.name != "reference" else [])
    for name, fn in timed:  # the reference once, when it is what ran (it was skipped twice: no point)
        if ctx.deadline.expired():
            continue
        ctx.progress(f"kda-decode: timing {name}")
        samples = sample_s(fn, *args, warmup=ctx.warmup, repeats=ctx.repeats, deadline=ctx.deadline)
        st = stats(samples)
        points.append(
            ProbePoint(
                params={"path": name, "state_bytes_moved": state_bytes},
                samples_s={"op": samples},
                stats=st,
                value=st.p50,
                unit="s",
                expected=expectation.value,
                notes=[f"achieved {state_bytes / st.p50 / 1e9:.3g} GB/s of state traffic"],
            )
        )
    interp = d.name == "pallas-interpret"
    return [
        ctx.record(
            probe="kda-decode",
            params=record_params,
            dispatched=d,
            points=points,
            baseline="none: one decode step is timed whole",
            verification=checks,
            verified=all(c.ok for c in checks),
            expectation=expectation,
            extra_label="Pallas interpret mode: correctness only" if interp else None,
        )
    ]


def _compare(name: str, fn, reference, args: tuple) -> Verification:
    import numpy as np

    (s1, o1), (s2, o2) = fn(*args), reference(*args)
    ok = bool(np.allclose(s1, s2, atol=ATOL, rtol=RTOL) and np.allclose(o1, o2, atol=ATOL, rtol=RTOL))
    err = max(
        float(np.max(np.abs(np.asarray(s1) - np.asarray(s2)))), float(np.max(np.abs(np.asarray(o1) - np.asarray(o2))))
    )
    return Verification(
        check="numerics",
        ok=ok,
        detail=f"{name} vs jnp one-step reference: state and output max abs error {err:.3g} "
        f"(atol {ATOL:g}, rtol {RTOL:g})",
    )
