"""plan's TPOT column where a serving benchmark speaks for the row (issue 38): the same figure roofline
and fit stand behind (``speed.serving.stands_behind``: measured at the benchmark's workload,
transferred near it by the model's ratio), labelled in ``tpot_source``; every other row keeps the
ceiling (the decode bound), labelled "ceiling" only where some row is not."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from k3plan.models import Model
    from k3plan.plan.rows import PlanRow
    from k3plan.plan.space import Space
    from k3plan.plan.table import StepColumns


def add_serving(
    rows: list[PlanRow],
    indices: list[int],
    *,
    space: Space,
    cols: StepColumns,
    model: Model,
    context: int,
    batch: int,
    probes: Path | None,
    spec_hardware: dict,
) -> list[PlanRow]:
    from k3plan.evidence.benchmarks import matching
    from k3plan.plan.expected import row_setup
    from k3plan.speed.serving import stands_behind

    out: list[PlanRow] = []
    for r, i in zip(rows, indices):
        cands = (
            matching(
                model=model.name,
                hardware=r.hardware,
                topology=r.topology,
                tp=r.tp,
                dp=r.dp,
                ep=r.ep,
                stack=r.stack.split(":")[0],
            )
            if r.pp == 1 and r.tpot_ms is not None
            else ()
        )
        if not cands or r.tpot_ms is None:
            out.append(r)
            continue
        setup = row_setup(space=space, cols=cols, i=i, model=model)
        tpot, _, _, _ = stands_behind(
            setup,
            spec_hardware[r.hardware],
            batch=batch,
            context=context,
            chunk=r.chunk_tokens,
            expected=None,
            ceiling_tpot_s=r.tpot_ms / 1e3,
            ceiling_ttft_s=None,
            probes=probes,
        )
        out.append(
            r.model_copy(
                update={
                    "tpot_ms": tpot.value_s * 1e3,
                    "tokens_per_s_per_chip": batch / tpot.value_s / r.chips,
                    "tpot_source": tpot.label,
                }
            )
        )
    return out


def sla_measured_lines(result) -> list[str]:
    """Under --isl/--osl the table is the scheduler's, from ceilings; a row whose configuration and load a
    serving benchmark measured gets a line with that benchmark's medians beside it (issue 38), labelled."""
    from k3plan.evidence.benchmarks import matching

    s = result.sla
    if s is None or s.request_rate_per_s:
        return []
    lines = []
    for r in result.ranked:
        if r.pp != 1:
            continue
        for b in matching(
            model=result.model,
            hardware=r.hardware,
            topology=r.topology,
            tp=r.tp,
            dp=r.dp,
            ep=r.ep,
            stack=r.stack.split(":")[0],
        ):
            w = b.workload
            if (w.isl, w.osl, w.concurrency, b.chunk_tokens) == (
                s.isl_tokens,
                s.osl_tokens,
                s.concurrency,
                r.chunk_tokens,
            ):
                ttft = b.measured.median_ttft_ms
                lines.append(
                    f"#{r.rank} measured: median TPOT {b.measured.median_tpot_ms:,.2f} ms"
                    + (f", median TTFT {ttft:,.0f} ms" if ttft is not None else "")
                    + f" ({b.label}); the table's TTFT and TPOT are the scheduler's from ceilings"
                )
    return lines
