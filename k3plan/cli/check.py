"""`k3plan check`: the CI gate for sharding and budget changes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from k3plan.cli.common import JsonOpt, ShardspecsOpt, console, err_console, print_json


def command(
    baseline: Annotated[
        Path,
        typer.Option(
            "--baseline", help="Baseline file (JSON or YAML) listing the configurations and their recorded budgets."
        ),
    ],
    shardspecs: ShardspecsOpt = None,
    tolerance: Annotated[
        str,
        typer.Option(
            "--tolerance",
            help="How much a per-device term may grow, with its unit: a percent of the recorded term ('1%') or a "
            "size ('512MiB', '1GB', '4096B'); a bare number other than 0 is refused.",
        ),
    ] = "0.5%",
    update: Annotated[
        bool,
        typer.Option(
            "--update", help="Recompute every configuration and rewrite the baseline (deliberately accept the change)."
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Recompute every configuration of a baseline and fail if a per-device term grew beyond the
    tolerance, a tensor is newly replicated or falls back, a configuration no longer fits, or KV
    bytes a token / state bytes a sequence changed. Exit 0 pass, 1 regression, 2 bad input (a
    corrupt or incompatible baseline). A baseline whose entries list only `config` is a seed:
    --update fills in the recorded values.

    \b
    Examples:
      k3plan check --baseline reports/baseline/k3.json
      k3plan check --baseline reports/baseline/k3.json --shardspecs my_specs.yaml --tolerance 256MiB
      k3plan check --baseline reports/baseline/k3.json --update      accept the current numbers
    """
    from k3plan.check.compare import parse_tolerance
    from k3plan.check.gate import run_check
    from k3plan.check.gate import update as do_update

    tol = parse_tolerance(tolerance)
    if update:
        new = do_update(path=baseline, shardspecs=shardspecs)
        if json_out:
            print_json(new)
        else:
            err_console.print(f"baseline {baseline} rewritten: {len(new.configurations)} configuration(s)")
        return
    result = run_check(path=baseline, tolerance=tol, shardspecs=shardspecs)
    if json_out:
        print_json(result)
    else:
        from k3plan.report.check_table import render_check

        render_check(result, console)
    if not result.passed:
        raise typer.Exit(1)
