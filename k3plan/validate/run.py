"""One validation: setup -> budget -> abstract model -> AOT compile -> comparison and census.

Call ``prepare_target`` before anything imports jax (it sets XLA_FLAGS for fake CPU devices).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional

from k3plan.budget.fit import DEFAULT_PREFILL_CHUNK_TOKENS, FitResult, Workload, fit
from k3plan.errors import K3PlanError
from k3plan.setup import Setup
from k3plan.step.cache import cache_layout
from k3plan.step.live import form_for
from k3plan.step.structure import LayerPlan, layer_plan
from k3plan.structs import replace
from k3plan.units import fmt_gib
from k3plan.validate.collective_check import CollectiveCheck
from k3plan.validate.result import (
    CensusReport,
    Devices,
    Environment,
    JobAbstract,
    JobBudget,
    JobResult,
    OomReport,
    OpCount,
    Split,
    TermReason,
    TermReport,
    ValidationResult,
)
from k3plan.validate.structure import truncate_setup
from k3plan.validate.targets import Target, describe_devices, devices_for, libtpu_version, prepare

STAGES = ("prefill", "decode")


@dataclass(frozen=True)
class Job:
    stage: str
    tokens: int  # prefill chunk tokens (decode: 1)
    batch: int  # sequences in the cache
    context: int  # cache capacity asked for, tokens

    @property
    def label(self) -> str:
        if self.stage == "prefill":
            return f"prefill {self.tokens:,} tokens (context {self.context:,})"
        return f"decode batch {self.batch} at context {self.context:,}"


def prepare_target(target: Target, setup: Setup) -> None:
    prepare(target, devices=setup.topology.devices)


def plan_jobs(*, setup: Setup, stage: str, tokens: list[int], batch: int, context: int) -> list[Job]:
    if stage not in (*STAGES, "both"):
        raise K3PlanError(f"--stage {stage!r}: expected prefill, decode or both")
    if setup.model.spec.dsv4 is not None:  # issue #37 item 4: not built yet; refused rather than compiled as MLA
        raise K3PlanError(
            "validate: DeepSeek-V4's compressed attention (CSA/HCA, indexer, mHC) has no abstract model yet; "
            "fit, plan and roofline price it analytically (k3plan/step/dsv4_cache.py, k3plan/step/dsv4_ops.py)"
        )
    for flag, v in (("--batch", batch), ("--context", context), *(("--tokens", t) for t in tokens)):
        if v < 1:
            raise K3PlanError(f"{flag} {v}: expected a positive integer")
    if setup.plan.uneven:  # JAX shardings split every dim evenly (jax/_src/sharding.py IndivisibleError)
        raise K3PlanError(
            f"validate: {setup.plan.uneven[0].describe()} is the engine's uneven placement, which a JAX "
            f"sharding cannot express; expected an --ep that divides the experts"
        )
    dp = setup.parallel.dp
    pf_batch = dp if setup.stack.kv_cache.split_across_dp else 1
    jobs = []
    if stage in ("prefill", "both"):
        jobs += [Job("prefill", t, pf_batch, max(context, t)) for t in tokens]
    if stage in ("decode", "both"):
        jobs.append(Job("decode", 1, batch, context))
    return jobs


def _budget(setup: Setup, job: Job) -> FitResult:
    chunk = job.tokens if job.stage == "prefill" else min(DEFAULT_PREFILL_CHUNK_TOKENS, job.context)
    return fit(setup, Workload(context_tokens=job.context, batch=job.batch, prefill_chunk_tokens=chunk))


def run_job(
    *,
    setup: Setup,
    target: Target,
    devices: list,
    lplan: LayerPlan,
    job: Job,
    on_phase: Optional[Callable[[str], None]] = None,
) -> JobResult:
    """``on_phase(name)`` as each phase starts: build (abstract model), lower, compile."""
    if on_phase:
        on_phase("build")
    from k3plan.validate import abstract_model as am
    from k3plan.validate.compare import Accounting, compare, unexplained
    from k3plan.validate.compile import compile_step
    from k3plan.validate.hlo_census import census
    from k3plan.validate.layouts import padding_by_group
    from k3plan.validate.steps import jitted

    layout = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel)
    capacity = am.capacity_tokens(layout, job.context)
    ab, inputs = am.build(setup, devices, lplan, stage=job.stage, batch=job.batch, tokens=job.tokens, capacity=capacity)
    budget = _budget(setup, job)
    pd = budget.per_device
    prefill = job.stage == "prefill"
    acc = Accounting(
        budget_weights=pd.weights_bytes,
        budget_kv=pd.kv_bytes,
        budget_kv_dense=_dense_kv_bytes(setup, pd.kv_bytes, layout.kv_bytes_per_token_layer),
        budget_state=pd.state_bytes,
        budget_state_unpadded=pd.sequences * layout.n_kda * layout.state_bytes_per_layer_unpadded,
        budget_temp=budget.temp.prefill_bytes if prefill else budget.temp.decode_bytes,
        abstract_weights=ab.weights_bytes(),
        abstract_cache=ab.cache_bytes(),
        abstract_inputs=am.inputs_bytes(inputs),
        platform=target.platform,
        weight_notes=tuple(n for n, _ in ab.weight_notes),
    )
    fn, args = jitted(job.stage, setup, ab, inputs)
    res = compile_step(fn, args, on_phase=on_phase)
    st = res.stats
    if res.hlo_text:
        import jax

        counts = {
            "weights": len(jax.tree.leaves(ab.params)),
            "cache": len(jax.tree.leaves(ab.cache)),
            "inputs": len(jax.tree.leaves(inputs)),
        }
        acc = dataclasses.replace(acc, padding=padding_by_group(res.hlo_text, counts))
    usable = setup.hardware.usable_bytes_per_device
    oom, memory, terms_out, census_out, unexplained_bytes = None, None, [], None, None
    collectives = None
    if res.oom is not None:
        fits, verdict = False, f"the compiler refused it: {res.oom.message}"
        oom = OomReport(
            required_bytes=res.oom.required_bytes, available_bytes=res.oom.available_bytes, message=res.oom.message
        )
    else:
        terms = compare(
            acc=acc,
            argument=None if st is None else st.argument_bytes,
            alias=None if st is None else st.alias_bytes,
            output=None if st is None else st.output_bytes,
            temp=None if st is None else st.temp_bytes,
        )
        fits, verdict = _verdict(st, target=target, usable=usable, hardware=setup.hardware.name)
        hlo_census = census(res.hlo_text) if res.hlo_text else None
        memory = st
        terms_out = [_term_report(t) for t in terms]
        census_out = None if hlo_census is None else _census_report(hlo_census)
        collectives = (
            None
            if hlo_census is None
            else _collective_check(
                setup, job, hlo_census, am.padded_batch(setup, job.batch), ragged=target.platform == "tpu"
            )
        )
        unexplained_bytes = unexplained(terms)
    local_run = None
    if target.local:
        from k3plan.validate.local import run_once

        local_run = run_once(res.compiled if fits else None, ab, inputs, job=job, fit_fits=bool(budget.fits), fits=fits)
    return JobResult(
        local_run=local_run,
        stage=job.stage,
        label=job.label,
        tokens=job.tokens,
        batch=job.batch,
        context=job.context,
        cache_capacity_tokens=capacity,
        lower_s=round(res.lower_s, 3),
        compile_s=round(res.compile_s, 3),
        budget=JobBudget(
            weights_bytes=pd.weights_bytes,
            kv_bytes=pd.kv_bytes,
            state_bytes=pd.state_bytes,
            temp_bytes=acc.budget_temp,
            temp_terms=budget.temp.prefill_terms if prefill else budget.temp.decode_terms,
        ),
        abstract=JobAbstract(
            weights_bytes=acc.abstract_weights, cache_bytes=acc.abstract_cache, inputs_bytes=acc.abstract_inputs
        ),
        fits=fits,
        oom=oom,
        memory=memory,
        terms=terms_out,
        census=census_out,
        unexplained_bytes=unexplained_bytes,
        verdict=verdict,
        collectives=collectives,
    )


def _verdict(st, *, target: Target, usable: int, hardware: str) -> tuple[bool, str]:
    """Whether the compiled step fits a device and the line that says so: on TPU arguments + outputs -
    alias + temp; on CPU without temp (the CPU compiler's temp is not representative of TPU)."""
    resident = (
        None
        if st is None or st.argument_bytes is None
        else (st.argument_bytes + (st.output_bytes or 0) - (st.alias_bytes or 0))
    )
    if target.platform == "tpu":
        total = None if resident is None or st is None else resident + (st.temp_bytes or 0)
        return (
            True if total is None else total <= usable,
            f"compiled for {target.name}: arguments + outputs - alias + temp = "
            f"{fmt_gib(total)} of {fmt_gib(usable)} usable"
            if total is not None
            else "compiled",
        )
    return (
        True if resident is None else resident <= usable,
        f"CPU backend: arguments + outputs - alias = {fmt_gib(resident, 3)} of {fmt_gib(usable)} usable "
        f"on {hardware} (temp excluded: CPU temp is not representative of TPU)"
        if resident is not None
        else "CPU backend: memory_analysis() unavailable",
    )


def _collective_check(setup: Setup, job: Job, hlo_census, batch: int, *, ragged: bool) -> CollectiveCheck:
    """The op list's collectives vs the compiled HLO's, kind by kind (k3plan.validate.collective_check)."""
    from k3plan.validate.collective_check import check, exceptions_for, step_ops

    tokens = job.tokens * batch if job.stage == "prefill" else batch
    ops = step_ops(setup, stage=job.stage, tokens=tokens, sequences=batch)
    return check(
        stack=setup.stack.name,
        stage=job.stage,
        ops=ops,
        hlo=hlo_census,
        exceptions=exceptions_for(setup, ragged=ragged),
    )


def _term_report(t) -> TermReport:
    """A validate.compare.Term with its derived figures."""
    return TermReport(
        name=t.name,
        predicted_bytes=t.predicted_bytes,
        compiled_bytes=t.compiled_bytes,
        reasons=[TermReason(why=r.why, bytes=r.bytes) for r in t.reasons],
        note=t.note,
        must_match=t.must_match,
        delta_bytes=t.delta_bytes,
        delta_pct=t.delta_pct,
        unexplained_bytes=t.unexplained_bytes,
    )


def _census_report(c) -> CensusReport:
    """A validate.hlo_census.Census: each collective kind's counts, and the while loops."""
    ops = tuple(
        OpCount(
            op=k, count=v.count, bytes=v.bytes, in_loop=v.in_loop, executed=v.executed, executed_bytes=v.executed_bytes
        )
        for k, v in c.ops.items()
    )
    return CensusReport(ops=ops, while_loops=c.loops)


def environment(target: Target, devices: list) -> Environment:
    import jax

    return Environment(
        target=target.name,
        backend=target.platform,
        jax_version=jax.__version__,
        libtpu_version=libtpu_version() if target.platform == "tpu" else None,
        devices=Devices(**describe_devices(devices)),
        date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def model_notes(setup: Setup) -> list[str]:
    """What the abstract model runs for this model's experts and what it simplifies, from its inventory
    and family (a DeepSeek-V3 checkpoint has FP8 experts and no AttnRes: naming K3's would mislead)."""
    text = setup.model.inventory.text
    fmts = sorted({setup.stack.runtime_format(t.role, t.fmt) for t in text if t.role == "expert"})
    held = "/".join(f.upper() if f.startswith("mx") else f for f in fmts)
    out = [f"routed experts: {held} dequantized in form {form_for(setup.stack.name)!r} (k3plan/validate/experts.py)"]
    simplified = []
    if any("attn_res" in t.name for t in text):
        simplified.append("AttnRes simplified to a per-layer residual gate; SiTU as SiLU")
    if setup.model.spec.family == "kimi_linear":
        simplified.append("MLA NoPE (no rotary)")
    else:
        simplified.append("MLA rotary not applied; grouped top-k routing as one group")
    out.append("; ".join(simplified) + ": weights and cache exact")
    return out


def validate(
    *,
    setup: Setup,
    target: Target,
    jobs: list[Job],
    layers: Optional[int] = None,
    unroll: bool = False,
    on_job: Optional[Callable[[Job, Optional[JobResult]], None]] = None,
    on_phase: Optional[Callable[[Job, str], None]] = None,
) -> ValidationResult:
    """Runs every job; ``on_job(job, None)`` before and ``on_job(job, result)`` after each;
    ``on_phase(job, phase)`` as each phase of a job starts ("devices" once, before the first job;
    then build, lower, compile)."""
    if on_phase and jobs:
        on_phase(jobs[0], "devices")
    if layers is not None:
        setup = truncate_setup(setup, layers)
    spec = setup.model.spec
    lplan = layer_plan(mixers=spec.mixers, mlps=spec.mlps, unroll=unroll)
    devices = devices_for(target, count=setup.topology.devices)
    results = []
    for job in jobs:
        if on_job:
            on_job(job, None)
        r = run_job(
            setup=setup,
            target=target,
            devices=devices,
            lplan=lplan,
            job=job,
            on_phase=functools.partial(on_phase, job) if on_phase else None,
        )
        if target.local:
            from k3plan.validate.local import oom_boundary

            run = functools.partial(run_job, setup=setup, target=target, devices=devices, lplan=lplan)
            r = replace(r, oom_boundary=oom_boundary(run, job, fits=r.fits))
        results.append(r)
        if on_job:
            on_job(job, r)
    notes = list(setup.notes)
    if setup.stack.collectives.experts == "all_to_all":
        notes.append(
            f"stack {setup.stack.name} dispatches experts with all-to-all: the step routes each device's share of "
            "the tokens and dispatches / combines them with two fixed-capacity all_to_all a MoE layer (dropless "
            "buffers, ep x the mean share a call) on CPU, where XLA cannot compile ragged_all_to_all; a TPU target "
            "gets ragged_all_to_all after an all_to_all of the counts (k3plan/validate/dispatch.py)"
        )
    if setup.stack.collectives.experts == "allgather_reducescatter":
        dp = setup.parallel.dp
        notes.append(
            f"stack {setup.stack.name} runs vLLM's all-gather / reduce-scatter EP backend: "
            + (
                f"each of the {dp} DP ranks routes its rows, all-gathers them with their top-k over DP (one buffer), "
                "runs its experts on all rows, reduce-scatters the outputs back, then all-reduces over TP"
                if dp > 1
                else "with DP 1 the experts' sum is the TP all-reduce alone (use_all2all_kernels needs DP > 1)"
            )
            + " (k3plan/validate/layers.py _moe_agrs)"
        )
    notes += model_notes(setup)
    if target.platform == "cpu":
        notes.append(
            "CPU backend: argument/output/alias sizes are per device and exact; temp is not representative of TPU"
        )
    return ValidationResult(
        model=spec.name,
        hardware=setup.hardware.name,
        topology=setup.topology.text,
        parallel=Split(tp=setup.parallel.tp, ep=setup.parallel.ep, dp=setup.parallel.dp),
        stack=setup.stack.name,
        layers=spec.num_layers,
        layer_plan=lplan.describe(),
        environment=environment(target, devices),
        results=results,
        fits=all(r.fits for r in results),
        notes=notes,
    )


def ceil_div(a: int, b: int) -> int:
    return math.ceil(a / b)


def _dense_kv_bytes(setup, kv_bytes: int, kv_layer: int) -> int:
    """``kv_bytes`` (whole blocks of ``kv_layer`` bytes a token a layer) with the dense MLA entry in place of the
    stack's padded one (kv_cache.layout): what the abstract model's cache holds."""
    from k3plan.engines.stack import updated
    from k3plan.step.cache import cache_layout

    st = setup.stack
    if st.kv_cache.layout is None or not kv_layer:
        return kv_bytes
    dense = updated(st, kv_cache=updated(st.kv_cache, layout=None))
    lay = cache_layout(spec=setup.model.spec, stack=dense, parallel=setup.parallel)
    return kv_bytes // kv_layer * lay.kv_bytes_per_token_layer
