"""The terminal rendering of a `k3plan check` result: one table of what regressed."""

from __future__ import annotations

from rich.console import Console

from k3plan.tables import MISSING, Column, build_table
from k3plan.units import GiB, MiB, fmt_gib


def _bytes(v) -> str:
    if isinstance(v, int):
        return fmt_gib(v, 3) if abs(v) >= MiB else f"{v:,} B"
    return MISSING if v is None else str(v)


def _delta(d) -> str:
    if d is None:
        return MISSING
    return f"{d / GiB:+,.3f} GiB\n{d:+,} B" if abs(d) >= MiB else f"{d:+,} B"


def render_check(result, console: Console) -> None:
    if not console.is_terminal:  # CI logs: do not fold tensor names at 80 columns
        # the caller's class: k3plan's console turns a closed pipe into exit 141 (cli.common), rich's exits 1
        console = type(console)(highlight=False, width=160, no_color=console.no_color)
    failed, info = result.failed, [f for f in result.findings if not f.fail]
    n = len(result.configurations)
    head = f"baseline {result.baseline} (k3plan {result.baseline_k3plan_version}), {n} configuration(s), tolerance {result.tolerance}"
    if result.shardspecs:
        head += f", shardspecs {result.shardspecs}"
    console.print(head)
    if failed:
        columns = [
            Column(col, "left" if col in ("configuration", "regression") else "right", overflow="fold")
            for col in ("configuration", "regression", "baseline", "now", "change a device")
        ]
        rows = [(f.configuration, f.what, _bytes(f.baseline), _bytes(f.now), _delta(f.delta_bytes)) for f in failed]
        console.print(build_table(columns, rows, title="regressions"))
    for f in info:
        console.print(f"[dim]note:[/] {f.configuration}: {f.what}")
    bad = sorted({f.configuration for f in failed})
    if failed:
        console.print(
            f"[bold red]FAIL[/]: {len(failed)} regression(s) in {len(bad)} of {n} configuration(s): {', '.join(bad)}"
        )
    else:
        console.print(f"[bold green]PASS[/]: {n} configuration(s) within the baseline")
