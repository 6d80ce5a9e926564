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

if TYPE_CHECKING:
    from k3plan.models import Model
    from k3plan.plan.rows import PlanRow
    from k3plan.plan.space import Space
    from k3plan.plan.table import StepColumns

RANK_BY = ("ceiling", "expected")
POOL_FACTOR, POOL_MIN = 4, 40  # --rank-by expected re-ranks the best max(4 x --top, 40) by ceiling


def pool_size(top: int) -> int:
    return max(POOL_FACTOR * top, POOL_MIN)


def row_setup(*, space: Space, cols: StepColumns, i: int, model: Model):
    """The Setup of feasible row ``i`` (built from the space's objects, as evaluate() saw them)."""
    from k3plan.setup import Setup
    from k3plan.sharding import make_mesh, resolve

    hw = space.hardware[int(cols.hw[i])]
    topo = space.topologies[int(cols.topo[i])]
    st = space.variants[int(cols.variant[i])]
    mesh, parallel = make_mesh(
        devices=topo.devices, tp=int(cols.tp[i]), ep=int(cols.ep[i]), dp=int(cols.dp[i]), pp=int(cols.pp[i])
    )
    st = st.for_mesh(family=model.spec.family, tp=parallel.tp, dp=parallel.dp, ep=parallel.ep)
    plan = resolve(
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

    def curves(self, hw_name: str):
        if hw_name not in self._curves:
            from k3plan.speed.peaks import Peaks
            from k3plan.speed.stage import curves_for

            peaks = Peaks.from_hardware(self.spec_hardware[hw_name])
            curves, line = curves_for(peaks, self.evidence)
            self._curves[hw_name] = (peaks, curves)
            self.sources[hw_name] = line
        return self._curves[hw_name]

    def tpot_s(self, i: int) -> float | None:
        """Expected decode step of row ``i``, or None where no record of its device kind covers any of its ops."""
        from k3plan.speed.stage import decode_stage, records_of

        name = self.space.hardware[int(self.cols.hw[i])].name
        peaks, curves = self.curves(name)
        if curves is None:
            return None
        setup = row_setup(space=self.space, cols=self.cols, i=i, model=self.model)
        # issue 38: roofline's model, term for term
        stage = decode_stage(setup, batch=self.batch, context=self.context, peaks=peaks, curves=curves)
        self.records[i] = records_of(stage)
        return stage.expected_s if any(o.efficiency.measured for o in stage.ops) else None


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
