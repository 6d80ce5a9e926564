"""plan()'s issue-13 pass over the feasible rows: latency targets, cost, the Pareto front, the
disaggregated alternative, the launch command and cold start of the pick (plan/sla.py and
plan/deployment.py do the work; this orders rows and amends the families' accounts)."""

from __future__ import annotations

import numpy as np

from k3plan.deploy.pareto import pareto_front
from k3plan.deploy.prices import Price
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
from k3plan.plan.sla import LABEL, SlaTargets, largest_batch, sla_row, step_coefficients
from k3plan.plan.space import Space
from k3plan.roofline.bounds import Efficiency


def add_costs(rows: list[PlanRow], *, prices: dict[str, Price], concurrency: int) -> list[PlanRow]:
    """Without an SLA: cost from the decode roofline's rate (concurrency / TPOT), output tokens only."""
    costs = cost_rows(
        prices=[prices[r.hardware] for r in rows],
        chips=[r.chips for r in rows],
        output_tokens_per_s=[r.tokens_per_s_per_chip * r.chips for r in rows],
        input_tokens_per_s=[None] * len(rows),
    )
    return [r.model_copy(update={"cost": c}) for r, c in zip(rows, costs)]


def _strict_families(fams: list[Family], rows: list[PlanRow], missed: list[PlanRow]) -> list[Family]:
    by_family: dict[tuple[str, str], list[PlanRow]] = {}
    for r in missed:
        by_family.setdefault((r.hardware, r.stack), []).append(r)
    out = []
    for f in fams:
        miss = by_family.get((f.hardware, f.stack), [])
        if not miss:
            out.append(f)
            continue
        left = f.feasible - len(miss)
        reasons = f.reasons.model_copy(update={"feasible": left or None, "sla": len(miss)})
        closest = miss[0]  # rows arrive in the objective's order: the best of the family first
        detail = f.detail + [
            f"SLA (--strict): {len(miss)} miss; closest {closest.topology} {closest.split_text}: "
            + "; ".join(closest.sla_row().misses)
        ]
        out.append(f.model_copy(update={"feasible": left, "reasons": reasons, "detail": detail}))
    return out


def apply_sla(
    *,
    space: Space,
    cols: dict,
    cols_1: dict,
    cols_k: dict,
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
) -> tuple[np.ndarray, list[Family], list[PlanRow], PlanExtras]:
    base, a, b = step_coefficients(model=model, cols_1=cols_1, cols_k=cols_k, k=k, isl=targets.isl_tokens, eff=eff)
    rows: list[PlanRow] = []
    for i in ranked:
        i = int(i)
        r = row(space=space, cols=cols, i=i, rank=0)
        s = sla_row(
            targets=targets,
            base=float(base[i]),
            a=float(a[i]),
            b=float(b[i]),
            token_budget=int(cols["chunk"][i]),
            chips=int(cols["chips"][i]),
            max_sequences=int(cols["max_sequences"][i]),
        )
        if objective == "throughput":
            tb, tput = largest_batch(
                targets=targets,
                base=float(base[i]),
                a=float(a[i]),
                b=float(b[i]),
                token_budget=int(cols["chunk"][i]),
                chips=int(cols["chips"][i]),
                max_sequences=int(cols["max_sequences"][i]),
            )
            s = s.model_copy(update={"throughput_batch": tb, "throughput_tokens_per_s_per_chip": tput})
        rows.append(r.model_copy(update={"sla": s}))
    if objective == "throughput":  # best first, rows with no batch that meets --tpot-ms last (stable)
        keep = sorted(range(len(rows)), key=lambda j: -(rows[j].sla_row().throughput_tokens_per_s_per_chip or -1.0))
        rows, ranked = [rows[j] for j in keep], ranked[keep] if ranked.size else ranked
    costs = cost_rows(
        prices=[prices[r.hardware] for r in rows],
        chips=[r.chips for r in rows],
        output_tokens_per_s=[r.sla_row().output_tokens_per_s for r in rows],
        input_tokens_per_s=[r.sla_row().input_tokens_per_s for r in rows],
    )
    rows = [r.model_copy(update={"cost": c}) for r, c in zip(rows, costs)]
    meets = np.array([r.sla_row().meets for r in rows], dtype=bool)
    met = [r for r in rows if r.sla_row().meets]
    missed = [r for r in rows if not r.sla_row().meets]
    if targets.strict:
        fams = _strict_families(fams, rows, missed)
        ordered, ranked = met, ranked[meets] if ranked.size else ranked
    else:
        ordered = met + missed
        ranked = np.concatenate([ranked[meets], ranked[~meets]]) if ranked.size else ranked
    ordered = [r.model_copy(update={"rank": n + 1}) for n, r in enumerate(ordered)]
    met = ordered[: len(met)]  # the met rows lead (--strict: they are all there is)
    batch = targets.concurrency or 1
    pool = [r for r in (met or ordered) if r.sla_row().output_tokens_per_s_per_user is not None]
    front = pareto_front(
        [r.sla_row().output_tokens_per_s_per_user for r in pool],
        [r.sla_row().output_tokens_per_s_per_chip for r in pool],
    )
    pareto = tuple(
        pareto_point(pool[j], batch=int(np.ceil(pool[j].sla_row().in_flight_sequences or batch))) for j in front
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
            f"Pareto front over {'the rows that meet the targets' if met else 'every feasible row (none meets)'}: "
            "tokens/s per user (1 / TPOT) vs output tokens/s per chip"
        ),
    )
    dis, pick_x = None, None
    if ordered:
        pick = ordered[0]
        hw = next(h for h in space.hardware if h.name == pick.hardware)
        stack = next(s for s in space.variants if s.name == pick.stack and s.kv_cache.dtype == pick.kv_dtype)
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
            space=space, pick=pick, model=model, context=context, max_num_seqs=int(np.ceil(seqs)), load_gbps=load_gbps
        )
    extra = PlanExtras(sla=targets, pareto=pareto, disaggregated=dis, pick=pick_x, assumptions=assumptions)
    return ranked, fams, ordered, extra


def pick_extras(
    *, space: Space, pick: PlanRow, model: Model, context: int, max_num_seqs: int, load_gbps: float | None
) -> PickExtras:
    """The launch command and (given --load-gbps) the cold start of the chosen row."""
    hw = next(h for h in space.hardware if h.name == pick.hardware)
    stack = next(s for s in space.stacks if s.name == pick.stack)
    topo = next(t for t in space.topologies if t.hardware == hw.name and t.text == pick.topology)
    return PickExtras(
        launch=launch_for(
            pick=pick, hw=hw, stack=stack, topology=topo, model=model, context=context, max_num_seqs=max_num_seqs
        ),
        cold_start=None
        if load_gbps is None
        else cold_start_for(pick=pick, hw=hw, topology=topo, load_gbps=load_gbps, model=model),
    )
