"""The TPOT and TTFT k3plan stands behind, and the three-way comparison ceiling / model / measured
(issue 38 items 1-3).

Figures stood behind (``stands_behind``):
    TPOT  a serving benchmark of this configuration: measured at its workload, transferred elsewhere
          by the model's ratio (``evidence.benchmarks``); else the model's decode step where a probe
          record sets an op or a term of it (this device kind's, or another TPU's transferred, labelled);
          else the ceiling (roofline's decode bound), labelled: fit, plan and roofline print the same TPOT.
    TTFT  a serving benchmark, as above; else the model's expected TTFT where a probe record set an op
          or a term; else the ceiling (roofline's prefill bound). One TTFT, labelled.
    Each with its band (``ServingFigure.band_s``) and source: never the ceiling while a model exists
    (issue 46 item 7; tests/speed/test_headline_properties.py).
The model (``expected.*.expected_s``) is always computed without any serving benchmark.

Comparison (``compare``), for a benchmark at the asked workload: the model's own terms (ops at
their ceilings, efficiency below them from probe records, the engine's fixed terms of
``speed.overheads``) and the gap measured - model, split into named terms: what another published
recipe of the same configuration changes (its flags listed), for prefill the per-chunk and per-token
parts solved from two recipes with different chunk counts, and the remainder with what no source
here measures.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from k3plan.evidence.benchmarks import (
    Asked,
    ServingBenchmark,
    ServingFigure,
    asked,
    at_workload,
    matching,
    nearest,
    serving_figure,
)
from k3plan.evidence.value import Evidence
from k3plan.structs import Frozen, dump, replace

UNMEASURED = {
    "decode": (
        "device time beyond the model that no source here measures: the engine's grouped matmul (gmm_v2) on TPU7x "
        "beyond its TPU v5 lite record (probe gmm, int4 weights standing in for fp4, transferred), its attention "
        "and linear-attention (KDA) kernels on TPU7x (no probe record of TPU7x; the v5e records transfer for XLA "
        "matmuls, HBM streams and the engine's gmm_v2 only), HBM and matmul efficiency on "
        "TPU7x beyond v5e's, collective latency beyond the spec's chained call, the step's broadcast to and "
        "gather from every host (a multi-host executor) beyond one host's round trip; under a load (concurrency "
        "above 1) the prefill chunks of arriving requests that share the decode steps (plan --isl/--osl's "
        "scheduler prices them; one decode step does not); a profile of the engine's step on the slice (the "
        "repository's phased profiler, USE_PHASED_PROFILER) would split it"
    ),
    "prefill": (
        "not measured by any source here: the chunk's kernels below their ceilings on TPU7x beyond the v5e records "
        "(the engine's gmm_v2 at the chunk's rows on TPU7x beyond its TPU v5 lite record, its attention and "
        "linear-attention kernels: no probe record), the engine's per-chunk work beyond one host's round trip; a "
        "profile of one chunk would split it"
    ),
}

# what a chunk costs whatever its tokens that the model does not price (issue 38): read in the engine's code
PER_CHUNK_UNPRICED = (
    "priced in the model's own time a chunk where the records hold it: the engine's grouped matmul dequantizes a "
    "visited expert's whole fp4 weight tile (w13 and w2) to bf16 in VMEM at every visit, before the MXU "
    "(kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/megablox/gmm_v2.py inner_kernel, "
    "should_dequantize_before_matmul: quant block 32 < the MXU's 256 columns, @15e5264a), so a chunk's VPU work "
    "scales with the local experts it touches (at 512 tokens all 28 a device), not its rows: the kernel itself timed "
    "on TPU v5 lite (probe gmm, int4 weights with the same block-32 scales standing in for fp4, which Mosaic there "
    "refuses) and transferred as an efficiency against its ceiling (the experts' column); what remains is "
    "not priced by any source here. The engine's MLA kernel at its default blocks (16 queries against one "
    "16-token page a step: its tuned table has no entry for K3's bf16 cache at TP 32, and the nightly sets no "
    "--block-size) is in the model's own time a chunk, as probe mla-engine timed it on TPU v5 lite. Named in the engine's code, untimed: the MoE's SparseCore sort, gather and "
    "combine at a chunk's 8,192 routed rows, above the one-hot threshold of 511 (kowalski-4831/vllm-torchtpu "
    "src/vllm_torchtpu/layers/core/fused_moe_gmm.py resolve_onehot_permute_threshold @15e5264a); a chunk's host work"
)


_Frozen = Frozen


class Term(_Frozen):
    name: str
    seconds: float
    source: str


class StageComparison(_Frozen):
    stage: Literal["decode", "prefill"]
    ceiling_s: float  # the model's op list at the peaks, ops one after another (the expected table's ceiling)
    model_s: float  # expected.<stage>.expected_s (+ the engine's TTFT floor for prefill): no benchmark in it
    measured_s: float | None
    benchmark: str | None
    model_over_measured: float | None
    model_terms: tuple[Term, ...]
    gap_terms: tuple[Term, ...]  # sum to measured - model


class ServingComparison(_Frozen):
    tpot: ServingFigure
    ttft: ServingFigure
    decode: StageComparison
    prefill: StageComparison
    benchmarks: tuple[str, ...]  # every benchmark that matched the configuration


def configuration(setup) -> dict:
    """What a serving benchmark or an engine profile must match to speak for ``setup`` (``evidence.benchmarks.
    speaks_for``): model, hardware, topology, split and stack. The rest of the key (KV dtype, page, chunk,
    scheduling, batch) decides measured or transferred: ``asked_of``."""
    p = setup.parallel
    return {
        "model": setup.model.name,
        "hardware": setup.hardware.name,
        "topology": setup.topology.text,
        "tp": p.tp,
        "dp": p.dp,
        "ep": p.ep,
        "stack": setup.stack.name,
    }


def candidates(setup) -> tuple[ServingBenchmark, ...]:
    return matching(**configuration(setup), pp=setup.parallel.pp)


def asked_of(setup, *, batch: int, context: int, chunk: int, osl: int | None = None) -> Asked:
    """The question's key beyond the configuration: its stack's KV dtype, the page and scheduling the model prices,
    the workload (its OSL where the question has one)."""
    return asked(
        stack=setup.stack.name, kv_dtype=setup.stack.kv_cache.dtype, batch=batch, context=context, chunk=chunk, osl=osl
    )


class ModelAt:
    """The model's expected speed at a benchmark's workload (same setup), computed once a workload."""

    def __init__(self, setup, spec_hardware, *, evidence, terms: frozenset[str] | None = None):
        from k3plan.speed.terms import resolve

        self.setup, self.spec_hardware, self.evidence = setup, spec_hardware, evidence
        self.terms = terms  # the registered speed terms ON (speed.terms; None: the admitted ones)
        self.on = resolve(terms)
        self.cache: dict[tuple[int, int, int], Any] = {}  # (batch, context, chunk) -> ExpectedSpeed
        self.decodes: dict[tuple[int, int], Any] = {}  # (batch, context) -> the decode step's model (a StageTime)
        self.read: Any = None  # curves_for's answer for this question's records and peaks, read once
        self.used: dict[str, None] = {}  # every record the model's figures here read (issue 46: the JSON names them)
        self.served: dict[tuple, Any] = {}  # served_of / served_asked: the scheduler's run, computed once

    def peaks_and_curves(self):
        """(the spec's peaks, curves_for's answer): every workload of one question reads the same records, once."""
        from k3plan.speed.peaks import Peaks
        from k3plan.speed.stage import curves_for

        peaks = Peaks.from_hardware(self.spec_hardware)
        if self.read is None:
            self.read = curves_for(peaks, self.evidence)
        return peaks, self.read

    def speed(self, batch: int, context: int, chunk: int):
        key = (batch, context, min(chunk, context))
        if key not in self.cache:
            from k3plan.speed.stage import expected_speed

            peaks, read = self.peaks_and_curves()
            self.cache[key] = expected_speed(
                self.setup,
                batch=batch,
                context_tokens=context,
                prompt_tokens=context,
                chunk_tokens=chunk,
                evidence=self.evidence,
                peaks=peaks,
                read=read,
                terms=self.terms,
            )
            self.used.update(dict.fromkeys(self.cache[key].records_used))
        return self.cache[key]

    def of(self, b: ServingBenchmark):
        chunk = b.chunk_tokens if b.chunk_tokens is not None else b.workload.isl  # unpublished: the whole prompt
        return self.speed(b.workload.concurrency, b.workload.isl, chunk)

    def decode_step(self, batch: int, context: int):
        """The model's decode step alone, a StageTime (fit needs no prefill): ``expected_speed``'s decode, op for op."""
        for (b, c, _), x in self.cache.items():
            if (b, c) == (batch, context):
                return x.decode
        if (batch, context) not in self.decodes:
            from k3plan.speed.stage import decode_stage, records_of

            peaks, (curves, _) = self.peaks_and_curves()
            stage = decode_stage(self.setup, batch=batch, context=context, peaks=peaks, curves=curves, terms=self.terms)
            self.decodes[(batch, context)] = stage
            self.used.update(dict.fromkeys(records_of(stage)))
        return self.decodes[(batch, context)]

    def decode_s(self, batch: int, context: int) -> float:
        return float(self.decode_step(batch, context).expected_s)


def model_at(setup, spec_hardware, *, evidence, terms: frozenset[str] | None = None) -> ModelAt:
    """The model's expected speed of ``setup`` at any workload, computed once a workload, with the registered speed
    terms ``terms`` ON (``speed.terms``; None: the admitted ones): what the benchmark score (k3plan.app.score)
    prices each case with."""
    return ModelAt(setup, spec_hardware, evidence=evidence, terms=terms)


def model_records(*stages) -> tuple[str, ...]:
    """The probe records that set an op or a term of ``stages`` (this device kind's, or another TPU's transferred
    and labelled so): where there is one, the model is an estimate below the ceiling, and it is the figure where no
    benchmark speaks (plan's best estimate reads the same rule: ``plan.expected.ExpectedColumn``)."""
    from k3plan.speed.stage import records_of

    return records_of(*stages)


def _band(*figures: float) -> tuple[float, float]:
    return (min(figures), max(figures))


def engine_floor_s(model: ModelAt, *, family: bool = True) -> tuple[float, str]:
    """(the admitted TTFT floor of the engine that runs ``model``'s stack, that engine): what every measured TTFT holds
    beyond the model's run -- the per-request path, HTTP server, tokenizer, scheduler (terms floor / engine-floor,
    fitted by the admission on the published TTFTs: ``speed.terms.ttft_floor_s``; the pooled fit for an engine with
    none). (0, "") where no floor term is ON. ``family``: the engine x hardware's own floor where the admission
    fitted one (a family floor term: hardware-floor, lowc-floor, family-min-floor), else the engine's."""
    return stack_floor_s(model.setup, model.on, family=family)


def stack_floor_s(setup: Any, on: frozenset[str] | None = None, *, family: bool = True) -> tuple[float, str]:
    """``engine_floor_s`` for ``setup``'s stack under the terms ``on`` (None: the admitted ones), where no ModelAt
    is at hand (roofline's comparison when no benchmark speaks)."""
    from k3plan.engines.flags import launcher_of
    from k3plan.speed.terms import admitted, resolve, ttft_floor_s

    if "floor" not in (resolve(None) if on is None else on):
        return 0.0, ""
    engine = setup.stack.name  # a benchmark's engine is the stack it speaks for (engine_accepts)
    fitted = admitted().get("ttft_floor_ms", {})
    if engine not in fitted:
        # a stack with no published TTFT of its own is served by its launcher's front end (the per-request path the
        # floor is): dp-attention by SGLang's on a GPU, by vLLM's on a TPU (Engine.launcher_on)
        launcher = launcher_of(engine, setup.hardware.kind)
        engine = launcher if launcher in fitted else engine
    hardware = setup.hardware.name  # a family floor term: the family's own floor where the admission fitted one
    if family and f"{engine} x {hardware}" in fitted:
        return ttft_floor_s(engine, hardware), f"{engine} x {hardware}"
    return ttft_floor_s(engine), engine


def floor_phrase(floor_s: float, engine: str) -> str:
    """What the floor is, said once: whose, how long, where it was fitted."""
    from k3plan.speed.terms import admitted

    own = engine in admitted().get("ttft_floor_ms", {})
    whose = f"{engine}'s" if own else "the pooled (no published TTFT of " + (engine or "its engine") + ")"
    return f"{whose} TTFT floor {floor_s * 1e3:,.1f} ms (the per-request path, admitted.json)"


def floor_label(floor_s: float, engine: str) -> str:
    """The words a TTFT says its engine's floor with (empty without one)."""
    return f"; + {floor_phrase(floor_s, engine)}" if floor_s else ""


def loop_pass_s(model: ModelAt) -> float:
    """The fixed time each step that prefills holds ``model``'s engine loop for (term prefill-pass, where it is ON
    and applies to the stack): the engine's admitted TTFT floor (``engine_floor_s``). SGLang runs a prefill batch
    as a step of its own, and the fixed part of a TTFT is spent inside that step, not beside the loop: its
    DeepSeek-V4 prefill runs without a CUDA graph (the model is on SGLang's piecewise-CUDA-graph blacklist), so each
    prefill launches its kernels from the host. 0 where the term is OFF or does not apply. With the term
    pass-engine-floor the engine's floor, not its engine x hardware's (the family's floor in the TTFT alone)."""
    from k3plan.speed.terms import BY_NAME

    term = BY_NAME["prefill-pass"]
    if term.name not in model.on or not term.may_hold_for(model.setup):
        return 0.0
    return engine_floor_s(model, family="pass-engine-floor" not in model.on)[0]


def _no_benchmark(
    *,
    ceiling_tpot_s: float,
    ceiling_ttft_s: float | None,
    expected,
    why: str,
    decode,
    served: Any = None,
    floor: tuple[float, str] = (0.0, ""),
):
    """The figures where no serving benchmark speaks: each the model where a probe record set an op or a term of
    its stage (TPOT: ``decode``, the model's decode step; TTFT: ``expected``, the model at the
    workload), else the ceiling -- never the ceiling while such a model exists (issue 46 item 7). Each with its band:
    the model's between the ops' ceiling and it, the ceiling's between it and the model. ``served`` (plan
    --isl/--osl: a ServedWorkload, ``served_asked``): the model is the load as the engine serves it (the scheduler
    on the model's step), its band between the ceilings under the same load (``ceiling_*_s``: plan's scheduler on
    the bounds) and it. ``floor`` (``engine_floor_s``): added to the model's TTFT, as the score prices it."""
    mine = model_records(decode)
    load = f", under the load: {served.label}" if served is not None else ""
    model_tpot = float(decode.expected_s) if served is None else served.tpot_s
    if mine:
        tpot = ServingFigure(
            value_s=model_tpot,
            source="model",
            label=f"model: expected TPOT ({why}), efficiencies and kernel times from {', '.join(mine)}{load}",
            band_s=_band(decode.ceiling_s if served is None else ceiling_tpot_s, model_tpot),
        )
    else:
        tpot = ServingFigure(
            value_s=ceiling_tpot_s,
            source="ceiling",
            label=f"ceiling: roofline's decode bound ({why})" if served is None else f"ceiling ({why})",
            band_s=_band(ceiling_tpot_s, model_tpot),
        )
    if ceiling_ttft_s is None:
        return tpot, None
    pre = expected.prefill
    model_ttft = (float(pre.expected_s) if served is None else served.ttft_s) + floor[0]
    own = model_records(pre)  # a record set an op or a term of the prefill (another TPU's transferred too, labelled)
    if own:
        return tpot, ServingFigure(
            value_s=model_ttft,
            source="model",
            label=f"model: expected TTFT ({why}), efficiencies and kernel times from {', '.join(own)}"
            + load
            + floor_label(*floor),
            band_s=_band(pre.ceiling_s if served is None else ceiling_ttft_s, model_ttft),
        )
    if served is None and pre.ceiling_s > ceiling_ttft_s:
        # the MFU-30% bound overlaps compute with bytes over the whole prefill; below the ops' own ceiling (each
        # at the spec's peaks, one after another: the model's first term) it is no floor to stand on
        return tpot, ServingFigure(
            value_s=float(pre.ceiling_s),
            source="ceiling",
            label=f"ceiling: every op at the spec's peaks, one after another, above roofline's prefill bound "
            f"{ceiling_ttft_s * 1e3:,.2f} ms ({why}; no probe record sets an op)",
            band_s=_band(float(pre.ceiling_s), model_ttft),
        )
    return tpot, ServingFigure(
        value_s=ceiling_ttft_s,
        source="ceiling",
        label=f"ceiling: roofline's prefill bound ({why}; no probe record sets an op)"
        if served is None
        else f"ceiling ({why}; no probe record sets an op)",
        band_s=_band(ceiling_ttft_s, model_ttft),
    )


def _as_asked(b: ServingBenchmark, *, batch: int, context: int, chunk: int, osl: int | None = None) -> ServingBenchmark:
    """Benchmark ``b``'s run moved to the asked workload: ``batch`` requests at a time (its prompts scaled with it),
    every one ``context`` tokens in and ``osl`` out (its own OSL where None; the question's lengths, not its client's
    draw), ``chunk`` tokens a step, a ``--max-num-seqs`` below ``batch`` raised to it (the question's batch decodes
    together: the nightly at concurrency 1 runs --max-num-seqs 1, which would queue the asked requests one by one);
    its other flags and engine as they were."""
    import math

    w = b.workload
    out = w.osl if osl is None else osl
    seqs = b.flags.max_num_seqs if b.flags.max_num_seqs is None else max(b.flags.max_num_seqs, batch)
    prompts = None if w.num_prompts is None else max(batch, math.ceil(w.num_prompts * batch / w.concurrency))
    return replace(
        b,
        workload=replace(
            w, concurrency=batch, isl=context, osl=out, num_prompts=prompts, completed=None, random_range_ratio=None
        ),
        flags=replace(b.flags, max_num_batched_tokens=chunk, max_num_seqs=seqs),
        path=f"{b.path}#asked@{batch},{context},{out},{chunk}",
    )


def _like_for_like(
    model: ModelAt,
    b: ServingBenchmark,
    what: Literal["tpot", "ttft"],
    *,
    batch: int,
    context: int,
    chunk: int,
    osl: int | None = None,
) -> tuple[float, float] | None:
    """(the model at the asked workload, the model of ``b``'s own run) for a transfer from ``b``'s figure, both the
    same kind of run: a published TPOT or TTFT is its run's -- requests queueing for a slot, prefills among the
    decodes -- so both sides run through the scheduler (``served_of``), ``b``'s as it ran and the same run moved to
    the asked batch, context, chunk and OSL (``_as_asked``; ``osl`` None: ``b``'s own); at ``b``'s own workload the
    ratio is 1. None where the scheduler cannot run either (more sequences a group than the token budget): the
    caller's step and prompt."""
    from k3plan.errors import K3PlanError

    if "served" not in model.on:
        return None
    w = b.workload
    fixed = w.random_range_ratio in (None, 1.0)  # the run's requests are the asked ones' lengths
    same = fixed and (w.concurrency, w.isl, b.chunk_tokens or w.isl, w.osl) == (batch, context, chunk, osl or w.osl)
    try:
        own, _ = served_of(model, b)
        moved = _as_asked(b, batch=batch, context=context, chunk=chunk, osl=osl)
        there = own if same else served_of(model, moved)[0]
    except K3PlanError:
        return None
    if what == "tpot":
        return there.tpot_s, own.tpot_s
    # a measured TTFT holds the per-request path (HTTP server, tokenizer, scheduler) the model's run does not: the
    # engine's admitted floor on both runs (terms floor / engine-floor; the leave-one-out transfer score, app.score
    # transfer_rows: TTFT 35/40 -> 37/40 within 0.67-1.5x, mean |ln ratio| 0.216 -> 0.139 with it)
    floor, _ = engine_floor_s(model)  # b's engine is the stack it speaks for (engine_accepts)
    return there.ttft_s + floor, own.ttft_s + floor


def _transfer(
    what: Literal["tpot", "ttft"],
    *,
    model: ModelAt,
    cands,
    asked: Asked,
    b: ServingBenchmark | None,
    step_s: float,
    served_s: float | None = None,
) -> ServingFigure:
    """``serving_figure`` from ``b``, the nearest benchmark (``nearest``, as stands_behind found it): measured where
    every key matches (beside it the model at the question: ``served_s``, the question's served load under plan
    --isl/--osl, else ``step_s``), else the model's ratio like for like (``_like_for_like``, at the asked OSL where
    the question has one); where the scheduler cannot run the pair, the decode step (TPOT) or one prompt's prefill
    (TTFT) against the benchmark's workload in the same form."""
    measured = b is None or at_workload(b, asked)
    pair = (
        None
        if b is None or measured
        else _like_for_like(
            model, b, what, batch=asked.batch, context=asked.context, chunk=asked.chunk_tokens, osl=asked.osl
        )
    )
    if pair is not None:
        there, own = pair
        fig = serving_figure(what, model_s=there, model_at=lambda _b: own, cands=cands, asked=asked)
        floor, engine = engine_floor_s(model)
        if what == "ttft" and floor:  # _like_for_like's floor: said where it is
            fig = replace(
                fig, label=f"{fig.label}; both runs + {engine}'s TTFT floor {floor * 1e3:,.1f} ms (admitted.json)"
            )
        return fig
    if what == "tpot":
        at = lambda x: model.decode_s(x.workload.concurrency, x.workload.isl)  # noqa: E731
    else:
        at = lambda x: model.of(x).prefill.expected_s  # noqa: E731
    beside = served_s if measured and served_s is not None else step_s
    return serving_figure(what, model_s=beside, model_at=at, cands=cands, asked=asked)


def stands_behind(
    setup: Any,
    spec_hardware: Any,
    *,
    batch: int,
    context: int,
    chunk: int,
    expected: Any,
    ceiling_tpot_s: float,
    ceiling_ttft_s: float | None,
    evidence: Evidence | None = None,
    osl: int | None = None,
) -> tuple[ServingFigure, ServingFigure | None, tuple[ServingBenchmark, ...], ModelAt | None]:
    """(TPOT, TTFT or None when ``ceiling_ttft_s`` is None, the matching benchmarks, the model cache).
    ``expected``: the model at the asked workload (ExpectedSpeed), or None to compute it when needed. ``osl``
    (plan --isl/--osl: a load of ``batch`` requests of ``context`` tokens in, ``osl`` out): a key of the question (a
    benchmark at another OSL is transferred, not measured), and a transfer moves the benchmark's run to it like for
    like (``_like_for_like``: both sides through the scheduler, ``served_of``); the model's own figure, where no
    benchmark speaks or beside a measured one, is the question's closed loop as the engine serves it
    (``served_asked``), not one step."""
    cands = candidates(setup)
    key = asked_of(setup, batch=batch, context=context, chunk=chunk, osl=osl)
    near = {w: nearest(cands, asked=key, need_ttft=w == "ttft") for w in ("tpot", "ttft")}
    if not cands or near["tpot"] is None:  # nearest() answers None only without a candidate
        why = "no serving benchmark of this configuration"
        model = ModelAt(setup, spec_hardware, evidence=evidence)
        if expected is None and ceiling_ttft_s is not None:  # the TTFT is the model's where a record sets an op
            expected = model.speed(batch, context, chunk)
        if expected is not None:
            model.cache[(batch, context, min(chunk, context))] = expected
        tpot, ttft = _no_benchmark(
            ceiling_tpot_s=ceiling_tpot_s,
            ceiling_ttft_s=ceiling_ttft_s,
            expected=expected,
            why=why,
            decode=model.decode_step(batch, context),
            served=None if osl is None else served_asked(model, batch=batch, isl=context, osl=osl, chunk=chunk),
            floor=engine_floor_s(model),
        )
        return tpot, ttft, cands, (model if tpot.source == "model" else None)
    model = ModelAt(setup, spec_hardware, evidence=evidence)
    if expected is not None:
        model.cache[(batch, context, min(chunk, context))] = expected
    # the question's served load (plan --isl/--osl): the model's own figure beside a measured one, plan's --rank-by
    # expected; a transfer moves the benchmark's run to the asked workload, like for like (_like_for_like)
    served = None if osl is None else served_asked(model, batch=batch, isl=context, osl=osl, chunk=chunk)
    tpot = _transfer(
        "tpot",
        model=model,
        cands=cands,
        asked=key,
        b=near["tpot"],
        step_s=model.decode_s(batch, context),
        served_s=None if served is None else served.tpot_s,
    )
    ttft = None
    if ceiling_ttft_s is not None:
        if expected is None:
            expected = model.speed(batch, context, chunk)
        if near["ttft"] is None:
            _, ttft = _no_benchmark(
                ceiling_tpot_s=ceiling_tpot_s,
                ceiling_ttft_s=ceiling_ttft_s,
                expected=expected,
                why="no serving benchmark with a TTFT of this configuration",
                decode=model.decode_step(batch, context),
                served=served,
                floor=engine_floor_s(model),
            )
        else:
            ttft = _transfer(
                "ttft",
                model=model,
                cands=cands,
                asked=key,
                b=near["ttft"],
                step_s=expected.prefill.expected_s,
                served_s=None if served is None else served.ttft_s,
            )
    return tpot, ttft, cands, model


def _model_terms(stage) -> tuple[Term, ...]:
    ops = [o for o in stage.ops if o.kind != "overhead"]
    ceiling = sum(o.ceiling_s for o in ops)
    eff = sum(o.expected_s for o in ops) - ceiling
    out = [
        Term(
            name="ops at their ceilings",
            seconds=ceiling,
            source="the step description's ops at the hardware spec's peaks, one after another",
        ),
        Term(
            name="ops below their ceilings",
            seconds=eff,
            source="probe records of the device kind, or another TPU's transferred for matmul and HBM (efficiency curves)"
            if eff
            else "no probe record of the device kind covers an op: 0",
        ),
    ]
    out += [
        Term(name=o.name, seconds=o.expected_s, source=o.label.split(": ", 1)[1])
        for o in stage.ops
        if o.kind == "overhead"
    ]
    return tuple(out)


def _flag_diff(a: ServingBenchmark, b: ServingBenchmark) -> str:
    fa, fb = ({k: v for k, v in dump(f.flags, mode="python").items() if k not in ("extra", "client")} for f in (a, b))
    return ", ".join(f"{k} {fa[k]} -> {fb[k]}" for k in fa if fa[k] != fb[k])


def _source_speed(st, model: ModelAt | None, n_steps: int = 1) -> str:
    """Where the routed experts' efficiency was transferred from another TPU (the engine's gmm_v2 records): their
    time a step as this TPU's compiler schedules the kernel (probe gmm-schedule: its compute, no DMA wait), set
    beside how far that schedule sat from the measured calls where both exist; without a schedule, their time
    were the kernel to run at the other TPU's own speed (the expected time x the chips' HBM and bf16 ratios)."""
    gm = [t for t in st.ops if t.kind == "grouped_matmul" and t.efficiency.measured]
    hardware = next((t.efficiency.source_hardware for t in gm if t.efficiency.source_hardware), None)
    if hardware is None or model is None:
        return ""
    from k3plan.hardware.loader import load_hardware
    from k3plan.speed.peaks import Peaks

    src, (tgt, (curves, _)) = Peaks.from_hardware(load_hardware(hardware)), model.peaks_and_curves()
    z = sum(t.expected_s for t in gm) / n_steps
    name = src.device_kind
    head = f"; the routed experts' {z * 1e3:,.2f} ms a step carry gmm_v2's efficiency measured on {name}"
    scheduled = [t.scheduled_s for t in gm]
    if scheduled and all(x is not None for x in scheduled):
        sched = sum(x for x in scheduled if x is not None) / n_steps
        checks = [c for c in (curves.schedule_checks if curves else ()) if c.device_kind == name]
        ratios = sorted(c.measured_s / c.scheduled_s for c in checks)
        where = sorted({p.record_path for c in (curves.schedules if curves else {}).values() for p in c.points})
        text = (
            f"{head}; {st.device_kind}'s own compiler schedules the kernel (MXFP4 weights, probe gmm-schedule, "
            f"deviceless: {', '.join(where)}) at {sched * 1e3:,.2f} ms a step -- its dequantization and matmuls, "
            f"issue slots with no DMA wait"
        )
        if ratios:
            text += (
                f"; {name} took {ratios[0]:.2f}-{ratios[-1]:.2f}x the same compiler's schedule in {len(ratios)} calls "
                f"it ran (docs/device.md), so were {st.device_kind}'s stalls {name}'s share the kernel would take "
                f"{sched * ratios[0] * 1e3:,.1f}-{sched * ratios[-1] * 1e3:,.1f} ms a step"
            )
        return text
    lo, hi = sorted(
        (tgt.hbm_bw_bytes_per_s / src.hbm_bw_bytes_per_s, tgt.flops_per_s("bf16") / src.flops_per_s("bf16"))
    )
    return (
        f"{head}, where its 4-bit weights take as long as bf16 ones: the dequantization is vector-unit work, which "
        f"the transfer speeds up by the chips' HBM and MXU ratios (x{lo:.2f}-x{hi:.2f}); at {name}'s own speed "
        f"they would take {z * lo * 1e3:,.1f}-{z * hi * 1e3:,.1f} ms a step ({st.device_kind}'s vector rate is "
        f"not published)"
    )


HOST_TERM = "synchronous step"  # the name of speed.overheads' host-side term (the rest are device time)
HOST_GAP = "host time between steps beyond the model's"  # the decode gap's host-side term (``_profile_split``)

UNMEASURED_DEVICE = (
    "device time the profile implies beyond the model's, that no source here measures: the engine's kernels on "
    "TPU7x (its MLA kernel beyond its TPU v5 lite record, in the model as probe mla-engine timed it; "
    "its KDA kernels, of which probe kda-engine timed the non-default pair on TPU v5 lite at "
    "under a twentieth of this gap, docs/device.md; gmm_v2, the attention-residual kernel and the MoE's routing glue "
    "beyond their TPU v5 lite records), the latency of the step's all-reduces over 32 devices beyond the spec's "
    "chained all-to-all call, HBM efficiency of the other weight reads beyond the profile's own rate"
)
UNMEASURED_HOST = (
    "host time between steps no source here measures: the synchronous engine loop (scheduler, the step's "
    "broadcast to 32 worker processes on 4 hosts and the sampled token's return: kowalski-4831/vllm-torchtpu "
    "src/vllm_torchtpu/executors/ray_distributed_executor_v2.py RayDistributedExecutorV2 @012e4f24, shared memory "
    "on the driver's host and TCP to the others; each worker's input preparation and its blocking device-to-host "
    "copy of the sampled token: src/vllm_torchtpu/runner/tpu_runner.py execute_model / sample_tokens @0095cdcb)"
)


def _profile_split(st, b: ServingBenchmark, o: ServingBenchmark | None, model: ModelAt | None, measured: float):
    """The decode gap split by an engine profile of this configuration (``evidence.profiles``): the device time it
    implies minus the model's device terms, and the rest of the measured TPOT minus the model's host term."""
    if model is None:
        return None
    from k3plan.evidence.profiles import implied_device_s, matching_profiles

    profs = matching_profiles(**configuration(model.setup), stage="decode")
    if not profs:
        return None
    prof = profs[0]
    peaks, _ = model.peaks_and_curves()
    device = implied_device_s(prof, {t.name: t.ceiling_s for t in st.ops}, hbm_bytes_per_s=peaks.hbm_bw_bytes_per_s)
    if device is None:
        return None
    host = sum(t.expected_s for t in st.ops if t.kind == "overhead" and HOST_TERM in t.name)
    model_device = st.expected_s - host
    pair_s = device * prof.share_of_device_time
    config = "" if prof.config_published else " (which serving flags it ran with is not published)"
    recipe = ""
    if o is not None and o.flags.async_scheduling and not b.flags.async_scheduling:
        recipe = (
            f"; the other published recipe, whose asynchronous scheduling overlaps the host's work with the device's "
            f"({o.name}: {_flag_diff(b, o)}), measured {o.measured.tpot_ms:,.2f} ms against the profile's "
            f"{device * 1e3:,.2f} ms of device time ({o.sources.baseline})"
        )
    return [
        Term(
            name="device time beyond the model's (the engine's profile)",
            seconds=device - model_device,
            source=(
                f"{prof.label}{config}: {' and '.join(prof.ops)} at {prof.op_bytes_per_s / 1e12:.3g} TB/s take "
                f"{pair_s * 1e3:,.2f} ms, {prof.share_of_device_time:.0%} of a decode step's device time -> "
                f"{device * 1e3:,.2f} ms; the model's device time {model_device * 1e3:,.2f} ms (its ops and their "
                f"fixed costs); {UNMEASURED_DEVICE}{_source_speed(st, model)}"
            ),
        ),
        Term(
            name=HOST_GAP,
            seconds=measured - device - host,
            source=(
                f"the measured TPOT less the profile's device time: {(measured - device) * 1e3:,.2f} ms, of which the "
                f"model holds {host * 1e3:,.2f} ms{recipe}; {UNMEASURED_HOST}"
            ),
        ),
    ]


def _host_per_step(decode: StageComparison | None) -> str:
    """The decode split's host time beyond the model's, said again for a prefill chunk (each chunk is an engine
    step of the same synchronous loop)."""
    host = next((t for t in (decode.gap_terms if decode else ()) if t.name == HOST_GAP), None)
    if host is None:
        return ""
    return (
        f"; each chunk is a synchronous engine step too: were its host time the decode step's (the profile leaves "
        f"{host.seconds * 1e3:,.2f} ms of host time a step beyond the model's), a chunk would carry that much more"
    )


def _stage(
    stage: Literal["decode", "prefill"],
    b: ServingBenchmark | None,
    st,
    others,
    model: ModelAt | None,
    decode: StageComparison | None = None,
    floor: tuple[float, str] = (0.0, ""),
) -> StageComparison:
    """One stage's ceiling / model / measured. ``floor`` (prefill: ``engine_floor_s``): the model's TTFT carries its
    engine's admitted floor, as the score and the figure stood behind price it -- a term of the model's, so the
    model compared with a TTFT is the model's TTFT, not its prefill alone."""
    terms = _model_terms(st)
    model_s = st.expected_s
    if floor[0]:
        model_s += floor[0]
        terms += (Term(name=f"{floor[1]}'s TTFT floor", seconds=floor[0], source=floor_phrase(*floor)),)
    if b is None:
        return StageComparison(
            stage=stage,
            ceiling_s=st.ceiling_s,
            model_s=model_s,
            measured_s=None,
            benchmark=None,
            model_over_measured=None,
            model_terms=terms,
            gap_terms=(),
        )
    ms = b.measured.tpot_ms if stage == "decode" else b.measured.ttft_ms
    if ms is None:
        return StageComparison(
            stage=stage,
            ceiling_s=st.ceiling_s,
            model_s=model_s,
            measured_s=None,
            benchmark=b.label,
            model_over_measured=None,
            model_terms=terms,
            gap_terms=(),
        )
    measured = ms / 1e3
    gap = measured - model_s
    gaps: list[Term] = []
    rest = gap
    same = [o for o in others if o.workload.isl == b.workload.isl and o.workload.concurrency == b.workload.concurrency]
    o = same[0] if same else None
    split = _profile_split(st, b, o, model, measured) if stage == "decode" else None
    if split is not None:
        gaps.extend(split)
        rest = 0.0
    elif o is not None and stage == "decode" and o.measured.tpot_ms < ms:
        diff = (ms - o.measured.tpot_ms) / 1e3
        # the model already holds the synchronous host time an asynchronous recipe hides: not gap
        hidden = (
            sum(t.expected_s for t in st.ops if t.kind == "overhead" and "synchronous step" in t.name)
            if b.flags.async_scheduling is False and o.flags.async_scheduling is True
            else 0.0
        )
        part = min(rest, max(0.0, diff - hidden))
        gaps.append(
            Term(
                name="what the other published recipe's flags change",
                seconds=part,
                source=(
                    f"{o.name} measured {o.measured.tpot_ms:,.2f} ms ({diff * 1e3:,.2f} ms less, of which the model "
                    f"holds {hidden * 1e3:,.2f} ms: the synchronous host time its asynchronous scheduling hides) with "
                    f"{_flag_diff(b, o)} ({o.sources.baseline}); one pair does not separate the flags"
                ),
            )
        )
        rest -= part
    if (
        o is not None
        and stage == "prefill"
        and o.measured.ttft_ms is not None
        and model is not None
        and b.chunk_tokens is not None
        and o.chunk_tokens is not None
    ):
        n1 = math.ceil(b.workload.isl / b.chunk_tokens)
        n2 = math.ceil(o.workload.isl / o.chunk_tokens)
        if n1 != n2:
            t1, t2 = measured, o.measured.ttft_ms / 1e3
            f_meas = (t1 - t2) / (n1 - n2)  # a chunk's fixed cost, both recipes' per-token cost equal
            m2 = model.of(o).prefill.expected_s
            f_model = (st.expected_s - m2) / (n1 - n2)
            part = n1 * (f_meas - f_model)
            gaps.append(
                Term(
                    name="per-chunk fixed cost beyond the model's",
                    seconds=part,
                    source=(
                        f"{n1} chunks x ({f_meas * 1e3:,.1f} - {f_model * 1e3:,.1f}) ms: measured {f_meas * 1e3:,.1f} ms a "
                        f"chunk, solved from {b.name} ({t1 * 1e3:,.0f} ms, {n1} chunks) and {o.name} "
                        f"({t2 * 1e3:,.0f} ms, {n2} chunk(s)) with equal per-token cost (flags also differ: "
                        f"{_flag_diff(b, o)}); the model's own {f_model * 1e3:,.1f} ms a chunk; "
                        + PER_CHUNK_UNPRICED
                        + _source_speed(st, model, n1)
                        + _host_per_step(decode)
                    ),
                )
            )
            rest -= part
            gaps.append(
                Term(
                    name="per-token cost beyond the model's",
                    seconds=rest,
                    source=(
                        f"the rest: {(t1 - n1 * f_meas) * 1e3 / b.workload.isl:.4f} ms a token measured against the model's "
                        f"{(model_s - n1 * f_model) * 1e3 / b.workload.isl:.4f}; " + UNMEASURED[stage]
                    ),
                )
            )
            rest = 0.0
    if rest:
        gaps.append(Term(name="not explained by any term above", seconds=rest, source=UNMEASURED[stage]))
    return StageComparison(
        stage=stage,
        ceiling_s=st.ceiling_s,
        model_s=model_s,
        measured_s=measured,
        benchmark=b.label,
        model_over_measured=model_s / measured,
        model_terms=terms,
        gap_terms=tuple(gaps),
    )


def compare(
    *,
    tpot: ServingFigure,
    ttft: ServingFigure,
    expected,
    cands: tuple[ServingBenchmark, ...],
    model: ModelAt | None,
    asked: Asked,
    floor: tuple[float, str] = (0.0, ""),
) -> ServingComparison:
    """The three-way comparison at the asked workload: measured only from a benchmark whose every key matches the
    question's (``evidence.benchmarks.differing``: KV dtype, page, chunk, scheduling, batch, context). ``floor``
    (``engine_floor_s``): the prefill's model is the model's TTFT, its engine's floor included."""
    at = [b for b in cands if at_workload(b, asked)]
    b = at[0] if at else None
    others = [o for o in cands if o is not b]
    return ServingComparison(
        tpot=tpot,
        ttft=ttft,
        decode=(dec := _stage("decode", b, expected.decode, others, model)),
        prefill=_stage("prefill", b, expected.prefill, others, model, decode=dec, floor=floor),
        benchmarks=tuple(c.label for c in cands),
    )


class ServedWorkload(_Frozen):
    """A serving benchmark's workload as the engine serves it (issue 46 item 4): ``concurrency`` requests of ISL in,
    OSL out, spread over the DP groups (each an engine of its own, stepping together), run through the scheduler
    (``speed.scheduler.simulate``: vLLM V1's rule, a step's token budget shared by decodes and prefill chunks,
    prompts sent together queueing behind each other) on a step time from the model alone."""

    ttft_s: float  # the benchmark's statistic (median; mean where it publishes means or does not say)
    tpot_s: float
    statistic: str
    groups: int  # DP groups serving
    concurrency_per_group: int
    prompts_per_group: int | None  # None: the steady state of a closed loop (the run's prompts unpublished)
    token_budget: int
    step: Any  # speed.scheduler.StepCoefficients: a group's T(d, p)
    result: Any  # speed.scheduler.SchedulerResult
    async_hidden_s: float  # the host time a step asynchronous scheduling hides (0: synchronous, or none priced)
    label: str


def served_step(
    model: ModelAt,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    token_budget: int,
    async_scheduling: bool | None = False,
    scheduling_source: str = "",
    mean_context: bool = False,
    prefill_pass_s: float = 0.0,
    anchor: int | None = None,
) -> tuple[Any, int, int, Any]:
    """(a DP group's step T(d, p) as StepCoefficients, the DP groups serving, the sequences a group, the async host
    term hidden or None): ``served_workload``'s step, on its own (plan --request-rate runs the scheduler's open loop
    on it). ``prefill_pass_s``: the fixed time a step that prefills holds the loop for (``loop_pass_s``);
    ``anchor``: the decode batch a group the line runs through besides one (None: the sequences a group)."""
    import math

    from k3plan.speed.overheads import async_host_term
    from k3plan.speed.scheduler import StepCoefficients

    groups = max(1, min(model.setup.parallel.dp, concurrency))
    n = math.ceil(concurrency / groups)
    ctx = isl + osl // 2 if mean_context else isl  # a request decodes from ISL to ISL + OSL tokens of context
    t1 = model.decode_s(groups, ctx)
    top = n if anchor is None else max(min(anchor, n), 1)
    tn = model.decode_s(top * groups, ctx) if top > 1 else t1
    a = max((tn - t1) / (top - 1), 0.0) if top > 1 else 0.0
    base = t1 - a
    chunk = min(token_budget, isl)
    speed = model.speed(concurrency, isl, chunk)
    chunks = math.ceil(isl / chunk)
    hidden = async_host_term(speed.decode, async_scheduling=async_scheduling, why=scheduling_source)
    host = -hidden.seconds if hidden is not None else 0.0
    b = max(speed.prefill.expected_s / chunks - base, 0.0) / (isl / chunks)
    step = StepCoefficients(
        base_s=max(base - host, 0.0),
        per_decode_seq_s=a,
        per_prefill_token_s=b,
        source=(
            "the model's decode step at 1 and N a group and its prefill chunk (speed.serving.served_workload)"
            if top == n
            else f"the model's decode step at 1 and at the {top:,} a group the run holds, and its prefill chunk "
            "(speed.serving.served_workload, term held-batch)"
        ),
        per_prefill_pass_s=prefill_pass_s,
    )
    return step, groups, n, hidden


# term held-batch: the step's line is drawn again where a run holds fewer than this share of its sequences decoding
# at once (nearer, the line through one and all of them is the line through one and those held to a few percent)
HELD_BATCH_SHARE = 0.8


def served_workload(
    model: ModelAt,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    prompts: int | None,
    token_budget: int,
    max_num_seqs: int | None = None,
    async_scheduling: bool | None = False,
    scheduling_source: str = "",
    statistic: str = "median",
    prefill_first: bool = False,
    mean_context: bool = False,
    range_ratio: float | None = None,
    recv_interval: int = 1,
    pool_tokens: int | None = None,
    prefill_pass_s: float = 0.0,
    swa_pool_tokens: int | None = None,
    held_batch: bool = False,
) -> ServedWorkload:
    """The scheduler's figures for the workload on ``model``'s setup (``ServedWorkload``). A DP group's step time
    is linear, T(d, p) = base + a d + b p: base and a through the model's decode step with one and with the
    group's share of the sequences a group (all groups alike: a decode step of d a group is the model's step of
    d x groups), b so that a prefill-only step of the run's chunk (min(token budget, ISL)) takes the model's mean
    chunk of one prompt; with asynchronous scheduling base loses the synchronous host term
    (``speed.overheads.async_host_term``). ``prefill_first``: the engine's scheduler runs prefill and decode in
    steps of their own, a prefill whenever one forms (SGLang: ``speed.scheduler.PREFILL_FIRST_RULE``).
    ``mean_context``: the decode step at a request's mean context over its decode, ISL + OSL / 2 (else at ISL).
    ``range_ratio``: the run's requests at the client's random lengths (``speed.scheduler.LENGTHS_RULE``; with
    ``prompts``), the step's coefficients at the nominal ISL and OSL. ``recv_interval``: the engine takes new
    requests in every that many decode steps (``speed.scheduler.RECV_RULE``). ``pool_tokens``: a group's KV pool,
    requests admitted while theirs fit (``speed.scheduler.POOL_RULE``); ``swa_pool_tokens``: SGLang's
    sliding-window pool, a request holding its prefill chunk for its life (``speed.scheduler.SWA_RULE``).
    ``held_batch`` (term held-batch): where the run holds fewer than ``HELD_BATCH_SHARE`` of a group's sequences
    decoding at once (its output rate x TPOT: a pool, a cap), the line is drawn again through the decode step at
    that batch and the run served again on it. ``prefill_pass_s``: each step that prefills holds the loop that long
    more (the engine's TTFT floor, term prefill-pass: ``loop_pass_s``); the TTFT
    returned leaves out the request's own one, as the floor is added to every TTFT once (``engine_floor_s``), so
    that the figure a client measures is the returned TTFT + the floor either way.
    At one request it is the one-step model exactly: T(1, 0) is the model's
    decode step, T(0, chunk) its chunk."""
    import math

    from k3plan.speed.scheduler import simulate

    def line(anchor: int | None = None):  # the step's line, through one and ``anchor`` (None: all) a group
        return served_step(
            model,
            isl=isl,
            osl=osl,
            concurrency=concurrency,
            token_budget=token_budget,
            async_scheduling=async_scheduling,
            scheduling_source=scheduling_source,
            mean_context=mean_context,
            prefill_pass_s=prefill_pass_s,
            anchor=anchor,
        )

    step, groups, n, hidden = line()
    per_prompts = None if prompts is None else math.ceil(prompts / groups)

    def served_run(step):
        return simulate(
            step_time=step,
            isl=isl,
            osl=osl,
            token_budget=token_budget,
            concurrency=n,
            max_num_seqs=max_num_seqs,
            prompts=per_prompts,
            chips=model.setup.topology.chips,
            prefill_first=prefill_first,
            range_ratio=range_ratio if per_prompts is not None else None,
            recv_interval=recv_interval,
            pool_tokens=pool_tokens,
            swa_pool_tokens=swa_pool_tokens,
        )

    r = served_run(step)
    held = round(r.output_tokens_per_s * r.tpot_s)  # decoding at once, as a run's own figures give it
    if held_batch and 1 < held < HELD_BATCH_SHARE * n:
        step, groups, n, hidden = line(held)
        r = served_run(step)
    a, b, host = step.per_decode_seq_s, step.per_prefill_token_s, -hidden.seconds if hidden is not None else 0.0
    median = statistic == "median"
    ttft = r.ttft_median_s if median and r.ttft_median_s is not None else r.ttft_s
    ttft -= prefill_pass_s  # the request's own pass is the floor every TTFT carries once (engine_floor_s)
    tpot = r.tpot_median_s if median and r.tpot_median_s is not None else r.tpot_s
    how = (
        f", lengths uniform over [{max(int(isl * range_ratio), 1):,}, {isl:,}] in and "
        f"[{max(int(osl * range_ratio), 1):,}, {osl:,}] out (the client's range ratio {range_ratio:g})"
        if range_ratio is not None and per_prompts is not None
        else ""
    )
    if recv_interval > 1:
        how += f", new requests taken in every {recv_interval} decode steps (--scheduler-recv-interval)"
    if pool_tokens is not None:
        how += f", admitted while their tokens fit the KV pool's {pool_tokens:,}"
    if swa_pool_tokens is not None:
        how += f" and their prefill chunks SGLang's sliding-window pool's {swa_pool_tokens:,}"
    run = (
        f"{per_prompts:,} requests a group, {n:,} at a time, sent at once{how}"
        if per_prompts is not None
        else f"the closed loop's steady state at {n:,} a group (the run's prompts unpublished)"
    )
    return ServedWorkload(
        ttft_s=ttft,
        tpot_s=tpot,
        statistic="median" if median else "mean",
        groups=groups,
        concurrency_per_group=n,
        prompts_per_group=per_prompts,
        token_budget=token_budget,
        step=step,
        result=r,
        async_hidden_s=host,
        label=(
            f"the scheduler ({'SGLang' if prefill_first else 'vLLM V1'}'s rule) over {groups} DP group(s): {run}, a token budget of {token_budget:,} a step; T(d, p) = "
            f"{step.base_s * 1e3:.2f} ms + {a * 1e3:.3f} ms d + {b * 1e6:.2f} us p"
            + (
                f" + {prefill_pass_s * 1e3:.1f} ms a step that prefills (term prefill-pass: the engine's TTFT floor "
                "held in its loop; the request's own is its TTFT's floor)"
                if prefill_pass_s
                else ""
            )
            + (f"; {hidden.source}" if hidden is not None else "")
        ),
    )


def run_token_budget(b: ServingBenchmark, setup) -> tuple[int, str]:
    """(the run's token budget a step, a note where it is not the run's own flag): --max-num-batched-tokens, else
    SGLang's --chunked-prefill-size default for the GPU's memory, else the whole prompt (one chunk)."""
    from k3plan.engines.sglang.speed import default_token_budget

    w = b.workload
    if b.flags.max_num_batched_tokens is not None:
        return b.flags.max_num_batched_tokens, ""
    engine_default = default_token_budget(b.engine.name, hbm_bytes_per_device=setup.hardware.hbm_bytes_per_device)
    if engine_default is not None:
        return engine_default
    return max(w.isl, w.concurrency), "token budget unpublished: one prompt a step"


def served_of(
    model: ModelAt,
    b: ServingBenchmark,
    *,
    prefill_first: bool | None = None,
    async_term: bool | None = None,
    mean_context: bool | None = None,
    pool_sequences: int | None = None,
    client_lengths: bool | None = None,
    recv_interval: bool | None = None,
    pass_s: float | None = None,
    swa_pool_tokens: int | None = None,
    held_batch: bool | None = None,
) -> tuple[ServedWorkload, list[str]]:
    """(ServedWorkload, notes) for a benchmark's own run on ``model``: its prompts, token budget, max-num-seqs and
    statistic; ``prefill_first``: under its engine's rule (``engines.flags.PREFILL_FIRST_ENGINES``), else vLLM V1's;
    ``async_term``: with its scheduling (its flag, else the cited default), else synchronous; ``mean_context``: the
    decode step at ISL + OSL / 2. Each None: whether ``model``'s terms hold the registered term of that name
    (``speed.terms``: prefill-first, async, mean-context; by default the admitted ones). ``pool_sequences``: the
    sequences of ISL + OSL tokens the KV pool holds over every DP group (fit's capacity; the term pool-cap): the
    scheduler admits a request only when its pages fit, so a group's requests hold at most that many sequences' tokens
    (``speed.scheduler.POOL_RULE``; None or 0: not capped). ``client_lengths``: the run's requests at the lengths its
    client draws (its published --random-range-ratio, ``Workload.random_range_ratio``; the term client-lengths).
    ``recv_interval``: an SGLang run's --scheduler-recv-interval (``Flags.scheduler_recv_interval``; the term
    recv-interval). ``pass_s``: the fixed time a step that prefills holds the loop for (None: ``loop_pass_s``, the
    admitted floor where the term prefill-pass is ON; the score passes each case's held-out floor).
    ``swa_pool_tokens``: SGLang's sliding-window pool a group (the term swa-pool; None: none); ``held_batch``:
    the term held-batch (None: whether ``model``'s terms hold it)."""
    from k3plan.engines.flags import PREFILL_FIRST_ENGINES, run_scheduling
    from k3plan.engines.torchtpu_vllm.speed import HARNESS_SCHEDULING_ENGINES

    prefill_first = "prefill-first" in model.on if prefill_first is None else prefill_first
    async_term = "async" in model.on if async_term is None else async_term
    mean_context = "mean-context" in model.on if mean_context is None else mean_context
    client_lengths = "client-lengths" in model.on if client_lengths is None else client_lengths
    recv_interval = "recv-interval" in model.on if recv_interval is None else recv_interval
    held_batch = "held-batch" in model.on if held_batch is None else held_batch

    w = b.workload
    ratio = w.random_range_ratio if client_lengths and w.num_prompts is not None else None
    budget, note = run_token_budget(b, model.setup)
    notes = [note] if note else []
    asyn, why = run_scheduling(b.engine.name, b.flags.async_scheduling) if async_term else (False, "")
    if async_term and b.flags.async_scheduling is None:
        whose = "the harness default" if b.engine.name in HARNESS_SCHEDULING_ENGINES else "the engine default"
        notes.append(f"scheduling unpublished: {'async' if asyn else 'sync' if asyn is False else 'unknown'} ({whose})")
    if w.num_prompts is None:
        notes.append("prompts unpublished: the closed loop's steady state")
    max_seqs, pool = b.flags.max_num_seqs, None
    if max_seqs is None:  # the engine's own default where the run sets none (SGLang's for DeepSeek-V4)
        from k3plan.engines.sglang.speed import default_max_running

        st = model.setup.stack
        held = default_max_running(
            b.engine.name,
            dsv4=model.setup.model.spec.dsv4 is not None,
            attn_dp=model.setup.parallel.dp if st.dp_attention else 1,
        )
        if held is not None:
            max_seqs, source = held
            notes.append(source)
    if pool_sequences:
        groups = max(1, min(model.setup.parallel.dp, w.concurrency))  # served_step's DP groups
        cap = max(pool_sequences // groups, 1)
        if -(-w.concurrency // groups) > cap and (max_seqs is None or max_seqs > cap):
            pool = cap * (w.isl + w.osl)  # fit's sequences at the nominal lengths as tokens; each request holds its own
            notes.append(
                f"the KV pool holds {cap:,} sequences of {w.isl + w.osl:,} tokens a group ({pool:,} tokens): requests "
                "admitted while theirs fit"
            )
    if client_lengths and ratio is None:
        notes.append("lengths fixed (no published range ratio)")
    # --scheduler-recv-interval is SGLang's (the engines of its prefill-first rule): read for its runs only
    polls = (b.flags.scheduler_recv_interval or 1) if recv_interval and b.engine.name in PREFILL_FIRST_ENGINES else 1
    passes = loop_pass_s(model) if pass_s is None else pass_s
    swa = swa_pool_tokens if b.engine.name in PREFILL_FIRST_ENGINES else None  # SGLang's pool (SWA_RULE)
    if swa is not None:
        notes.append(f"SGLang's sliding-window pool of {swa:,} tokens holds each running request's prefill chunk")
    key = (
        "bench",
        b.path,
        prefill_first,
        async_term,
        mean_context,
        max_seqs,
        ratio,
        polls,
        pool,
        passes,
        swa,
        held_batch,
    )
    if key not in model.served:
        model.served[key] = served_workload(
            model,
            isl=w.isl,
            osl=w.osl,
            concurrency=w.concurrency,
            prompts=w.num_prompts,
            token_budget=budget,
            max_num_seqs=max_seqs,
            async_scheduling=asyn,
            scheduling_source=why,
            statistic=b.measured.statistic,
            prefill_first=prefill_first and b.engine.name in PREFILL_FIRST_ENGINES,
            mean_context=mean_context,
            range_ratio=ratio,
            recv_interval=polls,
            pool_tokens=pool,
            prefill_pass_s=passes,
            swa_pool_tokens=swa,
            held_batch=held_batch,
        )
    return model.served[key], notes


def served_asked(model: ModelAt, *, batch: int, isl: int, osl: int, chunk: int) -> ServedWorkload | None:
    """The question's own load as the engine serves it: ``batch`` requests in a closed loop (plan --concurrency),
    its steady state through the scheduler under the stack's engine's rule, the chunk its token budget; None where
    the scheduler cannot run it (more sequences a group than the budget), or the registered term ``served`` is OFF in
    ``model``'s terms; the prefill-first rule and the mean context where their terms are ON."""
    from k3plan.engines.flags import PREFILL_FIRST_ENGINES, engine_for_stack
    from k3plan.errors import K3PlanError

    if "served" not in model.on:
        return None
    key = ("asked", batch, isl, osl, chunk)
    if key not in model.served:
        engine: str = ""
        try:
            engine = engine_for_stack(model.setup.stack.name, model.setup.hardware.kind)
        except K3PlanError:
            pass
        try:
            model.served[key] = served_workload(
                model,
                isl=isl,
                osl=osl,
                concurrency=batch,
                prompts=None,
                token_budget=max(chunk, 1),
                prefill_first=engine in PREFILL_FIRST_ENGINES and "prefill-first" in model.on,
                mean_context="mean-context" in model.on,
                prefill_pass_s=loop_pass_s(model),
                held_batch="held-batch" in model.on,
            )
        except K3PlanError:
            model.served[key] = None
    return model.served[key]
