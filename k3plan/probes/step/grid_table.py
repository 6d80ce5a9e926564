"""The v5e grid's table (issue 50) from the committed step records: measured vs expected time, the chip's compiled
temp vs fit's, and the chip's refusals vs fit's verdict. No device and no jax: the records hold what the chip said;
fit is run here, today, on the same scaled model, stack and expert format.

    python3 -m k3plan.probes.step.grid_table            # Markdown, the table docs/device.md holds
    python3 -m k3plan.probes.step.grid_table --check    # exit 1 when docs/device.md's copy differs

Columns: expected = today's model of the step (probe.reprice: speed.expected_time of step_op_costs, with
step/graph.py's ops of validate's graph, against the v5e efficiency records the grid ran with -- the shipped
k3plan/evidence/probes/*-tpu-v5-lite-* records, which the run read as `--records reports/probes`), so a term added
to the op list shows here without re-timing; the record's own expected is its run's model; compiled temp = the chip's memory_analysis
(a refused point: the compiler's "HLO temporaries" figure of its refusal); fit temp = fit's temp of that
stage at the point's workload (a decode point: batch x context; a prefill point: batch 1, the chunk = the
context) for the graph that ran (``fit(graph=TempGraph(form))``: k3plan's own graph, validate's step, in the
record's expert format and form -- not the engine's kernels, fit's default); fit = its verdict for that stage
alone (the chip compiled one stage; fit's own verdict counts the larger of both stages' temps): weights + cache + state + reserve + the stage's temp within usable HBM, "FITS IF"
where that temp has no compiled evidence (issue 50). A refused point's figure is the compiler's total
(arguments + temporaries) from its refusal, not its temp. The band is 0.8-1.25x; a ratio outside it is marked.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from k3plan.units import GiB

GRID_DIR = Path(__file__).resolve().parents[3] / "reports" / "probes" / "grid-20261204"
# where the compiler placed the tiled experts' intermediates at each tiled point (benchmarks/grid_placement.py: the
# step compiled on the chip; probes/step/alternate.py), for the records that predate their own ``alternate_memory``
PLACEMENT = Path(__file__).resolve().parents[3] / "reports" / "probes" / "grid-placement-20261204" / "placement.json"
DOC = Path(__file__).resolve().parents[3] / "docs" / "device.md"
BEGIN, END = "<!-- grid-table:begin (python3 -m k3plan.probes.step.grid_table) -->", "<!-- grid-table:end -->"
BAND = (0.8, 1.25)
TEMP_BAND = 0.15  # fit's temp of the graph that ran against the compiled temp (issue 50)
HARDWARE = "tpu-v5e"
DEVICE_KIND = "tpu v5 lite"


@dataclass(frozen=True)
class Row:
    model: str
    stage: str
    batch: int
    context: int
    measured_s: Optional[float]
    expected_s: Optional[float]
    compiled_temp: Optional[int]
    refused: bool
    fit_temp: Optional[int]
    fit_verdict: str
    record: str

    @property
    def ratio(self) -> Optional[float]:
        if self.measured_s is None or not self.expected_s:
            return None
        return self.measured_s / self.expected_s

    @property
    def agrees(self) -> bool:
        """The chip's verdict (ran / refused) against fit's: FITS with a run, DOES NOT FIT with a refusal. A FITS IF
        is neither: it agrees with a run whose compiled temp met its condition, and with no refusal."""
        if self.fit_verdict.startswith("DOES NOT"):
            return self.refused
        if self.fit_verdict.startswith("FITS IF"):
            return not self.refused and self.compiled_temp is not None and self.compiled_temp <= self.condition
        return not self.refused

    @property
    def condition(self) -> int:
        """The most temporaries a FITS IF allows (bytes; 0 for any other verdict)."""
        m = re.match(r"FITS IF temp <= ([\d.]+)", self.fit_verdict)
        return 0 if m is None else int(float(m.group(1)) * GiB)


def _refused_temp(words: str) -> Optional[int]:
    m = re.search(r"HLO temporaries \(([\d.]+)G\)", words)
    return None if m is None else int(float(m.group(1)) * GiB)  # the refusal's G is GiB (15.75G = bytes_limit)


def _fit(params: dict, *, stage: str, batch: int, context: int) -> tuple[Optional[int], str]:
    """fit's temp of ``stage`` and its verdict at the point, on the record's scaled model, stack and expert format."""
    from k3plan.budget.fit import ANALYTIC_TEMP, Workload, fit
    from k3plan.budget.temp_graph import VALIDATE_TEMP, TempGraph
    from k3plan.probes.step.probe import StepParams, expert_form, step_setup
    from k3plan.step.verdict import fit_reason

    sp = StepParams(
        width="k3",
        layers=int(params["layers"]),
        experts=int(params["experts"]),
        stack=str(params["stack"]),
        expert_format=str(params["expert_format"]),
    )
    setup = step_setup(sp, hardware=HARDWARE)
    if stage == "decode":
        w = Workload(context_tokens=context, batch=batch, prefill_chunk_tokens=1)
    else:
        w = Workload(context_tokens=context, batch=1, prefill_chunk_tokens=context)
    r = fit(setup, w, graph=TempGraph(form=expert_form(sp)))  # the graph that ran: validate's, in the record's form
    # the stage's own budget: the chip compiled one stage, fit counts the larger of both stages' temps
    temp = r.temp.decode_bytes if stage == "decode" else r.temp.prefill_bytes
    source = r.provenance.temp_decode if stage == "decode" else r.provenance.temp_prefill
    if temp is None:
        return None, "DOES NOT FIT: calibration"
    room = r.per_device.free_bytes + r.per_device.temp_bytes  # what the stage's temporaries may take
    code = fit_reason(fits=False, code=r.reason)[0].value if r.reason in (1, 2) else None  # fallback, weights
    if code is not None:
        verdict = f"DOES NOT FIT: {code}"
    elif temp > room:
        verdict = "DOES NOT FIT: budget"
    elif source in (ANALYTIC_TEMP, VALIDATE_TEMP):
        verdict = f"FITS IF temp <= {room / GiB:.2f}"
    else:
        verdict = "FITS"
    return temp, verdict


def efficiency_records() -> list:
    """(record, path) of the v5e efficiency records the grid's points are priced on: every ok non-step record of the
    chip's device kind shipped in k3plan/evidence/probes (the 30 the run's --records read, and since then the
    `probe kda --impl validate` record of validate's own chunked KDA and the `probe ragged-dot --dtype float32` one,
    which only validate's graph reads)."""
    from k3plan.evidence.probe_records import load_with_paths

    probes = Path(__file__).resolve().parents[2] / "evidence" / "probes"
    return [
        (r, p)
        for r, p in load_with_paths(probes)
        if r.ok and r.probe != "step" and r.device_kind.lower() == DEVICE_KIND
    ]


def placements(path: Path = PLACEMENT) -> dict[tuple, dict[str, float]]:
    """(stack, expert format, layers, experts, stage, batch, context) -> the compiled step's alternate-memory shares
    (probes/step/alternate.py) from the committed placement file; {} where there is none."""
    import json

    if not path.is_file():
        return {}
    return {
        (p["stack"], p["expert_format"], p["layers"], p["experts"], p["stage"], p["batch"], p["context"]): p["shares"]
        for p in json.loads(path.read_text())["points"]
    }


def rows(folder: Path = GRID_DIR) -> list[Row]:
    from k3plan.evidence.probe_records import load_with_paths
    from k3plan.probes.step.probe import reprice

    efficiency = efficiency_records()
    placed = placements()
    out = []
    dates: dict[str, str] = {}
    for rec, path in load_with_paths(folder, strict=True):
        if rec.probe != "step" or not rec.points:
            continue
        pt = rec.points[0].params
        stage = str(rec.mode)
        batch, context = int(pt["batch"]), int(pt["context"])
        refused = pt.get("refused") == "oom"
        params = {
            **rec.params,
            "layers": rec.params.get("layers", pt.get("layers")),
            "experts": rec.params.get("experts", pt.get("experts")),
        }
        fmt = "bf16" if params["expert_format"] == "bf16" else str(params.get("expert_runtime_format"))
        model = f"{params['stack']} {fmt} {params['layers']}L {params['experts']}E"
        mem = pt.get("memory_analysis") or {}
        fit_temp, verdict = _fit(params, stage=stage, batch=batch, context=context)
        out.append(
            Row(
                model=model,
                stage=stage,
                batch=batch,
                context=context,
                measured_s=None if refused else rec.points[0].value,
                expected_s=None
                if refused
                else reprice(
                    rec,
                    efficiency=efficiency,
                    hardware=HARDWARE,
                    alternate=placed.get(
                        (params["stack"], params["expert_format"], int(params["layers"]), int(params["experts"]))
                        + (stage, batch, context)
                    ),
                ).expected_s,
                compiled_temp=_refused_temp(str(pt.get("refusal", ""))) if refused else mem.get("temp_bytes"),
                refused=refused,
                fit_temp=fit_temp,
                fit_verdict=verdict,
                record=path.relative_to(folder).as_posix(),
            )
        )
        dates[out[-1].record] = str(rec.date)
    out = newest_per_point(out, dates)
    out.sort(key=lambda r: (r.model, r.stage != "decode", r.batch, r.context))
    return out


def newest_per_point(rs: list[Row], dates: dict[str, str]) -> list[Row]:
    """One row a point (model, stage, batch, context): the one of the newest record (its ``date``, then its path),
    wherever it lies under the folder -- a re-run's record supersedes the older one even if that was not moved
    into a ``superseded/`` folder (issue 50: the 4/6/8-layer models re-run at 22:4xZ with today's graph)."""
    best: dict[tuple, Row] = {}
    for r in rs:
        k = (r.model, r.stage, r.batch, r.context)
        if k not in best or (dates[r.record], r.record) > (dates[best[k].record], best[k].record):
            best[k] = r
    return list(best.values())


def _gib(n: Optional[int]) -> str:
    return "" if n is None else f"{n / GiB:.2f}"


def table(rs: list[Row]) -> str:
    lines = [
        "| model (stack, experts, layers, routed experts) | point | measured ms | expected ms | measured / expected "
        "| compiled temp GiB | fit temp GiB | fit | record (`reports/probes/grid-20261204/`) |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rs:
        point = f"decode {r.batch} x {r.context:,}" if r.stage == "decode" else f"prefill {r.context:,}"
        ratio = r.ratio
        if ratio is None:
            ratio_s = "**refused (OOM)**"
        else:
            ratio_s = f"{ratio:.2f}" + ("" if BAND[0] <= ratio <= BAND[1] else " (out)")
        fit_s = r.fit_verdict + (
            ""
            if r.agrees
            else " **(disagrees)**"
            if not r.fit_verdict.startswith("FITS IF")
            else " **(unmet: the chip refused)**"
            if r.refused
            else " **(unmet)**"
        )
        lines.append(
            f"| {r.model} | {point} | {'' if r.measured_s is None else f'{r.measured_s * 1e3:.1f}'} | "
            f"{'' if r.expected_s is None else f'{r.expected_s * 1e3:.1f}'} | {ratio_s} | "
            f"{('total ' if r.refused else '') + _gib(r.compiled_temp)} | {_gib(r.fit_temp)} | {fit_s} | `{r.record}` |"
        )
    timed = [r for r in rs if r.ratio is not None]
    inside = sum(BAND[0] <= (r.ratio or 0) <= BAND[1] for r in timed)
    temp_in = sum(r.fit_temp is not None and abs(r.fit_temp / (r.compiled_temp or 1) - 1) <= TEMP_BAND for r in timed)
    dis = [r for r in rs if not r.agrees and not r.fit_verdict.startswith("FITS IF")]
    unmet = [r for r in rs if not r.agrees and r.fit_verdict.startswith("FITS IF")]
    lines += [
        "",
        f"{len(rs)} points: {len(timed)} timed, {len(rs) - len(timed)} refused by the chip (out of memory); "
        f"{inside} of {len(timed)} timed points inside {BAND[0]}-{BAND[1]}x; fit's temp of the graph that ran within "
        f"{TEMP_BAND:.0%} of the compiled temp at {temp_in} of {len(timed)}; {len(dis)} where fit's verdict (FITS or "
        f"DOES NOT FIT) and the chip's disagree; {len(unmet)} FITS IF whose condition the chip did not meet.",
    ]
    return "\n".join(lines) + "\n"


def doc_block(text: str) -> Optional[str]:
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: list[str]) -> int:
    out = table(rows())
    if "--check" in argv:
        got = doc_block(DOC.read_text())
        if got != out:
            print("docs/device.md's grid table differs from the records: run python3 -m k3plan.probes.step.grid_table")
            return 1
        return 0
    print(out, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
