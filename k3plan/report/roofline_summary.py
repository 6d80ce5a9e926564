"""`k3plan roofline`'s default view (issue 48 item 2): the answer first, in a screen.

    the setup and the workload                                      2 lines
    TPOT and TTFT: the figure stood behind, its source, a band,     2 lines each
        the model and the one ceiling
    what the words mean                                             2 lines
    the largest terms of a decode step and of the prefill, what
        prices each (they sum to the model)                         ~13 lines

Every figure here is also in ``--verbose`` (every record and term) and ``--json``.

One ceiling a stage: the op-serial ceiling (``expected.<stage>.ceiling_s``): every op this device runs, at the
hardware spec's peaks, one after another -- the model's own first term, so the model is never below it. The
roofline bound (``roofline.bounds``: max(HBM, FLOPs at --mfu) + collectives, overlapped; the prefill's FLOPs
spread evenly over the devices) assumes an efficiency (MFU 30% by default, the porting study's) and is not a
ceiling: at a compute-bound prefill it can sit above the model. Where no benchmark or record speaks, the
figure stood behind is that bound (``speed.serving``'s fallback, shared with fit and plan): it is printed as
"roofline bound", never "ceiling".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from k3plan.tables import Column, build_table, figure, layout_grid

if TYPE_CHECKING:
    from rich.table import Table

    from k3plan.evidence.benchmarks import ServingFigure
    from k3plan.roofline.bounds import DecodeBound, Efficiency, PrefillBound
    from k3plan.roofline.comm import CommCost
    from k3plan.speed.expected import OpTime, StageTime
    from k3plan.speed.serving import ServingComparison
    from k3plan.speed.stage import ExpectedSpeed

TEXT_WIDTH = 120  # the most columns a line of the default view takes, piped or on a wide terminal
TOP_TERMS = 4  # terms a stage in the default view at most; the rest summed in one row
BUDGET = 25  # lines of the default view: the terms table gives up rows (to 2 a stage) to keep to it
UNPRICED_KEYS = ("KV dtype", "page", "scheduling", "MoE TP-split")  # evidence.benchmarks.config_differs' keys
RECORD_LIST = re.compile(r"(efficiencies(?: and kernel times)? from )(\S+\.json(?:, \S+\.json)*)")
KINDS = {"attention": "attention", "kda": "KDA", "experts": "routed experts", "dense": "dense matmuls",
         "collectives": "collectives"}  # fmt: skip


def width(console: Console) -> int:
    """Columns for a line of text: the terminal's, at most TEXT_WIDTH (piped output too)."""
    return min(console.width, TEXT_WIDTH)


def _ms(s: float) -> str:
    return f"{s * 1e3:,.2f}"


def bound_label(eff: Efficiency) -> str:
    """The roofline bound's name wherever it is printed: an estimate at the assumed efficiencies, not a ceiling."""
    return f"roofline bound at MFU {eff.mfu:.0%} and HBM {eff.bw_efficiency:.0%}, overlapped"


def print_prose(console: Console, text: str, *, markup: bool = True, indent: int = 4) -> None:
    """A line of prose (rich markup), wrapped at spaces at ``width(console)`` columns (piped output too), the
    continuation lines indented; a word longer than that (a URL, a path) is kept whole, never folded."""
    from rich.text import Text

    t = Text.from_markup(text) if markup else Text(text)
    plain, w = t.plain, width(console)
    cuts, start, room = [], 0, w
    while len(plain) - start > room:
        cut = plain.rfind(" ", start, start + room + 1)
        if cut <= start:
            cut = plain.find(" ", start + room)
            if cut == -1:
                break
        cuts.append(cut)
        start, room = cut + 1, w - indent
    for i, line in enumerate(t.divide(cuts)):
        if i:
            line = Text(" " * indent) + line[1:]
        console.print(line, soft_wrap=True)


def _record_name(path: str) -> str:
    """A probe record's file as its probe and device: ``gmm-tpu-v5-lite-20261204T080902Z-19b3b9.json`` ->
    ``gmm-tpu-v5-lite``."""
    stem = Path(path).name.removesuffix(".json")
    return re.sub(r"-\d{8}T\d{6}Z-[0-9a-f]+$", "", stem)


def _priced_kind(ops: list[OpTime]) -> str:
    """What prices a kind's ops: the records that set their efficiencies (their range), else the spec's peaks."""
    measured = [o for o in ops if o.efficiency.measured and o.efficiency.record_path]
    by_record: dict[str, list[float]] = {}
    for o in sorted(measured, key=lambda o: -o.expected_s):
        by_record.setdefault(_record_name(o.efficiency.record_path or ""), []).append(o.efficiency.value)
    parts = []
    for name, values in list(by_record.items())[:2]:
        lo, hi = min(values), max(values)
        span = f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo:.0%}-{hi:.0%}"
        moved = any(
            o.efficiency.source_hardware for o in measured if _record_name(o.efficiency.record_path or "") == name
        )
        parts.append(f"{name}{' (transferred)' if moved else ''} {span}")
    if len(measured) < len(ops):
        parts.append("spec peaks" if not parts else "rest at spec peaks")
    return "; ".join(parts)


def _priced_term(label: str) -> str:
    """What prices one of the engine's terms (speed.overheads), read from its label: the probe records it names,
    a published figure, a measurement, the routing, or the engine's code."""
    text = label.split(": ", 1)[-1]
    if "expected from the routing" in text:
        return "routing model (step.work)"
    probes = list(
        dict.fromkeys(_record_name(p) for p in re.findall(r"(?:reports|k3plan/evidence)/probes/[\w.-]+\.json", text))
    )
    if probes:
        return "probe " + ", ".join(probes)
    tables = list(dict.fromkeys(re.findall(r"evidence/gpu_gemm\.yaml#([\w.-]+)", text)))  # term gpu-gemm
    if tables:
        return "published GEMM table " + ", ".join(tables)
    if re.search(r"engines/\w+/kernels\.py|sgl-project/sglang@", text):  # an engine's kernels (sglang-kernels)
        return "engine code (cited)"
    url = re.search(r"https://github\.com/([\w.-]+/[\w.-]+)/issues/(\d+)", text)
    if url:
        return f"published: {url[1]}#{url[2]}"
    on = re.search(r"measured on ([\w ]+?) \(", text)
    if on:
        return f"measured on {on[1]}"
    if "engine code" in text:
        return "engine code (cited)"
    return "the step description"


def _priced_calls(comm: CommCost, steps: int) -> str:
    """The collectives' price: their calls x the latency a call (the spec's or a probe record's) + their bytes."""
    where = "spec" if "spec" in comm.latency_source else "probe record"
    return (
        f"{comm.calls_per_step * steps:,} calls x {comm.latency_s_per_call * 1e6:.2f} us ({where}) + "
        f"{comm.link_name} bytes"
    )


def terms_of(stage: StageTime, comm: CommCost | None = None, steps: int = 1) -> list[tuple[str, float, str]]:
    """A stage's model as (term, seconds, priced by): its ops by kind and each engine term; they sum to the
    model (``stage.expected_s``). ``comm``: the stage's collectives a step (``steps`` of them), which price the
    collectives where no probe record does."""
    out = []
    for kind, title in KINDS.items():
        ops = [o for o in stage.ops if o.category == kind]
        if ops:
            priced = _priced_kind(ops)
            if kind == "collectives" and comm is not None and priced == "spec peaks":
                priced = _priced_calls(comm, steps)
            out.append((title, sum(o.expected_s for o in ops), priced))
    out += [(o.name, o.expected_s, _priced_term(o.label)) for o in stage.ops if o.category == "overhead"]
    return sorted(out, key=lambda t: -abs(t[1]))  # a term that takes time off (its kernels fused) ranks by its size


def _terms_table(
    expected: ExpectedSpeed, decode: DecodeBound, prefill: PrefillBound, rows_a_stage: int = TOP_TERMS + 1
) -> Table:
    """The largest terms of each stage's model: the stage and its model's total in the first column's two rows;
    at most ``rows_a_stage`` rows a stage (at least 2), the last one summing the terms left out."""
    keep = max(2, rows_a_stage)
    columns = [
        Column("model", no_wrap=True, min_width=13),
        Column("largest terms", overflow="ellipsis", no_wrap=True, max_width=44),
        figure("ms", no_wrap=True, min_width=9),
        Column("priced by", overflow="ellipsis", no_wrap=True, min_width=12, max_width=44),
    ]
    rows = []
    for name, stage, comm, steps in (
        ("decode", expected.decode, decode.comm, 1),
        ("prefill", expected.prefill, prefill.comm, prefill.chunks),
    ):
        terms = [t for t in terms_of(stage, comm, steps) if t[1] != 0]  # the rows sum to the model
        n = min(TOP_TERMS, len(terms) if len(terms) <= keep else keep - 1)
        top, rest = terms[:n], terms[n:]
        heads = [name, f"{_ms(stage.expected_s)} ms"]
        for i, (term, s, priced) in enumerate(top):
            rows.append((heads[i] if i < 2 else "", escape(term), _ms(s), escape(priced)))
        if rest:
            head = heads[len(top)] if len(top) < 2 else ""
            rows.append((head, f"{len(rest)} more terms", _ms(sum(t[1] for t in rest)), "--verbose lists them"))
    return build_table(columns, rows, compact=True)


def _label(fig: ServingFigure) -> str:
    """The figure's label without its source word (printed beside it), its record list counted."""
    text = fig.label.split(": ", 1)[1] if fig.label.startswith(f"{fig.source}: ") else fig.label
    if fig.source == "measured":  # "measured" already says the whole key matched: the keys are in --verbose
        text = re.sub(r" \(engine, hardware, [^)]*all match\)$", "", text)
    if fig.source == "transferred":  # the benchmark's workload and the dimensions the transfer keeps: --verbose
        text = re.sub(r" \((?:ISL|isl) [^)]*\)", "", text)
        # the keys the ratio does not price, by name (their values in --verbose)
        unpriced = [k for k in fig.differing if k.startswith(UNPRICED_KEYS)]
        if unpriced:
            names = ", ".join(next(n for n in UNPRICED_KEYS if k.startswith(n)) for k in unpriced)
            text = text.replace("the ratio does not price " + ", ".join(unpriced), f"the ratio does not price {names}")
        text = re.sub(r"(\w+) ([\d,]+)->\2(, )?", "", text).replace(", )", ")")
    # the records the model read, counted (their paths are in --verbose and --json)
    return RECORD_LIST.sub(lambda m: f"{m[1]}{len(m[2].split(', '))} probe record(s)", text)


def _headline(
    what: str,
    fig: ServingFigure,
    *,
    model_s: float,
    ceiling_s: float,
    bound: str,
    rate_of: Callable[[float], float] | None = None,
) -> tuple[str, str, str, str]:
    """One stage's row: (name, the figure, its source, what it is + its band, the model and the ceiling)."""
    source: str = fig.source
    label = _label(fig)
    value = fig.value_s
    if source == "ceiling" and label.startswith("roofline's"):  # speed.serving's fallback: the roofline bound, an
        source, label = "bound", bound + " " + re.sub(r"^roofline's \w+ bound ", "", label)  # estimate, no ceiling
    if source in ("measured", "transferred"):
        lo, hi = sorted((model_s, value))
        band = f"band {_ms(lo)}-{_ms(hi)} ms (the model is {model_s / value:.2f}x the {source})"
    elif source in ("model", "ceiling"):  # the model, or the ops' own ceiling where it is above the bound
        band = f"band {_ms(min(value, ceiling_s))}-{_ms(model_s)} ms (the ceiling up to the model: no benchmark)"
    else:
        lo, hi = sorted((model_s, value))
        band = f"band {_ms(lo)}-{_ms(hi)} ms (from the bound up to the model)"
        if model_s < value:  # the bound's FLOPs run at an assumed MFU: it is no ceiling, the model may beat it
            band = (
                f"band {_ms(lo)}-{_ms(hi)} ms: the model ({_ms(model_s)} ms) is below the bound, whose MFU is assumed"
            )
    rate = f"; {rate_of(value):,.0f} tok/s" if rate_of else ""
    return (what, f"{_ms(value)} ms", source, escape(f"{label}\n{band}; ceiling {_ms(ceiling_s)} ms{rate}"))


def render_summary(
    console: Console,
    *,
    head: str,
    decode: DecodeBound,
    prefill: PrefillBound,
    expected: ExpectedSpeed,
    serving: ServingComparison,
    eff: Efficiency,
    warnings: list[str],
) -> None:
    """The default view: at most BUDGET lines of at most ``width(console)`` columns (the terms table gives up rows
    where the headlines and warnings take more)."""
    from rich.text import Text

    w = width(console)
    out: list = [
        Text(head),
        Text(
            f"decode: batch {decode.batch:,} at {decode.context_tokens:,} tokens of context; prefill: "
            f"{prefill.prompt_tokens:,} tokens in {prefill.chunks} chunk(s) of {prefill.chunk_tokens:,}"
        ),
    ]
    grid = layout_grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(justify="right", style="bold", no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(
        *_headline(
            "TPOT",
            serving.tpot,
            model_s=serving.decode.model_s,
            ceiling_s=serving.decode.ceiling_s,
            bound=bound_label(eff),
            rate_of=lambda tpot: decode.batch / tpot,  # the batch's tokens a second at the TPOT stood behind
        )
    )
    grid.add_row(
        *_headline(
            "TTFT",
            serving.ttft,
            model_s=serving.prefill.model_s,
            ceiling_s=serving.prefill.ceiling_s,
            bound=bound_label(eff),
        )
    )
    out.append(grid)
    # the benchmark, engine and commit; its URL in --verbose (a cropped URL is no source)
    benches = [re.sub(r"; https?://\S+\)$", ")", b) for b in (serving.tpot.benchmark, serving.ttft.benchmark) if b]
    if benches:
        out.append(Text("benchmark: " + "; ".join(dict.fromkeys(benches)), overflow="ellipsis", no_wrap=True))
        out[-1].truncate(w, overflow="ellipsis")  # one line (console.print wraps a Text whatever its no_wrap)
    out.append(
        Text(
            "ceiling: every op at the spec's peaks, one after another; model: below them by probe records, plus the "
            "engine's terms"
        )
    )
    tail = [Text.from_markup(f"[bold yellow]warning:[/] {escape(line)}") for line in warnings]
    tail.append(Text.from_markup("[dim]--verbose: every record, term, note and source URL; --json: all of it[/]"))
    opts = console.options.update(width=w)
    used = sum(len(console.render_lines(r, opts, pad=False)) for r in out + tail)
    rows = (BUDGET - used - 2) // 2  # the table's header and rule, then the two stages' rows
    for r in (*out, _terms_table(expected, decode, prefill, rows), *tail):
        console.print(r, width=w)
