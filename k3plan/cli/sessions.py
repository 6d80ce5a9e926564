"""The session options of `curve` and `plan` (issue 14), declared once; the session they describe and its
growth: k3plan.app.sessions."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from k3plan.cli.common import TOKENS

# The session options, declared once for curve and plan.
TurnsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--turns",
        help="Sessions: turns in a multi-turn conversation; prints context growth a turn and the first turn that no longer fits.",
    ),
]
UserTokensOpt = Annotated[
    int, typer.Option("--user-tokens", parser=TOKENS, metavar="TOKENS", help="Sessions: tokens the user sends a turn.")
]
AnswerTokensOpt = Annotated[
    int,
    typer.Option("--answer-tokens", parser=TOKENS, metavar="TOKENS", help="Sessions: visible answer tokens a turn."),
]
ReasoningTokensOpt = Annotated[
    int,
    typer.Option(
        "--reasoning-tokens",
        parser=TOKENS,
        metavar="TOKENS",
        help="Sessions: reasoning tokens a turn (K3 carries them back).",
    ),
]
ToolTokensOpt = Annotated[
    int,
    typer.Option(
        "--tool-tokens",
        parser=TOKENS,
        metavar="TOKENS",
        help="Sessions: tool calls and results a turn (always carried).",
    ),
]
SystemTokensOpt = Annotated[
    int, typer.Option("--system-tokens", parser=TOKENS, metavar="TOKENS", help="Sessions: system prompt tokens.")
]
DropReasoningOpt = Annotated[
    bool,
    typer.Option(
        "--drop-reasoning", help="Sessions: do not carry earlier reasoning back (K3's template requires it; compare)."
    ),
]
