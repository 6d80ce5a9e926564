"""ragged_dot probe: jax.lax.ragged_dot grouped matmul at K3 expert shapes (896 experts, top-16,
latent 3584 -> 3072) with real routing sparsity: tokens are routed top-k over all experts and one
device keeps the rows that land on its experts/ep local experts (EP as K3 deploys it).

``plan`` (``probe ragged-dot --from-plan``, probes/op_shapes.py): instead, the grouped-matmul shapes
of a planned step's routed-expert ops (experts a device, groups touched, rows a group, K, N), the
rows spread evenly over the touched groups; each point names its ops; widths scaled down on CPU by a
power of two the record's notes state."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional

from k3plan.errors import require
from k3plan.evidence.probe_record import ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.dispatch import NoImplementation, dispatch
from k3plan.probes.expect import expect
from k3plan.probes.loop import CPU_TARGET_S, TARGET_S, chained, time_loop
from k3plan.probes.peak import refuse_above_peak
from k3plan.probes.timing import stats

if TYPE_CHECKING:
    from k3plan.probes.op_shapes import PlanShapes


FULL_D_IN, FULL_D_OUT = 3584, 3072  # K3's expert latent -> output widths (k3-facts §1)


@dataclass(frozen=True)
class RaggedDotParams:
    """Sweep settings; d_in and d_out left None are sized to the backend by ``for_backend``."""

    tokens: tuple[int, ...] = (1, 64, 1024)
    experts: int = 896  # k3-facts §1
    top_k: int = 16
    d_in: Optional[int] = None
    d_out: Optional[int] = None
    ep: int = 32
    dtype: str = "bfloat16"
    seed: int = 0
    plan: Optional[PlanShapes] = None  # --from-plan: the step's grouped-matmul shapes
    cpu_scale_factor: int = 1  # set by for_backend: K3's widths divided by this on CPU

    def for_backend(self, *, is_cpu: bool) -> tuple["RaggedDotParams", list[str]]:
        """K3's expert widths on TPU/GPU; on CPU, with neither --d-in nor --d-out given, the quick sweep:
        both divided by the power of two that brings a device's expert weights (local experts x K x N)
        within op_shapes.GROUPED_CPU_BUDGET, as --from-plan scales on CPU (routing kept)."""
        from k3plan.probes.op_shapes import GROUPED_CPU_BUDGET

        if not (is_cpu and self.d_in is None and self.d_out is None) or self.plan is not None:
            return replace(self, d_in=self.d_in or FULL_D_IN, d_out=self.d_out or FULL_D_OUT), []
        f = 1
        while self.local_experts * -(-FULL_D_IN // f) * -(-FULL_D_OUT // f) > GROUPED_CPU_BUDGET:
            f *= 2
        d_in, d_out = -(-FULL_D_IN // f), -(-FULL_D_OUT // f)
        note = (
            f"CPU run: quick sweep (expert widths scaled: K3's {FULL_D_IN}x{FULL_D_OUT} divided by {f} to "
            f"{d_in}x{d_out}; routing at {self.experts} experts, top-{self.top_k}, ep {self.ep} kept); "
            "K3's widths run on TPU/GPU or with --d-in/--d-out"
        )
        return replace(self, d_in=d_in, d_out=d_out, cpu_scale_factor=f), [note]

    def check(self) -> None:
        require(min(self.experts, self.top_k, self.d_in or 1, self.d_out or 1, self.ep) >= 1, "sizes must be >= 1")
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
    """(label, (experts a device, K, N), group sizes, point params) for each point of the sweep
    (params resolved to the backend by ``for_backend``); a list, so that its length is the plan."""
    if params.plan is None:
        assert params.d_in is not None and params.d_out is not None, "RaggedDotParams not resolved"
        return [
            (
                f"tokens={t}",
                (params.local_experts, params.d_in, params.d_out),
                route(tokens=t, params=params)[0],
                {"tokens": t},
                t,
            )
            for t in params.tokens
        ]
    from k3plan.probes.op_shapes import cpu_factor, scaled

    factor = cpu_factor(params.plan) if ctx.is_cpu else 1
    plan = scaled(params.plan, factor)
    ctx.notes.append(f"shapes of the step's routed-expert ops: {plan.source}")
    if factor > 1:
        ctx.notes.append(
            f"CPU run: expert K, N, experts and touched groups a device divided by {factor} (rounded up); rows a group kept"
        )
    cases = []
    for g in plan.grouped:
        sizes = even_groups(local_experts=g.local_experts, groups=g.groups, rows=g.rows)
        extra = {"tokens": g.tokens, "rows_per_group_planned": g.rows_per_group, "k": g.k, "n": g.n, "ops": list(g.ops)}
        label = f"{g.local_experts} experts, {g.groups} x {g.rows_per_group:.3g} rows, {g.k}x{g.n}"
        cases.append((label, (g.local_experts, g.k, g.n), sizes, extra, g.tokens))
    return cases


# Host bytes an entry of [tokens, experts] routing holds: float64 logits and argpartition's int64 indices
ROUTING_BYTES_AN_ENTRY = 8 + 8


def _require_fits(ctx: ProbeContext, params: RaggedDotParams) -> None:
    """Bad input before allocating: the routing draw on the host, a device's expert weights and rows."""
    import numpy as np

    t = max(params.tokens)
    if params.plan is None:
        ctx.require_fits(ROUTING_BYTES_AN_ENTRY * t * params.experts, what=f"--tokens {t} (--experts {params.experts})")
        assert params.d_in is not None and params.d_out is not None, "RaggedDotParams not resolved"
        rows = min(t * params.top_k, t * params.local_experts)
        itemsize = np.dtype(params.dtype).itemsize
        ctx.require_fits(
            params.local_experts * params.d_in * params.d_out * itemsize
            + rows * (params.d_in * itemsize + params.d_out * 4),
            what=f"--tokens {t} at --experts {params.experts} / --ep {params.ep} x --d-in {params.d_in} x --d-out {params.d_out}",
        )


def run(*, ctx: ProbeContext, params: RaggedDotParams) -> list[ProbeRecord]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    params.check()
    params, notes = params.for_backend(is_cpu=ctx.is_cpu)
    ctx.notes.extend(notes)
    _require_fits(ctx, params)
    cases = _cases(ctx, params)
    ctx.plan(len(cases))
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
        "cpu_scale_factor": params.cpu_scale_factor,
        "shapes": "scaled for the CPU quick sweep" if params.cpu_scale_factor > 1 else "as given",
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
    for label, (e, din, dout), sizes, extra, t in cases:
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
        op = lambda a, b, g: jax.lax.ragged_dot(a, b, g, preferred_element_type=jnp.float32)  # noqa: E731
        lt = time_loop(
            chained(op),
            (lhs, rhs, gs),
            warmup=ctx.warmup,
            repeats=ctx.repeats,
            deadline=ctx.deadline,
            target_s=CPU_TARGET_S if ctx.is_cpu else TARGET_S,
        )
        st = stats(lt.per_iter_s)
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
                    **lt.params(),
                },
                samples_s={"per_iter": lt.per_iter_s, **lt.samples()},
                stats=st,
                value=flops / st.p50,
                unit="flop/s",
                expected=_expected_flops(ctx, flops=flops, weight_bytes=weight_bytes),
                notes=[f"{st.p50 / t * 1e6:.3g} us a token on this device; {touched}/{e} local experts touched"],
            )
        )
    refused = refuse_above_peak(points, what="ragged-dot")
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
            baseline=(
                "none needed: N dependent grouped matmuls in one compiled program (probes/loop.py), the marginal "
                "cost between two N; the dispatch floor and fixed cost are each point's params.floor_s"
            ),
            ok=refused is None,
            error=refused,
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
