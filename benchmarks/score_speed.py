"""The speed model's score against every public serving benchmark k3plan ships (issue 46 item 3).

    python3 benchmarks/score_speed.py            # the README table (Markdown), computed now
    python3 benchmarks/score_speed.py --frame    # the rows as a pandas DataFrame

For each file in ``k3plan/evidence/benchmarks/``: the model alone (``speed.stage``'s expected decode step and
prefill of one prompt, no serving benchmark in it) at the benchmark's own configuration and workload, against
the published figure, as model / measured for TPOT and TTFT; then the median and the worst ratio (farthest from
1) for each engine x hardware, and the share of ratios within 0.67-1.5x and 0.5-2x. Nothing is cached or typed
in: the ratios are computed from the shipped evidence each run, so they stay true when the model changes.

Leave-one-out: no parameter of the speed model is fitted to these benchmarks (``FITTED`` is empty: the model's
terms come from hardware specs, probe records, engine code and an engine's published host time, and
``k3plan/speed`` reads no serving benchmark -- tests/speed/test_serving_figures.py holds the model unchanged
with the benchmark set emptied), so each case's held-out ratio is its in-sample ratio. A term fitted to these
cases must add itself to ``FITTED`` with its refit, and the held-out column then differs.

A case k3plan cannot price gets a row saying why. Where the split or checkpoint k3plan prices differs from the
run's, the row's "priced as" says so (SGLang's MoE over the TP group without --ep-size is priced as k3plan's
experts over every device: the same expert bytes a device, not the same balance; decode context parallelism is
not in k3plan's split).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's k3plan, not an installed one

from k3plan.errors import K3PlanError  # noqa: E402
from k3plan.evidence.benchmarks import ServingBenchmark, kv_dtype_of, load_benchmarks  # noqa: E402

FITTED: tuple[str, ...] = ("floor",)  # the score's parameters fitted to serving benchmarks (each refitted held out)
LOO_NOTE = (
    "Leave-one-out: k3plan/speed reads no serving benchmark; the one fitted parameter is the TTFT floor (term "
    "floor), refitted without each case for its held-out ratio (the summary above is held out)."
)
# The terms tried against the whole set (issue 46 item 4), in the order they were tried; a term enters (ACCEPTED)
# only where it improves the held-out score over every case (``better``), never one point's.
TERMS = {
    "served": "the workload as the engine serves it: the scheduler's run of the benchmark (speed.serving."
    "served_workload: the concurrency's requests through vLLM V1's rule, decodes and prefill chunks sharing a "
    "step's token budget, prompts sent together queueing behind each other, TTFT from each request's send)",
    "prefill-first": "the engine's own scheduling rule: SGLang runs a prefill batch whenever one forms and never "
    "mixes it with decode (speed.scheduler.PREFILL_FIRST_RULE), so prompts sent together stay together; vLLM V1 mixes",
    "mean-context": "a request decodes from ISL to ISL + OSL tokens of context: the decode step priced at the "
    "mean, ISL + OSL / 2, where the one-step model prices it at ISL",
    "async": "asynchronous scheduling hides the synchronous step's host time (speed.overheads.async_host_term), "
    "where the run schedules asynchronously (its flag, else the default cited in engines.flags.SCHEDULING_DEFAULT)",
    "floor": "a per-request TTFT floor F added to every TTFT, fitted to the published TTFTs (least squares in log "
    "ratio); held out: F refitted without the case",
}
ACCEPTED: tuple[str, ...] = ("served", "prefill-first", "mean-context", "floor")  # as terms_table() decides (README)
BANDS = ((0.67, 1.5), (0.5, 2.0))
HARDWARE = {"tpu-v7x": "TPU v7x", "nvidia-b300": "B300", "nvidia-h200": "H200"}


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
    held_out_tpot_ratio: float | None  # leave-one-out: nothing fitted to TPOT, so equal to tpot_ratio
    held_out_ttft_ratio: float | None  # leave-one-out: the TTFT floor refitted without this case
    ttft_floor_ms: float | None = None  # the fitted floor in the TTFT (term floor), in sample
    held_out_ttft_floor_ms: float | None = None  # the floor fitted without this case


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
    util, knob = b.flags.gpu_memory_utilization, setup.stack.kv_pool.knob
    if util is not None and knob:  # the run's memory fraction (only fit's verdict reads it, not the speed)
        o = {**opts, "stack": f"{b.engine.name}:{knob}={util}"}
        setup = setup_from(**o, ep=setup.parallel.ep, kv_dtype=kv)
    if b.checkpoint and "not the bundled" in b.checkpoint:
        notes.append("the bundled checkpoint's expert format")
    if b.chunk_tokens is None:
        notes.append("chunk unpublished: one chunk")
    return setup, notes


class _Models:
    """One model evaluator a configuration, its workloads computed once (two published versions of one cell
    share them); only what a case needs: the decode step always, the prefill where a TTFT is published."""

    def __init__(self):
        self.by_config: dict = {}

    def of(self, b: ServingBenchmark):
        from k3plan.speed.serving import _ModelAt

        key = (b.model, b.hardware, b.topology, b.split, b.engine.name, b.flags.kv_cache_dtype)
        if key not in self.by_config:
            try:
                setup, notes = _setup(b)
                self.by_config[key] = (_ModelAt(setup, setup.hardware, evidence=None), notes, None)
            except K3PlanError as e:
                self.by_config[key] = (None, [], str(e))
        return self.by_config[key]


def _fit_note(setup, b: ServingBenchmark) -> list[str]:
    """k3plan fit's verdict at the run's workload where it is not "fits": the speed is priced all the same (the
    run did fit, with its own checkpoint and pool), but the row says the bundled one would not."""
    from k3plan.budget.fit import check_workload, fit
    from k3plan.step.verdict import fit_reason

    w = b.workload
    chunk = b.chunk_tokens if b.chunk_tokens is not None else w.isl
    r = fit(setup, check_workload(context_tokens=w.isl + w.osl, batch=w.concurrency, prefill_chunk_tokens=chunk))
    return [] if r.fits else [f"k3plan fit: does not fit ({fit_reason(fits=False, code=r.reason)[1]})"]


def _served(m, b: ServingBenchmark, terms: frozenset[str]):
    """(ServedWorkload, notes) for the run (``speed.serving.served_of``) with the terms asked."""
    from k3plan.speed.serving import served_of

    return served_of(
        m, b, prefill_first="prefill-first" in terms, async_term="async" in terms, mean_context="mean-context" in terms
    )


def _ratio(model_ms: float | None, measured_ms: float | None) -> float | None:
    return None if model_ms is None or measured_ms is None else model_ms / measured_ms


def score_rows(
    benchmarks: tuple[ServingBenchmark, ...] | None = None, *, terms: tuple[str, ...] = ACCEPTED, models=None
) -> list[Row]:
    """One Row a shipped serving benchmark (``load_benchmarks()``), the model computed now with ``terms`` (of
    ``TERMS``): it reads the probe records k3plan ships (k3plan/evidence/probes), as ``k3plan roofline`` does from
    any folder. ``models``: a ``_Models`` to share between calls."""
    rows = _score_rows(load_benchmarks() if benchmarks is None else benchmarks, frozenset(terms), models or _Models())
    return _with_floor(rows) if "floor" in terms else rows


def _score_rows(benchmarks: tuple[ServingBenchmark, ...], terms: frozenset[str], models: _Models) -> list[Row]:
    rows = []
    for b in benchmarks:
        m, notes, why = models.of(b)
        w, meas = b.workload, b.measured
        tpot = ttft = None
        if m is not None:
            notes = notes + _fit_note(m.setup, b)
            if "served" in terms:
                try:
                    served, more = _served(m, b, terms)
                except K3PlanError as e:
                    served, more = None, [f"not served: {e}"]
                notes = notes + more
            else:
                served = None
            if served is not None:
                tpot = served.tpot_s * 1e3
                ttft = served.ttft_s * 1e3 if meas.ttft_ms is not None else None
            else:
                tpot = m.decode_s(w.concurrency, w.isl) * 1e3
                if meas.ttft_ms is not None:
                    chunk = b.chunk_tokens if b.chunk_tokens is not None else w.isl
                    ttft = m.speed(w.concurrency, w.isl, chunk).prefill.expected_s * 1e3
        tr, fr = _ratio(tpot, meas.tpot_ms), _ratio(ttft, meas.ttft_ms)
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
                held_out_tpot_ratio=tr,  # FITTED is empty: nothing to refit without the case
                held_out_ttft_ratio=fr,
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


def _with_floor(rows: list[Row]) -> list[Row]:
    """The rows with the fitted TTFT floor: in sample F fitted on every published TTFT, held out F refitted
    without the case (true leave-one-out: the held-out ratio never sees its own case)."""
    from dataclasses import replace

    pairs = {r.case: (r.ttft_model_ms, r.ttft_measured_ms) for r in rows if r.ttft_ratio is not None}
    f_all = fit_floor(list(pairs.values()))
    out = []
    for r in rows:
        if r.case not in pairs:
            out.append(r)
            continue
        m, y = pairs[r.case]
        f_out = fit_floor([v for k, v in pairs.items() if k != r.case])
        out.append(
            replace(
                r,
                ttft_model_ms=m + f_all,
                ttft_ratio=(m + f_all) / y,
                held_out_ttft_ratio=(m + f_out) / y,
                ttft_floor_ms=f_all,
                held_out_ttft_floor_ms=f_out,
            )
        )
    return out


def score_of(rows: list[Row]) -> tuple[int, int, float, int]:
    """The held-out score over the whole set: (ratios within 0.67-1.5x, within 0.5-2x, mean |ln ratio|, ratios),
    TPOT and TTFT together."""
    xs = [x for r in rows for x in (r.held_out_tpot_ratio, r.held_out_ttft_ratio) if x is not None]
    (lo1, hi1), (lo2, hi2) = BANDS
    mean_log = sum(abs(math.log(x)) for x in xs) / len(xs) if xs else math.inf
    return sum(lo1 <= x <= hi1 for x in xs), sum(lo2 <= x <= hi2 for x in xs), mean_log, len(xs)


def better(after: list[Row], before: list[Row]) -> bool:
    """A term improves the held-out score over the whole set: neither band's count falls and the mean |ln ratio|
    falls, or a band's count rises and neither falls."""
    a, b = score_of(after), score_of(before)
    if a[0] < b[0] or a[1] < b[1]:
        return False
    return a[0] > b[0] or a[1] > b[1] or a[2] < b[2]


def _family_cells(rows: list[Row]) -> dict[str, str]:
    out = {}
    for fam in sorted({r.family for r in rows}):
        mine = [r for r in rows if r.family == fam]
        parts = []
        for what in ("tpot", "ttft"):
            xs = [getattr(r, f"held_out_{what}_ratio") for r in mine]
            xs = [x for x in xs if x is not None]
            if xs:
                (lo, hi), _ = BANDS
                parts.append(f"{what.upper()} {statistics.median(xs):.2f}x ({sum(lo <= x <= hi for x in xs)}/{len(xs)})")
        out[fam] = ", ".join(parts) or "-"
    return out


def terms_table(models=None) -> str:
    """Each term of ``TERMS`` tried in order on top of those accepted before it: the held-out score per engine x
    hardware (median ratio, cases within 0.67-1.5x) and over the whole set, before and after, and the verdict."""
    models = models or _Models()
    kept: tuple[str, ...] = ()
    before = score_rows(terms=kept, models=models)
    lines = [
        "| term | engine x hardware | before: median (in 0.67-1.5x) | after | whole set before -> after (0.67-1.5x, "
        "0.5-2x, mean abs ln) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for term in TERMS:
        after = score_rows(terms=kept + (term,), models=models)
        ok = better(after, before)
        b_cells, a_cells = _family_cells(before), _family_cells(after)
        sb, sa = score_of(before), score_of(after)
        whole = f"{sb[0]}/{sb[3]}, {sb[1]}/{sb[3]}, {sb[2]:.3f} -> {sa[0]}/{sa[3]}, {sa[1]}/{sa[3]}, {sa[2]:.3f}"
        for i, fam in enumerate(sorted(b_cells)):
            verdict = ("accepted" if ok else "rejected") if i == 0 else ""
            lines.append(
                f"| {term if i == 0 else ''} | {fam} | {b_cells[fam]} | {a_cells.get(fam, '-')} | "
                f"{whole if i == 0 else ''} | {verdict} |"
            )
        if ok:
            kept, before = kept + (term,), after
    lines.append("")
    lines.append(f"- kept: {', '.join(kept) or 'none'}")
    return "\n".join(lines) + "\n"


def _conc(r: Row) -> int:
    return int(r.workload.split(" @ ")[1].replace(",", ""))


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


def summary(rows: list[Row]) -> list[str]:
    """Median and worst ratio a family, then the share of ratios within each band (Markdown lines)."""
    out = [
        "| engine x hardware | cases | TPOT median | TPOT worst | TTFT median | TTFT worst |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for fam in sorted({r.family for r in rows}):
        mine = [r for r in rows if r.family == fam]
        tp = [r.held_out_tpot_ratio for r in mine if r.held_out_tpot_ratio is not None]
        tt = [r.held_out_ttft_ratio for r in mine if r.held_out_ttft_ratio is not None]
        cells = [_x(statistics.median(v)) if v else "-" for v in (tp,)] + [_x(_worst(tp)) if tp else "-"]
        cells += [_x(statistics.median(tt)) if tt else "-", _x(_worst(tt)) if tt else "-"]
        out.append(f"| {fam} | {len(mine)} | " + " | ".join(cells) + " |")
    out.append("")
    for what in ("tpot", "ttft"):
        xs = [getattr(r, f"held_out_{what}_ratio") for r in rows]
        xs = [x for x in xs if x is not None]
        shares = ", ".join(f"{sum(lo <= x <= hi for x in xs)}/{len(xs)} within {lo}-{hi}x" for lo, hi in BANDS)
        out.append(f"- {what.upper()}: {shares}")
    unpriced = [r.case for r in rows if r.priced_as.startswith("not priced")]
    out.append(f"- not priced: {', '.join(unpriced) if unpriced else 'none'}")
    floors = [r for r in rows if r.ttft_floor_ms is not None]
    if floors:
        held = [r.held_out_ttft_floor_ms for r in floors if r.held_out_ttft_floor_ms is not None]
        out.append(
            f"- TTFT floor (term floor): {floors[0].ttft_floor_ms:,.1f} ms fitted on all {len(floors)} published TTFTs; "
            f"held out {min(held):,.1f}-{max(held):,.1f} ms"
        )
    ins = [x for r in rows for x in (r.tpot_ratio, r.ttft_ratio) if x is not None]
    (lo, hi), _ = BANDS
    out.append(f"- in sample (the floor fitted on every case): {sum(lo <= x <= hi for x in ins)}/{len(ins)} within {lo}-{hi}x")
    out.append(f"- {LOO_NOTE}")
    return out


def markdown(rows: list[Row]) -> str:
    """The README table: every case, then the summary."""
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
    return "\n".join(lines + [""] + summary(rows)) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frame", action="store_true", help="print the rows as a pandas DataFrame")
    p.add_argument("--terms", action="store_true", help="print each term's before/after held-out score (TERMS)")
    a = p.parse_args(argv)
    if a.terms:
        print(terms_table(), end="")
    elif a.frame:
        import pandas as pd

        with pd.option_context("display.max_columns", None, "display.width", 200):
            print(score_frame())
    else:
        print(markdown(score_rows()), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
