"""Measured serving benchmarks: an engine's own published TPOT and TTFT for one configuration (issue 38).

Each file in ``k3plan/evidence/benchmarks/`` (package data) is one benchmark cell as its engine's
nightly publishes it: the engine (name, repo, commit, version where published) and every flag it was
served with; the hardware, topology and split; ISL, OSL and concurrency; the median TPOT and TTFT and
the throughputs; and the URLs of the baseline and of the config that produced it. The figures are
transcribed, never computed.

Matching (``matching``): a benchmark is a candidate for a configuration when model, hardware, topology and
the split (tp, dp, ep, pp; no decode context parallelism, which k3plan's split does not hold) are equal and the
configuration's stack is the benchmark's engine. Files of a model k3plan does not bundle yet say
``waiting_for_model`` and match nothing.

Measured or transferred (``serving_figure``, issue 46 item 6): a candidate is "measured" for a question only when
the rest of the key matches too (``differing``): the KV dtype ("auto" is the checkpoint's bf16), the KV page
(``--block-size``; unset: the engine's default where k3plan knows it, torchtpu-vllm's 16 tokens), the prefill
chunk (max-num-batched-tokens), the scheduling (the model prices a synchronous step; an unpublished flag never
matches) and the workload (batch = concurrency, context = ISL). Otherwise, near it (batch, context and chunk
each within ``NEARBY_FACTOR`` = 16), the candidate with the fewest differing KV dtype / page / scheduling keys,
then the nearest in log distance, is scaled by the model's own ratio, model(asked) / model(benchmark's
workload) ("transferred"), every differing key named, and those the ratio does not price (dtype, page,
scheduling: the same setup is evaluated at both workloads) said so. Farther, the nearest candidate is still
transferred, the label saying so (issue 46 item 7: a figure that fell to the ceiling past the factor made TPOT
fall as the batch grew). Never the max of several points.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Optional

import msgspec

from k3plan.errors import K3PlanError
from k3plan.specfile import Spec, convert, read_yaml_mapping
from k3plan.structs import Frozen

FOLDER = Path(__file__).parent / "benchmarks"


Source = Literal["measured", "transferred", "model", "ceiling"]


# input schemas (msgspec Structs, k3plan.specfile.Spec): fit reads the benchmarks of its configuration
Count = Annotated[int, msgspec.Meta(ge=1)]
Positive = Annotated[float, msgspec.Meta(gt=0)]
Url = Annotated[str, msgspec.Meta(pattern=r"^https://")]


class Engine(Spec):
    name: str
    repo: str
    # the full 40-hex commit where published; a source that names only a short hash (a release tag's
    # "v0.5.18 @ 71de97b2") keeps that short hash, never a guessed full one
    commit: Optional[Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{7,40}$")]] = None
    version: Optional[str] = None  # a release where the source names one (then the commit may be unpublished)

    @property
    def at(self) -> str:
        return self.commit[:8] if self.commit else f"v{self.version}".replace("vv", "v")


class Flags(Spec):
    """The serve flags as the source gives them; None: the source does not set it (the engine's default)."""

    tensor_parallel_size: Count
    data_parallel_size: Count
    enable_expert_parallel: bool
    max_num_batched_tokens: Optional[Count] = None  # vLLM's; SGLang's --chunked-prefill-size
    max_num_seqs: Optional[Count] = None
    max_model_len: Optional[Count] = None
    gpu_memory_utilization: Optional[Annotated[float, msgspec.Meta(gt=0, le=1)]] = None  # SGLang: mem-fraction-static
    kv_cache_dtype: Optional[str]  # as the flag says ("auto": the checkpoint's dtype); None: the source does not say
    block_size: Optional[Count] = None  # the KV page in tokens (--block-size / --page-size); None: the engine's default
    async_scheduling: Optional[bool] = None  # None: not published
    quantization: str = ""
    compile_sizes: Optional[list[int]] = None
    # SGLang's --scheduler-recv-interval (new requests taken in every N decode steps: speed.scheduler.RECV_RULE);
    # None: not set (1, every step)
    scheduler_recv_interval: Optional[Count] = None
    # SGLang's --moe-a2a-backend; None: not set, the engine's default (engines/sglang/flags.py SGLANG_A2A_DEFAULT)
    moe_a2a_backend: Optional[str] = None
    # SGLang's --moe-runner-backend where the run sets one the sglang stack prices (marlin, flashinfer_mxfp4: option
    # moe_runner_backend); None: not set, SGLang's auto
    moe_runner_backend: Optional[str] = None
    extra: str = ""
    client: str


class Split(Spec):
    tp: Count
    dp: Count
    ep: Count
    pp: Count = 1
    dcp: Count = 1  # decode context parallel (SGLang --dcp-size): k3plan's split has no such axis


class Workload(Spec):
    isl: Count
    osl: Count
    concurrency: Count
    num_prompts: Optional[Count] = None
    completed: Optional[Annotated[int, msgspec.Meta(ge=0)]] = None
    # the client's --random-range-ratio r where the source states it: each request's ISL and OSL uniform over
    # [int(L r), L] (speed.scheduler.LENGTHS_RULE); None: not published or not read, priced at ISL and OSL exactly
    random_range_ratio: Optional[Annotated[float, msgspec.Meta(ge=0, le=1)]] = None


Statistic = Literal["median", "mean", "unstated"]


class Measured(Spec):
    """The published figures. ``statistic`` says which the source gives: the median (vLLM's and SGLang's
    bench_serving print both; the nightlies keep the median), only the mean (a sweep's summary table), or a
    figure the source does not say is either (a PR's table: ``unstated_*``)."""

    statistic: Statistic = "median"
    median_tpot_ms: Optional[Positive] = None
    median_ttft_ms: Optional[Positive] = None
    mean_tpot_ms: Optional[Positive] = None
    mean_ttft_ms: Optional[Positive] = None
    unstated_tpot_ms: Optional[Positive] = None
    unstated_ttft_ms: Optional[Positive] = None
    output_token_throughput: Optional[Positive] = None
    total_token_throughput: Optional[Positive] = None

    @property
    def tpot_ms(self) -> float:
        v = getattr(self, f"{self.statistic}_tpot_ms")
        assert v is not None  # load_benchmark refuses a file without it
        return v

    @property
    def ttft_ms(self) -> float | None:
        return getattr(self, f"{self.statistic}_ttft_ms")


class Sources(Spec):
    baseline: Url  # where the figures were read
    config: Optional[Url] = None  # where the serve flags were read, when apart from the figures


class ServingBenchmark(Spec):
    name: str
    model: str  # the bundled model whose architecture the run served
    checkpoint: Optional[str] = None  # the checkpoint served, where it is not the bundled one's format
    waiting_for_model: bool = False
    engine: Engine
    flags: Flags
    hardware: str
    topology: str
    split: Split
    workload: Workload
    measured: Measured
    sources: Sources
    notes: str = ""
    path: str = ""  # the file, set by the loader

    @property
    def chunk_tokens(self) -> int | None:
        """The prefill chunk: vLLM chunks a prompt at --max-num-batched-tokens (None: not published)."""
        m = self.flags.max_num_batched_tokens
        return None if m is None else min(m, self.workload.isl)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.engine.name} @ {self.engine.at}; {self.sources.baseline})"


def _check(b: ServingBenchmark, path: Path) -> ServingBenchmark:
    f, s = b.flags, b.split
    if (f.tensor_parallel_size, f.data_parallel_size) != (s.tp, s.dp):
        raise K3PlanError(
            f"serving benchmark {path.name}: flags say tp {f.tensor_parallel_size} dp "
            f"{f.data_parallel_size}, split says tp {s.tp} dp {s.dp}"
        )
    if b.engine.commit is None and b.engine.version is None:
        raise K3PlanError(f"serving benchmark {path.name}: engine.commit or engine.version is required")
    w, m = b.workload, b.measured
    if w.completed is not None and w.num_prompts is not None and w.completed > w.num_prompts:
        raise K3PlanError(f"serving benchmark {path.name}: completed {w.completed} > prompts")
    if getattr(m, f"{m.statistic}_tpot_ms") is None:
        raise K3PlanError(
            f"serving benchmark {path.name}: measured.statistic is {m.statistic}, no {m.statistic}_tpot_ms"
        )
    return b


def load_benchmark(path: Path) -> ServingBenchmark:
    """One benchmark file, validated; bad input is one line naming the file and the field."""
    label = f"serving benchmark {path}"
    raw = read_yaml_mapping(label, path)
    # not strict: as pydantic's lax mode read them, "8" is 8 and 8.0 is 8
    b = convert(ServingBenchmark, {**raw, "path": f"k3plan/evidence/benchmarks/{path.name}"}, label, strict=False)
    return _check(b, path)


@lru_cache(maxsize=4)
def load_benchmarks(folder: Path = FOLDER) -> tuple[ServingBenchmark, ...]:
    return tuple(load_benchmark(p) for p in sorted(folder.glob("*.yaml")))


def engine_accepts(engine: str, stack: str) -> bool:
    """A benchmark of ``engine`` speaks for the stack of that name only (``vllm-tpu``, the old name, loads the
    ``torchtpu-vllm`` stack: the engine's Engine.aliases)."""
    return stack == engine


def matching(
    *,
    model: str,
    hardware: str,
    topology: str,
    tp: int,
    dp: int,
    ep: int,
    stack: str,
    pp: int = 1,
    benchmarks: tuple[ServingBenchmark, ...] | None = None,
) -> tuple[ServingBenchmark, ...]:
    """The benchmarks of this configuration (see the module's doc): the candidates a figure may come from,
    measured where the rest of the key matches too (``differing``), else transferred."""
    bs = load_benchmarks() if benchmarks is None else benchmarks
    at = (model, hardware, topology, tp, dp, ep, stack)
    return tuple(
        b
        for b in bs
        if not b.waiting_for_model and speaks_for(b, b.engine.name, *at) and (b.split.pp, b.split.dcp) == (pp, 1)
    )


def speaks_for(
    item, engine: str, model: str, hardware: str, topology: str, tp: int, dp: int, ep: int, stack: str
) -> bool:
    """Whether a piece of evidence of ``engine`` (a serving benchmark, an engine profile) speaks for this
    configuration: the same model, hardware, topology and split, and the stack its engine runs. A run at
    --ep-size 1 over a TP x DP group (each expert TP-split over the group: ``tp_split_experts``) speaks for the
    question's EP over that group, k3plan's way of holding the experts over every device of it (the same bytes a
    device); its MoE collectives are the run's own, so it is never measured for it (``config_differs``)."""
    s = item.split
    return (
        item.model == model
        and item.hardware == hardware
        and item.topology == topology
        and (s.tp, s.dp) == (tp, dp)
        and (s.ep == ep or (tp_split_experts(item) and ep == tp * dp))
        and engine_accepts(engine, stack)
    )


def tp_split_experts(item) -> bool:
    """The run holds its routed experts TP-split over the TP x DP group (--ep-size 1 on more than one device)."""
    s = item.split
    return s.ep == 1 and s.tp * s.dp > 1


# the rest of the key (issue 46 item 6): what the question asks beside the configuration
KV_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
"""A --kv-cache-dtype flag as k3plan's stacks name the dtype: "auto" is the checkpoint's activation dtype, bf16 for
every bundled model; vLLM's "fp8" is fp8_e4m3."""


def kv_dtype_of(flag: str) -> str:
    return KV_DTYPES.get(flag.lower(), flag.lower())


def default_page(engine: str) -> int | None:
    """The engine's KV page in tokens when no flag sets it, where k3plan knows it (``Engine.default_block``, cited
    in the engine's folder: torchtpu-vllm's 16-token block); None elsewhere (unknown: never equal to anything)."""
    from k3plan.engines.registry import find_engine

    found = find_engine(engine)
    return None if found is None or found.default_block is None else found.default_block[0]


def page_of(b: ServingBenchmark) -> int | None:
    return b.flags.block_size if b.flags.block_size is not None else default_page(b.engine.name)


class Asked(Frozen):
    """The question's side of the key beyond the configuration: the KV dtype of its stack, the KV page the model
    prices (None: unknown), the scheduling the model prices (a synchronous engine step), the batch (= the
    benchmark's concurrency), the context (= its ISL), the prefill chunk and, where the question has one (plan
    --isl/--osl), the output length (= its OSL: under a served load each request's prefill rides in the decode
    steps of the others, once every OSL tokens, so a TPOT or TTFT at another OSL is not the asked one's)."""

    kv_dtype: str
    page_tokens: int | None
    async_scheduling: bool = False
    batch: int
    context: int
    chunk: int
    osl: int | None = None  # None: the question has no output length (roofline, fit), not a key

    @property
    def chunk_tokens(self) -> int:
        return min(self.chunk, self.context)


def asked(*, stack: str, kv_dtype: str, batch: int, context: int, chunk: int, osl: int | None = None) -> Asked:
    """The key of a question on ``stack`` (its name) with that KV dtype and workload."""
    return Asked(
        kv_dtype=kv_dtype_of(kv_dtype),
        page_tokens=default_page(stack),
        batch=batch,
        context=context,
        chunk=chunk,
        osl=osl,
    )


def _show(x) -> str:
    return "unpublished" if x is None else f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)


def _sched(x: bool | None) -> str:
    return "unpublished" if x is None else "async" if x else "sync"


def config_differs(b: ServingBenchmark, a: Asked) -> tuple[str, ...]:
    """The keys beside the workload that differ (or that the benchmark does not publish): KV dtype, KV page,
    scheduling. The model's ratio does not price them."""
    out = []
    flag = b.flags.kv_cache_dtype
    kv = "unpublished" if flag is None else kv_dtype_of(flag)
    if kv != a.kv_dtype:
        out.append(f"KV dtype {kv}->{a.kv_dtype}")
    page = page_of(b)
    if page is None or a.page_tokens is None or page != a.page_tokens:
        out.append(f"page {_show(page)}->{_show(a.page_tokens)} tokens")
    if b.flags.async_scheduling is None or b.flags.async_scheduling != a.async_scheduling:
        out.append(f"scheduling {_sched(b.flags.async_scheduling)}->{_sched(a.async_scheduling)}")
    if tp_split_experts(b):
        out.append(f"MoE TP-split (--ep-size 1)->EP {b.split.tp * b.split.dp}")
    return tuple(out)


def workload_differs(b: ServingBenchmark, a: Asked) -> tuple[str, ...]:
    """The workload keys that differ: batch (concurrency), context (ISL), chunk (max-num-batched-tokens) and, where
    the question has one, the output length (OSL). The model's ratio prices them."""
    out = []
    if b.workload.concurrency != a.batch:
        out.append(f"batch {b.workload.concurrency:,}->{a.batch:,}")
    if b.workload.isl != a.context:
        out.append(f"context {b.workload.isl:,}->{a.context:,}")
    if b.chunk_tokens != a.chunk_tokens:
        out.append(f"chunk {_show(b.chunk_tokens)}->{a.chunk_tokens:,}")
    if a.osl is not None and b.workload.osl != a.osl:
        out.append(f"output {b.workload.osl:,}->{a.osl:,}")
    return tuple(out)


def differing(b: ServingBenchmark, a: Asked) -> tuple[str, ...]:
    """Every key of ``b`` that differs from the question's (engine, hardware, model and split already match:
    ``matching``); empty: the benchmark is measured for the question."""
    return config_differs(b, a) + workload_differs(b, a)


def _chunk(b: ServingBenchmark) -> int:
    """The chunk a distance compares: the published one, else the whole prompt."""
    return b.chunk_tokens if b.chunk_tokens is not None else b.workload.isl


def _pairs(b: ServingBenchmark, a: Asked) -> tuple[tuple[int, int], ...]:
    """(the benchmark's, the question's) of each workload key: batch, context, chunk, and the OSL where asked."""
    pairs = ((b.workload.concurrency, a.batch), (b.workload.isl, a.context), (_chunk(b), a.chunk_tokens))
    return pairs + (((b.workload.osl, a.osl),) if a.osl is not None else ())


def _distance(b: ServingBenchmark, a: Asked) -> float:
    return sum(abs(math.log(x / y)) for x, y in _pairs(b, a))


class ServingFigure(Frozen):
    """A TPOT or TTFT that roofline / plan stand behind, and where it came from (computed: a Struct)."""

    value_s: float
    source: Source
    benchmark: str | None = None  # the benchmark's label (name, engine @ commit, URL)
    measured_s: float | None = None  # the benchmark's figure (its statistic: median, mean or unstated)
    model_ratio: float | None = None  # model(asked) / model(benchmark's workload), when transferred
    differing: tuple[str, ...] = ()  # the keys that differ, when transferred
    label: str
    # (low, high) seconds the figure sits in, always given (issue 46 item 7): measured or transferred, between it
    # and the model at the asked workload; the model, between the ops' ceiling and it; the ceiling, between it and
    # the model
    band_s: tuple[float, float]


# a transfer reaches batch, context, chunk (and an asked OSL) each within this factor of the benchmark's
NEARBY_FACTOR = 16


def _nearby(b: ServingBenchmark, a: Asked) -> bool:
    return all(max(x, y) <= NEARBY_FACTOR * min(x, y) for x, y in _pairs(b, a))


def nearest(cands: tuple[ServingBenchmark, ...], *, asked: Asked, need_ttft: bool) -> ServingBenchmark | None:
    """Those nearby (``NEARBY_FACTOR``) first, then the rest: the benchmark with the fewest differing keys beside
    the workload (KV dtype, page, scheduling), then the closest in log distance; None only without a candidate.
    A farther benchmark still speaks, transferred by the model's ratio (its label says how far): dropping it past
    the factor switched the figure to the ceiling there, and TPOT fell as the batch grew (issue 46 item 7)."""
    usable = [b for b in cands if not need_ttft or b.measured.ttft_ms is not None]
    if not usable:
        return None
    return min(
        usable, key=lambda b: (not _nearby(b, asked), len(config_differs(b, asked)), _distance(b, asked), b.path)
    )


def at_workload(b: ServingBenchmark, asked: Asked) -> bool:
    """Measured for the question: every key matches (``differing`` is empty)."""
    return not differing(b, asked)


def serving_figure(
    what: Literal["tpot", "ttft"],
    *,
    model_s: float,
    cands: tuple[ServingBenchmark, ...],
    asked: Asked,
    model_at,
) -> ServingFigure:
    """The figure to stand behind: measured where every key of the benchmark matches the question's, transferred
    by the model's ratio near it (the differing keys named), else the model's own (``model_s``).
    ``model_at(benchmark)`` is the model's figure at that benchmark's workload (same setup)."""
    b = nearest(cands, asked=asked, need_ttft=what == "ttft")
    if b is None:
        return ServingFigure(
            value_s=model_s,
            source="model",
            label="model (no serving benchmark of this configuration)",
            band_s=(model_s, model_s),
        )
    ms = b.measured.tpot_ms if what == "tpot" else b.measured.ttft_ms
    assert ms is not None
    measured = ms / 1e3
    name = "TPOT" if what == "tpot" else "TTFT"
    stat = b.measured.statistic if b.measured.statistic != "unstated" else "published (statistic unstated)"
    keys = differing(b, asked)
    if not keys:
        return ServingFigure(
            value_s=measured,
            source="measured",
            benchmark=b.label,
            measured_s=measured,
            label=f"measured: {stat} {name} of {b.name} (engine, hardware, model, split, KV dtype, page, chunk, "
            + ("scheduling and batch all match)" if asked.osl is None else "scheduling, batch and output all match)"),
            band_s=(min(model_s, measured), max(model_s, measured)),
        )
    ratio = model_s / model_at(b)
    unpriced = config_differs(b, asked)
    priced = [k for k in keys if k not in unpriced]  # each key once: those the ratio prices, then those it does not
    said = "; ".join(
        ([", ".join(priced)] if priced else [])
        + ([f"the ratio does not price {', '.join(unpriced)}"] if unpriced else [])
    )
    far = "" if _nearby(b, asked) else f"; farther than {NEARBY_FACTOR}x from its workload: the ratio carries it alone"
    return ServingFigure(
        value_s=measured * ratio,
        source="transferred",
        benchmark=b.label,
        measured_s=measured,
        model_ratio=ratio,
        differing=keys,
        label=(f"transferred: {stat} {name} {ms:,.2f} ms of {b.name} x the model's ratio {ratio:.3g} ({said})" + far),
        band_s=(min(model_s, measured * ratio), max(model_s, measured * ratio)),
    )
