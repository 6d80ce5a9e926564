"""ragged_dot probe: jax.lax.ragged_dot grouped matmul at K3 expert shapes (896 experts, top-16,
latent 3584 -> 3072) with real routing sparsity: tokens are routed top-k over all experts and one
device keeps the rows that land on its experts/ep local experts (EP as K3 deploys it).

``plan`` (``probe ragged-dot --from-plan``, probes/op_shapes.py): instead, the grouped-matmul shapes
of a planned step's routed-expert ops (experts a device, groups touched, rows a group, K, N), the
rows spread evenly over the touched groups; each point names its ops; widths scaled down on CPU by a
power of two the record's notes state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from k3plan.errors import require
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.record import ProbePoint, ProbeRecord, Verification
from k3plan.probes.timing import sample_s, stats

if TYPE_CHECKING:
    from k3plan.probes.op_shapes import PlanShapes


@dataclass(frozen=True)
class RaggedDotParams:
    tokens: tuple[int, ...] = (1, 64, 1024)
    experts: int = 896  # k3-facts §1
    top_k: int = 16
    d_in: int = 3584
    d_out: int = 3072
    ep: int = 32
    dtype: str = "bfloat16"
    seed: int = 0
    plan: Optional[PlanShapes] = None  # --from-plan: the step's grouped-matmul shapes

    def check(self) -> None:
        require(min(self.experts, self.top_k, self.d_in, self.d_out, self.ep) >= 1, "sizes must be >= 1")
        require(self.top_k <= self.experts, f"--top-k {self.top_k} exceeds --experts {self.experts}")
        require(self.experts % self.ep == 0, f"--ep {self.ep} must divide --experts {self.experts}")
        require(all(t >= 1 for t in self.tokens), "--tokens: every count must be >= 1")
        require(self.dtype in ("bfloat16", "float32"), f"--dtype {self.dtype!r}: expected bfloat16 or float32")

    @property
    def local_experts(self) -> int:
        return self.experts // self.ep


def route(*, tokens: int, params: RaggedDotParams):
    """Top-k of random router logits over all experts; the busiest of the ep devices (the one
    that sets the step time) keeps its rows, sorted by local expert.
    Returns (group_sizes [local], rows kept, experts touched)."""
    import numpy as np

    rng = np.random.default_rng(params.seed + tokens)
    logits = rng.standard_normal((tokens, params.experts))
    chosen = np.argpartition(-logits, params.top_k - 1, axis=1)[:, : params.top_k].ravel()
    per_device = np.bincount(chosen // params.local_experts, minlength=params.ep)
    device = int(np.argmax(per_device))
    local = chosen[chosen // params.local_experts == device] - device * params.local_experts
    sizes = np.bincount(local, minlength=params.local_experts).astype(np.int32)
    return sizes, int(sizes.sum()), int((sizes > 0).sum())


def even_groups(*, local_experts: int, groups: int, rows: int):
    """Group sizes [local_experts]: ``rows`` spread as evenly as can be over the first ``groups``."""
    import numpy as np

    sizes = np.zeros(local_experts, np.int32)
    sizes[:groups] = rows // groups
    sizes[: rows % groups] += 1
    return sizes


def _cases(ctx: ProbeContext, params: RaggedDotParams):
    """(label, (experts a device, K, N), group sizes, point params) for each point of the sweep."""
    if params.plan is None:
        for t in params.tokens:
            sizes = route(tokens=t, params=params)[0]
            yield (f"tokens={t}", (params.local_experts, params.d_in, params.d_out), sizes, {"tokens": t}, t)
        return
    from k3plan.probes.op_shapes import cpu_factor, scaled

    factor = cpu_factor(params.plan) if ctx.is_cpu else 1
    plan = scaled(params.plan, factor)
    ctx.notes.append(f"shapes of the step's routed-expert ops: {plan.source}")
    if factor > 1:
        ctx.notes.append(
            f"CPU run: expert K, N, experts and touched groups a device divided by {factor} (rounded up); rows a group kept"
        )
    for g in plan.grouped:
        sizes = even_groups(local_experts=g.local_experts, groups=g.groups, rows=g.rows)
        extra = {"tokens": g.tokens, "rows_per_group_planned": g.rows_per_group, "k": g.k, "n": g.n, "ops": list(g.ops)}
        label = f"{g.local_experts} experts, {g.groups} x {g.rows_per_group:.3g} rows, {g.k}x{g.n}"
        yield label, (g.local_experts, g.k, g.n), sizes, extra, g.tokens


def run(*, ctx: ProbeContext, params: RaggedDotParams) -> list[ProbeRecord]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    params.check()
    dev = jax.local_devices()[0]
    rng = np.random.default_rng(params.seed)
    weights: dict[tuple[int, int, int], object] = {}

    def expert_weights(e: int, din: int, dout: int):
        if (e, din, dout) not in weights:
            weights.clear()  # one set of expert weights on the device at a time
            with jax.default_device(dev):  # built on the device: no host copy of the expert weights
                weights[(e, din, dout)] = jax.jit(
                    lambda key: (jax.random.normal(key, (e, din, dout), jnp.float32) * din**-0.5).astype(params.dtype)
                )(jax.random.key(params.seed))
        return weights[(e, din, dout)]

    record_params = {
        "experts": params.experts,
        "top_k": params.top_k,
        "d_in": params.d_in,
        "d_out": params.d_out,
        "ep": params.ep,
        "local_experts": params.local_experts,
        "dtype": params.dtype,
        "tokens": list(params.tokens),
        "warmup": ctx.warmup,
        "repeats": ctx.repeats,
    }
    if params.plan is not None:
        record_params = {"from_plan": params.plan.source, "dtype": params.dtype}
        record_params.update(warmup=ctx.warmup, repeats=ctx.repeats)
    points, dispatched = [], None
    checks: list[Verification] = []
    itemsize = np.dtype(params.dtype).itemsize
    for label, (e, din, dout), sizes, extra, t in _cases(ctx, params):
        if ctx.deadline.expired():
            break
        ctx.progress(f"ragged-dot {label}")
        rows, touched = int(sizes.sum()), int((sizes > 0).sum())
        rhs = expert_weights(e, din, dout)
        m = max(rows, 1)  # ragged_dot needs >= 1 row; an empty device still pays the launch
        sizes_pad = sizes.copy()
        sizes_pad[0] += m - rows
        lhs = jax.device_put(rng.standard_normal((m, din), dtype=np.float32).astype(params.dtype), dev)
        gs = jax.device_put(sizes_pad, dev)

        def xla():
            fn = lambda a, b, g: jax.lax.ragged_dot(a, b, g, preferred_element_type=jnp.float32)  # noqa: E731
            return jax.jit(fn).lower(lhs, rhs, gs).compile()

        try:
            d = dispatch(implementations={"xla-ragged-dot": xla}, order=["xla-ragged-dot"])
        except NoImplementation as err:
            return [
                ctx.record(probe="ragged-dot", params=record_params, ok=False, error=str(err), attempts=err.attempts)
            ]
        dispatched = dispatched or d
        if not checks:
            checks.append(_verify(d.value, lhs, rhs, gs, sizes_pad))
        samples = sample_s(d.value, lhs, rhs, gs, warmup=ctx.warmup, repeats=ctx.repeats, deadline=ctx.deadline)
        st = stats(samples)
        flops = 2.0 * rows * din * dout
        weight_bytes = touched * din * dout * itemsize
        points.append(
            ProbePoint(
                params={
                    **extra,
                    "rows": rows,
                    "experts_touched": touched,
                    "flops": flops,
                    "weight_bytes_touched": weight_bytes,
                },
                samples_s={"op": samples},
                stats=st,
                value=flops / st.p50,
                unit="flop/s",
                expected=_expected_flops(ctx, flops=flops, weight_bytes=weight_bytes),
                notes=[f"{st.p50 / t * 1e6:.3g} us a token on this device; {touched}/{e} local experts touched"],
            )
        )
    first = points[0].params if points else {"flops": 0.0, "weight_bytes_touched": 0}
    expectation = expect(
        ctx.hardware,
        unit="flop/s",
        formula="flops / max(flops / flops_per_s_per_device(bf16), weight bytes touched / hbm_bw) (first point)",
        compute=lambda hw: (
            first["flops"]
            / max(
                first["flops"] / hw.flops_per_s_per_device("bf16"),
                first["weight_bytes_touched"] / hw.hbm_bw_bytes_per_s_per_device,
            )
        ),
    )
    return [
        ctx.record(
            probe="ragged-dot",
            params=record_params,
            dispatched=dispatched,
            points=points,
            baseline="none: the whole grouped matmul is timed",
            verification=checks,
            verified=all(c.ok for c in checks) if checks else None,
            expectation=expectation,
        )
    ]


def _expected_flops(ctx: ProbeContext, *, flops: float, weight_bytes: float):
    hw = ctx.hardware.spec
    if hw is None:
        return None
    try:
        peak = hw.flops_per_s_per_device("bf16")
        t = max(flops / peak, weight_bytes / hw.hbm_bw_bytes_per_s_per_device)
        return flops / t if t > 0 else None
    except Exception:
        return None


def _verify(fn, lhs, rhs, gs, sizes) -> Verification:
    """Each group's rows against its own expert's matmul in numpy (first and last non-empty group)."""
    import numpy as np

    out = np.asarray(fn(lhs, rhs, gs), np.float64)
    a = np.asarray(lhs, np.float64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    nonempty = [i for i in range(len(sizes)) if sizes[i]]
    worst = 0.0
    for g in {nonempty[0], nonempty[-1]}:
        sl = slice(starts[g], starts[g + 1])
        worst = max(worst, float(np.max(np.abs(out[sl] - a[sl] @ np.asarray(rhs[g], np.float64)))))
    tol = 5e-2
    return Verification(
        check="numerics",
        ok=worst <= tol,
        detail=f"groups {sorted({nonempty[0], nonempty[-1]})} vs numpy: max abs error {worst:.3g} (tolerance {tol:g})",
    )
