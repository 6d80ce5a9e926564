"""`k3plan census PATH`: tensors and bytes by dtype from safetensors headers, vs the inventory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from k3plan.cli.common import JsonOpt, console, err_console, print_json


def command(
    path: Annotated[
        Path,
        typer.Argument(
            help="A checkpoint folder (with or without model.safetensors.index.json) or one .safetensors file."
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Compare with this model's inventory (bundled name or config path). Default: the folder's config.json if present, else none.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Read only the headers of *.safetensors files: tensors and bytes by dtype, and what is
    missing, extra or mis-shaped compared with the model's tensor inventory.

    Each header is checked against its file (known dtype, non-negative shape, data_offsets that
    hold dtype x shape bytes and tile the data region); a header that does not agree is an error
    naming the shard and the tensor (exit 2). Exit 0 when the checkpoint matches the inventory (or
    no model is given), 1 when it differs. A progress bar over shards shows on a terminal.

    \b
    Examples:
      k3plan census /ckpt/kimi-k3                      uses /ckpt/kimi-k3/config.json
      k3plan census /ckpt/kimi-k3 --model kimi-k3 --json
    """
    from k3plan.models import load_model
    from k3plan.models.census import census

    if model is None and path.is_dir() and (path / "config.json").is_file():
        model = str(path)
    inventory = load_model(model).inventory if model else None
    with shard_progress() as progress:
        result = census(path, inventory, progress=progress)
    if json_out:
        print_json(result)
    else:
        from k3plan.report.catalog_tables import render_census

        render_census(result, console)
    if result.comparison is not None and not result.comparison.ok:
        raise typer.Exit(1)


@contextmanager
def shard_progress() -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar over shards on stderr when it is a terminal; nothing otherwise."""
    if not err_console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("reading headers"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("shards"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("census", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
