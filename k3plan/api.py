"""k3plan for notebooks: the commands' answers as typed values and pandas DataFrames, no JSON to scrape.

    >>> import k3plan.api as k3
    >>> k3.fit(topology="2x2x4", tp=32).row["capacity.max_sequences"]
    >>> k3.plan(context="128k", concurrency=8, top=5).to_pandas()     # ranked rows, one column per field
    >>> k3.curve(topology="2x2x4", tp=32).to_pandas()                 # prefill chunk vs longest context
    >>> k3.report(hardware=["tpu-v7x"], contexts=[131072]).to_pandas()  # the report's platforms table
    >>> k3.score().to_pandas()                   # the speed model against every shipped serving benchmark
    >>> k3.score(terms=["served", "floor"]).to_pandas()                  # ... with only these speed terms ON

Each function asks the app layer the question its command asks (k3plan.app.fit/plan/curve/report), so a
notebook and the CLI cannot disagree; ``plan --csv``, ``curve --csv`` and ``report --csv`` write these same
tables. A table's columns are its rows' fields in the JSON's order, a nested field named by its path
(``per_device.weights_bytes``, ``sla.ttft_ms``): the unit is in the name, as in the JSON. A list of notes is
one cell, a note a line; a figure that does not exist (a closest miss has no TPOT) is empty (<NA>).

pandas is imported by ``to_pandas``/``to_csv`` only: a fit stays as fast as ``k3plan fit`` (and neither
imports jax)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from k3plan.units import DEFAULT_CONTEXT_TOKENS

if TYPE_CHECKING:
    import pandas as pd

    from k3plan.app.curve import CurveAnswer
    from k3plan.app.fit import FitAnswer
    from k3plan.app.plan import PlanAnswer
    from k3plan.app.report import ReportAnswer

Tokens = Union[int, str]  # 131072 or as people write it: "128k", "1M" (k3plan.tokencount)
OBJECTIVES = ("chips", "cost", "tokens-per-chip", "throughput")

__all__ = ["Table", "FitRow", "fit", "plan", "curve", "report", "score", "transfers", "flatten", "records"]


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """One JSON object as one row: a nested object's fields as ``outer.inner`` columns, a list of scalars as one
    cell (its items a line each), a non-finite float as None; an empty object adds no column."""
    out: dict[str, Any] = {}
    for key, v in value.items():
        name = f"{prefix}{key}"
        if isinstance(v, Mapping):
            out.update(flatten(v, prefix=f"{name}."))
        elif isinstance(v, (list, tuple)):
            out[name] = "\n".join(str(x) for x in v)
        elif isinstance(v, float) and not math.isfinite(v):
            out[name] = None
        else:
            out[name] = v
    return out


def records(values: Iterable[Any], *, drop: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``values`` (frozen Structs or JSON objects) as flat rows (``flatten``), without the top-level fields in
    ``drop``; every row carries every column (None where a row has no such field), in first-seen order."""
    from k3plan.structs import dump

    flat = [flatten({k: v for k, v in dump(x).items() if k not in drop}) for x in values]
    columns = list(dict.fromkeys(c for row in flat for c in row))
    return [{c: row.get(c) for c in columns} for row in flat]


def _series_dtype(values: list[Any]) -> Optional[str]:
    """A column's pandas dtype from its Python values: whole numbers Int64 (a missing one <NA>, not a float),
    booleans 'boolean', other numbers float64; None lets pandas infer (text)."""
    present = [v for v in values if v is not None]
    if not present:
        return "object"
    if all(isinstance(v, bool) for v in present):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "Int64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float64"
    return None


class Table:
    """A command's table: ``rows`` its typed rows (k3plan's frozen Structs: PlanRow, CurvePoint, ...), ``records()``
    the same rows flat (one column per field), ``to_pandas()`` a DataFrame of them, ``to_csv()`` its CSV."""

    def __init__(self, rows: Sequence[Any], flat: list[dict[str, Any]]):
        self.rows = list(rows)
        self._flat = flat

    def __len__(self) -> int:
        return len(self._flat)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {len(self)} rows, {len(self.columns)} columns>"

    @property
    def columns(self) -> list[str]:
        return list(self._flat[0]) if self._flat else []

    def records(self) -> list[dict[str, Any]]:
        """The rows as flat dicts (column -> value), a copy."""
        return [dict(r) for r in self._flat]

    def to_pandas(self) -> pd.DataFrame:
        """The rows as a DataFrame: one row a row, one column a field (``records``), typed by column."""
        import pandas as pd

        data = {}
        for c in self.columns:
            values = [r[c] for r in self._flat]
            dtype = _series_dtype(values)
            data[c] = pd.Series(values, dtype=dtype) if dtype else pd.Series(values)
        return pd.DataFrame(data)

    def to_csv(self, path: Optional[Path] = None) -> str:
        """The DataFrame as CSV text (no index column); written to ``path`` (atomically) when one is given."""
        text = self.to_pandas().to_csv(index=False, lineterminator="\n")
        if path is not None:
            from k3plan.io_safe import write_text

            write_text(Path(path), text, label="--csv")
        return text


def _tokens(flag: str, value: Tokens) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    from k3plan.errors import K3PlanError
    from k3plan.tokencount import parse_tokens

    try:
        return parse_tokens(str(value))
    except ValueError as err:
        raise K3PlanError(f"{flag} {value!r}: {err}") from None


def _names(value: Union[str, Sequence[str], None]) -> Optional[list[str]]:
    """A list of names, given as a list or as comma-separated text."""
    if value is None:
        return None
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value)


def _setup_options(**options: Any) -> dict[str, Any]:
    """The setup options every planning command shares (k3plan.app.setup.setup_from's keywords)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}


# fit's one row: fit --json less its sections that are tables of their own (the per-term temporaries, the weights
# by role, the replicated tensors, the cache layout, the advice, the prefix hit, the engine's sizing: ``answer``)
FIT_DROP = ("temp", "weights_by_role", "replicated", "cache_layout", "advice", "prefix_hit", "engine")


class FitRow(Table):
    """fit's answer as one row (``row``: fit --json's one-figure fields, flat) and its typed answer (``answer``:
    k3plan.app.fit.FitAnswer, ``result``: the FitResult)."""

    def __init__(self, answer: FitAnswer):
        from k3plan.advice.fit_output import FitOutput

        self.answer = answer
        self.result = answer.result
        out = FitOutput.of(answer.result, advice=answer.advice, prefix_hit=answer.prefix_hit, engine=answer.engine)
        super().__init__([answer.result], records([out], drop=FIT_DROP))

    @property
    def fits(self) -> bool:
        return bool(self.result.fits)

    @property
    def row(self) -> dict[str, Any]:
        return self.records()[0]


def fit(
    *,
    model: str = "kimi-k3",
    hardware: str = "tpu-v7x",
    topology: Optional[str] = None,
    tp: Optional[int] = None,
    ep: Optional[int] = None,
    dp: Optional[int] = None,
    pp: Optional[int] = None,
    stack: Optional[str] = None,
    kv_dtype: Optional[str] = None,
    shardspecs: Optional[str] = None,
    context: Tokens = DEFAULT_CONTEXT_TOKENS,
    batch: int = 1,
    chunk: Optional[Tokens] = None,
    calibration: Optional[Path] = None,
    probes: Optional[Path] = None,
    allow_cpu_probes: bool = False,
) -> FitRow:
    """``k3plan fit`` with the same options (their flags' names, unprefixed): one row. A configuration that
    does not fit is a row too (``fits`` False, ``row["reason"]`` says why); bad input raises K3PlanError."""
    from k3plan.app.fit import FitQuestion, answer

    q = FitQuestion(
        setup_options=_setup_options(
            model=model,
            hardware=hardware,
            topology=topology,
            tp=tp,
            ep=ep,
            dp=dp,
            pp=pp,
            stack=stack,
            kv_dtype=kv_dtype,
            shardspecs=shardspecs,
        ),
        context=_tokens("context", context),
        batch=batch,
        chunk=None if chunk is None else _tokens("chunk", chunk),
        calibration=None if calibration is None else Path(calibration),
        probes=None if probes is None else Path(probes),
        allow_cpu_probes=allow_cpu_probes,
    )
    return FitRow(answer(q))


class PlanTable(Table):
    """plan's ranked rows (``rows``: k3plan.plan.rows.PlanRow, best first), its pick (``recommended``) and its
    whole answer (``answer``: k3plan.app.plan.PlanAnswer, with the advice; ``result``: the PlanResult)."""

    def __init__(self, answer: PlanAnswer):
        self.answer = answer
        self.result = answer.result
        super().__init__(answer.result.ranked, records(_bands_split(answer.result.ranked)))

    @property
    def recommended(self) -> Any:
        return self.result.recommended


def _bands_split(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """The rows as JSON objects with each band (``*_band_ms``: (lo, hi), the JSON's pair) as ``lo`` and ``hi``
    fields, so the CSV and the DataFrame hold two number columns (``tpot_band_ms.lo``, ``sla.ttft_band_ms.hi``, ...)
    rather than one text cell."""
    from k3plan.structs import dump

    def split(d: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in d.items():
            if k.endswith("_band_ms") and isinstance(v, (list, tuple)) and len(v) == 2:
                out[k] = {"lo": v[0], "hi": v[1]}
            elif isinstance(v, Mapping):
                out[k] = split(v)
            else:
                out[k] = v
        return out

    return [split(dump(r)) for r in rows]


def plan_table(answer: PlanAnswer) -> PlanTable:
    """``plan --csv``'s table of an answer the CLI already has."""
    return PlanTable(answer)


def plan(
    *,
    model: str = "kimi-k3",
    hardware: Union[str, Sequence[str], None] = None,
    stacks: Union[str, Sequence[str], None] = None,
    max_chips: int = 1024,
    max_pp: int = 8,
    context: Optional[Tokens] = None,
    concurrency: int = 1,
    target_tpot_ms: Optional[float] = None,
    objective: str = "chips",
    kv_dtypes: Union[str, Sequence[str], None] = None,
    chunks: Optional[Sequence[int]] = None,
    top: int = 10,
    ttft_ms: Optional[float] = None,
    request_latency_ms: Optional[float] = None,
    isl: Optional[Tokens] = None,
    osl: Optional[Tokens] = None,
    request_rate: Optional[float] = None,
    strict: bool = False,
    prices: Optional[Mapping[str, float]] = None,
    load_gbps: Optional[float] = None,
    probes: Optional[Path] = None,
    allow_cpu_probes: bool = False,
    rank_by: str = "ceiling",
) -> PlanTable:
    """``k3plan plan`` with the same options: ``objective`` is --minimize chips|cost or --maximize
    tokens-per-chip|throughput, ``prices`` --price as {hardware: USD a chip-hour}; ``context`` None is the
    command's default (ISL + OSL with ``isl``/``osl``). Nothing passing is an empty table (``recommended``
    None, ``answer.result`` says why); bad input raises K3PlanError."""
    from k3plan.app.plan import PlanQuestion, answer
    from k3plan.errors import K3PlanError

    if objective not in OBJECTIVES:
        raise K3PlanError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    q = PlanQuestion(
        model=model,
        hardware=_names(hardware),
        stacks=_names(stacks),
        max_chips=max_chips,
        max_pp=max_pp,
        context=DEFAULT_CONTEXT_TOKENS if context is None else _tokens("context", context),
        context_given=context is not None,
        concurrency=concurrency,
        target_tpot_ms=target_tpot_ms,
        objective=objective,
        kv_dtypes=_names(kv_dtypes),
        chunks=None if chunks is None else list(chunks),
        top=top,
        ttft_ms=ttft_ms,
        request_latency_ms=request_latency_ms,
        isl=None if isl is None else _tokens("isl", isl),
        osl=None if osl is None else _tokens("osl", osl),
        request_rate=request_rate,
        strict=strict,
        price=[f"{k}={v}" for k, v in (prices or {}).items()],
        load_gbps=load_gbps,
        probes=None if probes is None else Path(probes),
        allow_cpu_probes=allow_cpu_probes,
        prefix_hit=None,
        prefix_tier="hbm",
        rank_by=rank_by,
    )
    return PlanTable(answer(q))


class CurveTable(Table):
    """curve's points (``rows``: k3plan.budget.curve.CurvePoint, by chunk size) and its answer (``answer``:
    k3plan.app.curve.CurveAnswer: title, warnings, ``why_not``)."""

    def __init__(self, answer: CurveAnswer):
        self.answer = answer
        super().__init__(answer.points, records(answer.points))


def curve_table(answer: CurveAnswer) -> CurveTable:
    """``curve --csv``'s table of an answer the CLI already has."""
    return CurveTable(answer)


def curve(
    *,
    model: str = "kimi-k3",
    hardware: str = "tpu-v7x",
    topology: Optional[str] = None,
    tp: Optional[int] = None,
    ep: Optional[int] = None,
    dp: Optional[int] = None,
    pp: Optional[int] = None,
    stack: Optional[str] = None,
    kv_dtype: Optional[str] = None,
    shardspecs: Optional[str] = None,
    context: Tokens = DEFAULT_CONTEXT_TOKENS,
    batch: int = 1,
    chunks: Optional[Sequence[int]] = None,
    calibration: Optional[Path] = None,
) -> CurveTable:
    """``k3plan curve`` with the same options: for each prefill chunk size its temporaries and the longest
    context (and most sequences) the rest of the budget leaves; bad input raises K3PlanError."""
    from k3plan.app.curve import CurveQuestion, answer

    q = CurveQuestion(
        setup_options=_setup_options(
            model=model,
            hardware=hardware,
            topology=topology,
            tp=tp,
            ep=ep,
            dp=dp,
            pp=pp,
            stack=stack,
            kv_dtype=kv_dtype,
            shardspecs=shardspecs,
        ),
        context=_tokens("context", context),
        batch=batch,
        chunks=None if chunks is None else list(chunks),
        calibration=None if calibration is None else Path(calibration),
    )
    return CurveTable(answer(q))


# a platform's fields repeated on each of its context rows; its curve, roofline points, advice and tiers are
# tables of their own (``answer.reports``)
PLATFORM_FIELDS = ("hardware", "kind", "stack", "price_usd_per_chip_hour", "price_source")


class ReportTable(Table):
    """The report's platforms table: a row a (platform, context), the smallest viable topology and split there,
    headroom by term, capacity, decode and prefill bounds, cost and each figure's source (``rows``:
    k3plan.report.capacity_model.PlatformReport, one a platform; ``answer``: k3plan.app.report.ReportAnswer)."""

    def __init__(self, answer: ReportAnswer):
        self.answer = answer
        flat = []
        for r in answer.reports:
            platform = {k: getattr(r, k) for k in PLATFORM_FIELDS}
            flat += [{**platform, **row} for row in records(r.rows)]
        columns = list(dict.fromkeys(c for row in flat for c in row))
        super().__init__(answer.reports, [{c: row.get(c) for c in columns} for row in flat])


def report_table(answer: ReportAnswer) -> ReportTable:
    """``report --csv``'s table of an answer the CLI already has."""
    return ReportTable(answer)


def report(
    *,
    model: str = "kimi-k3",
    hardware: Union[str, Sequence[str]] = ("tpu-v7x", "tpu-v6e", "nvidia-b200", "nvidia-gb300-nvl72"),
    contexts: Sequence[Tokens] = (131072, 1048576),
    concurrency: int = 1,
    stacks: Optional[Mapping[str, str]] = None,
    max_chips: Optional[int] = None,
    probes: Optional[Path] = None,
    allow_cpu_probes: bool = False,
) -> ReportTable:
    """``k3plan report``'s platforms table without writing the report: ``stacks`` by platform kind
    ({"tpu": "tpu-inference", "gpu": "sglang"}; None: each machine's default stack)."""
    from k3plan.app.report import ReportQuestion, answer
    from k3plan.budget.fit import check_workload

    ctx = [_tokens("contexts", c) for c in contexts]
    for c in ctx:
        check_workload(context_tokens=c, batch=concurrency, prefill_chunk_tokens=None, batch_flag="concurrency")
    q = ReportQuestion(
        model=model,
        platforms=_names(hardware) or [],
        stacks=dict(stacks or {}),
        contexts=ctx,
        concurrency=concurrency,
        max_chips=max_chips,
        probes=None if probes is None else Path(probes),
        allow_cpu_probes=allow_cpu_probes,
    )
    return ReportTable(answer(q))


class ScoreTable(Table):
    """The speed model's score (``rows``: k3plan.app.score.Row, one a shipped serving benchmark: the model alone
    against the published TPOT, TTFT and output throughput, model / measured, and the held-out ratios), as
    ``benchmarks/score_speed.py`` prints it; ``terms`` the speed terms the rows were priced with."""

    def __init__(self, rows: Sequence[Any], terms: frozenset[str]):
        from dataclasses import asdict

        self.terms = terms
        super().__init__(rows, records([asdict(r) for r in rows]))


def score(*, terms: Optional[Sequence[str]] = None) -> ScoreTable:
    """The speed model scored on every public serving benchmark k3plan ships (issue 46: ``k3plan.app.score``), the
    registered speed terms ``terms`` ON (names of ``k3plan.speed.terms.REGISTRY``; None: the admitted ones,
    ``k3plan/speed/admitted.json``). One row a benchmark; ``.to_pandas()`` the DataFrame."""
    from k3plan.app.score import score_rows
    from k3plan.speed.terms import default_terms, resolve

    on = default_terms() if terms is None else resolve(frozenset(terms))
    return ScoreTable(score_rows(terms=on), on)


class TransferTable(Table):
    """The transfer rule the commands use, scored leave one out (``rows``: k3plan.app.score.TransferRow, one a
    published TPOT or TTFT predicted from the nearest other benchmark of its configuration, beside the model alone's
    held-out ratio), as the README score block's last lines summarise it."""

    def __init__(self, rows: Sequence[Any]):
        from dataclasses import asdict

        super().__init__(rows, records([asdict(r) for r in rows]))


def transfers() -> TransferTable:
    """The transfer rule roofline, fit and plan stand behind where a serving benchmark speaks, scored leave one out on
    the shipped benchmarks (``k3plan.app.score.transfer_rows``) with the admitted speed terms; ``.to_pandas()`` the
    DataFrame."""
    from k3plan.app.score import score_rows, transfer_rows

    return TransferTable(transfer_rows(score_rows()))
