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

FITTED: tuple[str, ...] = ()  # the model's parameters fitted to serving benchmarks (with their refit): none
LOO_NOTE = (
    "Leave-one-out: no parameter of the model is fitted to these benchmarks (k3plan/speed reads none), so each "
    "held-out ratio equals its in-sample one."
)
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
    held_out_tpot_ratio: float | None  # leave-one-out: equal to tpot_ratio while FITTED is empty
    held_out_ttft_ratio: float | None


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


def _ratio(model_ms: float | None, measured_ms: float | None) -> float | None:
    return None if model_ms is None or measured_ms is None else model_ms / measured_ms


def score_rows(benchmarks: tuple[ServingBenchmark, ...] | None = None) -> list[Row]:
    """One Row a shipped serving benchmark (``load_benchmarks()``), the model computed now: it reads the probe
    records k3plan ships (k3plan/evidence/probes), as ``k3plan roofline`` does from any folder."""
    return _score_rows(load_benchmarks() if benchmarks is None else benchmarks)


def _score_rows(benchmarks: tuple[ServingBenchmark, ...]) -> list[Row]:
    models, rows = _Models(), []
    for b in benchmarks:
        m, notes, why = models.of(b)
        w, meas = b.workload, b.measured
        tpot = ttft = None
        if m is not None:
            notes = notes + _fit_note(m.setup, b)
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
    a = p.parse_args(argv)
    if a.frame:
        import pandas as pd

        with pd.option_context("display.max_columns", None, "display.width", 200):
            print(score_frame())
    else:
        print(markdown(score_rows()), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
