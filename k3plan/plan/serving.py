"""plan's TPOT column where a serving benchmark speaks for the row (issue 38): the same figure roofline
and fit stand behind (``speed.serving.stands_behind``: measured at the benchmark's workload,
transferred elsewhere by the model's ratio), labelled in ``tpot_source``; every other row keeps the
ceiling (the decode bound) in that column, its best estimate the model's where one exists (plan/expected.py)."""

from __future__ import annotations

import math
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
                tpot_band_ms=(tpot.band_s[0] * 1e3, tpot.band_s[1] * 1e3),
            )
        )
    return out


class RowEvidence:
    """Which feasible rows have more than the ceiling to say under --isl/--osl: a serving benchmark of their
    configuration (its key), or a model of their device kind (a probe record of it, or another TPU's transferred:
    ``speed.stage.curves_for`` answers curves). The rest stand on the ceiling, as roofline says for them."""

    def __init__(self, *, space: Space, cols: StepColumns, model: Model, evidence: Evidence | None, spec_hardware):
        from k3plan.evidence.benchmarks import load_benchmarks

        self.space, self.cols, self.evidence, self.spec_hardware = space, cols, evidence, spec_hardware
        self.keys = {
            (b.hardware, b.topology, b.split.tp, b.split.dp, b.split.ep, b.engine.name)
            for b in load_benchmarks()
            if not b.waiting_for_model and b.model == model.name
        }
        self._curves: dict[str, bool] = {}

    def benchmark(self, i: int) -> bool:
        c = self.cols
        key = (
            self.space.hardware[int(c.hw[i])].name,
            self.space.topologies[int(c.topo[i])].text,
            int(c.tp[i]),
            int(c.dp[i]),
            int(c.ep[i]),
            self.space.stacks[int(c.stack[i])].name,
        )
        return key in self.keys and int(c.pp[i]) == 1

    def has_model(self, i: int) -> bool:
        name = self.space.hardware[int(self.cols.hw[i])].name
        if name not in self._curves:
            from k3plan.speed.peaks import Peaks
            from k3plan.speed.stage import curves_for

            curves, _ = curves_for(Peaks.from_hardware(self.spec_hardware[name]), self.evidence)
            self._curves[name] = curves is not None
        return self._curves[name]

    def more_than_ceiling(self, i: int) -> bool:
        """Whether the row's best estimate may be other than the ceiling (else evaluating it only adds its band)."""
        return self.benchmark(i) or self.has_model(i)


def _coefficients(step) -> dict:
    """SlaRow's step fields from a StepCoefficients (a DP group's T(d, p))."""
    return {
        "step_base_ms": step.base_s * 1e3,
        "step_per_decode_seq_ms": step.per_decode_seq_s * 1e3,
        "step_per_prefill_token_us": step.per_prefill_token_s * 1e6,
    }


def _band_ms(a_s: float, b_s: float) -> tuple[float, float]:
    return (min(a_s, b_s) * 1e3, max(a_s, b_s) * 1e3)


def serve_row(
    s: SlaRow,
    i: int,
    *,
    space: Space,
    cols: StepColumns,
    model: Model,
    targets: SlaTargets,
    evidence: Evidence | None,
    spec_hardware: dict,
    objective: str = "chips",
) -> tuple[SlaRow, float | None]:
    """(the row, the model's TPOT under the load in ms or None: --rank-by expected ranks on it) -- row ``i``'s figures under the load as roofline and fit assemble a best estimate (measured > transferred >
    model > ceiling, issue 46 item 7), each with its source and band; ``s`` is its scheduler run on the ceilings.

    Closed loop (--concurrency N): ``speed.serving.stands_behind`` at batch N, context ISL, the row's chunk and
    OSL: a serving benchmark's figure (measured at its workload, transferred by the ratio of the served workloads),
    else the model as the engine serves the load (``served_asked``: the scheduler on the model's step), else the
    ceiling (``s``'s). Open loop (--request-rate): the scheduler's closed form on the model's step
    (``speed.serving.served_step`` at the in-flight sequences ``s`` found), where a model exists. Request latency
    is then TTFT + (OSL - 1) x TPOT and the throughput Little's law's at that latency (the scheduler's relations)."""
    from k3plan.plan.expected import row_setup
    from k3plan.plan.sla import sla_row, target_miss

    if s.tpot_ms is None or s.ttft_ms is None:  # the ceilings do not sustain the load: no figure to stand behind
        return s, None
    hw = space.hardware[int(cols.hw[i])]
    setup = row_setup(space=space, cols=cols, i=i, model=model)
    chunk = int(cols.chunk[i])
    osl = targets.osl_tokens
    extra: dict = {}
    if targets.concurrency is not None:
        from k3plan.speed.serving import model_records, stands_behind

        tpot, ttft, _, m = stands_behind(
            setup,
            spec_hardware[hw.name],
            batch=targets.concurrency,
            context=targets.isl_tokens,
            chunk=chunk,
            expected=None,
            ceiling_tpot_s=s.tpot_ms / 1e3,
            ceiling_ttft_s=s.ttft_ms / 1e3,
            evidence=evidence,
            osl=osl,  # issue 46 item 4: the served workload, not single steps
        )
        assert ttft is not None  # a ceiling TTFT was given
        ttft_s, tpot_s = ttft.value_s, tpot.value_s
        sources: tuple[str, ...] = (ttft.source, tpot.source)
        bands = (_band_ms(*ttft.band_s), _band_ms(*tpot.band_s))
        labels = [f"{w}: {f.label}" for w, f in (("TTFT", ttft), ("TPOT", tpot)) if f.source != "ceiling"]
        served = None if m is None else m.served.get(("asked", targets.concurrency, targets.isl_tokens, osl, chunk))
        own = (
            served.tpot_s * 1e3
            if served is not None
            and m is not None
            and model_records(m.decode_step(targets.concurrency, targets.isl_tokens))
            else None
        )
        if tpot.source == "model" and served is not None:  # the step the figures ran on: the model's
            extra = _coefficients(served.step)
        if objective == "throughput" and tpot.source == "model" and served is not None:
            from k3plan.plan.sla import largest_batch

            st = served.step
            tb, tput = largest_batch(
                targets=targets,
                base=st.base_s,
                a=st.per_decode_seq_s,
                b=st.per_prefill_token_s,
                token_budget=chunk,
                chips=int(cols.chips[i]),
                max_sequences=int(cols.max_sequences[i]),
                dp=int(cols.dp[i]),
            )
            extra |= {"throughput_batch": tb, "throughput_tokens_per_s_per_chip": tput}
    else:
        from k3plan.speed.serving import ModelAt, model_records, served_step

        m = ModelAt(setup, spec_hardware[hw.name], evidence=evidence)
        n = max(1, math.ceil(s.in_flight_sequences or 1))
        step, _, _, _ = served_step(
            m,
            isl=targets.isl_tokens,
            osl=osl,
            concurrency=n,
            token_budget=chunk,
            mean_context="mean-context" in m.on,
        )
        run = sla_row(
            targets=targets,
            base=step.base_s,
            a=step.per_decode_seq_s,
            b=step.per_prefill_token_s,
            token_budget=chunk,
            chips=int(cols.chips[i]),
            max_sequences=int(cols.max_sequences[i]),
            dp=int(cols.dp[i]),
        )
        speed = m.speed(n, targets.isl_tokens, min(chunk, targets.isl_tokens))
        has = (bool(model_records(speed.prefill)), bool(model_records(speed.decode)))  # each stage by its own
        if run.ttft_ms is None or run.tpot_ms is None:  # the model's step does not sustain the rate
            if any(has):
                return replace(
                    run,
                    ttft_source="model",
                    tpot_source="model",
                    serving_labels=[f"the model's step ({step.source}) does not sustain the rate"],
                ), None
            # the ceiling's band reaches the model, which does not sustain the rate: no upper end (JSON null)
            return replace(s, ttft_band_ms=(s.ttft_ms, math.inf), tpot_band_ms=(s.tpot_ms, math.inf)), None
        from k3plan.speed.serving import engine_floor_s, floor_label

        floor = engine_floor_s(m)  # the model's TTFT with its engine's floor, as the score prices it
        mod = (run.ttft_ms / 1e3 + floor[0], run.tpot_ms / 1e3)
        own = run.tpot_ms if has[1] else None
        extra = _coefficients(step) if has[1] else {}
        ceil = (s.ttft_ms / 1e3, s.tpot_ms / 1e3)
        ttft_s, tpot_s = (mod[k] if has[k] else ceil[k] for k in (0, 1))
        sources = tuple("model" if has[k] else "ceiling" for k in (0, 1))
        bands = (_band_ms(ceil[0], mod[0]), _band_ms(ceil[1], mod[1]))
        records = ", ".join(m.used)
        labels = [
            f"{w}: model: the scheduler's open loop on the model's step (efficiencies and kernel times from "
            f"{records}): T(d, p) = {step.base_s * 1e3:.2f} ms + {step.per_decode_seq_s * 1e3:.3f} ms d + "
            f"{step.per_prefill_token_s * 1e6:.2f} us p" + (floor_label(*floor) if k == 0 else "")
            for w, k in (("TTFT", 0), ("TPOT", 1))
            if has[k]
        ]
    if sources == ("ceiling", "ceiling"):
        return replace(s, ttft_band_ms=bands[0], tpot_band_ms=bands[1], **extra), own
    lat = ttft_s + (osl - 1) * tpot_s
    if targets.concurrency is not None:
        scale = (s.request_latency_ms or lat * 1e3) / (lat * 1e3)  # closed loop: throughput ~ 1 / latency
    else:
        scale = 1.0  # open loop: what arrives leaves, whatever the latency
    misses = [
        x
        for x in (
            target_miss("TTFT", ttft_s, targets.ttft_ms),
            target_miss("TPOT", tpot_s, targets.tpot_ms),
            target_miss("request latency", lat, targets.request_latency_ms),
        )
        if x
    ]
    in_flight = s.in_flight_sequences
    if targets.concurrency is None and s.output_tokens_per_s is not None:  # Little's law at the new latency
        in_flight = s.output_tokens_per_s / osl * lat
        if in_flight > int(cols.max_sequences[i]):
            misses.append(f"memory: {in_flight:,.1f} sequences in flight > {int(cols.max_sequences[i]):,} that fit")
    else:
        misses += [x for x in s.misses if x.startswith("memory")]
    return replace(
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
        in_flight_sequences=in_flight,
        meets=not misses,
        misses=misses,
        ttft_source=sources[0],
        tpot_source=sources[1],
        serving_labels=labels,
        ttft_band_ms=bands[0],
        tpot_band_ms=bands[1],
        **extra,
    ), own


def sla_measured_lines(result) -> list[str]:
    """Under --isl/--osl: one line a row whose TTFT or TPOT is not the ceiling (``serve_row``), naming what it rests
    on (the benchmark, or the model's records and step); then what the marks mean."""
    s = result.sla
    if s is None:
        return []
    lines = [f"#{r.rank} {label}" for r in result.ranked if r.sla is not None for label in r.sla.serving_labels]
    return lines + [
        "TTFT and TPOT: each row's best estimate under the load, as roofline and fit stand behind one (measured > "
        "transferred > model > ceiling), with its band in the JSON and CSV: m = measured (a serving benchmark's "
        "median), t = transferred from one by the ratio of the served workloads, e = the model (the scheduler on the "
        "model's step), c = the ceiling (the scheduler on the decode bound and the prefill compute ceiling)"
    ]
