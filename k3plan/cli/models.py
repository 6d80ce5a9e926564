"""`k3plan models`: list bundled models; `models show`: parameters, bytes and a breakdown."""

from __future__ import annotations

from typing import Annotated

import typer

from k3plan.cli.common import JsonOpt, console, print_json

app = typer.Typer(
    help="""List bundled models, or show one model's parameters and checkpoint bytes.

\b
Examples:
  k3plan models                                 the bundled models (or: k3plan models list)
  k3plan models show kimi-k3 --by format        K3 bytes by storage format
  k3plan models show ./my-model/config.json --json
""",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback()
def _list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the bundled models (name, family, total and active parameters)."""
    if ctx.invoked_subcommand is None:
        _do_list(json_out)


@app.command("list")
def list_(json_out: JsonOpt = False) -> None:
    """Name, family, layers, total and active parameters, checkpoint GiB (same as `models`).

    \b
    Examples:
      k3plan models list
      k3plan models list --json
    """
    _do_list(json_out)


def _do_list(json_out: bool) -> None:
    from k3plan.models import bundled_models, load_model
    from k3plan.models.summary import model_summary

    rows = [model_summary(load_model(n)) for n in bundled_models()]
    if json_out:
        print_json(rows)
        return
    from k3plan.report.catalog_tables import render_models

    render_models(rows, console)


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
    from k3plan.report.catalog_tables import render_model_show

    render_model_show(result, console)
