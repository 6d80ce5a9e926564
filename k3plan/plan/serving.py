"""plan's TPOT column where a serving benchmark speaks for the row (issue 38): the same figure roofline
and fit stand behind (``speed.serving.stands_behind``: measured at the benchmark's workload,
transferred elsewhere by the model's ratio), labelled in ``tpot_source``; every other row keeps the
ceiling (the decode bound) in that column, its best estimate the model's where one exists (plan/expected.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3plan.engines.registry import StackRef
from k3plan.evidence.value import Evidence
from k3plan.structs import replace

if TYPE_CHECKING:
    from k3plan.models import Model
    from k3plan.plan.rows import PlanRow
    from k3plan.plan.sla import SlaRow, SlaTargets
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
    evidence: Evidence | None,
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
                stack=StackRef.parse(r.stack).name,
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
            evidence=evidence,
        )
        if tpot.source not in ("measured", "transferred"):  # no benchmark near it: the row keeps its ceiling column
            out.append(r)  # (and its best estimate the model's or the ceiling: plan/expected.best_estimate)
            continue
        out.append(
            r.extended(
                tpot_ms=tpot.value_s * 1e3,
                tokens_per_s_per_chip=batch / tpot.value_s / r.chips,
                tpot_source=tpot.label,
            )
        )
    return out


def serve_sla(
    slas: list[SlaRow],
    idx: list[int],
    *,
    space: Space,
    cols: StepColumns,
    model: Model,
    targets: SlaTargets,
    evidence: Evidence | None,
    spec_hardware: dict | None,
) -> list[SlaRow]:
    """Under --isl/--osl (closed loop): a row whose configuration a serving benchmark speaks for takes the TTFT and
    TPOT roofline and fit stand behind there (``stands_behind`` at batch = the concurrency, context = the ISL, the
    row's chunk: measured at the benchmark's workload, transferred near it), each labelled; its request latency is
    then TTFT + (OSL - 1) x TPOT and its throughput Little's law's at that latency (the scheduler's own relations).
    Every other row keeps the scheduler's figures from ceilings (``ttft_source`` / ``tpot_source`` "ceiling")."""
    if spec_hardware is None or targets.concurrency is None:
        return slas
    from k3plan.evidence.benchmarks import load_benchmarks
    from k3plan.plan.expected import row_setup
    from k3plan.speed.serving import stands_behind

    keys = {
        (b.hardware, b.topology, b.split.tp, b.split.dp, b.split.ep, b.engine.name)
        for b in load_benchmarks()
        if not b.waiting_for_model and b.model == model.name
    }
    if not keys:
        return slas
    out = list(slas)
    for j, i in enumerate(idx):
        s = slas[j]
        hw = space.hardware[int(cols.hw[i])]
        key = (
            hw.name,
            space.topologies[int(cols.topo[i])].text,
            int(cols.tp[i]),
            int(cols.dp[i]),
            int(cols.ep[i]),
            space.stacks[int(cols.stack[i])].name,
        )
        if key not in keys or int(cols.pp[i]) != 1 or s.tpot_ms is None or s.ttft_ms is None:
            continue
        setup = row_setup(space=space, cols=cols, i=i, model=model)
        tpot, ttft, _, _ = stands_behind(
            setup,
            spec_hardware[hw.name],
            batch=targets.concurrency,
            context=targets.isl_tokens,
            chunk=int(cols.chunk[i]),
            expected=None,
            ceiling_tpot_s=s.tpot_ms / 1e3,
            ceiling_ttft_s=s.ttft_ms / 1e3,
            evidence=evidence,
            osl=targets.osl_tokens,  # issue 46 item 4: the transfer between served workloads, not single steps
        )
        served = [f for f in (ttft, tpot) if f is not None and f.source in ("measured", "transferred")]
        if not served:
            continue
        ttft_s = ttft.value_s if ttft is not None and ttft in served else s.ttft_ms / 1e3
        tpot_s = tpot.value_s if tpot in served else s.tpot_ms / 1e3
        lat = ttft_s + (targets.osl_tokens - 1) * tpot_s
        scale = (s.request_latency_ms or lat * 1e3) / (lat * 1e3)  # closed loop: throughput ~ 1 / latency
        from k3plan.plan.sla import target_miss

        misses = [
            m
            for m in (
                target_miss("TTFT", ttft_s, targets.ttft_ms),
                target_miss("TPOT", tpot_s, targets.tpot_ms),
                target_miss("request latency", lat, targets.request_latency_ms),
            )
            if m
        ] + [m for m in s.misses if m.startswith("memory")]
        out[j] = replace(
            s,
            ttft_ms=ttft_s * 1e3,
            tpot_ms=tpot_s * 1e3,
            request_latency_ms=lat * 1e3,
            output_tokens_per_s=None if s.output_tokens_per_s is None else s.output_tokens_per_s * scale,
            output_tokens_per_s_per_user=1.0 / tpot_s,
            output_tokens_per_s_per_chip=(
                None if s.output_tokens_per_s_per_chip is None else s.output_tokens_per_s_per_chip * scale
            ),
            input_tokens_per_s=None if s.input_tokens_per_s is None else s.input_tokens_per_s * scale,
            meets=not misses,
            misses=misses,
            ttft_source=ttft.source if ttft is not None and ttft in served else "ceiling",
            tpot_source=tpot.source if tpot in served else "ceiling",
            serving_labels=[f"{w}: {f.label}" for w, f in (("TTFT", ttft), ("TPOT", tpot)) if f in served],
        )
    return out


def sla_measured_lines(result) -> list[str]:
    """Under --isl/--osl: one line a row whose TTFT or TPOT a serving benchmark gave (``serve_sla``), naming it; then
    what the other figures are (the scheduler's from ceilings)."""
    s = result.sla
    if s is None:
        return []
    lines = [f"#{r.rank} {label}" for r in result.ranked if r.sla is not None for label in r.sla.serving_labels]
    if not lines:
        return []
    return lines + [
        "TTFT and TPOT of the other rows (and the unmarked ones): the scheduler's from ceilings; m = measured, "
        "t = transferred from a serving benchmark (the figure roofline and fit stand behind)"
    ]
