"""Measured serving benchmarks: an engine's own published TPOT and TTFT for one configuration (issue 38).

Each file in ``k3plan/evidence/benchmarks/`` (package data) is one benchmark cell as its engine's
nightly publishes it: the engine (name, repo, commit, version where published) and every flag it was
served with; the hardware, topology and split; ISL, OSL and concurrency; the median TPOT and TTFT and
the throughputs; and the URLs of the baseline and of the config that produced it. The figures are
transcribed, never computed.

Matching (``matching``): a benchmark speaks for a configuration when model, hardware, topology and
the split (tp, dp, ep) are equal and the configuration's stack is the benchmark's engine. Files of a
model k3plan does not bundle yet say ``waiting_for_model`` and match nothing (none now: the DeepSeek-V4
Flash and Pro files speak for their configurations).

Transfer (``serving_figure``): at the benchmark's own workload (batch = concurrency, context = ISL,
chunk = max-num-batched-tokens) the figure is the measured median ("measured"). Near it (batch,
context and chunk each within a factor of ``NEARBY_FACTOR`` = 16: the nightly's 8,192 tokens reach a
131,072-token context, not a 1M one) the nearest benchmark (smallest log distance over the three) is
scaled by the model's own ratio, model(asked) / model(benchmark's workload) ("transferred"): the
measurement carries what the model misses, the model carries how the workload moves it. Farther, no
benchmark speaks. Never the max of several points.
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
    kv_cache_dtype: str  # as the flag says ("auto": the checkpoint's dtype)
    block_size: Optional[Count] = None  # the KV page in tokens (--block-size / --page-size); None: the engine's default
    async_scheduling: Optional[bool] = None  # None: not published
    quantization: str = ""
    compile_sizes: Optional[list[int]] = None
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
        raise K3PlanError(f"serving benchmark {path.name}: measured.statistic is {m.statistic}, no {m.statistic}_tpot_ms")
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
    ``torchtpu-vllm`` stack: engines.stack.STACK_ALIASES)."""
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
    benchmarks: tuple[ServingBenchmark, ...] | None = None,
) -> tuple[ServingBenchmark, ...]:
    """The benchmarks that speak for this configuration (see the module's doc)."""
    bs = load_benchmarks() if benchmarks is None else benchmarks
    at = (model, hardware, topology, tp, dp, ep, stack)
    return tuple(b for b in bs if not b.waiting_for_model and speaks_for(b, b.engine.name, *at))


def speaks_for(
    item, engine: str, model: str, hardware: str, topology: str, tp: int, dp: int, ep: int, stack: str
) -> bool:
    """Whether a piece of evidence of ``engine`` (a serving benchmark, an engine profile) speaks for this
    configuration: the same model, hardware, topology and split, and the stack its engine runs."""
    s = item.split
    return (
        item.model == model
        and item.hardware == hardware
        and item.topology == topology
        and (s.tp, s.dp, s.ep) == (tp, dp, ep)
        and engine_accepts(engine, stack)
    )


def _distance(b: ServingBenchmark, *, batch: int, context: int, chunk: int) -> float:
    return (
        abs(math.log(b.workload.concurrency / batch))
        + abs(math.log(b.workload.isl / context))
        + abs(math.log(b.chunk_tokens / min(chunk, context)))
    )


class ServingFigure(Frozen):
    """A TPOT or TTFT that roofline / plan stand behind, and where it came from (computed: a Struct)."""

    value_s: float
    source: Source
    benchmark: str | None = None  # the benchmark's label (name, engine @ commit, URL)
    measured_s: float | None = None  # the benchmark's median
    model_ratio: float | None = None  # model(asked) / model(benchmark's workload), when transferred
    label: str


NEARBY_FACTOR = 16  # a transfer reaches batch, context and chunk each within this factor of the benchmark's


def _nearby(b: ServingBenchmark, *, batch: int, context: int, chunk: int) -> bool:
    pairs = ((b.workload.concurrency, batch), (b.workload.isl, context), (b.chunk_tokens, min(chunk, context)))
    return all(max(x, y) <= NEARBY_FACTOR * min(x, y) for x, y in pairs)


def nearest(
    cands: tuple[ServingBenchmark, ...], *, batch: int, context: int, chunk: int, need_ttft: bool
) -> ServingBenchmark | None:
    """The benchmark closest in log distance among those nearby (``NEARBY_FACTOR``), or None."""
    usable = [
        b
        for b in cands
        if (not need_ttft or b.measured.median_ttft_ms is not None)
        and _nearby(b, batch=batch, context=context, chunk=chunk)
    ]
    if not usable:
        return None
    return min(usable, key=lambda b: (_distance(b, batch=batch, context=context, chunk=chunk), b.path))


def at_workload(b: ServingBenchmark, *, batch: int, context: int, chunk: int) -> bool:
    return (b.workload.concurrency, b.workload.isl, b.chunk_tokens) == (batch, context, min(chunk, context))


def serving_figure(
    what: Literal["tpot", "ttft"],
    *,
    model_s: float,
    cands: tuple[ServingBenchmark, ...],
    batch: int,
    context: int,
    chunk: int,
    model_at,
) -> ServingFigure:
    """The figure to stand behind: measured at the benchmark's workload, transferred by the model's ratio
    near it, else the model's own (``model_s``). ``model_at(benchmark)`` is the model's figure at that
    benchmark's workload (same setup)."""
    b = nearest(cands, batch=batch, context=context, chunk=chunk, need_ttft=what == "ttft")
    if b is None:
        return ServingFigure(
            value_s=model_s, source="model", label="model (no serving benchmark of this configuration)"
        )
    ms = b.measured.median_tpot_ms if what == "tpot" else b.measured.median_ttft_ms
    assert ms is not None
    measured = ms / 1e3
    name = "TPOT" if what == "tpot" else "TTFT"
    if at_workload(b, batch=batch, context=context, chunk=chunk):
        return ServingFigure(
            value_s=measured,
            source="measured",
            benchmark=b.label,
            measured_s=measured,
            label=f"measured: median {name} of {b.name}",
        )
    ref = model_at(b)
    ratio = model_s / ref
    return ServingFigure(
        value_s=measured * ratio,
        source="transferred",
        benchmark=b.label,
        measured_s=measured,
        model_ratio=ratio,
        label=(
            f"transferred: median {name} {ms:,.2f} ms of {b.name} x the model's ratio {ratio:.3g} "
            f"(batch {b.workload.concurrency}->{batch}, context {b.workload.isl:,}->{context:,}, "
            f"chunk {b.chunk_tokens}->{min(chunk, context)})"
        ),
    )
