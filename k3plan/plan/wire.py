"""plan()'s issue-13 pass over the feasible rows: latency targets, cost, the Pareto front, the
disaggregated alternative, the launch command and cold start of the pick (plan/sla.py and
plan/deployment.py do the work; this orders rows and amends the families' accounts)."""

from __future__ import annotations

from typing import Any

import numpy as np

from k3plan.deploy.pareto import pareto_front
from k3plan.deploy.prices import Price
from k3plan.evidence.value import Evidence
from k3plan.models import Model
from k3plan.plan.deployment import (
    cold_start_for,
    cost_rows,
    disaggregated,
    launch_for,
    pareto_point,
)
from k3plan.plan.extras import PickExtras, PlanExtras
from k3plan.plan.reasons import Family
from k3plan.plan.rows import PlanRow, row
from k3plan.plan.sla import LABEL, SlaRow, SlaTargets, largest_batch, sla_row, step_coefficients
from k3plan.plan.space import Space
from k3plan.plan.table import StepColumns
from k3plan.roofline.bounds import Efficiency
from k3plan.structs import replace


def add_costs(rows: list[PlanRow], *, prices: dict[str, Price], concurrency: int) -> list[PlanRow]:
    """Without an SLA: cost from the decode roofline's rate (concurrency / TPOT), output tokens only."""
    costs = cost_rows(
        prices=[prices[r.hardware] for r in rows],
        chips=[r.chips for r in rows],
        output_tokens_per_s=[
            None if r.tokens_per_s_per_chip is None else r.tokens_per_s_per_chip * r.chips for r in rows
        ],
        input_tokens_per_s=[None] * len(rows),
    )
    return [r.extended(cost=c) for r, c in zip(rows, costs)]


def _strict_families(
    fams: list[Family], missed: list[tuple[str, str]], closest: dict[tuple[str, str], PlanRow]
) -> list[Family]:
    """``missed``: (hardware, stack) of each row that misses a target; ``closest``: each such family's
    first (best) miss, typed."""
    count: dict[tuple[str, str], int] = {}
    for key in missed:
        count[key] = count.get(key, 0) + 1
    out = []
    for f in fams:
        n = count.get((f.hardware, f.stack), 0)
        if not n:
            out.append(f)
            continue
        left = f.feasible - n
        reasons = replace(f.reasons, feasible=left or None, sla=n)
        best = closest[(f.hardware, f.stack)]  # rows arrive in the objective's order: the best of the family first
        detail = f.detail + [
            f"SLA (--strict): {n} miss; closest {best.topology} {best.split_text}: " + "; ".join(best.sla_row().misses)
        ]
        out.append(replace(f, feasible=left, reasons=reasons, detail=detail))
    return out


def apply_sla(
    *,
    space: Space,
    cols: StepColumns,
    cols_1: StepColumns,
    cols_k: StepColumns,
    k: int,
    ranked: np.ndarray,
    fams: list[Family],
    targets: SlaTargets,
    model: Model,
    eff: Efficiency,
    prices: dict[str, Price],
    context: int,
    load_gbps: float | None,
    objective: str = "chips",
    keep: int | None = None,
    evidence: Evidence | None = None,
    spec_hardware: dict | None = None,
    unlaunchable: dict[int, str] | None = None,
    rank_by: str = "best",
) -> tuple[np.ndarray, list[Family], list[PlanRow], PlanExtras]:
    """-> (ranked indices, families, the first ``keep`` rows in order (None: all), extras). Every
    feasible row gets its SLA figures (they order the rows and choose the Pareto front); only the
    rows returned or named (the Pareto front's, each --strict family's closest miss) are built as
    typed PlanRows, with their cost and rank."""
    base, a, b = step_coefficients(model=model, cols_1=cols_1, cols_k=cols_k, k=k, isl=targets.isl_tokens, eff=eff)
    idx = [int(i) for i in ranked]
    slas: list[SlaRow] = []
    for i in idx:
        kw: dict[str, Any] = dict(
            targets=targets,
            base=float(base[i]),
            a=float(a[i]),
            b=float(b[i]),
            token_budget=int(cols.chunk[i]),
            chips=int(cols.chips[i]),
            max_sequences=int(cols.max_sequences[i]),
            dp=int(cols.dp[i]),
        )
        s = sla_row(**kw)
        if objective == "throughput":
            tb, tput = largest_batch(**kw)
            s = replace(s, throughput_batch=tb, throughput_tokens_per_s_per_chip=tput)
        slas.append(s)
    last = unlaunchable or {}  # --include-unlaunchable: these rows after every row that can launch (late_*)
    own: dict[int, float] = {}  # the model's TPOT under the load (ms), where it has one: --rank-by expected

    def arrange() -> list[int]:
        """The rows' order: those that meet the targets, then the misses (--strict: the misses dropped), then the
        same for the rows their stack cannot launch; within each, the objective on each row's figures (its best
        estimate once evaluated; --rank-by expected: the model's TPOT where it has one; --rank-by ceiling: the
        ceilings' order), ties in the ceilings' order."""

        def key(j: int):
            s, i = slas[j], idx[j]
            late, miss = i in last, not s.meets
            if rank_by == "ceiling":
                return (late, miss, j)
            tpot = own.get(j, s.tpot_ms) if rank_by == "expected" else s.tpot_ms
            t = tpot if tpot is not None else float("inf")
            if objective == "throughput":
                first: float = -(s.throughput_tokens_per_s_per_chip or -1.0)
            elif objective == "tokens-per-chip":
                per_chip = s.output_tokens_per_s_per_chip
                first = -(per_chip * s.tpot_ms / t if per_chip is not None and s.tpot_ms else -1.0)
            elif objective == "cost":
                first = float(cols.cost_per_hour[i])
            else:
                first = float(cols.chips[i])
            return (late, miss, first, t, j)

        return sorted(range(len(idx)), key=key)

    if spec_hardware is not None:  # issue 46 item 7: each row's best estimate, as roofline and fit assemble one
        from k3plan.evidence.value import evidence_of
        from k3plan.plan.expected import pool_size
        from k3plan.plan.serving import RowEvidence, serve_row

        evidence = evidence_of(evidence)  # one value: the records and curves read once for every row (its memo)
        ev = RowEvidence(space=space, cols=cols, model=model, evidence=evidence, spec_hardware=spec_hardware)
        done: set[int] = set()

        def evaluate(js: list[int]) -> None:
            for j in js:
                if j in done:
                    continue
                done.add(j)
                slas[j], t = serve_row(
                    slas[j],
                    idx[j],
                    space=space,
                    cols=cols,
                    model=model,
                    targets=targets,
                    evidence=evidence,
                    spec_hardware=spec_hardware,
                    objective=objective,
                )
                if t is not None:
                    own[j] = t

        shown = len(idx) if keep is None else keep
        # the best by the ceilings that may stand on more than the ceiling (a benchmark, a model of the device kind)
        evaluate([j for j in arrange()[: pool_size(shown)] if ev.more_than_ceiling(idx[j])])
        for _ in range(len(idx)):  # then until every row shown and every Pareto point is evaluated
            todo = [j for j in arrange()[:shown] if j not in done]
            todo += [j for j in _front(slas, arrange()) if j not in done and ev.more_than_ceiling(idx[j])]
            if not todo:
                break
            evaluate(todo)
    order_all = arrange()
    meets = np.array([s.meets for s in slas], dtype=bool)
    met_j = [j for j in order_all if slas[j].meets and idx[j] not in last]
    miss_j = [j for j in order_all if not slas[j].meets and idx[j] not in last]
    late_met = [j for j in order_all if slas[j].meets and idx[j] in last]
    late_miss = [j for j in order_all if not slas[j].meets and idx[j] in last]

    def typed(j: int, rank: int) -> PlanRow:
        r = row(space=space, cols=cols, i=idx[j], rank=rank)
        s = slas[j]
        (c,) = cost_rows(
            prices=[prices[r.hardware]],
            chips=[r.chips],
            output_tokens_per_s=[s.output_tokens_per_s],
            input_tokens_per_s=[s.input_tokens_per_s],
        )
        return r.extended(sla=s, cost=c, **({"launch_error": last[idx[j]]} if idx[j] in last else {}))

    def family(j: int) -> tuple[str, str]:
        i = idx[j]
        return space.hardware[int(cols.hw[i])].name, space.stacks[int(cols.stack[i])].name

    if targets.strict:
        closest: dict[tuple[str, str], PlanRow] = {}
        for j in miss_j + late_miss:
            if family(j) not in closest:  # the first miss of each family, its best: typed once
                closest[family(j)] = typed(j, rank=0)
        fams = _strict_families(fams, [family(j) for j in miss_j + late_miss], closest)
        order, ranked = met_j + late_met, ranked[meets] if ranked.size else ranked
    else:
        order = met_j + miss_j + late_met + late_miss
        ranked = np.concatenate([ranked[meets], ranked[~meets]]) if ranked.size else ranked
    built: dict[int, PlanRow] = {}

    def at(pos: int) -> PlanRow:  # the row ranked pos + 1, typed once
        if pos not in built:
            built[pos] = typed(order[pos], rank=pos + 1)
        return built[pos]

    ordered = [at(pos) for pos in range(len(order) if keep is None else min(keep, len(order)))]
    batch = targets.concurrency or 1
    # the met rows lead (--strict: they are all there is); the front is over them, else over every row
    pool = [pos for pos in range(len(met_j) or len(order)) if slas[order[pos]].output_tokens_per_s_per_user is not None]
    front = pareto_front(
        [slas[order[pos]].output_tokens_per_s_per_user for pos in pool],
        [slas[order[pos]].output_tokens_per_s_per_chip for pos in pool],
    )
    pareto = tuple(
        pareto_point(at(pool[j]), batch=int(np.ceil(slas[order[pool[j]]].in_flight_sequences or batch))) for j in front
    )
    assumptions = (
        f"latency: {LABEL}; ISL {targets.isl_tokens:,}, OSL {targets.osl_tokens:,}, "
        + (
            f"{targets.request_rate_per_s:g} requests/s (open loop)"
            if targets.request_rate_per_s
            else f"{batch} sequences in flight (closed loop)"
        )
        + ", token budget = the prefill chunk",
        (
            "--strict: rows that miss a target are rejected (families say why)"
            if targets.strict
            else "best-effort: rows that miss a target are ranked after those that meet, with the miss and by how much"
        ),
        (
            f"Pareto front over {'the rows that meet the targets' if met_j else 'every feasible row (none meets)'}: "
            "tokens/s per user (1 / TPOT) vs output tokens/s per chip"
        ),
    )
    dis, pick_x = None, None
    if ordered:
        pick = ordered[0]
        hw = next(h for h in space.hardware if h.name == pick.hardware)
        stack = next(  # the pick's machine's binding (Stack.bindings: one stack a kind)
            s for s in space.variants if s.label == pick.stack and s.kv_cache.dtype == pick.kv_dtype and s.runs_on(hw)
        )
        rate = targets.request_rate_per_s
        out_per_s = pick.sla_row().output_tokens_per_s
        if rate is None and out_per_s:
            rate = out_per_s / targets.osl_tokens
        if rate:
            dis = disaggregated(
                pick=pick,
                model=model,
                hw=hw,
                stack=stack,
                isl=targets.isl_tokens,
                osl=targets.osl_tokens,
                rate=rate,
                tpot_ms=targets.tpot_ms,
                ttft_ms=targets.ttft_ms,
                price=prices[hw.name],
            )
        seqs = pick.sla_row().in_flight_sequences or batch
        pick_x = pick_extras(
            space=space,
            pick=pick,
            model=model,
            context=context,
            max_num_seqs=int(np.ceil(seqs)),
            load_gbps=load_gbps,
            output_tokens=targets.osl_tokens,
        )
    extra = PlanExtras(sla=targets, pareto=pareto, disaggregated=dis, pick=pick_x, assumptions=assumptions)
    return ranked, fams, ordered, extra


def _front(slas: list[SlaRow], order: list[int]) -> list[int]:
    """The rows (positions in ``slas``) on the Pareto front of tokens/s a user vs a chip: over the rows that meet the
    targets, else over every row (``apply_sla``'s front)."""
    met = [j for j in order if slas[j].meets]
    pool = [j for j in (met or order) if slas[j].output_tokens_per_s_per_user is not None]
    front = pareto_front(
        [slas[j].output_tokens_per_s_per_user for j in pool], [slas[j].output_tokens_per_s_per_chip for j in pool]
    )
    return [pool[k] for k in front]


def pick_extras(
    *,
    space: Space,
    pick: PlanRow,
    model: Model,
    context: int,
    max_num_seqs: int,
    load_gbps: float | None,
    output_tokens: int = 1,
) -> PickExtras:
    """The launch command and (given --load-gbps) the cold start of the chosen row; ``output_tokens`` a
    request generates (--osl; 1 without it, as the SLA targets take it), which leaves the prompt its launch
    accepts."""
    hw = next(h for h in space.hardware if h.name == pick.hardware)
    stack = next(s for s in space.stacks if s.label == pick.stack and s.runs_on(hw))  # its machine's binding
    topo = next(t for t in space.topologies if t.hardware == hw.name and t.text == pick.topology)
    return PickExtras(
        launch=launch_for(
            pick=pick,
            hw=hw,
            stack=stack,
            topology=topo,
            model=model,
            context=context,
            max_num_seqs=max_num_seqs,
            output_tokens=output_tokens,
        ),
        cold_start=None
        if load_gbps is None
        else cold_start_for(pick=pick, hw=hw, topology=topo, load_gbps=load_gbps, model=model),
    )
