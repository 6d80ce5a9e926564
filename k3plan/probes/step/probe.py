"""`k3plan probe step`: a scaled-down K3 decode step timed end to end, beside the expected time of the
same step from its op list and efficiency records measured in the same run (issue 17 item 4).

1. The step: ``validate``'s decode step (validate/steps.py) of the scaled K3 (probes/step/scaled.py)
   on the first ``devices`` devices (tpu-v7x layout: 2 devices a chip), concrete random weights and a
   zero cache, batch b at ``context`` tokens; timed call after call (the cache is donated: each call
   takes the last one's), the compiled HLO's collectives counted (validate/hlo_census.py).
2. Efficiency records in the same run: ``probe matmul`` (bf16, sizes the step's matmuls span),
   ``probe hbm`` (copy, sizes its ops move) and ``probe allreduce`` (chained, over the TP group, its
   messages) -- written as ordinary records beside the step's.
3. Expected: ``speed.expected_time`` of the same step's op list (``speed.stage.decode_op_costs``) against
   those records. Peaks: the hardware spec of the device kind when one exists; otherwise (CPU) the best
   rates measured in this run (there is no CPU spec), so every op's expected time is its bytes or FLOPs
   at the rate the run measured for its size.
On CPU the fake devices share the host's cores and the run checks the machinery (probes -> records ->
expected -> measured vs expected), not a calibration; the record and the output say so.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from k3plan.errors import K3PlanError, require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.timing import stats

if TYPE_CHECKING:
    from k3plan.step.collective import Collective

LAYOUT_HARDWARE = "tpu-v7x"  # the setup's layout (2 devices a chip); the devices timed are whatever runs
CPU_NOTE = (
    "CPU backend: this checks the machinery (probes -> records -> expected time -> measured vs expected); "
    "the fake devices share the host's cores, so the error is not a calibration"
)


@dataclass(frozen=True)
class StepParams:
    batch: int = 2
    context: int = 256
    topology: str = "2x2x1"  # tpu-v7x chips: 8 devices
    tp: int = 8
    sub_probes: bool = True  # matmul, hbm, allreduce records in the same run

    def check(self) -> None:
        require(self.batch >= 1, f"--batch {self.batch}: expected >= 1")
        require(self.context >= 2, f"--context {self.context}: expected >= 2 tokens")
        require(self.tp >= 1, f"--tp {self.tp}: expected >= 1")


def _setup(params: StepParams):
    from k3plan.engines.stack import ComputeDtype
    from k3plan.probes.step.scaled import scaled_config_path
    from k3plan.setup import make_setup

    s = make_setup(model=str(scaled_config_path()), hardware=LAYOUT_HARDWARE, topology=params.topology, tp=params.tp)
    # the step timed is validate's (validate/steps.py), which runs every matmul in the activations' dtype, not in
    # the engine kernel's the stack declares (vllm-tpu's W4A8 experts: fp8 on v7x): its op list is priced so
    cd = ComputeDtype(default="bf16", default_source="k3plan validate's step: every matmul on the bf16 activations")
    return replace(s, stack=s.stack.model_copy(update={"compute_dtype": cd}))


def _time_decode(setup, devices, *, batch: int, context: int, warmup: int, repeats: int, deadline):
    """(samples s, next tokens, compiled HLO text, compile s) of the scaled decode step."""
    import jax
    import jax.numpy as jnp

    from k3plan.budget.cache import cache_layout
    from k3plan.probes.step.scaled import concrete, zeros
    from k3plan.step.structure import layer_plan
    from k3plan.validate import abstract_model as am
    from k3plan.validate.steps import jitted

    spec = setup.model.spec
    lplan = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    layout = cache_layout(spec=spec, stack=setup.stack, parallel=setup.parallel)
    ab, inputs = am.build(
        setup,
        devices,
        lplan,
        stage="decode",
        batch=batch,
        tokens=1,
        capacity=am.capacity_tokens(layout, context),
    )
    fn, args = jitted("decode", setup, ab, inputs)
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    weights, cache = concrete(ab.params), zeros(ab.cache)
    tok = inputs["tokens"]
    tokens = jax.device_put(jnp.zeros(tok.shape, jnp.int32), tok.sharding)
    positions = jax.device_put(jnp.full(tok.shape, context - 1, jnp.int32), inputs["positions"].sharding)
    samples: list[float] = []
    nxt = None
    for i in range(max(warmup, 0) + max(repeats, 1)):
        if i > warmup and len(samples) >= 2 and deadline.expired():
            break
        t = time.perf_counter()
        nxt, cache = compiled(weights, cache, tokens, positions)
        jax.block_until_ready((nxt, cache))
        if i >= warmup:
            samples.append(time.perf_counter() - t)
    return samples, nxt, compiled.as_text(), compile_s


def _sub_probes(ops: list, tp: int) -> list[tuple]:
    """(run, params, sweep points) of the matmul / hbm / allreduce probes at the sizes the step's ops
    have (a small sweep)."""
    from k3plan.probes import matmul
    from k3plan.probes.collectives import probe as coll
    from k3plan.probes.hbm import probe as hbm

    mm = [o for o in ops if o.kind == "matmul"]
    sides = sorted({max(8, round((o.m * o.n * o.k) ** (1 / 3))) for o in mm})
    sizes = tuple(sorted({sides[0], sides[len(sides) // 2], sides[-1]})) if sides else (64,)
    nbytes = [o.bytes for o in ops if o.bytes > 0]
    lo, hi = max(min(nbytes), 1 << 18), max(max(nbytes), 1 << 19)  # the probe subtracts a 64 KiB baseline
    hbm_sizes = tuple(sorted({1 << int(math.log2(lo)), 1 << math.ceil(math.log2(hi))}))
    msgs = sorted({o.message_bytes for o in ops if o.kind == "collective" and o.collective == "all-reduce"})
    mm_params = matmul.MatmulParams(sizes=sizes, dtypes=("bfloat16",))
    hbm_params = hbm.HbmParams(sizes_bytes=hbm_sizes, ops=("copy",))
    out = [(matmul.run, mm_params, mm_params.points()), (hbm.run, hbm_params, hbm_params.points())]
    if msgs and tp > 1:
        ar = coll.CollectiveParams(
            op="all-reduce", sizes_bytes=tuple(max(64, m) for m in msgs[:2]), modes=("chained",), axis_size=tp
        )
        out.append((coll.run, ar, ar.points()))
    return out


def _sub_records(ctx: ProbeContext, subs: list[tuple]) -> list[ProbeRecord]:
    """Run the sub-probes under the step's plan: each would plan its own total, the step planned the sum."""
    quiet = replace(ctx, plan=lambda total: None)  # shares the deadline, notes and progress
    return [r for run, params, _ in subs for r in run(ctx=quiet, params=params)]


def measured_peaks(records: list[ProbeRecord], *, device_kind: str):
    """Peaks for a device kind without a hardware spec (CPU): the best rates this run measured."""
    from k3plan.speed.peaks import LinkPeak, Peaks

    best = {
        p: max(
            (pt.value for r in records if r.probe == p and r.ok for pt in r.points if pt.value),
            default=None,
        )
        for p in ("matmul", "hbm")
    }
    if best["matmul"] is None or best["hbm"] is None:
        raise K3PlanError("probe step: the matmul and hbm probes of this run measured nothing (try a longer --timeout)")
    lat = min(
        (pt.value for r in records if r.probe == "allreduce" and r.ok for pt in r.points if pt.value),
        default=0.0,
    )
    link = LinkPeak(bw_bytes_per_s=best["hbm"], latency_s=lat)  # fake devices: one host's memory
    return Peaks(
        device_kind=device_kind,
        hardware="measured in this run (best matmul FLOP/s, hbm B/s, smallest all-reduce per call)",
        flops_per_s_by_dtype={"bf16": best["matmul"]},
        hbm_bw_bytes_per_s=best["hbm"],
        scale_up=link,
        scale_out=link,
    )


def run(*, ctx: ProbeContext, params: StepParams) -> list[ProbeRecord]:
    import jax

    from k3plan.speed.curves import build_curves
    from k3plan.speed.expected import expected_time
    from k3plan.speed.peaks import Peaks
    from k3plan.speed.stage import decode_op_costs
    from k3plan.validate.hlo_census import census

    params.check()
    setup = _setup(params)
    n = setup.topology.devices
    if ctx.device_count < n:
        raise K3PlanError(
            f"probe step: {params.topology} ({LAYOUT_HARDWARE}) is {n} devices, {ctx.device_count} present "
            f"(--cpu-devices {n} on CPU, or a smaller --topology/--tp)"
        )
    ops = decode_op_costs(setup, batch=params.batch, context=params.context)
    subs = _sub_probes(ops, setup.parallel.tp) if params.sub_probes else []
    ctx.plan(sum(points for _, _, points in subs) + 1)  # the sub-probes' points and the step
    sub = _sub_records(ctx, subs)
    ctx.progress(f"step: compile and time the scaled decode step on {n} devices")
    samples, nxt, hlo, compile_s = _time_decode(
        setup,
        jax.devices()[:n],
        batch=params.batch,
        context=params.context,
        warmup=ctx.warmup,
        repeats=ctx.repeats,
        deadline=ctx.deadline,
    )
    spec_hw = ctx.hardware.spec
    peaks = Peaks.from_hardware(spec_hw) if spec_hw is not None and not ctx.is_cpu else None
    peaks = peaks or measured_peaks(sub, device_kind=ctx.device_kind)
    curves = build_curves([(r, Path(f"this run: {r.probe} {r.mode or r.op or ''}".strip())) for r in sub], peaks=peaks)
    stage = expected_time(ops, peaks=peaks, curves=curves)
    st = stats(samples)
    error = st.p50 / stage.expected_s - 1.0
    counts = census(hlo)
    ids = [int(t) for t in jax.device_get(nxt).ravel()]
    vocab = setup.model.spec.vocab_size
    ok_tokens = all(0 <= t < vocab for t in ids)
    op_calls: dict[Collective, int] = {}
    op_bytes: dict[Collective, int] = {}  # a device's messages (all-gather: its shard), summed over the step's calls
    for o in ops:
        if o.kind == "collective" and o.collective is not None:  # a collective op always names its collective
            op_calls[o.collective] = op_calls.get(o.collective, 0) + o.count * o.calls
            op_bytes[o.collective] = op_bytes.get(o.collective, 0) + o.count * o.calls * (o.message_bytes or 0)
    notes = [CPU_NOTE] if ctx.is_cpu else []
    measured = dict.fromkeys(o.efficiency.record_path for o in stage.ops if o.efficiency.measured)
    notes += [f"peaks: {peaks.hardware}"]
    notes += [label for label in stage.labels if label.startswith("ceiling:")]
    notes += [
        f"expected: {sum(o.efficiency.record_path == r for o in stage.ops)} op(s) at the efficiency of {r}"
        for r in measured
    ]
    point = ProbePoint(
        params={
            "stage": "decode",
            "batch": params.batch,
            "context": params.context,
            "devices": n,
            "tp": setup.parallel.tp,
            "layers": setup.model.spec.num_layers,
            "experts": setup.model.spec.moe.num_experts,
            "compile_s": round(compile_s, 3),
            "expected_s": stage.expected_s,
            "ceiling_s": stage.ceiling_s,
            "error": error,
            "expected_by_kind_s": {k: v.expected_s for k, v in stage.by_kind.items()},
            "ceiling_by_kind_s": {k: v.ceiling_s for k, v in stage.by_kind.items()},
            "op_list_collective_calls": op_calls,
            "hlo_collectives": {k: v.executed for k, v in counts.ops.items()},
            "op_list_collective_bytes": op_bytes,
            "hlo_collective_bytes": {k: v.executed_bytes for k, v in counts.ops.items()},
        },
        samples_s={"step": samples},
        stats=st,
        value=st.p50,
        unit="s",
        expected=stage.expected_s,
        notes=notes,
    )
    rec = ctx.record(
        probe="step",
        mode="decode",
        params={
            "model": "scaled kimi-k3 (probes/step/scaled.py)",
            "layout": f"{LAYOUT_HARDWARE} {params.topology} tp={setup.parallel.tp} ep={setup.parallel.ep}",
            "stack": setup.stack.name,
            "batch": params.batch,
            "context": params.context,
            "warmup": ctx.warmup,
            "repeats": ctx.repeats,
            "efficiency_records": [f"{r.probe} {r.mode or r.op or ''}".strip() for r in sub],
        },
        implementation="xla: validate.steps decode",
        attempts=[Attempt(implementation="xla: validate.steps decode", ok=True)],
        points=[point],
        baseline="none: the whole step is timed, one call after another (the cache donated and threaded)",
        verification=[
            Verification(
                check="output",
                ok=ok_tokens,
                detail=f"next tokens {ids[:4]}... within the vocabulary of {vocab}",
            )
        ],
        verified=ok_tokens,
        extra_label="measured vs expected checks the machinery only" if ctx.is_cpu else None,
    )
    return [*sub, rec]
