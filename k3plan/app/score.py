"""The speed model's score against every public serving benchmark k3plan ships (issue 46 item 3), and the admission
of its terms by that score (issue 46 item 4).

For each file in ``k3plan/evidence/benchmarks/``: the model alone (``speed.stage``'s expected decode step and
prefill of one prompt, no serving benchmark in it, with the registered terms asked: ``speed.terms``) at the
benchmark's own configuration and workload, against the published figure, as model / measured for TPOT, TTFT and
throughput (output tokens/s, or input and output together where a run publishes only that); then the median and the
worst ratio (farthest from 1) for each engine x hardware, and the share of ratios within 0.67-1.5x and 0.5-2x.
Nothing is cached or typed in: the ratios are computed from the shipped evidence each run, so they stay true when
the model changes.

Leave-one-out: ``k3plan/speed`` reads no serving benchmark (tests/speed/test_serving_figures.py holds the model
unchanged with the benchmark set emptied); the only parameter fitted to these cases is the TTFT floor (term
``floor``; one an engine with ``engine-floor``), refitted without each case for its held-out ratio. The held-out
ratios are the ones scored. Under the term ``prefill-pass`` an SGLang run is served again with each prefill step
holding its case's held-out floor (``_with_prefill_pass``), so its TPOT and throughput rest on a floor fitted on the
other cases' TTFTs only.

Admission (``admit``): every scored term of ``speed.terms.REGISTRY`` in its order, the held-out score over the whole
set with every other term as admitted and with and without this one; the term is ON only where it improves the score
(``better``), passes repeated from every term ON until none changes. ``speed/admitted.json`` is the decision
(``write_admitted``), read by every command that prices a step (``speed.terms.default_terms``).

The transfer rule the commands stand behind where a benchmark speaks (``transfer_rows``) is scored the same way,
leave one out: each published TPOT and TTFT from the nearest other benchmark of its configuration, beside the model
alone on the same cases (``transfer_summary``, the README block's last lines).

``benchmarks/score_speed.py`` prints these; ``k3plan.api.score()`` gives the rows as a DataFrame.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from k3plan.engines.registry import engine_rules
from k3plan.errors import K3PlanError
from k3plan.evidence.benchmarks import ServingBenchmark, kv_dtype_of, load_benchmarks
from k3plan.speed.terms import ADMITTED, BY_NAME, REGISTRY, SCORED, default_terms

LOO_NOTE = (
    "Leave-one-out: k3plan/speed reads no serving benchmark; the only fitted parameter is the TTFT floor (term "
    "floor; one an engine with engine-floor; one an engine x hardware with a family floor term), refitted without "
    "each case for its held-out ratio (the summary above is held out)."
)
LOO_NOTE_NO_FIT = (
    "Leave-one-out: k3plan/speed reads no serving benchmark and no parameter is fitted to these cases (the fitted TTFT "
    "floor, term floor, is off), so every ratio above is held out as it stands."
)
BANDS = ((0.67, 1.5), (0.5, 2.0))
HARDWARE = {"tpu-v7x": "TPU v7x", "nvidia-b300": "B300", "nvidia-h200": "H200"}
HARDWARE_OF_LABEL = {v: k for k, v in HARDWARE.items()}  # a family label's hardware, undone once
FIGURES = ("tpot", "ttft", "throughput")  # what the score compares, each model / measured


@dataclass(frozen=True)
class Row:
    case: str  # the file's stem
    family: str  # engine x hardware
    model: str
    split: str
    workload: str  # ISL/OSL @ concurrency
    statistic: str  # median, mean or unstated (the source's)
    tpot_model_ms: float | None
    tpot_measured_ms: float
    tpot_ratio: float | None  # model / measured
    ttft_model_ms: float | None
    ttft_measured_ms: float | None
    ttft_ratio: float | None
    priced_as: str  # what k3plan priced that differs from the run, or why it could not
    # leave-one-out: nothing fitted to TPOT, so equal to tpot_ratio (under prefill-pass both at the held-out floor)
    held_out_tpot_ratio: float | None
    held_out_ttft_ratio: float | None  # leave-one-out: the TTFT floor refitted without this case
    ttft_floor_ms: float | None = None  # the fitted floor in the TTFT (term floor), in sample
    held_out_ttft_floor_ms: float | None = None  # the floor fitted without this case
    # tokens/s of the whole run (every DP group): the served run's (term served), else concurrency / TPOT; output
    # tokens where the run publishes them, else input and output together (throughput_kind "total")
    throughput_kind: str | None = None
    throughput_model_tok_s: float | None = None
    throughput_measured_tok_s: float | None = None
    throughput_ratio: float | None = None
    held_out_throughput_ratio: float | None = None  # nothing fitted to throughput: equal to throughput_ratio
    # the group the in-sample floor was fitted on: the family's label (engine x hardware), the engine, "" all cases
    ttft_floor_group: str | None = None


def _family(b: ServingBenchmark) -> str:
    return f"{b.engine.name} x {HARDWARE.get(b.hardware, b.hardware)}"


def _split(b: ServingBenchmark) -> str:
    s = b.split
    parts = [f"TP {s.tp}"] + [
        f"{k} {v}" for k, v in (("DP", s.dp), ("EP", s.ep), ("PP", s.pp), ("DCP", s.dcp)) if v > 1
    ]
    return ", ".join(parts)


def _setup(b: ServingBenchmark):
    """(setup, notes) for the run's configuration, or raise K3PlanError saying why k3plan cannot price it."""
    from k3plan.app.setup import setup_from

    s, notes = b.split, []
    if s.pp > 1:
        raise K3PlanError(f"pipeline parallel {s.pp}: the score prices pp 1 only")
    if s.dcp > 1:
        notes.append(f"no DCP (the run's {s.dcp})")
    opts = dict(model=b.model, hardware=b.hardware, topology=b.topology, tp=s.tp, dp=s.dp, stack=b.engine.name)
    # the release the run ran, where the record names one and its engine's rules follow releases (Engine.
    # newest_release_read): priced as that release, as fit --serve --engine-version reads a command, not as the
    # newest read a question that names none is
    if b.engine.version is not None and engine_rules(b.engine.name).newest_release_read is not None:
        from k3plan.engines.release import parse_release

        opts["engine_release"] = parse_release(b.engine.version)
    flag = b.flags.kv_cache_dtype
    kv = None if flag is None else kv_dtype_of(flag)  # None: the stack's default
    if flag is None:
        notes.append("KV dtype unpublished: the stack's default")
    try:
        setup = setup_from(**opts, ep=s.ep, kv_dtype=kv)
    except K3PlanError:
        if s.ep != 1:
            raise
        setup = setup_from(**opts, ep=s.tp * s.dp, kv_dtype=kv)  # the MoE over the TP group: k3plan's EP over it
        notes.append(f"EP {s.tp * s.dp} (the run shards each expert over TP)")
    options = {}
    util, knob = b.flags.gpu_memory_utilization, setup.stack.kv_pool.knob
    if util is not None and knob:  # the run's memory fraction (only fit's verdict reads it, not the speed)
        options[knob] = str(util)
    # the options the run ran at where it sets none: its engine's own defaults (Engine.run_options), as --serve reads
    # a command, not the stack's deployment; the MoE backend the run sets wins
    options.update(engine_rules(b.engine.name).run_options)
    if b.flags.moe_a2a_backend is not None:
        options["moe_a2a_backend"] = b.flags.moe_a2a_backend
    # the MoE runner after the a2a backend, as --serve sets it: its expert formats are the runner's
    if b.flags.moe_runner_backend is not None:
        options["moe_runner_backend"] = b.flags.moe_runner_backend
    if options:
        o = {**opts, "stack": f"{b.engine.name}:" + "+".join(f"{k}={v}" for k, v in options.items())}
        setup = setup_from(**o, ep=setup.parallel.ep, kv_dtype=kv)
    if b.checkpoint and "not the bundled" in b.checkpoint:
        notes.append("the bundled checkpoint's expert format")
    if b.chunk_tokens is None:
        notes.append("chunk unpublished: one chunk")
    return setup, notes


class Models:
    """The model a configuration and set of step terms, computed once: a configuration's setup (and fit's note) is
    built once; its model (``speed.serving.model_at``) once for each set of the step terms that may apply to it
    (``When.may_hold``: its stack and hardware kind), so trying a term re-prices only the cases it may touch."""

    def __init__(self) -> None:
        self.setups: dict = {}
        self.models: dict = {}
        self.scores: dict[frozenset[str], list[Row]] = {}  # the rows of a set of terms (the admission's)
        self.fitted: dict[str, tuple[list[str], int, int | None]] = {}  # _fit_note a benchmark: terms do not move it

    def fit_note(self, b: ServingBenchmark, setup) -> tuple[list[str], int, int | None]:
        """``_fit_note`` of ``b`` on its configuration's setup, computed once."""
        if b.path not in self.fitted:
            self.fitted[b.path] = _fit_note(setup, b)
        return self.fitted[b.path]

    def setup_of(self, b: ServingBenchmark):
        key = (
            b.model,
            b.hardware,
            b.topology,
            b.split,
            b.engine.name,
            b.flags.kv_cache_dtype,
            b.flags.moe_runner_backend,
        )
        if key not in self.setups:
            try:
                setup, notes = _setup(b)
                self.setups[key] = (setup, notes, None)
            except K3PlanError as e:
                self.setups[key] = (None, [], str(e))
        return key, self.setups[key]

    def of(self, b: ServingBenchmark, terms: frozenset[str]):
        """(the model, notes, why not priced) of ``b``'s configuration with the step terms of ``terms`` that may
        apply to it."""
        from k3plan.speed.serving import model_at

        key, (setup, notes, why) = self.setup_of(b)
        if setup is None:
            return None, notes, why
        step = frozenset(n for n in terms if BY_NAME[n].level == "step" and BY_NAME[n].may_hold_for(setup))
        if (key, step) not in self.models:
            self.models[(key, step)] = model_at(setup, setup.hardware, evidence=None, terms=step)
        return self.models[(key, step)], notes, None


def _fit_note(setup, b: ServingBenchmark) -> tuple[list[str], int, int | None]:
    """(notes, the sequences the pool holds, SGLang's sliding-window pool or None): k3plan fit's verdict at the run's
    workload where it is not "fits" -- the speed is priced all the same (the run did fit, with its own checkpoint and
    pool), but the row says the bundled one would not -- fit's most sequences at ISL + OSL tokens over every DP group
    (0: none), and for DeepSeek-V4 on SGLang its sliding-window pool a worker after fit's weights (term swa-pool)."""
    from k3plan.budget.fit import check_workload, fit
    from k3plan.engines.sglang.memory import sglang_dsv4_swa_tokens
    from k3plan.step.verdict import fit_reason

    w = b.workload
    chunk = b.chunk_tokens if b.chunk_tokens is not None else w.isl
    r = fit(setup, check_workload(context_tokens=w.isl + w.osl, batch=w.concurrency, prefill_chunk_tokens=chunk))
    held = int(r.capacity.max_sequences or 0)
    swa = sglang_dsv4_swa_tokens(setup, r.per_device.weights_bytes) if BY_NAME["swa-pool"].may_hold_for(setup) else None
    notes = [] if r.fits else [f"k3plan fit: does not fit ({fit_reason(fits=False, code=r.reason)[1]})"]
    return notes, held, None if swa is None else swa[0]


def _ratio(model: float | None, measured: float | None) -> float | None:
    return None if model is None or measured is None else model / measured


def score_rows(
    benchmarks: tuple[ServingBenchmark, ...] | None = None,
    *,
    terms: frozenset[str] | tuple[str, ...] | None = None,
    models: Models | None = None,
) -> list[Row]:
    """One Row a shipped serving benchmark (``load_benchmarks()``), the model computed now with ``terms`` (names of
    ``speed.terms.REGISTRY``; None: the admitted ones): it reads the probe records k3plan ships
    (k3plan/evidence/probes), as ``k3plan roofline`` does from any folder. ``models``: a ``Models`` to share between
    calls."""
    on = default_terms() if terms is None else frozenset(terms)
    models = models or Models()
    benchmarks = load_benchmarks() if benchmarks is None else benchmarks
    rows = _score_rows(benchmarks, on, models)
    if "floor" not in on:
        return rows
    per = floor_level(on)
    floored = _with_floor(rows, per=per)
    if "prefill-pass" in on and "served" in on:
        level = pass_level(on)
        passes = floored if level == per else _with_floor(rows, per=level)
        floored = _with_prefill_pass(floored, benchmarks, on, models, passes=passes)
    return floored


def pass_level(on: frozenset[str]) -> str:
    """The floor level whose floor a prefill step holds the loop for under ``on`` (term prefill-pass): the TTFT's
    (``floor_level``), or the engine's where pass-engine-floor is ON and the TTFT's is an engine x hardware's."""
    per = floor_level(on)
    return "engine" if "pass-engine-floor" in on and family_rule(per) is not None else per


def _with_prefill_pass(
    rows: list[Row],
    benchmarks: tuple[ServingBenchmark, ...],
    on: frozenset[str],
    models: Models,
    passes: list[Row] | None = None,
) -> list[Row]:
    """The rows of the engines the term prefill-pass applies to, their runs served again with each step that
    prefills holding the loop for the case's held-out TTFT floor (fitted on the other cases' TTFTs, as
    ``_with_floor`` fitted it: the request's own run + F; an engine's floor in sample where the case publishes no
    TTFT, which then holds nothing of it): TPOT and throughput at that loop, the held-out TTFT the scheduler's
    (its own pass is its floor), the in-sample TTFT with the in-sample floor in place of the held-out one.
    ``passes``: the rows whose floors the loop holds (``pass_level``; None: ``rows``'), the TTFT's own floor
    ``rows``' either way. The commands' own served runs take the admitted floor (``speed.serving.loop_pass_s``)."""
    term = BY_NAME["prefill-pass"]
    by_case = {Path(b.path).stem: b for b in benchmarks}
    held = {r.case: r for r in passes or rows}

    def in_sample(rs: list[Row]) -> dict[str, float]:
        floor_of: dict[str, float] = {}
        for r in rs:
            if r.ttft_floor_ms is not None:
                floor_of.setdefault(r.family, r.ttft_floor_ms)
                floor_of.setdefault(engine_of(r), r.ttft_floor_ms)
        return floor_of

    floor_of, pass_of = in_sample(rows), in_sample(passes or rows)
    out = []
    for r in rows:
        b = by_case[r.case]
        _, (setup, _, _) = models.setup_of(b)
        f_all = floor_of.get(r.family, floor_of.get(engine_of(r)))
        f_out = r.held_out_ttft_floor_ms if r.held_out_ttft_floor_ms is not None else f_all
        p = held[r.case].held_out_ttft_floor_ms
        f_pass = p if p is not None else pass_of.get(r.family, pass_of.get(engine_of(r)))
        if setup is None or f_out is None or f_pass is None or not term.may_hold_for(setup):
            out.append(r)
            continue
        m, _, _ = models.of(b, on)
        served, _ = _served(m, b, on, models.fit_note(b, m.setup), pass_s=f_pass / 1e3)
        if served is None:
            out.append(r)
            continue
        tpot, ttft, rate, total_rate = _served_figures(served, b)
        meas = b.measured
        if r.throughput_kind == "total":
            rate = total_rate
        tr, qr = _ratio(tpot, meas.tpot_ms), _ratio(rate, r.throughput_measured_tok_s)
        held_ttft = None if ttft is None else ttft + f_out
        own_ttft = None if ttft is None or f_all is None else ttft + f_all
        out.append(
            replace(
                r,
                tpot_model_ms=tpot,
                tpot_ratio=tr,
                held_out_tpot_ratio=tr,
                ttft_model_ms=own_ttft,
                ttft_ratio=_ratio(own_ttft, meas.ttft_ms),
                held_out_ttft_ratio=_ratio(held_ttft, meas.ttft_ms),
                throughput_model_tok_s=rate if r.throughput_measured_tok_s is not None else None,
                throughput_ratio=qr,
                held_out_throughput_ratio=qr,
                priced_as="; ".join(
                    x
                    for x in (r.priced_as, f"each prefill step holds the loop {f_pass:,.1f} ms (term prefill-pass)")
                    if x
                ),
            )
        )
    return out


def _served(m, b: ServingBenchmark, terms: frozenset[str], fitted: tuple, pass_s: float = 0.0):
    """(the benchmark's run through the scheduler with the served terms of ``terms``, notes), or (None, why):
    ``fitted`` ``_fit_note``'s (the sequences fit's pool holds: term pool-cap; SGLang's sliding-window pool: term
    swa-pool), ``pass_s`` the time each step that prefills holds the loop for (term prefill-pass:
    ``_with_prefill_pass``)."""
    from k3plan.speed.serving import served_of

    _, held, swa = fitted
    try:
        return served_of(
            m,
            b,
            prefill_first="prefill-first" in terms,
            async_term="async" in terms,
            mean_context="mean-context" in terms,
            pool_sequences=held if "pool-cap" in terms else None,
            client_lengths="client-lengths" in terms,
            recv_interval="recv-interval" in terms,
            pass_s=pass_s,
            swa_pool_tokens=swa if "swa-pool" in terms else None,
            held_batch="held-batch" in terms,
        )
    except K3PlanError as e:
        return None, [f"not served: {e}"]


def _served_figures(served, b: ServingBenchmark) -> tuple[float, float | None, float, float]:
    """(TPOT ms, TTFT ms where the run publishes one, output and total tokens/s of the whole run) of a served run."""
    ttft = served.ttft_s * 1e3 if b.measured.ttft_ms is not None else None
    groups = served.groups
    return (
        served.tpot_s * 1e3,
        ttft,
        served.result.output_tokens_per_s * groups,
        served.result.total_tokens_per_s * groups,
    )


def _score_rows(benchmarks: tuple[ServingBenchmark, ...], terms: frozenset[str], models: Models) -> list[Row]:
    rows = []
    for b in benchmarks:
        m, notes, why = models.of(b, terms)
        w, meas = b.workload, b.measured
        tpot = ttft = rate = total_rate = None
        if m is not None:
            fitted = models.fit_note(b, m.setup)
            notes = notes + fitted[0]
            served = None
            if "served" in terms:
                served, more = _served(m, b, terms, fitted)
                notes = notes + more
            if served is not None:
                tpot, ttft, rate, total_rate = _served_figures(served, b)
            else:
                tpot = m.decode_s(w.concurrency, w.isl) * 1e3
                rate = w.concurrency / (tpot / 1e3)
                total_rate = rate * (w.isl + w.osl) / w.osl
                if meas.ttft_ms is not None:
                    chunk = b.chunk_tokens if b.chunk_tokens is not None else w.isl
                    ttft = m.speed(w.concurrency, w.isl, chunk).prefill.expected_s * 1e3
        # the output token rate where the run publishes it, else its total (input + output) rate, the model's alike
        measured_rate, kind = meas.output_token_throughput, "output"
        if measured_rate is None and meas.total_token_throughput is not None:
            measured_rate, rate, kind = meas.total_token_throughput, total_rate, "total"
        tr, fr, qr = _ratio(tpot, meas.tpot_ms), _ratio(ttft, meas.ttft_ms), _ratio(rate, measured_rate)
        rows.append(
            Row(
                case=Path(b.path).stem,
                family=_family(b),
                model=b.model,
                split=_split(b),
                workload=f"{w.isl:,}/{w.osl:,} @ {w.concurrency:,}",
                statistic=meas.statistic,
                tpot_model_ms=tpot,
                tpot_measured_ms=meas.tpot_ms,
                tpot_ratio=tr,
                ttft_model_ms=ttft,
                ttft_measured_ms=meas.ttft_ms,
                ttft_ratio=fr,
                priced_as=f"not priced: {why}" if why else "; ".join(notes),
                held_out_tpot_ratio=tr,  # nothing fitted to TPOT: nothing to refit without the case
                held_out_ttft_ratio=fr,
                throughput_model_tok_s=rate if measured_rate is not None else None,
                throughput_measured_tok_s=measured_rate,
                throughput_kind=kind if measured_rate is not None else None,
                throughput_ratio=qr,
                held_out_throughput_ratio=qr,
            )
        )
    return sorted(rows, key=lambda r: (r.family, r.model, r.workload.split(" @ ")[0], _conc(r), r.case))


FLOOR_GRID_MS = tuple(0.5 * i for i in range(4001))  # 0 to 2 s: the floor fitted on a 0.5 ms grid


def fit_floor(pairs: list[tuple[float, float]]) -> float:
    """The TTFT floor F (ms) minimising the squared log ratio (model + F) / measured over ``pairs`` (model ms,
    measured ms)."""
    import numpy as np

    if not pairs:
        return 0.0
    m, y = (np.array(v) for v in zip(*pairs))
    grid = np.array(FLOOR_GRID_MS)[:, None]
    cost = (np.log((m[None, :] + grid) / y[None, :]) ** 2).sum(axis=1)
    return float(grid[int(np.argmin(cost)), 0])


def engine_of(r: Row) -> str:
    """The row's engine (its family is engine x hardware)."""
    return r.family.split(" x ")[0]


def hardware_of(r: Row) -> str:
    """The row's hardware as its benchmark names it (nvidia-b300): the family's second part, its label undone."""
    label = r.family.split(" x ", 1)[1]
    return HARDWARE_OF_LABEL.get(label, label)


def floor_key(r: Row) -> str:
    """The key of a row's family floor in admitted.json ttft_floor_ms (term hardware-floor): engine x hardware as
    the benchmark names it ("sglang x nvidia-b300"), the key ``speed.terms.ttft_floor_s`` reads first."""
    return f"{engine_of(r)} x {hardware_of(r)}"


# term lowc-floor: the concurrency at or below which a published TTFT is "low" -- the cases a family's floor is fitted
# on -- chosen before scoring: at most four requests sent together, so a request's TTFT waits on at most a few others'
# prefills and is mostly the per-request path the floor stands for. On the set's 1k-prompt curves the TTFT at c4 is
# within 1.6x of the c1 (B200 V3 160 -> 204 ms, B300 R1 76-77 -> 117-123 ms) and the model's own run 12-48% of it;
# from c32 up it is the queue, 3-9.4x the c1 (B300 R1 c32 664-725 ms, B200 V3 c64 1,170 ms), which the served run
# prices and whose error a floor fitted there absorbs (the V4-Flash H100 pair at c1024/c4096). Every engine has cases
# this low (SGLang's B200 and B300, vLLM's MI355X c4, torchtpu-vllm's v7x c1); SGLang's H200 and H100 do not
LOW_CONCURRENCY = 4
# term family-min-floor: a family's own floor needs at least this many other published TTFTs of the family once the
# case is left out, else the case takes its engine's. Chosen before scoring: the floor is one parameter, and fitted on
# one or two cases it is their residual (the two DeepSeek-V4-Flash H100 runs, c1024 and c4096, each other's only
# family case, fitted each other to the grid's 2 s end); three is the fewest where the fit is over more cases than a
# pair and one odd run cannot set it alone. On the shipped set any N from 2 to 7 draws the same line (family sizes
# 2, 3, 8, 10, 11, 19; the family of 3 is torchtpu-vllm's only one, its engine's fit the same cases)
FAMILY_MIN_OTHERS = 3
# the floor levels that fit a floor an engine x hardware, the term that asks for each, in precedence (one level
# fits the floor: where two of these terms are ON, the first named here decides)
FAMILY_LEVELS = (("lowc", "lowc-floor"), ("family-min", "family-min-floor"), ("hardware", "hardware-floor"))


def floor_level(on: frozenset[str]) -> str:
    """How finely the TTFT floor is fitted under the terms ``on``: "" (floor: one for all), "engine" (engine-floor:
    one an engine), or one F an engine x hardware -- "hardware" (hardware-floor: on the family's published TTFTs),
    "lowc" (lowc-floor: on its low-concurrency ones, ``LOW_CONCURRENCY``), "family-min" (family-min-floor: on its
    published TTFTs where at least ``FAMILY_MIN_OTHERS`` others are left) -- each refining engine-floor, the first of
    ``FAMILY_LEVELS`` ON deciding."""
    if "engine-floor" not in on:
        return ""
    return next((level for level, term in FAMILY_LEVELS if term in on), "engine")


def floor_term(per: str) -> str:
    """The term that fits the floor at level ``per`` (``floor_level``)."""
    return dict(FAMILY_LEVELS).get(per) or {"engine": "engine-floor"}.get(per, "floor")


def _floor_keys(r: Row, per: str) -> tuple[str, ...]:
    """The groups a row's floor is fitted on, the finest first ("" every case): its family, its engine, all."""
    if per in dict(FAMILY_LEVELS):
        return (r.family, engine_of(r), "")
    return {"engine": (engine_of(r), "")}.get(per, ("",))


def family_rule(per: str) -> tuple[Any, int] | None:
    """(which of a family's cases its own floor is fitted on, how many of them besides the case left out it needs)
    at the floor level ``per``; None where the level fits no floor an engine x hardware."""
    return {
        "hardware": (lambda r: True, 1),
        "lowc": (lambda r: _conc(r) <= LOW_CONCURRENCY, 1),
        "family-min": (lambda r: True, FAMILY_MIN_OTHERS),
    }.get(per)


def floor_fits(rows: list[Row], per: str = "") -> tuple[dict[str, tuple[float, str]], dict[str, tuple[float, str]]]:
    """(held out, in sample): a case's TTFT floor and the group it was fitted on (its family's label, its engine, ""
    for all), for every row with a published TTFT. Held out: fitted on the finest group with cases other than the
    row's own (at a family level, its family's cases of ``family_rule``, as many as it asks; else its engine's; else
    all) -- the case itself never among them. In sample: one F a group, fitted on all its cases; a family has its own
    only where the held-out score fitted one for a case of it (else its engine's)."""
    pairs: dict[str, tuple[float, float]] = {
        r.case: (r.ttft_model_ms, r.ttft_measured_ms)
        for r in rows
        if r.ttft_ratio is not None and r.ttft_model_ms is not None and r.ttft_measured_ms is not None
    }
    by_case = {r.case: r for r in rows}
    keys = {r.case: _floor_keys(r, per) for r in rows}
    rule = family_rule(per)
    on_it, need = rule if rule is not None else (lambda r: True, 1)

    def fit(case: str, without: str | None, own_family: bool = True) -> tuple[float, str]:
        for level, key in enumerate(keys[case]):
            family = rule is not None and level == 0
            if family and not own_family:
                continue
            mine = [
                v
                for k, v in pairs.items()
                if k != without and (not key or key in keys[k]) and (not family or on_it(by_case[k]))
            ]
            if len(mine) >= (need if family and without is not None else 1):
                return fit_floor(mine), key
        return 0.0, ""

    held = {c: fit(c, c) for c in pairs}
    own = {key for _, key in held.values()} if rule is not None else set()
    groups: dict[str, tuple[float, str]] = {}
    in_sample = {}
    for c in pairs:
        g = keys[c][0]
        if g not in groups:
            groups[g] = fit(c, None, own_family=g in own)
        in_sample[c] = groups[g]
    return held, in_sample


def _with_floor(rows: list[Row], *, per: str = "") -> list[Row]:
    """The rows with the fitted TTFT floor (``floor_fits``): in sample F fitted on every published TTFT, held out F
    refitted without the case (true leave-one-out: the held-out ratio never sees its own case). ``per`` "engine" (the
    term engine-floor): F fitted on the case's own engine's TTFTs only (the per-request path -- HTTP server,
    tokenizer, scheduler -- is the engine's); an engine with no other published TTFT takes the pooled fit. ``per``
    "hardware", "lowc", "family-min" (``floor_level``): F fitted on the case's own engine x hardware's TTFTs (all of
    them, its low-concurrency ones, or all where enough are left), a family without them taking its engine's fit
    (else the pooled one)."""
    held, in_sample = floor_fits(rows, per)
    out = []
    for r in rows:
        if r.case not in held:
            out.append(r)
            continue
        m, y = r.ttft_model_ms, r.ttft_measured_ms
        assert m is not None and y is not None
        (f_all, group), (f_out, _) = in_sample[r.case], held[r.case]
        out.append(
            replace(
                r,
                ttft_model_ms=m + f_all,
                ttft_ratio=(m + f_all) / y,
                held_out_ttft_ratio=(m + f_out) / y,
                ttft_floor_ms=f_all,
                held_out_ttft_floor_ms=f_out,
                ttft_floor_group=group,
            )
        )
    return out


def held_out(rows: list[Row], what: str) -> list[float]:
    """The held-out ratios of ``what`` (tpot, ttft, throughput) that exist."""
    return [x for r in rows if (x := getattr(r, f"held_out_{what}_ratio")) is not None]


def score_of(rows: list[Row], figures: tuple[str, ...] = FIGURES) -> tuple[int, int, float, int]:
    """The held-out score over the whole set: (ratios within 0.67-1.5x, within 0.5-2x, mean |ln ratio|, ratios),
    the ``figures`` together (TPOT, TTFT and throughput by default)."""
    xs = [x for what in figures for x in held_out(rows, what)]
    (lo1, hi1), (lo2, hi2) = BANDS
    mean_log = sum(abs(math.log(x)) for x in xs) / len(xs) if xs else math.inf
    return sum(lo1 <= x <= hi1 for x in xs), sum(lo2 <= x <= hi2 for x in xs), mean_log, len(xs)


def better(after: list[Row], before: list[Row]) -> bool:
    """A term improves the held-out score over the whole set: the mean |ln ratio| of every held-out TPOT, TTFT and
    throughput together falls. One continuous score: the bands (0.67-1.5x, 0.5-2x) are reported, not ruled on -- a
    rule that refused any term moving one case out of a band refused trade-offs whole (the client's own lengths: 7
    cases into 0.5-2x for 1 out of 0.67-1.5x) and made the admitted set hang on the order of the passes."""
    return score_of(after)[2] < score_of(before)[2]


def _score_dict(rows: list[Row]) -> dict[str, Any]:
    """The held-out score of each figure and of all together: counts in each band, ratios, mean |ln ratio|."""
    out: dict[str, Any] = {}
    for name, figs in (*((f, (f,)) for f in FIGURES), ("together", FIGURES)):
        n1, n2, ml, n = score_of(rows, figs)
        out[name] = {"within_0.67_1.5": n1, "within_0.5_2": n2, "ratios": n, "mean_abs_ln": round(ml, 6)}
    return out


@dataclass(frozen=True)
class Decision:
    term: str
    on: bool
    with_term: dict[str, Any]  # the held-out score with it (every other term as admitted)
    without: dict[str, Any]  # and without it


def _scored(models: Models, on: frozenset[str]) -> list[Row]:
    if on not in models.scores:
        models.scores[on] = score_rows(terms=on, models=models)
    return models.scores[on]


def decide(on: frozenset[str], models: Models | None = None) -> list[Decision]:
    """Each scored term of ``speed.terms.REGISTRY``, in its order: the held-out score over the whole set with every
    other term as ``on`` has it and with and without this one; ``on`` in a Decision says whether with it is better
    (``better``). The TTFT floor is refitted without each case inside every score (``_with_floor``)."""
    models = models or Models()
    out = []
    for name in SCORED:
        with_term, without = _scored(models, on | {name}), _scored(models, on - {name})
        out.append(
            Decision(
                term=name,
                on=better(with_term, without),
                with_term=_score_dict(with_term),
                without=_score_dict(without),
            )
        )
    return out


MAX_PASSES = 6


def admit(models: Models | None = None) -> list[Decision]:
    """The admitted terms: from every scored term ON, pass over them in REGISTRY order, each set ON or off by its
    score with and without it given the others as decided so far (``decide``'s rule), until a pass changes none;
    the decisions of that last pass (each term judged against the final set). Raises where no set settles."""
    models = models or Models()
    on = frozenset(SCORED)
    for _ in range(MAX_PASSES):
        changed = False
        for name in SCORED:
            keep = better(_scored(models, on | {name}), _scored(models, on - {name}))
            if keep != (name in on):
                on, changed = (on | {name}) if keep else (on - {name}), True
        if not changed:
            return decide(on, models)
    raise K3PlanError(f"the admission did not settle in {MAX_PASSES} passes over {', '.join(SCORED)}")


def admitted_floors(on: frozenset[str], models: Models | None = None) -> dict[str, float]:
    """The TTFT floor of each engine with the admitted terms ``on`` (term engine-floor: its own TTFTs' in-sample
    fit), and ``*`` the pooled fit (term floor; an engine without a published TTFT): what a command's transfer adds
    to both runs' TTFT (``speed.terms.ttft_floor_s``: the per-request path a measured TTFT holds and the model's
    run does not). {} where no floor term is ON."""
    if "floor" not in on:
        return {}
    models = models or Models()
    rows = _scored(models, on)
    raw = [
        (r.ttft_model_ms - r.ttft_floor_ms, r.ttft_measured_ms)
        for r in rows
        if r.ttft_floor_ms is not None and r.ttft_model_ms is not None and r.ttft_measured_ms is not None
    ]
    out = {"*": fit_floor(raw)}
    per = floor_level(on)
    if per == "engine":
        out |= {engine_of(r): r.ttft_floor_ms for r in rows if r.ttft_floor_ms is not None}
    if family_rule(per) is not None:
        # each family's own fit where the held-out score fitted one; each engine's as engine-floor fits it (every
        # TTFT of the engine, the runs before prefill-pass serves them again), the floor its other families take
        out |= {
            floor_key(r): r.ttft_floor_ms
            for r in rows
            if r.ttft_floor_ms is not None and r.ttft_floor_group == r.family
        }
        engines = _with_floor(_score_rows(load_benchmarks(), on, models), per="engine")
        out |= {engine_of(r): r.ttft_floor_ms for r in engines if r.ttft_floor_ms is not None}
    return dict(sorted(out.items()))


def admitted_data(decisions: list[Decision], models: Models | None = None) -> dict[str, Any]:
    """admitted.json's content: each scored term's decision and scores, how it was decided, and the TTFT floor a
    command's transfer reads (``admitted_floors`` with the admitted terms)."""
    on = frozenset(d.term for d in decisions if d.on)
    return {
        "how": "benchmarks/score_speed.py --admit --write (k3plan.app.score.admit): every scored term of "
        "k3plan/speed/terms.py REGISTRY in order, the held-out score over the shipped benchmark set with and "
        "without it, every other term as admitted; ON only where with it is better (k3plan.app.score.better: the "
        "mean |ln ratio| of TPOT, TTFT and throughput together falls); passes from every term ON until none "
        "changes, the scores below the last pass's",
        "benchmarks": sorted(Path(b.path).stem for b in load_benchmarks()),
        "terms": {d.term: {"on": d.on, "with": d.with_term, "without": d.without} for d in decisions},
        "ttft_floor_ms": admitted_floors(on, models),
    }


def write_admitted(decisions: list[Decision], path: Path = ADMITTED, models: Models | None = None) -> None:
    from k3plan.io_safe import write_text

    write_text(path, json.dumps(admitted_data(decisions, models), indent=2) + "\n", label="admitted.json")


def _cell(s: dict[str, Any]) -> str:
    return f"{s['within_0.67_1.5']}/{s['ratios']}, {s['within_0.5_2']}/{s['ratios']}, {s['mean_abs_ln']:.3f}"


def admission_table(decisions: list[Decision]) -> str:
    """The admission as Markdown: each term, its held-out score without and with it (within 0.67-1.5x, within
    0.5-2x, mean |ln ratio|) for TPOT, TTFT, throughput and together, and the verdict."""
    lines = [
        "| term | phase | TPOT without -> with | TTFT without -> with | throughput without -> with | together "
        "without -> with | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in decisions:
        cells = [f"{_cell(d.without[f])} -> {_cell(d.with_term[f])}" for f in (*FIGURES, "together")]
        verdict = "ON" if d.on else "off"
        lines.append(f"| {d.term} | {BY_NAME[d.term].phase} | " + " | ".join(cells) + f" | {verdict} |")
    lines.append("")
    lines.append(f"- ON: {', '.join(d.term for d in decisions if d.on) or 'none'}")
    lines.append(f"- off: {', '.join(d.term for d in decisions if not d.on) or 'none'}")
    cited = [t.name for t in REGISTRY if t.admission == "cited"]
    lines.append(f"- cited (0 s by the engine code they cite, always listed, never scored): {', '.join(cited)}")
    return "\n".join(lines) + "\n"


def _conc(r: Row) -> int:
    return int(r.workload.split(" @ ")[1].replace(",", ""))


@dataclass(frozen=True)
class TransferRow:
    """One published TPOT or TTFT predicted the way roofline, fit and plan stand behind a benchmark where the
    question is not its own workload: from another benchmark of the same configuration (``speed.serving``'s
    candidates, the nearest by ``evidence.benchmarks.nearest``), its figure x the model's ratio of the two runs as
    they ran (the score's served runs; a TTFT's with the engine's floor, fitted without the case, on both), left out:
    the case never speaks for itself."""

    case: str
    figure: str  # "tpot" or "ttft"
    measured_ms: float
    model_ratio: float  # the model alone, held out (the score's ratio, its floor refitted without the case)
    transferred_ratio: float  # the transfer from ``source`` over the measured figure
    source: str  # the benchmark transferred from (its file's stem)


def _raw_model_ms(r: Row, what: str) -> float | None:
    """The model's own figure of a row: its TTFT without the fitted floor (a transfer's ratio has none)."""
    ms = getattr(r, f"{what}_model_ms")
    return None if ms is None else ms - ((r.ttft_floor_ms or 0.0) if what == "ttft" else 0.0)


def transfer_rows(rows: list[Row], benchmarks: tuple[ServingBenchmark, ...] | None = None) -> list[TransferRow]:
    """Leave one out, the transfer rule the commands use (``TransferRow``), for every published TPOT and TTFT that
    another benchmark of its configuration can speak for. ``rows``: ``score_rows()``'s (their model figures)."""
    from k3plan.evidence.benchmarks import nearest
    from k3plan.speed.serving import asked_of, candidates

    by = {r.case: r for r in rows}
    out = []
    for b in load_benchmarks() if benchmarks is None else benchmarks:
        case = Path(b.path).stem
        if case not in by:
            continue
        try:
            setup, _ = _setup(b)
        except K3PlanError:
            continue
        w, r = b.workload, by[case]
        key = asked_of(setup, batch=w.concurrency, context=w.isl, chunk=b.chunk_tokens or w.isl)
        others = [c for c in candidates(setup) if Path(c.path).stem != case and Path(c.path).stem in by]
        for what in ("tpot", "ttft"):
            held, measured, own = (
                getattr(r, f"held_out_{what}_ratio"),
                getattr(r, f"{what}_measured_ms"),
                _raw_model_ms(r, what),
            )
            speak = tuple(c for c in others if _raw_model_ms(by[Path(c.path).stem], what))
            if held is None or measured is None or not own or not speak:
                continue
            o = nearest(speak, asked=key, need_ttft=what == "ttft")
            if o is None:
                continue
            ro = by[Path(o.path).stem]
            other_ms, other_model = getattr(ro, f"{what}_measured_ms"), _raw_model_ms(ro, what)
            if other_ms is None or not other_model:
                continue
            if what == "ttft":  # the floor fitted without the case, on both runs (speed.serving._like_for_like)
                floor = r.held_out_ttft_floor_ms or 0.0
                own, other_model = own + floor, other_model + floor
            out.append(
                TransferRow(
                    case=case,
                    figure=what,
                    measured_ms=measured,
                    model_ratio=held,
                    transferred_ratio=other_ms * own / other_model / measured,
                    source=Path(o.path).stem,
                )
            )
    return out


def transfer_summary(trows: list[TransferRow]) -> list[str]:
    """One Markdown line a figure: the transfers' share within the first band and mean |ln ratio|, beside the model
    alone on the same cases."""
    (lo, hi), _ = BANDS
    out = []
    for what in ("tpot", "ttft"):
        mine = [t for t in trows if t.figure == what]
        if not mine:
            continue

        def cell(xs: list[float]) -> str:
            mean = sum(abs(math.log(x)) for x in xs) / len(xs)
            return f"{sum(lo <= x <= hi for x in xs)}/{len(xs)} within {lo}-{hi}x, mean |ln ratio| {mean:.3f}"

        out.append(
            f"- {what.upper()} transferred, leave one out (from the nearest other benchmark of the configuration, as "
            f"roofline, fit and plan stand behind one): {cell([t.transferred_ratio for t in mine])}; the model alone on "
            f"the same cases: {cell([t.model_ratio for t in mine])}"
        )
    return out


def score_frame(rows: list[Row] | None = None):
    """The rows (``score_rows()`` where none are given) as a pandas DataFrame, one row a case, the Row fields as
    columns."""
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in (score_rows() if rows is None else rows)])


def _worst(xs: list[float]) -> float:
    return max(xs, key=lambda x: abs(math.log(x)))


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}" if x < 100 else f"{x:,.0f}"


def summary(rows: list[Row], terms: frozenset[str] | None = None) -> list[str]:
    """Median and worst ratio a family, then the share of ratios within each band (Markdown lines); ``terms``: the
    terms the rows were priced with (None: the admitted ones)."""
    out = [
        "| engine x hardware | cases | TPOT median | TPOT worst | TTFT median | TTFT worst |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for fam in sorted({r.family for r in rows}):
        mine = [r for r in rows if r.family == fam]
        tp, tt = held_out(mine, "tpot"), held_out(mine, "ttft")
        cells = [_x(statistics.median(v)) if v else "-" for v in (tp,)] + [_x(_worst(tp)) if tp else "-"]
        cells += [_x(statistics.median(tt)) if tt else "-", _x(_worst(tt)) if tt else "-"]
        out.append(f"| {fam} | {len(mine)} | " + " | ".join(cells) + " |")
    out.append("")
    for what in FIGURES:
        xs = held_out(rows, what)
        shares = ", ".join(f"{sum(lo <= x <= hi for x in xs)}/{len(xs)} within {lo}-{hi}x" for lo, hi in BANDS)
        label = (
            "throughput (output tokens/s, total where only that is published)" if what == "throughput" else what.upper()
        )
        out.append(f"- {label}: {shares}")
    unpriced = [r.case for r in rows if r.priced_as.startswith("not priced")]
    out.append(f"- not priced: {', '.join(unpriced) if unpriced else 'none'}")
    floors = [r for r in rows if r.ttft_floor_ms is not None]
    on = default_terms() if terms is None else frozenset(terms)
    per = floor_level(on)
    term, rule = floor_term(per), family_rule(per)
    for name in sorted({r.ttft_floor_group or "" for r in floors}):
        mine = [r for r in floors if (r.ttft_floor_group or "") == name]
        held = [r.held_out_ttft_floor_ms for r in mine if r.held_out_ttft_floor_ms is not None]
        fitted = [r for r in rows if r.ttft_ratio is not None and name in _floor_keys(r, per)]
        if rule is not None and name in {r.family for r in fitted}:
            fitted = [r for r in fitted if rule[0](r)]
        low = f" low-concurrency (c <= {LOW_CONCURRENCY})" if per == "lowc" and " x " in name else ""
        whose = f"{name}'s {len(fitted)}{low}" if name else f"all {len(fitted)}"
        applied = f", the floor of the {len(mine)} whose family has none of its own" if len(mine) != len(fitted) else ""
        out.append(
            f"- TTFT floor (term {term if ' x ' in name or not name or rule is None else 'engine-floor'}): "
            f"{mine[0].ttft_floor_ms:,.1f} ms fitted on {whose} published TTFTs{applied}; held out "
            f"{min(held):,.1f}-{max(held):,.1f} ms"
        )
    (lo, hi), _ = BANDS
    if floors:
        ins = [x for r in rows for x in (r.tpot_ratio, r.ttft_ratio) if x is not None]
        out.append(
            f"- in sample (the floor fitted on every case): {sum(lo <= x <= hi for x in ins)}/{len(ins)} within "
            f"{lo}-{hi}x"
        )
    out.append(f"- terms ON: {', '.join(n for n in SCORED if n in on)} (k3plan/speed/admitted.json)")
    out.append(f"- {LOO_NOTE if floors else LOO_NOTE_NO_FIT}")
    return out


def markdown(rows: list[Row], terms: frozenset[str] | None = None) -> str:
    """The README table: every case, then the summary (``terms``: those the rows were priced with; None: the
    admitted ones)."""
    lines = [
        "| case | engine x hardware | split | ISL/OSL @ conc | TPOT model / measured ms | ratio | "
        "TTFT model / measured ms | ratio | priced as |",
        "|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        stat = "" if r.statistic == "median" else f" ({r.statistic})"
        lines.append(
            f"| {r.case}{stat} | {r.family} | {r.split} | {r.workload} | {_ms(r.tpot_model_ms)} / "
            f"{_ms(r.tpot_measured_ms)} | {_x(r.tpot_ratio)} | {_ms(r.ttft_model_ms)} / {_ms(r.ttft_measured_ms)} | "
            f"{_x(r.ttft_ratio)} | {r.priced_as or '-'} |"
        )
    return "\n".join(lines + [""] + summary(rows, terms) + transfer_summary(transfer_rows(rows))) + "\n"
