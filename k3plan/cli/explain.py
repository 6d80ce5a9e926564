"""`k3plan explain`: what a term in k3plan's output means (k3plan/glossary.py; issue 36)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from k3plan.cli.common import JsonOpt, console, print_json
from k3plan.errors import K3PlanError


def command(
    term: Annotated[
        Optional[str], typer.Argument(help="A term the output uses (KDA, hybrid paging, TPOT, ...).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """What a term in k3plan's output means, and where to read more; without TERM, every term.

    \b
    Examples:
      k3plan explain KDA
      k3plan explain "hybrid paging"
      k3plan explain "study view"
      k3plan explain shardspecs          the ShardSpecs file format (docs/shardspecs.md)
      k3plan explain                     every term, one line each
    """
    from rich.markup import escape

    from k3plan.glossary import TERMS, lookup, near

    if term is None:
        if json_out:
            print_json([t._asdict() for t in TERMS])
            return
        for t in TERMS:
            console.print(f"[bold]{escape(t.term)}[/]: {escape(t.text.split('. ')[0].rstrip('.'))}.")
        console.print("k3plan explain TERM for the whole entry and where to read more")
        return
    found = lookup(term)
    if found is None:
        maybe = near(term)
        raise K3PlanError(
            f"explain {term!r}: not a term k3plan uses"
            + (f"; did you mean {', '.join(maybe)}?" if maybe else "")
            + " (k3plan explain lists them all)"
        )
    if json_out:
        print_json(found._asdict())
        return
    console.print(
        f"[bold]{escape(found.term)}[/]" + (f" (also: {escape(', '.join(found.aliases))})" if found.aliases else "")
    )
    console.print(escape(found.text))
    console.print(f"more: {escape(found.more)}")
