"""plan's expected TPOT column and --rank-by expected (issue 17 item 5).

A row's expected TPOT is ``speed.expected_time`` of its decode step's ops (``speed.stage``) against
the efficiency curves of its hardware's device kind, from the shipped records (k3plan/evidence/probes) plus --probes.
The column is filled only where such a record covers at least one of the row's ops (None elsewhere:
the ceiling is all there is).
Each row costs a Setup and an op list (~30 ms), so only rows shown -- and, for --rank-by expected,
a pool of the best by ceiling (``POOL``) -- get one; the assumption line says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from k3plan.evidence.value import Evidence
from k3plan.structs import replace

if TYPE_CHECKING:
    from k3plan.models import Model
    from k3plan.plan.rows import PlanRow
    from k3plan.plan.space import Space
    from k3plan.plan.table import StepColumns

RANK_BY = ("best", "ceiling", "expected")
POOL_FACTOR, POOL_MIN = 4, 40  # --rank-by best / expected re-rank the best max(4 x --top, 40) by ceiling
# the kinds of evidence a row's best estimate rests on, best first, and the mark each figure carries
ESTIMATE_KINDS = ("measured", "transferred", "model", "ceiling")
ESTIMATE_MARK = {"measured": "m", "transferred": "t", "model": "e", "ceiling": "c"}


def pool_size(top: int) -> int:
    return max(POOL_FACTOR * top, POOL_MIN)


def row_setup(*, space: Space, cols: StepColumns, i: int, model: Model):
    """The Setup of feasible row ``i`` (built from the space's objects, as evaluate() saw them)."""
    from k3plan.setup import Setup
    from k3plan.sharding import make_mesh, resolve

    hw = space.hardware[int(cols.hw[i])]
    topo = space.topologies[int(cols.topo[i])]
    st = space.variants[int(cols.variant[i])]
    split = tuple(int(getattr(cols, k)[i]) for k in ("tp", "ep", "dp", "pp"))
    mesh, parallel = make_mesh(devices=topo.devices, tp=split[0], ep=split[1], dp=split[2], pp=split[3])
    # as make_setup: the engine's collectives at this DP (DeepEP needs DP > 1), then its rules at this mesh
    st = st.for_dp(parallel.dp).for_mesh(family=model.spec.family, tp=parallel.tp, dp=parallel.dp, ep=parallel.ep)
    key = (model.spec.name, int(cols.variant[i]), topo.devices, *split)
    plan = space.shardings.get(key)
    if plan is None:  # the rules' answer for this variant and mesh, whatever the machine
        plan = space.shardings[key] = resolve(
            model.inventory,
            mesh=mesh,
            rules=st.sharding.rules,
            role_overrides=st.sharding.role_overrides,
            uneven=st.sharding.uneven_axes,
            source=f"rules of stack {st.name}",
        )
    return Setup(model=model, hardware=hw, topology=topo, mesh=mesh, parallel=parallel, stack=st, plan=plan)


class ExpectedColumn:
    """Expected TPOT a row, curves looked up once a hardware (spec peaks: ``spec_hardware`` by name)."""

    def __init__(
        self,
        *,
        space: Space,
        cols: StepColumns,
        model: Model,
        context: int,
        batch: int,
        evidence: Evidence | None,
        spec_hardware: dict,
    ):
        self.space, self.cols, self.model, self.context, self.batch = space, cols, model, context, batch
        self.evidence, self.spec_hardware = evidence, spec_hardware
        self._curves: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.records: dict[int, tuple[str, ...]] = {}  # row -> the records its expected TPOT used
        self.stages: dict[int, Any] = {}  # row -> its decode step's model (a StageTime), once priced

    def curves(self, hw_name: str):
        if hw_name not in self._curves:
            from k3plan.speed.peaks import Peaks
            from k3plan.speed.stage import curves_for

            peaks = Peaks.from_hardware(self.spec_hardware[hw_name])
            curves, line = curves_for(peaks, self.evidence)
            self._curves[hw_name] = (peaks, curves)
            self.sources[hw_name] = line
        return self._curves[hw_name]

    def stage(self, i: int):
        """Row ``i``'s decode step as the model prices it (a StageTime; without a record of its device kind, its
        ops at their ceilings plus the terms), computed once."""
        if i not in self.stages:
            from k3plan.speed.stage import decode_stage, records_of

            peaks, curves = self.curves(self.space.hardware[int(self.cols.hw[i])].name)
            setup = row_setup(space=self.space, cols=self.cols, i=i, model=self.model)
            # issue 38: roofline's model, term for term
            self.stages[i] = decode_stage(setup, batch=self.batch, context=self.context, peaks=peaks, curves=curves)
            self.records[i] = records_of(self.stages[i])
        return self.stages[i]

    def tpot_s(self, i: int) -> float | None:
        """Expected decode step of row ``i``, or None where no record sets an op or a term of it (a device kind
        without efficiency curves may still have one: a GPU's published kernel floor, speed.terms kernel-floor)."""
        stage = self.stage(i)
        # one rule with roofline and fit (speed.serving.model_records): a record set an op or a term of the step
        return stage.expected_s if self.records[i] else None

    def band_ms(self, i: int, *, ceiling_ms: float) -> tuple[float, float]:
        """The band roofline gives row ``i``'s TPOT where no serving benchmark speaks (speed.serving._no_benchmark):
        the model's between its ops' ceiling and it, the ceiling's (``ceiling_ms``, the decode bound) between it and
        the model."""
        st = self.stage(i)
        lo, hi = (st.ceiling_s * 1e3, st.expected_s * 1e3) if self.records.get(i) else (ceiling_ms, st.expected_s * 1e3)
        return (min(lo, hi), max(lo, hi))


def rerank(
    indices: list[int], *, column: ExpectedColumn, cols: StepColumns, objective: str
) -> tuple[list[int], dict[int, float]]:
    """The pool (in ceiling order) re-sorted on the objective with TPOT := expected where known
    (the ceiling TPOT elsewhere); ties keep the ceiling order's tie-breaks (a stable sort)."""
    exp = {i: column.tpot_s(i) for i in indices}
    tpot: dict[int, float] = {}
    for i in indices:
        e = exp[i]
        tpot[i] = e if e is not None else float(cols.tpot_s[i])

    def key(i: int):
        chips = float(cols.chips[i])
        if objective in ("tokens-per-chip", "throughput"):
            return (-column.batch / tpot[i] / chips, chips)
        first = float(cols.cost_per_hour[i]) if objective == "cost" else chips
        return (first, tpot[i])

    return sorted(indices, key=key), {i: v for i, v in exp.items() if v is not None}


def add_expected(
    rows: list[PlanRow], indices: list[int], *, column: ExpectedColumn, known: dict[int, float]
) -> list[PlanRow]:
    """Each row gains expected_tpot_ms (None without a record of its device kind) and its source line."""
    out = []
    for r, i in zip(rows, indices):
        t = known[i] if i in known else column.tpot_s(i)
        out.append(
            r.extended(
                expected_tpot_ms=None if t is None else t * 1e3,
                expected_source=column.sources.get(r.hardware),
                expected_records=column.records.get(i, ()) if t is not None else (),
            )
        )
    return out


def best_estimate(r: PlanRow) -> tuple[float | None, str]:
    """A row's best estimate of its TPOT (ms) and its kind: a serving benchmark's figure (plan/serving.py sets
    tpot_source: measured at its workload, transferred near it), else the model's (expected_tpot_ms, the decode ops
    against efficiency records), else the ceiling (tpot_ms, the decode bound)."""
    if r.tpot_source:
        return r.tpot_ms, "measured" if r.tpot_source.startswith("measured") else "transferred"
    if r.expected_tpot_ms is not None:
        return r.expected_tpot_ms, "model"
    return r.tpot_ms, "ceiling"


def with_estimates(rows: list[PlanRow], *, batch: int) -> list[PlanRow]:
    """Each row with its best estimate (estimate_tpot_ms, estimate_source) and tokens/s a chip from it."""
    out = []
    for r in rows:
        t, kind = best_estimate(r)
        extra = {} if t is None else {"tokens_per_s_per_chip": batch / (t / 1e3) / r.chips}
        out.append(r.extended(estimate_tpot_ms=t, estimate_source=kind, **extra))
    return out


def _key(r: PlanRow) -> tuple:
    return (r.hardware, r.topology, r.tp, r.ep, r.dp, r.pp, r.stack, r.kv_dtype, r.chunk_tokens)


def with_bands(rows: list[PlanRow], *, where: dict[tuple, int], column: ExpectedColumn) -> list[PlanRow]:
    """Each row's best estimate with its band (issue 46 item 7), as roofline gives it: a serving benchmark's band
    (plan/serving.add_serving set it), else ``ExpectedColumn.band_ms``. ``where``: each row's feasible index
    (``index_of``)."""
    out = []
    for r in rows:
        band = r.tpot_band_ms
        if band is None and r.tpot_ms is not None:
            band = column.band_ms(where[_key(r)], ceiling_ms=r.tpot_ms)
        out.append(r.extended(tpot_band_ms=band))
    return out


def index_of(rows: list[PlanRow], indices: list[int]) -> dict[tuple, int]:
    """Each row's feasible index by its configuration (the rows keep it through a re-ranking)."""
    return {_key(r): i for r, i in zip(rows, indices)}


def order_by_estimate(rows: list[PlanRow], *, objective: str, batch: int) -> list[PlanRow]:
    """--rank-by best: the rows (in the ceiling's order) re-sorted on the objective with TPOT := each row's best
    estimate; a row its stack cannot launch after every other (as the search orders them); ties keep the ceiling
    order's tie-breaks (a stable sort). Ranks renumbered from 1."""

    def key(r: PlanRow):
        t = r.estimate_tpot_ms if r.estimate_tpot_ms is not None else float("inf")
        if objective in ("tokens-per-chip", "throughput"):
            return (r.launch_error is not None, -batch / t / r.chips, r.chips)
        first = (
            (r.cost_usd_per_hour if r.cost_usd_per_hour is not None else float("inf"))
            if objective == "cost"
            else r.chips
        )
        return (r.launch_error is not None, first, t)

    return [replace(r, rank=k + 1) for k, r in enumerate(sorted(rows, key=key))]


def evidence_line(rows: list[PlanRow], *, sla: bool = False) -> str | None:
    """Issue 48: when the rows are ranked on different kinds of evidence, which rows rest on which (a measured or
    modelled time and a ceiling are not like for like: the ceiling is a lower bound). ``sla``: the kind of each
    row's TPOT under the load (SlaRow.tpot_source) rather than its best estimate."""
    kinds: dict[str, list[int]] = {}
    for r in rows:
        kind = (r.sla.tpot_source if r.sla is not None else None) if sla else r.estimate_source
        if kind in ESTIMATE_MARK:
            kinds.setdefault(kind, []).append(r.rank)
    if len(kinds) < 2:
        return None
    parts = [f"{ESTIMATE_MARK[k]} = {k} ({_ranks(kinds[k])})" for k in ESTIMATE_KINDS if k in kinds]
    return (
        "ranked on different kinds of evidence: "
        + "; ".join(parts)
        + ". A ceiling is a lower bound on the time and a model sits between it and a measurement: figures of "
        "different kinds are not like for like"
    )


def _ranks(ranks: list[int]) -> str:
    """[1, 2, 3, 5] -> "#1-#3, #5"."""
    runs: list[list[int]] = []
    for n in ranks:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"#{r[0]}" if len(r) == 1 else f"#{r[0]}-#{r[-1]}" for r in runs)
