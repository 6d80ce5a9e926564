"""`k3plan models`: list bundled models; `models show`: parameters, bytes and a breakdown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from k3plan.cli.common import JsonOpt, console, print_json

if TYPE_CHECKING:
    from k3plan.models.summary import ModelShow

app = typer.Typer(
    help="""List bundled models, or show one model's parameters and checkpoint bytes.

\b
Examples:
  k3plan models                                 the bundled models
  k3plan models show kimi-k3 --by format        K3 bytes by storage format
  k3plan models show ./my-model/config.json --json
""",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback()
def _list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the bundled models (name, family, total and active parameters)."""
    if ctx.invoked_subcommand is not None:
        return
    from k3plan.models import bundled_models, load_model
    from k3plan.models.summary import model_summary

    rows = [model_summary(load_model(n)) for n in bundled_models()]
    if json_out:
        print_json(rows)
        return
    from rich.table import Table

    from k3plan.units import fmt_count, fmt_gib

    table = Table(title="Bundled models")
    for col in ("name", "family", "layers", "total params", "active / token", "checkpoint"):
        # fold, never truncate, the name: it is what `models show` takes
        table.add_column(
            col,
            justify="left" if col in ("name", "family") else "right",
            overflow="fold" if col == "name" else "ellipsis",
        )
    for r in rows:
        table.add_row(
            r.name,
            r.family,
            str(r.layers.total),
            fmt_count(r.total_params),
            fmt_count(r.active_params),
            fmt_gib(r.checkpoint_bytes),
        )
    console.print(table)


@app.command("show")
def show(
    model: Annotated[str, typer.Argument(help="Bundled name, config.json path, or folder.")] = "kimi-k3",
    by: Annotated[str, typer.Option("--by", help="Breakdown by role, kind or format.")] = "role",
    json_out: JsonOpt = False,
) -> None:
    """Total and active parameters, vision separately, checkpoint bytes by format, a breakdown.

    \b
    Examples:
      k3plan models show kimi-k3
      k3plan models show deepseek-v3 --by kind --json
    """
    from k3plan.models import load_model
    from k3plan.models.summary import breakdown_by, model_show

    checked = breakdown_by(by)  # a bad --by: one line, before loading the model
    result = model_show(load_model(model), by=checked)
    if json_out:
        print_json(result)
        return
    _render(result)


def _render(r: ModelShow) -> None:
    from rich.table import Table

    from k3plan.units import GiB, fmt_count, fmt_gib

    console.print(
        f"[bold]{r.name}[/]  family {r.family} ({r.architecture}), "
        f"{r.layers.total} layers: {r.layers.kda} KDA, {r.layers.mla} MLA, {r.layers.moe} MoE"
    )
    console.print(f"  total parameters   {r.total_params:>22,}  ({fmt_count(r.total_params)}, text model)")
    console.print(f"  active per token   {r.active_params:>22,}  ({fmt_count(r.active_params)})")
    if r.vision_params:
        console.print(f"  vision (separate)  {r.vision_params:>22,}")
    if r.mtp_params:
        console.print(f"  MTP (separate)     {r.mtp_params:>22,}")
    console.print(f"  checkpoint bytes   {r.checkpoint_bytes:>22,}  ({fmt_gib(r.checkpoint_bytes)})")
    table = Table(title=f"by {r.breakdown_by}")
    for col in (r.breakdown_by, "tensors", "params", "active / token", "bytes (GiB)"):
        table.add_column(col, justify="left" if col == r.breakdown_by else "right")
    for row in sorted(r.breakdown, key=lambda g: -g.params):
        table.add_row(
            row.group,
            f"{row.tensors:,}",
            f"{row.params:,}",
            f"{round(row.active_params):,}",
            f"{row.bytes / GiB:,.3f}",
        )
    console.print(table)
    for note in r.notes:
        console.print(f"[yellow]note:[/] {note}")
