"""`k3plan models`: list bundled models; `models show`: parameters, bytes and a breakdown."""

from __future__ import annotations

from typing import Annotated

import typer

from k3plan.cli.common import JsonOpt, console, print_json

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


def summary(model) -> dict:
    inv, spec = model.inventory, model.spec
    return {
        "name": spec.name,
        "family": spec.family,
        "architecture": spec.architecture,
        "source": spec.source,
        "layers": {"total": spec.num_layers, "kda": spec.n_kda, "mla": spec.n_mla, "moe": spec.n_moe},
        "total_params": inv.total_params,
        "active_params": inv.active_params,
        "vision_params": inv.vision_params,
        "mtp_params": inv.mtp_params,
        "checkpoint_bytes": inv.checkpoint_bytes,
        "checkpoint_bytes_by_format": {k: v["bytes"] for k, v in inv.breakdown("fmt").items()},
        "notes": list(model.notes),
    }


@app.callback()
def _list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the bundled models (name, family, total and active parameters)."""
    if ctx.invoked_subcommand is not None:
        return
    from k3plan.models import bundled_models, load_model

    rows = [summary(load_model(n)) for n in bundled_models()]
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
            r["name"],
            r["family"],
            str(r["layers"]["total"]),
            fmt_count(r["total_params"]),
            fmt_count(r["active_params"]),
            fmt_gib(r["checkpoint_bytes"]),
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
    from k3plan.errors import K3PlanError
    from k3plan.models import load_model

    key = {"role": "role", "kind": "kind", "format": "fmt"}.get(by)
    if key is None:
        raise K3PlanError(f"--by {by!r}: expected one of role, kind, format")
    m = load_model(model)
    result = summary(m)
    result["breakdown_by"] = by
    # vision and MTP get their own rows by role/kind; by format only the text model (= checkpoint bytes)
    result["breakdown"] = m.inventory.breakdown(key, include_extra=key != "fmt")
    if json_out:
        print_json(result)
        return
    _render(result)


def _render(r: dict) -> None:
    from rich.table import Table

    from k3plan.units import GiB, fmt_count, fmt_gib

    console.print(
        f"[bold]{r['name']}[/]  family {r['family']} ({r['architecture']}), "
        f"{r['layers']['total']} layers: {r['layers']['kda']} KDA, {r['layers']['mla']} MLA, {r['layers']['moe']} MoE"
    )
    console.print(f"  total parameters   {r['total_params']:>22,}  ({fmt_count(r['total_params'])}, text model)")
    console.print(f"  active per token   {r['active_params']:>22,}  ({fmt_count(r['active_params'])})")
    if r["vision_params"]:
        console.print(f"  vision (separate)  {r['vision_params']:>22,}")
    if r["mtp_params"]:
        console.print(f"  MTP (separate)     {r['mtp_params']:>22,}")
    console.print(f"  checkpoint bytes   {r['checkpoint_bytes']:>22,}  ({fmt_gib(r['checkpoint_bytes'])})")
    table = Table(title=f"by {r['breakdown_by']}")
    for col in (r["breakdown_by"], "tensors", "params", "active / token", "bytes (GiB)"):
        table.add_column(col, justify="left" if col == r["breakdown_by"] else "right")
    for key, row in sorted(r["breakdown"].items(), key=lambda kv: -kv[1]["params"]):
        table.add_row(
            key,
            f"{row['tensors']:,}",
            f"{row['params']:,}",
            f"{round(row['active_params']):,}",
            f"{row['bytes'] / GiB:,.3f}",
        )
    console.print(table)
    for note in r["notes"]:
        console.print(f"[yellow]note:[/] {note}")
