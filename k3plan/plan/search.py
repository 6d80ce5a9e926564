"""plan(): check the request, build the space, evaluate it, rank the feasible configurations."""

from __future__ import annotations

import time
from typing import Collection, Optional, Sequence

import numpy as np

from k3plan.budget.fit import DEFAULT_PREFILL_CHUNK_TOKENS, MAX_SEQUENCES, MAX_TOKENS, check_workload
from k3plan.deploy.coldstart import ColdStart
from k3plan.deploy.pareto import ParetoPoint
from k3plan.deploy.prices import Price, price_column, price_for
from k3plan.engines.stack import KV_DTYPES, list_stacks, load_stack
from k3plan.errors import K3PlanError
from k3plan.evidence.value import Evidence, measures_hardware
from k3plan.hardware import list_hardware, load_hardware
from k3plan.models import load_model
from k3plan.plan.deployment import Disaggregated, Launch
from k3plan.plan.evaluate import evaluate, static_columns
from k3plan.plan.extras import PlanExtras
from k3plan.plan.reasons import CODE, Family, ReasonTexts, families, reason_codes, reason_texts
from k3plan.plan.rows import PlanRow, row
from k3plan.plan.sla import SlaTargets, check_targets
from k3plan.plan.space import MAX_PP, build_space
from k3plan.plan.table import StepColumns
from k3plan.roofline.bounds import Efficiency
from k3plan.setup import engine_refusals
from k3plan.structs import Frozen

OBJECTIVES = {
    "chips": "minimize chips",
    "cost": "minimize cost (USD an hour)",
    "tokens-per-chip": "maximize tokens/s a chip",
    "throughput": "maximize output tokens/s a chip at the largest batch that fits memory and --tpot-ms",
}
DEFAULT_MAX_CHIPS = 1024
CONFIGURATION = (
    "a configuration = (hardware, standard topology, tp, ep, stack, KV dtype, prefill chunk); "
    "dp = devices / tp, ep = tp or all devices"
)


class PlanWorkload(Frozen):
    """What plan was asked to serve."""

    context_tokens: int
    concurrency: int
    target_tpot_ms: Optional[float]
    rank_by: str


class PlanSearch(Frozen):
    """What plan searched over ("stack" in kv_dtypes: the stack's own KV dtype)."""

    hardware: list[str]
    stacks: list[str]
    kv_dtypes: list[str]
    chunks: list[int]
    max_chips: int


class PlanResult(Frozen):
    model: str
    workload: PlanWorkload
    objective: str
    search: PlanSearch
    configuration: str
    configurations: int
    feasible: int
    evaluate_s: float
    recommended: Optional[PlanRow]
    ranked: list[PlanRow]
    families: list[Family]
    rejected_families: list[Family]
    reasons: ReasonTexts
    assumptions: list[str]
    # issue 13: all None / empty unless --isl/--osl (SLA), --load-gbps are given
    sla: Optional[SlaTargets] = None
    prices: list[Price] = []
    pareto: list[ParetoPoint] = []
    disaggregated: Optional[Disaggregated] = None
    launch: Optional[Launch] = None
    cold_start: Optional[ColdStart] = None
    # nothing passes: the configuration that came closest (k3plan.advice.plan applies the rules to it)
    closest_miss: Optional[PlanRow] = None
    # the k3plan.step.verdict.REASONS index that rejected closest_miss (-1: none); plan/output.py names it
    closest_miss_code: int = -1

    __exclude__ = ("closest_miss_code",)


def check_inputs(*, concurrency: int, max_chips: int, objective: str, top: int, context: int) -> None:
    """The search's own inputs; the latency and load targets are plan/sla.check_targets'."""
    if not 1 <= concurrency <= MAX_SEQUENCES:
        raise K3PlanError(f"--concurrency {concurrency}: expected a positive integer of at most {MAX_SEQUENCES:,}")
    if max_chips < 1:
        raise K3PlanError(f"--max-chips {max_chips}: expected a positive integer")
    if objective not in OBJECTIVES:
        raise K3PlanError(
            f"objective {objective!r}: expected --minimize chips|cost or --maximize tokens-per-chip|throughput"
        )
    if top < 1:
        raise K3PlanError(f"--top {top}: expected a positive integer")
    check_workload(context_tokens=context, batch=1, prefill_chunk_tokens=None)


def _kv_list(kv_dtypes: Optional[Sequence[str]]) -> list[Optional[str]]:
    if not kv_dtypes:
        return [None]
    if list(kv_dtypes) == ["all"]:
        return list(KV_DTYPES)
    for k in kv_dtypes:
        if k not in (*KV_DTYPES, "stack"):
            raise K3PlanError(f"--kv-dtypes {k!r}: expected 'stack', 'all' or some of {', '.join(KV_DTYPES)}")
    return list(dict.fromkeys(None if k == "stack" else k for k in kv_dtypes))


def _chunks(chunks: Optional[Sequence[int]], context: int) -> list[int]:
    if not chunks:
        return [min(DEFAULT_PREFILL_CHUNK_TOKENS, context)]  # as fit does when --chunk is not given
    for c in chunks:
        if not 1 <= c <= MAX_TOKENS:
            raise K3PlanError(f"--chunks {c}: expected a positive integer of at most {MAX_TOKENS:,}")
    return sorted(set(int(c) for c in chunks))


def _order(cols: StepColumns, idx: np.ndarray, objective: str, last: Collection[int] = ()) -> np.ndarray:
    """Feasible configurations, best first: the objective, then the tie-breaks, most significant first; the rows
    of ``last`` (those their stack cannot launch, under --include-unlaunchable) after every other."""
    chips, tpot = cols.chips[idx], cols.tpot_s[idx]
    if objective == "chips":
        keys = [chips, tpot]
    elif objective == "cost":
        keys = [cols.cost_per_hour[idx], tpot]
    else:  # tokens-per-chip, throughput (re-ranked by plan/wire.py)
        keys = [-cols.tokens_per_s_per_chip[idx], chips]
    keys += [-cols.free_bytes[idx], -cols.chunk[idx], cols.hw[idx]]
    keys = [np.isin(idx, np.fromiter(last, dtype=np.int64, count=len(last)))] + keys
    return idx[np.lexsort(keys[::-1])]  # lexsort: the last key is the primary one


def closest_miss(cols: StepColumns, codes: np.ndarray) -> Optional[int]:
    """The index of the rejected configuration that came closest: the fastest one its stack cannot launch (it
    passed every check), else the fastest TPOT miss (it passed every memory check), else the memory miss (weights, budget, concurrency) with the most free HBM a
    device; fewest chips on a tie."""
    for keys in (("launch",), ("tpot",), ("weights", "budget", "concurrency")):
        idx = np.flatnonzero(np.isin(codes, [CODE[k] for k in keys]))
        if idx.size:
            first = cols.tpot_s[idx] if keys in (("launch",), ("tpot",)) else -cols.free_bytes[idx]
            return int(idx[np.lexsort([cols.chips[idx], first])[0]])  # lexsort: the last key is the primary
    return None


def _miss_row(*, space, cols: StepColumns, i: int, codes: np.ndarray, why: dict[int, str]) -> PlanRow:
    """The closest miss as a row: with its speed where it passed the memory checks (a TPOT miss, or one its stack
    cannot launch, which carries why)."""
    code = int(codes[i])
    r = row(space=space, cols=cols, i=i, rank=0, fits=code in (CODE["tpot"], CODE["launch"]))
    return r.extended(launch_error=why[i]) if code == CODE["launch"] else r


def engram_stacks(stacks: list, model, engram: Optional[str]) -> list:
    """For a model with Engram tables (DeepSeek-V4.1): each stack with them where --engram puts them ("hbm" /
    "host"), else where its engine does by default, so every row says where they are and counts what a device
    holds (plan.evaluate.with_engram); a model without Engram refuses --engram."""
    from k3plan.budget.engram import has_engram, placement_for

    if not has_engram(model):
        if engram is not None:
            raise K3PlanError(f"--engram {engram}: {model.name} has no Engram tables; leave it out")
        return stacks
    return [s.with_engram(placement_for(s, engram)) for s in stacks]


def plan(
    *,
    model: str = "kimi-k3",
    hardware: Optional[Sequence[str]] = None,
    stacks: Optional[Sequence[str]] = None,
    max_chips: int = DEFAULT_MAX_CHIPS,
    max_pp: int = MAX_PP,
    context: int = 131072,
    concurrency: int = 1,
    target_tpot_ms: Optional[float] = None,
    objective: str = "chips",
    kv_dtypes: Optional[Sequence[str]] = None,
    chunks: Optional[Sequence[int]] = None,
    top: int = 10,
    eff: Optional[Efficiency] = None,
    evidence: Optional[Evidence] = None,
    allow_cpu_probes: bool = False,
    ttft_ms: Optional[float] = None,
    request_latency_ms: Optional[float] = None,
    isl: Optional[int] = None,
    osl: Optional[int] = None,
    request_rate: Optional[float] = None,
    strict: bool = False,
    prices: Optional[dict[str, float]] = None,
    load_gbps: Optional[float] = None,
    rank_by: str = "best",
    include_unlaunchable: bool = False,
    engram: Optional[str] = None,
) -> PlanResult:
    """Without --isl/--osl: the decode roofline at --concurrency, --target-tpot-ms rejects (as before).
    With them: each feasible row also runs the scheduler's steady state (plan/sla.py) and is checked
    against --ttft-ms / --tpot-ms / --request-latency-ms, best-effort (misses ranked last) or --strict.
    A row its stack cannot launch (plan/launchable.py) is rejected (reason ``launch``), or with
    ``include_unlaunchable`` ranked after every row that can, with its ``launch_error``."""
    check_inputs(
        concurrency=concurrency,
        max_chips=max_chips,
        objective=objective,
        top=top,
        context=context,
    )
    check_targets(
        ttft_ms=ttft_ms,
        tpot_ms=target_tpot_ms,
        request_latency_ms=request_latency_ms,
        isl=isl,
        osl=osl,
        request_rate=request_rate,
        concurrency_given=concurrency != 1,
    )
    if isl is None and (ttft_ms is not None or request_latency_ms is not None or request_rate is not None or strict):
        raise K3PlanError(
            "--ttft-ms, --request-latency-ms, --request-rate and --strict need --isl and --osl "
            "(the request's prompt and output tokens)"
        )
    if objective == "throughput" and isl is None:
        raise K3PlanError("--maximize throughput needs --isl and --osl (the batch is sized against the scheduler)")
    if load_gbps is not None:
        from k3plan.deploy.coldstart import load_bytes_per_s

        load_bytes_per_s(load_gbps)  # checks it
    from k3plan.plan.expected import RANK_BY

    if rank_by not in RANK_BY:
        raise K3PlanError(f"--rank-by {rank_by!r}: expected best, ceiling or expected")
    eff = eff or Efficiency()
    m = load_model(model)
    hws = [load_hardware(h) for h in (hardware or list_hardware())]
    spec_hardware = {h.name: h for h in hws}  # the expected time's peaks: the specs', never probe-substituted
    probe_notes: list[str] = []
    if measures_hardware(evidence):  # measured HBM bandwidth replaces the specs'; latency: evaluate(), per collective
        from k3plan.roofline.latency import measured_hardware

        measured = [measured_hardware(h, evidence=evidence, allow_cpu=allow_cpu_probes) for h in hws]
        hws = [h for h, _ in measured]
        probe_notes = [f"{h.name}: {n}" for h, notes in measured for n in notes]
    if len({h.name for h in hws}) < len(hws):
        raise K3PlanError("--hardware: a hardware is listed twice")
    price_list = [price_for(h, prices or {}) for h in hws]
    sts = [s.for_model(m) for s in engram_stacks([load_stack(s) for s in (stacks or list_stacks())], m, engram)]
    twice = sorted({s.label for s in sts if sum(t.label == s.label for t in sts) > 1})
    hws, sts, fp4_notes = _fp4_paths(m, hws, sts)
    probe_notes += fp4_notes
    if twice:
        raise K3PlanError(f"--stacks: {', '.join(twice)} listed twice; expected each stack (with its options) once")
    kvs, chunk_list = _kv_list(kv_dtypes), _chunks(chunks, context)
    need_price = objective == "cost"
    if need_price and all(p.usd_per_chip_hour is None for p in price_list):
        raise K3PlanError(
            "--minimize cost: none of the hardware searched has a price "
            f"({', '.join(h.name for h in hws)}); priced: "
            + (", ".join(n for n in list_hardware() if load_hardware(n).price_usd_per_chip_hour) or "none")
            + "; --price HW=USD sets one"
        )
    start = time.perf_counter()
    sla_mode = isl is not None
    space = build_space(
        hardware=hws,
        stacks=sts,
        kv_dtypes=kvs,
        chunks=chunk_list,
        max_chips=max_chips,
        stacks_given=bool(stacks),
        # a stage holds a decoder layer at least: past the model's layers there is no pipeline to search
        # (was: --max-pp 99999 reached pp 128 on 4x4x8 x 128 slices and stage_bounds aborted the search on it)
        max_pp=1 if sla_mode else min(max_pp, m.spec.num_layers),
        experts=m.spec.moe.num_experts,
        expert_width=m.spec.moe.expert_intermediate if m.spec.n_moe else 0,
    )
    static = static_columns(space=space, model=m, eff=eff, evidence=evidence, allow_cpu_probes=allow_cpu_probes)
    ev = evaluate(
        space=space,
        model=m,
        context=context,
        batch=concurrency,
        eff=eff,
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
        static=static,
    )
    cols = ev.cols.priced(price_column([hws[h].name for h in ev.cols.hw], {p.hardware: p for p in price_list}))
    probe_notes = probe_notes + ev.notes
    target_s = None if target_tpot_ms is None or sla_mode else target_tpot_ms / 1e3
    codes = reason_codes(cols=cols, concurrency=concurrency, target_tpot_s=target_s, need_price=need_price)
    from k3plan.plan.launchable import launch_errors

    unlaunchable = launch_errors(
        space=space,
        cols=cols,
        idx=np.flatnonzero(codes == 0),
        model=m,
        context=context,
        concurrency=concurrency,
        output_tokens=osl or 1,
    )
    if unlaunchable and not include_unlaunchable:
        codes = codes.copy()
        codes[list(unlaunchable)] = CODE["launch"]
    last = unlaunchable if include_unlaunchable else {}
    ranked = _order(cols, np.flatnonzero(codes == 0), objective, last=last.keys())
    fams = families(
        space=space,
        cols=cols,
        codes=codes,
        kinds=ev.kinds,
        concurrency=concurrency,
        target_tpot_s=target_s,
        launch=unlaunchable,
    )
    extra = PlanExtras()
    if isl is not None:  # sla_mode, spelled so the type checker narrows isl
        from k3plan.plan.wire import apply_sla

        k = concurrency if concurrency > 1 else 2
        other = evaluate(
            space=space,
            model=m,
            context=context,
            batch=1 if concurrency > 1 else 2,
            eff=eff,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
            static=static,
        ).cols
        targets = SlaTargets(
            isl_tokens=isl,
            osl_tokens=osl or 1,
            concurrency=None if request_rate else concurrency,
            request_rate_per_s=request_rate,
            ttft_ms=ttft_ms,
            tpot_ms=target_tpot_ms,
            request_latency_ms=request_latency_ms,
            strict=strict,
        )
        ranked, fams, all_rows, extra = apply_sla(
            space=space,
            cols=cols,
            cols_1=cols if concurrency == 1 else other,
            cols_k=other if concurrency == 1 else cols,
            k=k,
            ranked=ranked,
            fams=fams,
            targets=targets,
            model=m,
            eff=eff,
            prices={p.hardware: p for p in price_list},
            context=context,
            load_gbps=load_gbps,
            objective=objective,
            keep=top,
            evidence=evidence,
            spec_hardware=spec_hardware,
            unlaunchable=last,
            rank_by=rank_by,
        )
        rows = all_rows[:top]
    else:
        from k3plan.plan.expected import (
            ExpectedColumn,
            add_expected,
            index_of,
            order_by_estimate,
            pool_size,
            rerank,
            with_bands,
            with_estimates,
        )
        from k3plan.plan.wire import add_costs, pick_extras

        column = ExpectedColumn(
            space=space,
            cols=cols,
            model=m,
            context=context,
            batch=concurrency,
            evidence=evidence,
            spec_hardware=spec_hardware,
        )
        order = [int(i) for i in ranked[: pool_size(top) if rank_by in ("best", "expected") else top]]
        known: dict[int, float] = {}
        if rank_by == "expected":
            order, known = rerank(order, column=column, cols=cols, objective=objective)
        if rank_by != "best":
            order = order[:top]
        rows = [row(space=space, cols=cols, i=i, rank=r + 1) for r, i in enumerate(order)]
        rows = add_expected(rows, order, column=column, known=known)
        rows = [r.extended(launch_error=last[i]) if i in last else r for r, i in zip(rows, order)]
        from k3plan.plan.serving import add_serving  # issue 38: a serving benchmark's TPOT where one matches

        rows = add_serving(
            rows,
            order,
            space=space,
            cols=cols,
            model=m,
            context=context,
            batch=concurrency,
            evidence=evidence,
            spec_hardware=spec_hardware,
        )
        # issue 48: each row's best estimate (measured > transferred > model > ceiling), which --rank-by best orders
        rows = with_estimates(rows, batch=concurrency)
        where = index_of(rows, order)
        if rank_by == "best":
            rows = order_by_estimate(rows, objective=objective, batch=concurrency)[:top]
        rows = with_bands(rows, where=where, column=column)  # issue 46 item 7: the rows shown, each with its band
        rows = add_costs(rows, prices={p.hardware: p for p in price_list}, concurrency=concurrency)
        ranked_on = (
            f"--rank-by expected: the best {pool_size(top)} by ceiling re-ranked on expected TPOT (speed."
            "expected_time of each row's decode ops against its device kind's efficiency records; the "
            "ceiling TPOT where no record exists)"
        )
        ranked_best = (
            f"--rank-by best (the default): the best {pool_size(top)} by ceiling re-ranked on each row's best estimate "
            "of its TPOT: a serving benchmark's (measured at its workload, transferred near it), else the model's "
            "(speed.expected_time of the decode ops against the device kind's efficiency records), else the ceiling"
        )
        extra = PlanExtras(
            assumptions=(ranked_on,) if rank_by == "expected" else (ranked_best,) if rank_by == "best" else ()
        )
        if rows:
            extra = PlanExtras(
                pick=pick_extras(
                    space=space, pick=rows[0], model=m, context=context, max_num_seqs=concurrency, load_gbps=load_gbps
                ),
                assumptions=extra.assumptions + tuple(f"expected TPOT: {v}" for v in column.sources.values()),
            )
    miss = closest_miss(cols, codes) if not rows else None
    elapsed = time.perf_counter() - start
    return PlanResult(
        model=m.name,
        workload=PlanWorkload(
            context_tokens=context, concurrency=concurrency, target_tpot_ms=target_tpot_ms, rank_by=rank_by
        ),
        objective=objective,
        search=PlanSearch(
            hardware=[h.name for h in hws],
            stacks=[s.name for s in sts],
            kv_dtypes=[k or "stack" for k in kvs],
            chunks=chunk_list,
            max_chips=max_chips,
        ),
        configuration=CONFIGURATION,
        configurations=space.size,
        feasible=int(ranked.size),
        evaluate_s=elapsed,
        recommended=rows[0] if rows else None,
        ranked=rows,
        families=fams,
        rejected_families=[f for f in fams if f.feasible == 0],
        reasons=reason_texts(strict_sla=sla_mode and strict),
        assumptions=[
            f"decode batch = --concurrency ({concurrency}) sequences at --context {context:,} tokens; TPOT from "
            f"the decode roofline at {eff.bw_efficiency:.0%} HBM bandwidth, {eff.mfu:.0%} MFU ({eff.compute_dtype}), "
            + (
                "collective latencies and HBM bandwidth from probe records where they match (below), else the specs"
                if measures_hardware(evidence)
                else "collective latencies from the hardware specs"
            ),
            f"memory: fit's per-device terms (the stack's reserve; temporaries from a shipped calibration for "
            f"{int(((cols.temp_source == 1) | (cols.temp_source == 2)).sum()):,} configuration(s), from the "
            f"shipped temp model's upper end for {int((cols.temp_source == 3).sum()):,}, row key temp_evidence, "
            f"else the analytic lower bound); a configuration must hold --concurrency sequences",
            "topologies: each hardware's standard single shapes (topologies_up_to); TPU multi-slice not enumerated",
            (
                "pipeline: pp 1 only under --isl/--osl (the scheduler's linear step model has no microbatch "
                "pipeline yet)"
                if sla_mode
                else f"pipeline: pp divides the topology's scale-up domains (a stage is whole domains), up to "
                f"--max-pp {max_pp}, for stacks with a pipeline rule; the batch runs as pp microbatches (every stage busy), "
                "TPOT = the sum over the stages at a microbatch + the stage-to-stage sends; fewer sequences than "
                "stages leave stages idle (the bubble)"
            ),
            "--maximize tokens-per-chip scores at batch = --concurrency (it ranks by latency); --maximize throughput "
            "(with --isl/--osl) scores each row at the largest batch that fits memory and --tpot-ms",
        ]
        + list(extra.assumptions)
        + list(  # a stack bound to two kinds of machine says its refusals once
            dict.fromkeys(
                r for i in sorted(set(space.cols.stack.tolist())) for r in engine_refusals(m, space.stacks[i])
            )
        )
        + probe_notes,
        sla=extra.sla,
        prices=price_list,
        pareto=list(extra.pareto),
        disaggregated=extra.disaggregated,
        launch=extra.launch,
        cold_start=extra.cold_start,
        closest_miss=None if miss is None else _miss_row(space=space, cols=cols, i=miss, codes=codes, why=unlaunchable),
        closest_miss_code=-1 if miss is None else int(codes[miss]),
    )


def _fp4_paths(m, hws: list, sts: list) -> tuple[list, list, list[str]]:
    """The hardware and stacks a 4-bit checkpoint is searched on: those where its engine holds it as stored
    (engines/fp4_paths.py; the rule is a GPU condition and an engine condition, so the pairs left are the product of
    the two lists); each left out named once in the notes. None left: refused with the first reason."""
    from k3plan.engines.fp4_paths import fp4_refusal, fp4_storages
    from k3plan.engines.registry import engine_rules

    storages = fp4_storages(t.fmt for t in m.inventory.tensors)  # one pass over the inventory, not one a pair
    if not storages:
        return hws, sts, []
    why = {(h.name, s.label): fp4_refusal(storages, hardware=h, engine=engine_rules(s.name)) for h in hws for s in sts}
    if not any(w is not None for w in why.values()):
        return hws, sts, []
    hw_ok = [h for h in hws if any(why[h.name, s.label] is None for s in sts)]
    st_ok = [s for s in sts if any(why[h.name, s.label] is None for h in hws)]
    if not hw_ok or not st_ok:
        raise K3PlanError(f"{m.name}: {next(w for w in why.values() if w is not None)}")
    hw_out = [h for h in hws if h not in hw_ok]
    st_out = [s for s in sts if s not in st_ok]
    notes = []
    if hw_out:
        first = next(w for w in (why[hw_out[0].name, s.label] for s in sts) if w)
        notes.append(f"{m.name}: not searched on {', '.join(h.name for h in hw_out)} ({hw_out[0].name}: {first})")
    if st_out:
        first = next(w for w in (why[h.name, st_out[0].label] for h in hw_ok) if w)
        notes.append(f"{m.name}: not searched under {', '.join(s.label for s in st_out)} ({st_out[0].label}: {first})")
    return hw_ok, st_ok, notes
