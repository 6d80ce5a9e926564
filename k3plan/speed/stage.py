"""Expected time beside the ceiling for one Setup's decode step and prompt prefill (issue 17 item 5).

The ops are the step description's (k3plan/step/ops.py, as ``decode_terms`` and ``collective_ops``
build them for ``roofline``), mapped onto speed.ops.OpCost and timed by ``expected_time`` against
the efficiency curves of the hardware's device kind:

    decode   one step of ``batch`` sequences at ``context`` tokens, a device (the slowest)
    prefill  one prompt of ``prompt`` tokens in chunks of ``chunk``: the sum over its chunks, the
             i-th ending at min(i x chunk, prompt) tokens; a chunk's tokens are one DP group's and
             route through the EP group (the other groups idle: a single prompt's TTFT)

The peaks are the hardware spec's (never a probe-substituted bandwidth: the efficiency curves are
ceiling / measured against those same peaks). Records: an Evidence value's (k3plan.evidence.value): the ones
k3plan ships (k3plan/evidence/probes) plus a user's ``--probes DIR``, read alike from any folder; where none is
of the device kind (nor transferable from another TPU's), every op runs at its ceiling and the output says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from k3plan.roofline.comm import collective_args
from k3plan.speed.expected import KindTime, KindTimes, StageTime, expected_time
from k3plan.speed.peaks import Peaks
from k3plan.speed.terms import TermShare
from k3plan.structs import Frozen, fields, replace

if TYPE_CHECKING:
    from k3plan.evidence.value import Evidence

_Frozen = Frozen


class ExpectedSpeed(_Frozen):
    device_kind: str
    records: str  # where the efficiency records came from, or why none were used
    records_used: tuple[str, ...]  # record files that set a figure: an op's efficiency or an engine term's time
    records_transferred: tuple[str, ...] = ()  # of those, another TPU's (issue 38: transferred, labelled)
    decode: StageTime  # one decode step (TPOT)
    prefill: StageTime  # the whole prompt, its chunks summed (TTFT)
    prefill_chunks: int
    batch: int
    context_tokens: int
    # every registered step term: ON or not, what it adds to the decode step and the prefill, its source (speed.terms)
    terms: tuple[TermShare, ...] = ()


def curves_for(peaks: Peaks, evidence):
    """(EfficiencyCurves or None, a line saying which records set the efficiencies or why none), from the records
    ``evidence`` holds (the shipped ones plus a user's --probes folders); read once a value and device kind."""
    from k3plan.evidence.value import evidence_of

    ev = evidence_of(evidence)
    return ev.memo(("curves", repr(peaks)), lambda: _curves_for(peaks, ev))


def _curves_for(peaks: Peaks, ev: Evidence):
    from k3plan.speed.curves import VIEWS, load_curves

    where = ev.shown()
    records = ev.records
    if not records:
        return None, f"ceilings: no probe records ({where}) for {peaks.device_kind}"
    curves = load_curves(records, peaks=peaks)
    if not curves.curves:
        return None, f"ceilings: no usable probe record of {peaks.device_kind} in {where}"
    counted = [c for k, c in curves.curves.items() if k not in VIEWS]  # a view re-reads records another curve counts
    moved = sorted({p.transferred_from for c in counted for p in c.points if p.transferred_from is not None})
    own = sum(1 for c in counted if not any(p.transferred_from for p in c.points))
    if moved:  # issue 38: another TPU's matmul, HBM and engine-kernel (gmm_v2) efficiency, labelled
        n = len(counted) - own
        return curves, (
            f"efficiency records of {peaks.device_kind} in {where} ({own} curves) and {n} curves transferred "
            f"from {', '.join(moved)} (matmul, HBM and the engine's gmm_v2 only: the engine runs them as the probe did)"
        )
    return curves, f"efficiency records of {peaks.device_kind} in {where} ({len(counted)} curves)"


def _send_ops(setup, *, tokens: int) -> list:
    """Under ``--pp``: the stage-to-stage send of a step over ``tokens`` tokens as one op, on the link
    the bound's ``comm_cost`` uses (``roofline.comm.pipeline_sends`` / ``pipeline_link``); else none."""
    from k3plan.roofline.comm import pipeline_link, pipeline_sends

    p2p = pipeline_sends(setup, tokens=tokens)
    if p2p is None:
        return []
    from k3plan.step.p2p import send_op

    return [send_op(p2p, tp=setup.parallel.tp, link=pipeline_link(setup))]


def decode_stage(setup, *, batch: int, context: int, peaks, curves, histogram=None, weights=None, terms=None):
    """One decode step's expected time (a StageTime): its ops (``decode_op_costs``) below their ceilings, plus the
    registered terms that are ON (``speed.terms``: the engine's fixed terms a step, its small kernels as a TPU timed
    them, the routed experts of the busiest EP rank, ...; ``terms`` None: the admitted ones) -- the one assembly
    roofline, fit, plan and report price a decode step with."""
    from k3plan.speed.overheads import add_terms

    stage, extra = decode_step_terms(
        setup,
        batch=batch,
        context=context,
        peaks=peaks,
        curves=curves,
        histogram=histogram,
        weights=weights,
        terms=terms,
    )
    return add_terms(stage, extra)


def decode_step_terms(setup, *, batch: int, context: int, peaks, curves, histogram=None, weights=None, terms=None):
    """(the decode step's ops' StageTime, the registered terms ON that apply to it): ``decode_stage`` before the
    terms join it."""
    from k3plan.speed.terms import StepInput, step_terms, term_key
    from k3plan.step.comm import padded_tokens
    from k3plan.step.memory import cdiv
    from k3plan.step.stages import microbatch

    ops = decode_op_costs(setup, batch=batch, context=context, histogram=histogram, weights=weights)
    stage = expected_time(ops, peaks=peaks, curves=curves)
    par, stack = setup.parallel, setup.stack
    micro = microbatch(batch, par.pp)
    padded = padded_tokens(micro, par.dp, stack.token_buckets.min_tokens if stack.token_buckets else None)
    step = StepInput(
        key=term_key(setup, stage="decode", ops=ops),
        setup=setup,
        ops=ops,
        stage=stage,
        curves=curves,
        rows=int(padded),
        context=context,
        sequences=cdiv(micro, par.dp),
        ep_tokens=min(micro, cdiv(micro, par.dp) * max(1, par.ep // par.tp)),  # as step.decode.decode_terms routes
        histogram=histogram,
    )
    return stage, step_terms(step, terms)


def decode_op_costs(
    setup, *, batch: int, context: int, histogram=None, weights=None, graph=None, engine: bool = True
) -> list:
    """One decode step's ops (compute from ``decode_terms``, collectives from ``collective_ops`` over the rows
    the engine pads the step to where the stack declares its compiled sizes (``Stack.token_buckets``), the
    pipeline send) as OpCost. Under ``--pp`` the step is a microbatch's (``step.stages.microbatch``), as
    ``roofline.bounds.decode_bound`` counts it: the batch advances a token in that time. ``engine`` False: the
    step as a graph of its own rows runs it (``probe step``'s compiled step: no bucket padding, no kernel tiling).
    ``graph`` (step.graph.ValidateGraph): the step timed is k3plan validate's own graph, whose extra HBM ops are
    added; None (every engine's step): none."""
    from k3plan.step.cache import cache_layout
    from k3plan.step.compute import dtype_of_setup
    from k3plan.step.decode import decode_terms
    from k3plan.step.dsv4_cache import stack_sizes
    from k3plan.step.gmm import expert_rows_of_setup, kernel_curve_of_setup
    from k3plan.step.ops import collective_ops, to_op_costs, weight_groups_of_setup
    from k3plan.step.stages import microbatch

    a = collective_args(setup)
    if not engine:  # validate's own graph reduces a LatentMoE's latent and hidden outputs in one all-reduce
        a["latent_calls"] = 1
    spec, par = a.pop("spec"), setup.parallel
    batch = microbatch(batch, par.pp)
    layout = cache_layout(spec=spec, stack=setup.stack, parallel=par)
    # the compiled size the engine pads the step to (Stack.token_buckets: each DP group's rows), which its TP
    # collectives carry and its grouped matmul's lhs holds; the padded rows touch no expert and sample nothing
    from k3plan.step.comm import padded_tokens

    buckets = setup.stack.token_buckets if engine else None
    rows = padded_tokens(batch, par.dp, buckets.min_tokens if buckets else None)
    routed = expert_rows_of_setup(setup) if engine else None
    expert_rows = (
        routed
        if routed is None or rows == batch
        else lambda r, t, size_m: routed(r, t, rows * spec.moe.top_k)  # gmm_v2's lhs: the padded rows x top-k
    )
    d = decode_terms(
        spec,
        dense_bytes=0,
        expert_bytes=0,
        dense_params=0,
        expert_params=0,
        kv_bytes_per_token=layout.kv_bytes_per_token,
        state_bytes_per_sequence=layout.state_bytes_per_slot,  # one slot: what the step reads
        tp=par.tp,
        dp=par.dp,
        ep=par.ep,
        batch=batch,
        context=context,
        hbm_bw=1.0,  # the times decode_terms adds are not read here: only its ops
        flops=1.0,
        bw_efficiency=1.0,
        mfu=1.0,
        comm_s=0.0,
        histogram=histogram,
        weights=weights if weights is not None else weight_groups_of_setup(setup),
        expert_rows=expert_rows,
        dsv4_sizes=stack_sizes(spec, setup.stack.name),
    )
    coll = collective_ops(spec, **a, tokens=rows, sequences=batch)
    out = to_op_costs(
        d.ops + coll + _send_ops(setup, tokens=batch),
        dtype_of=dtype_of_setup(setup),
        curve_of=kernel_curve_of_setup(setup) if engine else None,
        stage="decode" if engine else None,
    )
    out = _f32_experts(out, graph)
    return out + _graph_ops(setup, graph, stage="decode", rows=batch, weights=weights, histogram=histogram)


def prefill_op_costs(setup, *, chunk: int, context: int, weights=None, graph=None, engine: bool = True) -> list:
    """One prefill chunk of ``chunk`` tokens ending at ``context`` tokens, a device, as OpCost (with the
    chunk's stage-to-stage send under ``--pp``); ``engine`` and ``graph`` as ``decode_op_costs``'."""
    return prefill_parts(setup, chunk=chunk, weights=weights, graph=graph, engine=engine).at(context)


class PrefillParts:
    """The OpCost of a prefill chunk of one size, split by what moves with where it ends: ``head`` (the weights' ops)
    and ``tail`` (the KDA scan, the collectives, the send, validate's graph ops) are the same wherever the chunk ends,
    built once; ``at(context)`` adds the attention side's ops there (``step.ops.prefill_attention_ops``: MLA's, or
    DeepSeek-V4's with its compressors and hyper-connections) -- a prompt's chunks of one size differ in those alone."""

    def __init__(self, head: list, attention: Callable[[int], list], tail: list) -> None:
        self.head, self.attention, self.tail = head, attention, tail

    def at(self, context: int) -> list:
        """The chunk ending at ``context`` tokens: ``prefill_op_costs``' list."""
        return self.head + self.attention(context) + self.tail


def prefill_parts(setup, *, chunk: int, weights=None, graph=None, engine: bool = True) -> PrefillParts:
    """``prefill_op_costs`` of ``chunk`` tokens at any context (``PrefillParts``)."""
    from k3plan.step.cache import cache_layout
    from k3plan.step.compute import dtype_of_setup
    from k3plan.step.dsv4_cache import stack_sizes
    from k3plan.step.gmm import expert_rows_of_setup, kernel_curve_of_setup
    from k3plan.step.ops import (
        collective_ops,
        prefill_attention_ops,
        prefill_chunk_ops,
        to_op_costs,
        weight_groups_of_setup,
    )
    from k3plan.step.work import experts_touched

    a = collective_args(setup)
    if not engine:  # validate's own graph reduces a LatentMoE's latent and hidden outputs in one all-reduce
        a["latent_calls"] = 1
    spec, par = a.pop("spec"), setup.parallel
    layout = cache_layout(spec=spec, stack=setup.stack, parallel=par)
    moe = spec.moe
    weight, state = prefill_chunk_ops(
        spec,
        weights=weights if weights is not None else weight_groups_of_setup(setup),
        state_bytes_per_sequence=layout.state_bytes_per_slot,  # one slot: what the step reads
        tp=par.tp,
        chunk=chunk,
        ep_tokens=chunk,
        touched=experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=chunk),
        expert_rows=expert_rows_of_setup(setup) if engine else None,
    )
    coll = collective_ops(spec, **a, tokens=chunk, sequences=1)  # one prompt's chunk: one row sampled
    dtype_of = dtype_of_setup(setup)
    curve_of = kernel_curve_of_setup(setup) if engine else None
    stage = "prefill" if engine else None
    sizes = stack_sizes(spec, setup.stack.name)

    def costs(ops: list) -> list:
        out = to_op_costs(ops, dtype_of=dtype_of, curve_of=curve_of, stage=stage)
        if graph is not None:  # validate's graph runs its own chunked KDA: that form's curve where it was probed
            out = [_validate_kda(o, spec, chunk) if o.kind == "kda_chunked" else o for o in out]
        return _f32_experts(out, graph)

    def attention(context: int) -> list:
        kv = layout.kv_bytes_per_token
        return costs(
            prefill_attention_ops(spec, kv_bytes_per_token=kv, tp=par.tp, chunk=chunk, context=context, sizes=sizes)
        )

    tail = costs(state + coll + _send_ops(setup, tokens=chunk))
    return PrefillParts(
        costs(weight), attention, tail + _graph_ops(setup, graph, stage="prefill", rows=chunk, weights=weights)
    )


def _f32_experts(ops: list, graph) -> list:
    """validate's graph under f32 activations (jax-native) runs its routed experts' ragged_dots on f32 operands: the
    curve of that ragged_dot against the bf16 peak (speed.curves F32_PASSES; the 1,024-token prefill profile: 26.8
    ms against 7.8 in bf16 for the same rows) where it was probed; every other graph and every engine: unchanged."""
    if graph is None or graph.activation_bytes != 4:
        return ops
    from k3plan.speed.curves import F32_PASSES
    from k3plan.structs import replace

    return [replace(o, curve=F32_PASSES) if o.kind == "grouped_matmul" and o.curve is None else o for o in ops]


def _validate_kda(op, spec, tokens: int):
    """validate's chunked KDA op priced on its own form's curve (``probe kda --impl validate``), with the FLOPs that
    curve's efficiency is measured against (``step.kda.kda_flops_per_token``, chunked: the intra-chunk products
    too), so the record's seconds a token transfer as measured; the op list's 3 [d, d] products a token a head are
    ~2/3 of them at K3's heads and chunk (an efficiency taken on one count and applied to the other read the v5e
    chunked scan 1.6x fast)."""
    from k3plan.speed.curves import VALIDATE_KDA
    from k3plan.step.kda import kda_flops_per_token
    from k3plan.structs import replace

    d = spec.kda.head_dim
    fpt = kda_flops_per_token(path="chunked", heads=int(op.heads), dk=d, dv=d, chunk=int(op.chunk))
    return replace(op, curve=VALIDATE_KDA.format(chunk=op.chunk), flops=float(fpt * tokens))


def _graph_ops(setup, graph, *, stage: str, rows: int, weights=None, histogram=None) -> list:
    if graph is None:
        return []
    from k3plan.step.graph import graph_ops
    from k3plan.step.ops import weight_groups_of_setup
    from k3plan.step.work import experts_touched

    groups = weights if weights is not None else weight_groups_of_setup(setup)
    moe = setup.model.spec.moe
    share = 1.0
    if moe is not None and moe.num_experts:
        touched = (
            sum(1 for h in histogram if h > 0)
            if histogram is not None
            else experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=rows)
        )
        share = float(touched) / moe.num_experts
    return graph_ops(
        setup.model.spec,
        weights=groups,
        graph=graph,
        stage=stage,
        rows=rows,
        tp=setup.parallel.tp,
        touched_share=share,
    )


def add_stages(stages: list[StageTime]) -> StageTime:
    """Several stages run one after another (a prompt's chunks): times summed, ops merged by name."""
    first = stages[0]
    by_kind = KindTimes(
        **{
            k: KindTime(
                ceiling_s=sum(getattr(s.by_kind, k).ceiling_s for s in stages),
                expected_s=sum(getattr(s.by_kind, k).expected_s for s in stages),
            )
            for k in fields(KindTimes)
        }
    )
    # by name: [its first OpTime, how many, ceiling_s, expected_s, scheduled_s], each added in the stages' order
    merged: dict[str, list] = {}
    for s in stages:
        for o in s.ops:
            m = merged.get(o.name)
            if m is None:
                merged[o.name] = [o, 1, o.ceiling_s, o.expected_s, o.scheduled_s]
            else:
                m[1] += 1
                m[2] = m[2] + o.ceiling_s
                m[3] = m[3] + o.expected_s
                m[4] = None if m[4] is None else m[4] + (o.scheduled_s or 0.0)
    ops = {
        name: o if n == 1 else replace(o, ceiling_s=c, expected_s=e, scheduled_s=sched)
        for name, (o, n, c, e, sched) in merged.items()
    }
    return StageTime(
        device_kind=first.device_kind,
        ceiling_s=sum(s.ceiling_s for s in stages),
        expected_s=sum(s.expected_s for s in stages),
        by_kind=by_kind,
        labels=tuple(dict.fromkeys(label for s in stages for label in s.labels)),
        ops=tuple(ops.values()),
        assumptions=first.assumptions,
    )


def expected_speed(
    setup,
    *,
    batch: int,
    context_tokens: int,
    prompt_tokens: int,
    chunk_tokens: int,
    evidence: Evidence | None = None,
    histogram=None,
    peaks: Peaks | None = None,
    read: tuple | None = None,
    terms: frozenset[str] | None = None,
) -> ExpectedSpeed:
    """Decode step and prompt prefill of one Setup: ceiling and expected, by op kind, labelled. ``read``: what
    ``curves_for(peaks, evidence)`` answered, where the caller has read the records already (a question asks the
    model at several workloads: speed.serving's ModelAt). ``terms``: the registered terms ON (``speed.terms``; None:
    the admitted ones)."""
    from k3plan.step.ops import weight_groups_of_setup

    peaks = peaks or Peaks.from_hardware(setup.hardware)
    curves, records = read if read is not None else curves_for(peaks, evidence)
    weights = weight_groups_of_setup(setup)
    from k3plan.speed.overheads import add_terms  # issue 38: the engine's fixed terms a step
    from k3plan.speed.terms import StepInput, shares, step_terms, term_key

    dec0, dec_terms = decode_step_terms(
        setup,
        batch=batch,
        context=context_tokens,
        peaks=peaks,
        curves=curves,
        histogram=histogram,
        weights=weights,
        terms=terms,
    )
    dec = add_terms(dec0, dec_terms)
    pre_terms: tuple = ()
    chunk = min(chunk_tokens, prompt_tokens)
    n = math.ceil(prompt_tokens / chunk)
    # a prompt's chunks of one size repeat all but their attention ops: each size's ops built once (PrefillParts), each
    # distinct op timed once (expected_time's cache) and priced once by a term that prices ops one by one (memo)
    parts: dict[int, PrefillParts] = {}
    cache: dict = {}
    memo: dict = {}
    chunks = []
    for i in range(n):
        rows, context = min(chunk, prompt_tokens - i * chunk), min((i + 1) * chunk, prompt_tokens)
        if rows not in parts:
            parts[rows] = prefill_parts(setup, chunk=rows, weights=weights)
        ops = parts[rows].at(context)
        st = expected_time(ops, peaks=peaks, curves=curves, cache=cache)
        step = StepInput(
            key=term_key(setup, stage="prefill", ops=ops),
            setup=setup,
            ops=ops,
            stage=st,
            curves=curves,
            rows=rows,
            context=context,
            memo=memo,
        )
        chunk_terms = step_terms(step, terms)
        pre_terms += chunk_terms
        chunks.append(add_terms(st, chunk_terms))  # every chunk is an engine step
    pre = add_stages(chunks)
    used = records_of(dec, pre)
    moved = tuple(
        dict.fromkeys(
            o.efficiency.record_path
            for s in (dec, pre)
            for o in s.ops
            if o.efficiency.measured and o.efficiency.record_path and "transferred to" in o.efficiency.label
        )
    )
    return ExpectedSpeed(
        device_kind=peaks.device_kind,
        records=records,
        records_used=used,
        records_transferred=moved,
        decode=dec,
        prefill=pre,
        prefill_chunks=n,
        batch=batch,
        context_tokens=context_tokens,
        terms=shares(dec_terms, pre_terms, terms),
    )


def records_of(*stages: StageTime) -> tuple[str, ...]:
    """Every record that set a figure of ``stages``: an op's measured efficiency, or an engine term's measured
    kernel time (speed.terms: probe attnres, moe-glue, mla-engine; gpu-gemm's published GEMM tables; a decode
    step's kernel-floor trace), each once,
    first use first."""
    out: dict[str, None] = {}
    for s in stages:
        for o in s.ops:
            path = o.efficiency.record_path
            if path and (o.efficiency.measured or o.category == "overhead"):
                out.update(dict.fromkeys(path.split(", ")))
    return tuple(out)


def expected_time_of(setup, spec_hardware, workload, *, evidence: Evidence | None, histogram=None) -> ExpectedSpeed:
    """``expected_speed`` at a command's workload (``roofline``'s: prompt = context), peaks of ``spec_hardware``."""
    return expected_speed(
        setup,
        batch=workload.batch,
        context_tokens=workload.context_tokens,
        prompt_tokens=workload.context_tokens,
        chunk_tokens=workload.prefill_chunk_tokens,
        evidence=evidence,
        histogram=histogram,
        peaks=Peaks.from_hardware(spec_hardware),
    )
