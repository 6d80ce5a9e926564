"""`k3plan probe step`: a scaled-down K3 step (decode, prefill or both) timed end to end with real arrays,
beside the expected time of the same step from its op list and efficiency records measured in the same
run (issue 17 item 4; issue 35 for one real chip).

Widths (``--width``; ``auto``: toy on the CPU backend, k3 on an accelerator):
  toy  2 layers at toy widths (probes/step/scaled.py), laid out as tpu-v7x (8 fake CPU devices by default).
  k3   K3's hidden 7168, latent 3584, 96 heads of 128 and MLA ranks; layers, experts and vocabulary cut to
       fit one chip (scaled.k3_width_raw); the hardware is the device's own spec; the routed experts are
       held in bf16 and run as plain ragged_dots (K3_EXPERTS_NOTE says why).

1. The step: ``validate``'s step (validate/steps.py) on the first ``devices`` devices, weights drawn on the
   device and a zero cache; decode: batch b at ``context`` tokens; prefill: one chunk of
   ``prefill_tokens``; timed call after call (the cache is donated: each call takes the last one's), the
   compiled HLO's collectives counted (validate/hlo_census.py), its memory_analysis() kept and, on an
   accelerator, the profiler's device time by HLO op (probes/step/profile.py).
2. Efficiency records in the same run: ``probe matmul`` (bf16, sizes the step's matmuls span),
   ``probe hbm`` (sizes its ops move) and ``probe allreduce`` (chained, over the TP group, its messages);
   at K3 width also ragged-dot, kda (chunked) and kda-decode -- written as ordinary records, as soon as
   they exist, beside the step's.
3. Expected: ``speed.expected_time`` of the same step's op list (``speed.stage.decode_op_costs`` /
   ``prefill_op_costs``) against those records. Peaks: the hardware spec of the device kind when one
   exists; otherwise (CPU) the best rates measured in this run (there is no CPU spec). Each record point
   carries ``value`` (measured s) and ``expected`` (s), and the expected time by op.
On CPU the fake devices share the host's cores and the run checks the machinery (probes -> records ->
expected -> measured vs expected), not a calibration; the record and the output say so.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from k3plan.budget.fit import MAX_SEQUENCES, MAX_TOKENS
from k3plan.errors import K3PlanError, require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.timing import stats
from k3plan.units import GiB, MiB

if TYPE_CHECKING:
    from k3plan.setup import Setup
    from k3plan.step.collective import Collective

LAYOUT_HARDWARE = "tpu-v7x"  # the setup's layout (2 devices a chip); the devices timed are whatever runs
CPU_NOTE = (
    "CPU backend: this checks the machinery (probes -> records -> expected time -> measured vs expected); "
    "the fake devices share the host's cores, so the error is not a calibration"
)


WIDTHS = ("auto", "toy", "k3")
EXPERT_FORMATS = ("bf16", "runtime")
RUNTIME_EXPERTS_NOTE = (
    "routed experts in the stack's runtime format and validate's form of it (its engine's expert_form): MXFP4 dequantized in "
    "XLA ops, validate's graph -- not the engine's fused kernel"
)
K3_EXPERTS_NOTE = (
    "routed experts held in bf16 (the stack's runtime format overridden) and run as three ragged_dots on the "
    "weights (validate's 'ragged' form): validate's step dequantizes MXFP4 in XLA ops, which on a v5e ran at "
    "~8-16 GB/s (profile of 2026-12-04) -- not what an engine's fused MoE kernel does, and not what the op "
    "list prices; bf16 experts are a step the op list describes as it runs"
)


@dataclass(frozen=True)
class StepParams:
    batch: int = 2
    context: int = 256
    topology: Optional[str] = None  # None: 2x2x1 of tpu-v7x (toy), the smallest grid of one chip (k3)
    tp: Optional[int] = None  # None: 8 (toy), 1 (k3)
    sub_probes: bool = True  # matmul, hbm, allreduce (and, k3 width, ragged-dot, kda) records in the same run
    width: str = "auto"  # toy: 2 layers at toy widths, laid out as tpu-v7x; k3: K3's widths on the device present;
    # auto: toy on the CPU backend, k3 on an accelerator (whatever devices are present, one chip included)
    stages: tuple[str, ...] = ("decode",)
    prefill_tokens: int = 1024
    layers: Optional[int] = None  # k3 width: None = scaled.K3_WIDTH_LAYERS
    experts: Optional[int] = None  # k3 width: None = scaled.K3_WIDTH_EXPERTS
    records: Optional[Path] = None  # efficiency records of this device kind from this folder, not measured in this run
    # the cache slots validate's graph attended over (k3 width), as a record states it; None: from today's stack
    capacity_tokens: Optional[int] = None
    stack: Optional[str] = None  # k3 width: None = the hardware's default stack
    expert_format: str = "bf16"  # k3 width: bf16 (the runtime format overridden, ragged form) or runtime (the
    # stack's own format and expert form, e.g. torchtpu-vllm's mxfp4_f32scale, tiled)
    grid: tuple[tuple[str, int, int], ...] = ()  # (stage, batch, context-or-prefill tokens) points of ONE model,
    # timed one after another on the same drawn weights; () = the points batch/context/prefill_tokens give
    # the compiled step's placement of the tiled experts' intermediates (probes/step/alternate.py shares): (pass,
    # share in the chip's alternate memory); () = all in HBM
    alternate: tuple[tuple[str, float], ...] = ()

    def check(self) -> None:
        require(self.width in WIDTHS, f"--width {self.width!r}: expected auto, toy or k3")
        require(self.batch >= 1, f"--batch {self.batch}: expected >= 1")
        require(self.context >= 2, f"--context {self.context}: expected >= 2 tokens")
        require(self.tp is None or self.tp >= 1, f"--tp {self.tp}: expected >= 1")
        require(
            bool(self.stages) and set(self.stages) <= {"decode", "prefill"},
            "--stage: expected decode, prefill or both",
        )
        require(self.prefill_tokens >= 1, f"--prefill-tokens {self.prefill_tokens}: expected >= 1")
        for flag, v, most in (
            ("--batch", self.batch, MAX_SEQUENCES),
            ("--context", self.context, MAX_TOKENS),
            ("--prefill-tokens", self.prefill_tokens, MAX_TOKENS),
        ):
            require(v <= most, f"{flag} {v}: absurdly large; expected at most {most:,}")
        require(self.layers is None or self.layers >= 1, f"--layers {self.layers}: expected >= 1")
        require(
            self.expert_format in EXPERT_FORMATS, f"--expert-format {self.expert_format!r}: expected bf16 or runtime"
        )
        require(
            self.width != "toy" or (self.stack is None and self.expert_format == "bf16"),
            "--stack/--expert-format: --width k3 only",
        )
        require(
            self.width != "toy" or (self.layers is None and self.experts is None), "--layers/--experts: --width k3 only"
        )


def step_setup(params: StepParams, *, hardware: Optional[str] = None):
    from k3plan.engines.stack import ComputeDtype, updated
    from k3plan.probes.step.scaled import K3_WIDTH_EXPERTS, K3_WIDTH_LAYERS, k3_width_config_path, scaled_config_path
    from k3plan.setup import make_setup

    # the step timed is validate's (validate/steps.py), which runs every matmul in the activations' dtype, not in
    # the engine kernel's the stack declares (vllm-tpu's W4A8 experts: fp8 on v7x): its op list is priced so
    cd = ComputeDtype(default="bf16", default_source="k3plan validate's step: every matmul on the bf16 activations")
    if params.width == "toy":
        s = make_setup(
            model=str(scaled_config_path()),
            hardware=LAYOUT_HARDWARE,
            topology=params.topology or "2x2x1",
            tp=params.tp or 8,
        )
        return replace(s, stack=updated(s.stack, compute_dtype=cd))
    if hardware is None:
        raise K3PlanError("probe step --width k3: no hardware spec for this device kind; pass --hardware NAME")
    path = k3_width_config_path(layers=params.layers or K3_WIDTH_LAYERS, experts=params.experts or K3_WIDTH_EXPERTS)
    k3: Optional[Setup] = None
    for topo in [params.topology] if params.topology else ["1x1", "1x1x1", "1"]:
        try:
            k3 = make_setup(model=str(path), hardware=hardware, topology=topo, tp=params.tp or 1, stack=params.stack)
            break
        except K3PlanError:
            if params.topology:
                raise
    if k3 is None:
        raise K3PlanError(f"probe step --width k3: no one-chip topology of {hardware}; pass --topology")
    if params.expert_format == "runtime":  # the stack's own expert format and form (validate's graph of it)
        return replace(k3, stack=updated(k3.stack, compute_dtype=cd))
    # every expert key overridden: a ``role@format`` key (torchtpu-vllm's "expert@mxfp4") outranks "expert" in
    # Stack.runtime_format, and with it kept the step held MXFP4 experts dequantized in XLA ops (the v5e run of
    # 2026-12-04 05:41Z: 80.7 ms a decode step, the profile's top ops u8 unpacking and scale broadcasts)
    formats = {k: v for k, v in k3.stack.runtime_formats.items() if not k.startswith("expert@")} | {"expert": "bf16"}
    return replace(k3, stack=updated(k3.stack, compute_dtype=cd, runtime_formats=formats))


def _jit(stage: str, setup, ab, inputs, *, form: Optional[str]):
    """validate.steps.jitted, with the experts' form chosen (None: the stack's)."""
    import dataclasses

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from k3plan.validate.steps import jitted, make_ctx, make_step

    if form is None:
        return jitted(stage, setup, ab, inputs)
    ctx = dataclasses.replace(make_ctx(setup, ab.mesh), experts_form=form)
    fn = make_step(stage, ctx=ctx, lplan=ab.lplan)
    shard = lambda t: jax.tree.map(lambda s: s.sharding, t)  # noqa: E731
    in_sh = (shard(ab.params), shard(ab.cache), *(shard(inputs[k]) for k in inputs))
    out_sh = (NamedSharding(ab.mesh, P(ctx.batch_axis)), shard(ab.cache))
    jf = jax.jit(fn, in_shardings=in_sh, out_shardings=out_sh, donate_argnums=(1,), keep_unused=True)
    return jf, (ab.params, ab.cache, *(inputs[k] for k in inputs))


@dataclass
class Timed:
    samples: list
    next_tokens: object
    hlo: str
    compile_s: float
    memory: dict
    profile: Optional[dict]
    phases_s: dict  # wall seconds of the stage's phases on the host (compile, draw, time, profile)


def _memory(compiled) -> dict:
    """The compiler's memory_analysis (on TPU the allocator's peak leaves XLA's temporaries out)."""
    try:
        m = compiled.memory_analysis()
    except Exception:
        return {}
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes")
    out = {f.replace("_size_in", ""): int(getattr(m, f, 0) or 0) for f in fields}
    out["total_bytes"] = out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"]
    return out


def jitted_point(setup, devices, *, stage: str, batch: int, context: int, tokens: int, form: Optional[str]):
    """The scaled step of ``stage`` at one grid point, built abstract on ``devices`` and jitted (not lowered):
    (abstract model, inputs, jitted function, its arguments). A decode step takes one token a sequence; the cache
    holds ``context`` tokens. What ``probe step`` times and the grid's compile-only scripts compile (benchmarks/)."""
    from k3plan.step.cache import cache_layout
    from k3plan.step.structure import layer_plan
    from k3plan.validate import abstract_model as am

    spec = setup.model.spec
    lplan = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    layout = cache_layout(spec=spec, stack=setup.stack, parallel=setup.parallel)
    ab, inputs = am.build(
        setup,
        devices,
        lplan,
        stage=stage,
        batch=batch,
        tokens=1 if stage == "decode" else tokens,
        capacity=am.capacity_tokens(layout, context),
    )
    fn, args = _jit(stage, setup, ab, inputs, form=form)
    return ab, inputs, fn, args


def _time_stage(
    setup,
    devices,
    *,
    stage: str,
    batch: int,
    context: int,
    tokens: int,
    warmup: int,
    repeats: int,
    deadline,
    form: Optional[str] = None,
    profile: bool = False,
    drawn: Optional[dict] = None,
) -> Timed:
    """The scaled step of ``stage`` compiled, run with real arrays, timed call after call (the cache donated
    and threaded), optionally profiled. ``drawn`` keeps the weights between stages (decode and prefill take
    the same params: drawn once)."""
    import jax
    import jax.numpy as jnp

    from k3plan.validate.local import concrete, zeros

    decode = stage == "decode"
    ab, inputs, fn, args = jitted_point(
        setup, devices, stage=stage, batch=batch, context=context, tokens=tokens, form=form
    )
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    same = drawn is not None and "weights" in drawn and _same_tree(drawn["weights"], ab.params)
    weights = drawn["weights"] if same and drawn is not None else concrete(ab.params)
    if drawn is not None:
        drawn["weights"] = weights
    cache = zeros(ab.cache)
    jax.block_until_ready((weights, cache))
    draw_s = time.perf_counter() - t0
    tok = inputs["tokens"]
    toks = jax.device_put(jnp.zeros(tok.shape, jnp.int32), tok.sharding)
    if decode:
        where = jax.device_put(jnp.full(tok.shape, context - 1, jnp.int32), inputs["positions"].sharding)
    else:
        start = inputs["start"]
        where = jax.device_put(jnp.zeros(start.shape, start.dtype), start.sharding)
    state = {"cache": cache, "next": None}

    def call() -> None:
        state["next"], state["cache"] = compiled(weights, state["cache"], toks, where)
        jax.block_until_ready((state["next"], state["cache"]))

    samples: list[float] = []
    t0 = time.perf_counter()
    for i in range(max(warmup, 0) + max(repeats, 1)):
        if i > warmup and len(samples) >= 2 and deadline.expired():
            break
        t = time.perf_counter()
        call()
        if i >= warmup:
            samples.append(time.perf_counter() - t)
    time_s = time.perf_counter() - t0
    breakdown = None
    t0 = time.perf_counter()
    if profile:
        from k3plan.probes.step.profile import device_ops

        breakdown = device_ops(call)
    phases = {
        "compile": round(compile_s, 3),
        "draw": round(draw_s, 3),
        "draw_reused": bool(same),
        "time": round(time_s, 3),
        "profile": round(time.perf_counter() - t0, 3),
    }
    return Timed(samples, state["next"], compiled.as_text(), compile_s, _memory(compiled), breakdown, phases)


def _same_tree(a, b) -> bool:
    """Whether concrete arrays ``a`` stand for the abstract tree ``b`` (structure, shapes, dtypes, shardings)."""
    import jax

    if str(jax.tree.structure(a)) != str(jax.tree.structure(b)):  # PyTreeDef's == is untyped
        return False
    return all(
        x.shape == y.shape and x.dtype == y.dtype and x.sharding == y.sharding
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


def _pow2_span(lo: float, hi: float, *, floor: int, cap: int) -> tuple[int, ...]:
    """Powers of two from below ``lo`` to above ``hi``, within [floor, cap]: a sweep over the ops' range."""
    a = max(floor, 1 << max(0, int(math.floor(math.log2(max(lo, 1))))))
    b = min(cap, 1 << int(math.ceil(math.log2(max(hi, 1)))))
    out, x = [], a
    while x <= max(a, b):
        out.append(x)
        x *= 2
    return tuple(out)


def _sub_probes(ops: list, tp: int, *, k3: bool = False, setup=None, tokens: tuple[int, ...] = ()) -> list[tuple]:
    """(run, params, sweep points) of the matmul / hbm / allreduce probes at the sizes the step's ops
    have (a small sweep); at K3 width also ragged-dot (the step's experts at its token counts), kda
    (chunked, K3's heads) and kda-decode, so that every op kind has a record of this run."""
    from k3plan.probes import matmul
    from k3plan.probes.collectives import probe as coll
    from k3plan.probes.hbm import probe as hbm

    mm = [o for o in ops if o.kind == "matmul"]
    sides = sorted({max(8, round((o.m * o.n * o.k) ** (1 / 3))) for o in mm})
    nbytes = [o.bytes for o in ops if o.bytes > 0]
    if k3:
        sizes = _pow2_span(sides[0], sides[-1], floor=128, cap=8192) if sides else (1024,)
        hbm_sizes = _pow2_span(min(nbytes), max(nbytes), floor=MiB, cap=GiB)
        hbm_params = hbm.HbmParams(sizes_bytes=hbm_sizes, ops=("copy", "reduce"))
    else:
        sizes = tuple(sorted({sides[0], sides[len(sides) // 2], sides[-1]})) if sides else (64,)
        lo, hi = max(min(nbytes), 1 << 18), max(max(nbytes), 1 << 19)  # the probe subtracted a 64 KiB baseline
        hbm_sizes = tuple(sorted({1 << int(math.log2(lo)), 1 << math.ceil(math.log2(hi))}))
        hbm_params = hbm.HbmParams(sizes_bytes=hbm_sizes, ops=("copy",))
    msgs = sorted({o.message_bytes for o in ops if o.kind == "collective" and o.collective == "all-reduce"})
    mm_params = matmul.MatmulParams(sizes=sizes, dtypes=("bfloat16",))
    out = [(matmul.run, mm_params, mm_params.points()), (hbm.run, hbm_params, hbm_params.points())]
    if msgs and tp > 1:
        ar = coll.CollectiveParams(
            op="all-reduce", sizes_bytes=tuple(max(64, m) for m in msgs[:2]), modes=("chained",), axis_size=tp
        )
        out.append((coll.run, ar, ar.points()))
    if k3 and setup is not None:
        from k3plan.probes import ragged_dot
        from k3plan.probes.kda import probe as kda
        from k3plan.probes.kda_decode import probe as kdd

        spec = setup.model.spec
        moe = spec.moe
        rd = ragged_dot.RaggedDotParams(
            tokens=tokens,
            experts=moe.num_experts,
            top_k=moe.top_k,
            d_in=_latent(setup),
            d_out=_expert_width(setup),
            ep=1,
        )
        out.append((ragged_dot.run, rd, len(tokens)))
        kd = kdd.KdaDecodeParams(heads=96, head_dim=128)
        out.append((kdd.run, kd, 3))
        kc = kda.KdaParams(seq_lens=(max(64, max(tokens) // 64 * 64),), heads=96, head_dim=128, paths=("chunked",))
        out.append((kda.run, kc, 1))
    return out


def _given_records(folder: Path, *, device_kind: str) -> list[tuple[ProbeRecord, Path]]:
    """--records DIR: the ok records of this device kind in DIR (oldest first, with their paths), which set
    the expected time instead of sub-probes run now (a step re-run on the chip without re-measuring them)."""
    from k3plan.evidence.probe_records import load_with_paths

    require(Path(folder).is_dir(), f"--records {folder}: not a folder of probe records")
    got = [
        (r, p)
        for r, p in load_with_paths(Path(folder), strict=False)  # other files in the folder: not records, skipped
        if r.ok and r.probe != "step" and r.device_kind.lower() == device_kind.lower()
    ]
    require(bool(got), f"--records {folder}: no ok probe record of {device_kind} there")
    return got


def _latent(setup) -> int:
    return int(setup.model.spec.moe.expert_in)  # the latent a routed expert reads (K3: 3584)


def _expert_width(setup) -> int:
    return int(setup.model.spec.moe.expert_intermediate)  # K3: 3072


IDENTICAL_ROWS = (
    "decode inputs: every sequence token id 0 at the same position over a zero cache (_time_stage), so every row "
    "routes to the same top_k experts: the op list's expert histogram is top_k experts at full load"
)


def dispatch_floor(records: list[ProbeRecord]) -> Optional[tuple[float, str]]:
    """(seconds, source) of an empty jitted call, dispatch to result, as the newest matmul record of these measured
    it (``params.dispatch_floor_s``, probes/loop.py); None where none did."""
    got = [r for r in records if r.probe == "matmul" and r.params.get("dispatch_floor_s")]
    if not got:
        return None
    r = max(got, key=lambda r: r.date)
    return float(r.params["dispatch_floor_s"]), f"probe matmul's dispatch floor on {r.device_kind}, {r.date}"


def step_op_costs(setup, params: StepParams, *, stage: str, floor: Optional[tuple[float, str]] = None) -> list:
    """The op list of the step this probe times (speed.stage's, the one roofline prices). At K3 width the step
    is validate's own graph (step.graph: its expert relayout and scan-slice copies, prefill scores over the
    cache's capacity) and decode's rows are identical (IDENTICAL_ROWS); the toy step is priced as the
    engine's op list. ``floor`` (dispatch_floor): each timed sample is one jitted call from the host, waited
    for, so it holds one dispatch floor, added as an overhead op (K3 width)."""
    from k3plan.speed.stage import decode_op_costs, prefill_op_costs

    chunk = min(params.prefill_tokens, params.context)
    graph = histogram = None
    if _k3(params):
        from k3plan.step.cache import kv_bytes_per_token_layer
        from k3plan.step.graph import validate_graph
        from k3plan.step.live import form_for

        spec = setup.model.spec
        expert = next(t for t in setup.model.inventory.text if t.role == "expert")
        graph = validate_graph(
            spec,
            expert_format=setup.stack.runtime_format("expert", expert.fmt),
            capacity_tokens=params.capacity_tokens or graph_capacity(setup, params, stage),
            activation=setup.stack.activation_dtype,
            form=expert_form(params) or form_for(setup.stack.name),
            ep=setup.parallel.ep,
            kv_bytes=kv_bytes_per_token_layer(spec, setup.stack.kv_cache.dtype) if spec.n_mla else 0,
            alternate=params.alternate,
        )
        k, e = spec.moe.top_k, spec.moe.num_experts
        histogram = [1.0] * k + [0.0] * (e - k)
    if stage == "decode":
        ops = decode_op_costs(
            setup, batch=params.batch, context=params.context, histogram=histogram, graph=graph, engine=False
        )
    else:  # validate's compiled step runs its own rows: no engine bucket padding or kernel tiling
        ops = prefill_op_costs(setup, chunk=chunk, context=chunk, graph=graph, engine=False)
    if floor is not None and _k3(params):
        from k3plan.step.opcost import OpCost

        over: dict[str, Any] = {"name": "host.dispatch_floor", "kind": "overhead", "fixed_s": floor[0]}
        ops.append(OpCost(**over, source=floor[1]))  # a dict: OpCost's optional fields stay unnamed
    return ops


def _k3(params: StepParams) -> bool:
    return params.width == "k3"


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


def _require_cache_fits(ctx: ProbeContext, setup, params: StepParams, *, devices: int) -> None:
    """The decode step's cache (--batch sequences of --context tokens, a device's share) must fit the device's
    memory before anything is allocated: `--batch 1000000000` ran until the host ran out of memory."""
    from k3plan.step.cache import cache_layout

    layout = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel)
    need = params.batch * layout.sequence_bytes(params.context)
    ctx.require_fits(need, what=f"probe step --batch {params.batch} --context {params.context}", devices=devices)


def run(*, ctx: ProbeContext, params: StepParams) -> list[ProbeRecord]:
    import jax

    from k3plan.speed.curves import build_curves
    from k3plan.speed.peaks import Peaks

    params.check()
    if params.width == "auto":
        params = replace(params, width="toy" if ctx.is_cpu else "k3")
    k3 = params.width == "k3"
    setup = step_setup(params, hardware=ctx.hardware.name)
    n = setup.topology.devices
    if ctx.device_count < n:
        raise K3PlanError(
            f"probe step: {setup.topology.text} ({setup.hardware.name}) is {n} devices, {ctx.device_count} present "
            f"(--cpu-devices {n} on CPU, or a smaller --topology/--tp)"
        )
    _require_cache_fits(ctx, setup, params, devices=n)  # before the sub-probes and the step allocate anything
    chunk = min(params.prefill_tokens, params.context)
    stage_ops = {st: step_op_costs(setup, params, stage=st) for st in ("decode", "prefill")}
    stages = [st for st in ("decode", "prefill") if st in params.stages]
    all_ops = [o for st in stages for o in stage_ops[st]]  # the sub-probes' sizes (the dispatch floor is no size)
    tokens = tuple(sorted({params.batch if st == "decode" else chunk for st in stages}))
    given = _given_records(params.records, device_kind=ctx.device_kind) if params.records is not None else None
    subs = (
        _sub_probes(all_ops, setup.parallel.tp, k3=k3, setup=setup, tokens=tokens)
        if params.sub_probes and given is None
        else []
    )
    ctx.plan(sum(points for _, _, points in subs) + len(stages))  # the sub-probes' points and the steps
    sub = _sub_records(ctx, subs)
    for r in sub:
        ctx.emit(r)  # written now: the steps' compiles and runs come after
    spec_hw = ctx.hardware.spec
    peaks = Peaks.from_hardware(spec_hw) if spec_hw is not None and not ctx.is_cpu else None
    if given is not None:
        sub = [r for r, _ in given]
        peaks = peaks or measured_peaks(sub, device_kind=ctx.device_kind)
        curves = build_curves(given, peaks=peaks)
    else:
        peaks = peaks or measured_peaks(sub, device_kind=ctx.device_kind)
        curves = build_curves(
            [(r, Path(f"this run: {r.probe} {r.mode or r.op or ''}".strip())) for r in sub], peaks=peaks
        )
    floor = dispatch_floor(sub)
    stage_ops = {st: step_op_costs(setup, params, stage=st, floor=floor) for st in stages}
    out = list(sub) if given is None else []  # given records are not this run's: not written again
    drawn: dict = {}
    for stage, batch, context in _points(params, stages=stages, chunk=chunk):
        pp = replace(params, batch=batch, context=context, prefill_tokens=context, stages=(stage,))
        what = f"{stage} b{batch} c{context}" if stage == "decode" else f"{stage} {context} tokens"
        ctx.progress(f"step: compile and time the {'K3-width' if k3 else 'scaled'} {what} step on {n} devices")
        if params.grid and ctx.deadline.expired():
            break
        try:
            timed = _time_stage(
                setup,
                jax.devices()[:n],
                stage=stage,
                batch=batch,
                context=context,
                tokens=context,
                warmup=ctx.warmup,
                repeats=ctx.repeats,
                deadline=ctx.deadline,
                form=expert_form(params),
                profile=not ctx.is_cpu and not params.grid,
                drawn=drawn,
            )
        except Exception as err:  # the compiler's or the allocator's refusal is a grid point too
            if not params.grid or not _oom(err):
                raise
            out.append(rec := _refused_record(ctx, pp, setup, stage=stage, err=err))
            ctx.emit(rec)
            continue
        if _k3(pp) and timed.hlo:  # where the compiler put the tiled experts' intermediates: priced as placed
            from k3plan.probes.step.alternate import shares

            pp = replace(pp, alternate=tuple(sorted(shares(timed.hlo).items())))
        ops = step_op_costs(setup, pp, stage=stage, floor=floor)
        out.append(
            rec := _step_record(
                ctx,
                pp,
                setup,
                stage=stage,
                ops=ops,
                timed=timed,
                peaks=peaks,
                curves=curves,
                sub=sub,
                chunk=context if stage == "prefill" else chunk,
            )
        )
        ctx.emit(rec)
    return out


def parse_grid(text: str) -> tuple[tuple[str, int, int], ...]:
    """--grid decode:BxC,prefill:T,... -> ((stage, batch, context-or-tokens), ...)."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        stage, _, rest = item.partition(":")
        try:
            if stage == "decode":
                b, _, c = rest.lower().partition("x")
                out.append(("decode", int(b), int(c)))
            elif stage == "prefill":
                out.append(("prefill", 1, int(rest)))
            else:
                raise ValueError(stage)
        except ValueError:
            raise K3PlanError(
                f"--grid {item!r}: expected decode:BATCHxCONTEXT or prefill:TOKENS (e.g. decode:16x8192,prefill:1024)"
            ) from None
        require(out[-1][1] >= 1 and out[-1][2] >= 2, f"--grid {item!r}: batch >= 1 and >= 2 tokens")
    require(bool(out), "--grid: no points")
    return tuple(out)


def _points(params: StepParams, *, stages: Sequence[str], chunk: int) -> list[tuple[str, int, int]]:
    """(stage, batch, context) of each step timed: the grid's, else decode at batch x context and one prefill
    chunk (batch 1, its context the chunk)."""
    if params.grid:
        return [p for p in params.grid if p[0] in stages]
    return [(st, params.batch, params.context) if st == "decode" else (st, 1, chunk) for st in stages]


def expert_form(params: StepParams) -> Optional[str]:
    """The experts' form: K3 width with bf16 experts runs them as plain ragged_dots; the stack's runtime
    format runs in the stack's own form (its engine's Engine.expert_form); the toy step in the stack's."""
    return "ragged" if _k3(params) and params.expert_format == "bf16" else None


OOM_WORDS = ("RESOURCE_EXHAUSTED", "exceeds available HBM", "Out of memory", "out of memory", "Ran out of memory")


def _oom(err: BaseException) -> bool:
    return any(w in str(err) for w in OOM_WORDS)


def _model_params(params: StepParams, setup) -> dict:
    from k3plan.step.live import form_for

    spec = setup.model.spec
    expert = next(t for t in setup.model.inventory.text if t.role == "expert")
    return {
        "stack": setup.stack.name,
        "expert_format": params.expert_format,
        "expert_runtime_format": str(setup.stack.runtime_format("expert", expert.fmt)),
        "expert_form": expert_form(params) or form_for(setup.stack.name),
        "layers": spec.num_layers,
        "experts": spec.moe.num_experts,
    }


def _refused_record(ctx, params: StepParams, setup, *, stage: str, err: BaseException):
    """A grid point the chip refused (the compiler's HBM check or the allocator): no time, the refusal's words."""
    decode = stage == "decode"
    words = " ".join(str(err).split())
    first = next((w for w in OOM_WORDS if w in words), "")
    at = max(0, words.find(first) - 200)
    point = ProbePoint(
        params={
            "stage": stage,
            "batch": params.batch if decode else 1,
            "context": params.context,
            "tokens": 1 if decode else params.context,
            "devices": setup.topology.devices,
            "tp": setup.parallel.tp,
            "refused": "oom",
            "refusal": words[at : at + 600],
            **_model_params(params, setup),
        },
        notes=["refused by the chip: out of memory (compile or allocation); no time"],
    )
    return ctx.record(
        probe="step",
        mode=stage,
        params={
            "width": params.width,
            "layout": f"{setup.hardware.name} {setup.topology.text} tp={setup.parallel.tp} ep={setup.parallel.ep}",
            **_model_params(params, setup),
            "batch": params.batch if decode else 1,
            "context": params.context,
            "prefill_tokens": None if decode else params.context,
            "refused": "oom",
        },
        implementation=f"xla: validate.steps {stage}",
        attempts=[
            Attempt(implementation=f"xla: validate.steps {stage}", ok=False, reason="out of memory: " + words[:300])
        ],
        points=[point],
        ok=False,
        error="out of memory on the chip (a grid point: the refusal is the measurement)",
    )


def _step_record(ctx, params: StepParams, setup, *, stage: str, ops, timed: Timed, peaks, curves, sub, chunk: int):
    import jax

    from k3plan.speed.expected import expected_time
    from k3plan.validate.hlo_census import census

    k3 = params.width == "k3"
    n = setup.topology.devices
    stage_t = expected_time(ops, peaks=peaks, curves=curves)
    st = stats(timed.samples)
    error = st.p50 / stage_t.expected_s - 1.0
    counts = census(timed.hlo)
    ids = [int(t) for t in jax.device_get(timed.next_tokens).ravel()]
    vocab = setup.model.spec.vocab_size
    ok_tokens = all(0 <= t < vocab for t in ids)
    op_calls: dict[Collective, int] = {}
    op_bytes: dict[Collective, int] = {}  # a device's messages (all-gather: its shard), summed over the step's calls
    for o in ops:
        if o.kind == "collective" and o.collective is not None:  # a collective op always names its collective
            op_calls[o.collective] = op_calls.get(o.collective, 0) + o.count * o.calls
            op_bytes[o.collective] = op_bytes.get(o.collective, 0) + o.count * o.calls * (o.message_bytes or 0)
    notes = [CPU_NOTE] if ctx.is_cpu else []
    if k3:
        from k3plan.step.graph import validate_graph_note

        notes += [K3_EXPERTS_NOTE if params.expert_format == "bf16" else RUNTIME_EXPERTS_NOTE, validate_graph_note()]
        if stage == "decode":
            notes.append(IDENTICAL_ROWS)
    measured = dict.fromkeys(o.efficiency.record_path for o in stage_t.ops if o.efficiency.measured)
    notes += [f"peaks: {peaks.hardware}"]
    notes += [label for label in stage_t.labels if label.startswith("ceiling:")]
    notes += [
        f"expected: {sum(o.efficiency.record_path == r for o in stage_t.ops)} op(s) at the efficiency of {r}"
        for r in measured
    ]
    decode = stage == "decode"
    spec = setup.model.spec
    point = ProbePoint(
        params={
            "stage": stage,
            "batch": params.batch if decode else 1,
            "context": params.context if decode else chunk,
            "tokens": 1 if decode else chunk,
            "devices": n,
            "tp": setup.parallel.tp,
            "layers": spec.num_layers,
            "experts": spec.moe.num_experts,
            "hidden": spec.hidden_size,
            "compile_s": round(timed.compile_s, 3),
            "phases_s": timed.phases_s,
            "expected_s": stage_t.expected_s,
            "ceiling_s": stage_t.ceiling_s,
            "error": error,
            "measured_over_expected": st.p50 / stage_t.expected_s,
            "expected_by_kind_s": {k: v.expected_s for k, v in stage_t.by_kind.items()},
            "ceiling_by_kind_s": {k: v.ceiling_s for k, v in stage_t.by_kind.items()},
            "expected_by_op_s": {o.name: o.expected_s for o in stage_t.ops},
            "memory_analysis": timed.memory,
            "alternate_memory": dict(params.alternate),
            "device_profile": timed.profile,
            "op_list_collective_calls": op_calls,
            "hlo_collectives": {k: v.executed for k, v in counts.ops.items()},
            "op_list_collective_bytes": op_bytes,
            "hlo_collective_bytes": {k: v.executed_bytes for k, v in counts.ops.items()},
        },
        samples_s={"step": timed.samples},
        stats=st,
        value=st.p50,
        unit="s",
        expected=stage_t.expected_s,
        notes=notes,
    )
    model = (
        f"kimi-k3 at K3's widths, {spec.num_layers} layers, {spec.moe.num_experts} experts, vocab {spec.vocab_size} "
        "(probes/step/scaled.py k3_width_raw)"
        if k3
        else "scaled kimi-k3 (probes/step/scaled.py)"
    )
    return ctx.record(
        probe="step",
        mode=stage,
        params={
            "model": model,
            "width": params.width,
            "layout": f"{setup.hardware.name} {setup.topology.text} tp={setup.parallel.tp} ep={setup.parallel.ep}",
            "stack": setup.stack.name,
            **(_model_params(params, setup) if k3 else {}),
            "batch": params.batch if decode else 1,
            "context": params.context if decode else chunk,
            "prefill_tokens": None if decode else chunk,
            # the graph's cache capacity (validate.abstract_model.capacity_tokens): its prefill scores span it, so
            # a re-pricing under a later page must take the capacity the timed graph had (reprice)
            "capacity_tokens": graph_capacity(setup, params, stage) if k3 else None,
            "warmup": ctx.warmup,
            "repeats": ctx.repeats,
            "efficiency_records": [f"{r.probe} {r.mode or r.op or ''}".strip() for r in sub],
            "efficiency_records_from": (
                "measured in this run" if params.records is None else f"--records {params.records}: {len(sub)} records"
            ),
        },
        implementation=f"xla: validate.steps {stage}"
        + (
            " (experts: ragged form, bf16)"
            if k3 and params.expert_format == "bf16"
            else f" (experts: {_model_params(params, setup)['expert_runtime_format']}, the stack's form)"
            if k3
            else ""
        ),
        attempts=[Attempt(implementation=f"xla: validate.steps {stage}", ok=True)],
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


def graph_capacity(setup, params: StepParams, stage: str) -> int:
    """The cache slots validate's graph of this step attends over: its context in whole blocks of the stack's page
    (validate.abstract_model.capacity_tokens)."""
    from k3plan.step.cache import cache_layout

    layout = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel)
    tokens = params.context if stage == "decode" else min(params.prefill_tokens, params.context)
    return math.ceil(tokens / layout.block_tokens) * layout.block_tokens


def _legacy_capacity(setup, params: StepParams, stage: str) -> int:
    """A record from before records named their graph's capacity (issue 48): its graph held the torchtpu-vllm
    stack's pages as they were then, upstream vLLM's hybrid block (64 x ceil(state page / (64 x KV bytes a token a
    layer)), 5,120 tokens for the one-chip K3-width model), not today's 16-token page."""
    from k3plan.step.cache import stack_kv_bytes_per_token_layer, state_bytes_per_layer
    from k3plan.step.memory import cache_terms

    spec, st = setup.model.spec, setup.stack
    c = cache_terms(
        spec,
        kv_layer=stack_kv_bytes_per_token_layer(spec, st),
        replicate_across_tp=st.kv_cache.replicate_across_tp,
        state_layer=state_bytes_per_layer(spec, st),
        shard_state_by_heads=st.state.shard_by_heads,
        align_tokens=64,
        hybrid_paging=True,
        tp=setup.parallel.tp,
    )
    block = int(c.block_tokens)
    tokens = params.context if stage == "decode" else min(params.prefill_tokens, params.context)
    return math.ceil(tokens / block) * block


def reprice(
    record: ProbeRecord,
    *,
    efficiency: list[tuple[ProbeRecord, Path]],
    hardware: str,
    alternate: Optional[dict[str, float]] = None,
):
    """The expected time of a K3-width step record's point, from today's model (step_op_costs) and the given
    efficiency records (with their paths): how a committed measurement is held against a model changed since
    (benchmarks/step_expected.py; tests/probes/test_step_record.py). ``alternate``: the compiled step's placement
    of the tiled experts' intermediates (probes/step/alternate.py) where the record predates its
    ``alternate_memory``. -> speed.expected.StageTime."""
    from k3plan.hardware import load_hardware
    from k3plan.speed.curves import build_curves
    from k3plan.speed.expected import expected_time
    from k3plan.speed.peaks import Peaks

    require(record.probe == "step" and record.mode in ("decode", "prefill"), "reprice: a step record of one stage")
    pt = record.points[0].params
    stage = str(record.mode)
    params = StepParams(
        width="k3",
        batch=int(pt["batch"]) if stage == "decode" else 1,
        context=int(pt["context"]),
        prefill_tokens=int(pt["tokens"]) if stage == "prefill" else 1024,
        layers=int(pt["layers"]),
        experts=int(pt["experts"]),
        stages=(stage,),
        stack=str(record.params["stack"]) if "expert_format" in record.params else None,  # grid records name theirs
        expert_format=str(record.params.get("expert_format", "bf16")),
        alternate=tuple(sorted((pt.get("alternate_memory") or alternate or {}).items())),
    )
    require(str(record.params.get("width")) == "k3", "reprice: a --width k3 step record")
    setup = step_setup(params, hardware=hardware)
    cap = record.params.get("capacity_tokens")
    params = replace(params, capacity_tokens=int(cap) if cap else _legacy_capacity(setup, params, stage))
    peaks = Peaks.from_hardware(load_hardware(hardware))
    curves = build_curves(efficiency, peaks=peaks)
    floor = dispatch_floor([r for r, _ in efficiency])
    return expected_time(step_op_costs(setup, params, stage=stage, floor=floor), peaks=peaks, curves=curves)
