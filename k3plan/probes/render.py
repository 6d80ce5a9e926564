"""Terminal rendering of probe records (rich); fallbacks, CPU labels and failed checks stand out."""

from __future__ import annotations

from typing import Optional

from k3plan.evidence.probe_record import ProbeRecord
from k3plan.tables import MISSING, Column, build_table

_SCALES = {
    "s/call": ((1e-6, "us"), (1e-3, "ms"), (1.0, "s")),
    "s/token": ((1e-9, "ns"), (1e-6, "us"), (1e-3, "ms"), (1.0, "s")),
    "s": ((1e-6, "us"), (1e-3, "ms"), (1.0, "s")),
    "bytes/s": ((1e9, "GB/s"), (1e12, "TB/s")),
    "flop/s": ((1e9, "GFLOP/s"), (1e12, "TFLOP/s")),
}


def fmt_value(value: Optional[float], unit: Optional[str]) -> str:
    if value is None:
        return MISSING
    scales = _SCALES.get(unit or "")
    if not scales:
        return f"{value:.4g} {unit or ''}".strip()
    scale, name = scales[0]
    for s, n in scales:
        if abs(value) >= s:
            scale, name = s, n
    return f"{value / scale:.4g} {name}"


def render(console, record: ProbeRecord, path=None) -> None:
    head = (
        f"[bold]{record.probe}[/]"
        + (f" {record.op}" if record.op and record.probe == "hbm" else "")
        + (f" {record.mode}" if record.mode else "")
    )
    head += f" on {record.device_count} x {record.device_kind} ({record.backend}, {record.process_count} process"
    head += "es)" if record.process_count > 1 else ")"
    console.print(head)
    impl = record.implementation or "none"
    line = f"  implementation: {impl}"
    if record.fallback:
        line += f"  [yellow]FALLBACK[/] ({'; '.join(record.fallback_reasons)})"
    console.print(line, soft_wrap=True)
    if record.label:
        console.print(f"  [yellow]{record.label}[/]", soft_wrap=True)
    for note in record.notes:  # what a CPU run changed: its quick sweep, its default timeout
        if note.startswith("CPU run:"):
            console.print(f"  [yellow]{note}[/]", soft_wrap=True)
    if not record.ok:
        console.print(f"  [bold red]failed:[/] {record.error}", soft_wrap=True)
        return
    per = {"s/call": " / call", "s/token": " / token"}.get((record.points[0].unit or "") if record.points else "", "")
    columns = [
        Column(col, "left" if col == "point" else "right", no_wrap=True)
        for col in ("point", "value" + per, "raw p50", "raw p90", "baseline", "expected")
    ]
    rows = []
    for pt in record.points:
        shown = {
            k: v for k, v in pt.params.items() if k in ("bytes", "dtype", "size", "seq_len", "path", "op", "tokens")
        }
        st = pt.stats
        unit_s = "s/call" if pt.unit == "s/call" else "s"
        label = " ".join(f"{v}" if k in ("dtype", "path", "op") else f"{k}={v}" for k, v in shown.items())
        if pt.params.get("ops"):  # --from-plan: the shape and the step's ops that have it
            p, ops = pt.params, pt.params["ops"]
            shape = f"{p['m']}x{p['n']}x{p['k']}" if "m" in p else f"{p['rows']} rows {p['k']}x{p['n']}"
            more = f" +{len(ops) - 1}" if len(ops) > 1 else ""
            label = f"{p.get('dtype', '')} {shape} {ops[0]}{more}".strip()
        rows.append(
            (
                label,
                fmt_value(pt.value, pt.unit),
                fmt_value(st.p50 if st else None, unit_s),
                fmt_value(st.p90 if st else None, unit_s),
                fmt_value(pt.baseline_s, unit_s),
                fmt_value(pt.expected, pt.unit),
            )
        )
    console.print(build_table(columns, rows, compact=True))
    for note in dict.fromkeys(n for pt in record.points for n in pt.notes):
        console.print(f"  note: {note}", soft_wrap=True)
    for check in record.verification:
        if not check.ok:
            console.print(f"  [bold red]verification failed:[/] {check.detail}", soft_wrap=True)
    if record.verification and all(c.ok for c in record.verification):
        console.print(f"  verified: {record.verification[-1].detail}", soft_wrap=True)
    exp = record.expectation
    if exp is not None and exp.value is None and exp.missing:
        console.print(f"  expectation: none ({exp.missing})", soft_wrap=True)
    if record.probe == "step":
        _render_step(console, record)
    if record.cut_short:
        console.print(f"  [yellow]cut short:[/] {record.cut_short_reason}", soft_wrap=True)
    if path is not None:
        console.print(f"  wrote {path}")


def _render_step(console, record: ProbeRecord) -> None:
    """Measured vs expected (and the ceiling) of `probe step`, with the expected time by op kind."""
    for pt in record.points:
        p = pt.params
        if pt.value is None or "expected_s" not in p:
            continue
        console.print(
            f"  [bold]measured {fmt_value(pt.value, 's')}[/] vs expected {fmt_value(p['expected_s'], 's')} "
            f"(ceiling {fmt_value(p['ceiling_s'], 's')}): error {p['error']:+.1%}",
            soft_wrap=True,
        )
        kinds = ", ".join(f"{k} {fmt_value(v, 's')}" for k, v in p.get("expected_by_kind_s", {}).items() if v)
        console.print(f"  expected by op kind: {kinds}", soft_wrap=True)
        if p.get("op_list_collective_calls") or p.get("hlo_collectives"):
            console.print(
                f"  collectives a step: op list {p.get('op_list_collective_calls')}, compiled HLO "
                f"{p.get('hlo_collectives')}",
                soft_wrap=True,
            )
