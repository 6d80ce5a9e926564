"""A multi-turn session: how its context grows turn by turn, and the turn at which it stops fitting.

K3 always thinks, and its chat template requires earlier turns' reasoning content and tool calls
to be carried back (issue 14), so the context grows by the reasoning too, not just by what the
user sees. Per turn t (1-indexed), with S the system prompt, U user, A visible answer, T tool
calls + results, R reasoning tokens, and C = U + A + T + (R if carried else 0) a finished turn:

  prompt at turn t (prefill)     = S + (t - 1) C + U
  peak context in turn t         = S + (t - 1) C + U + A + T + R
                                   (the turn's own reasoning is in context while it generates)

Arrays first: every turn at once over numpy columns; ``turns_that_fit`` is the closed form.
"""

from __future__ import annotations

import numpy as np

from k3plan.errors import require
from k3plan.structs import Frozen, fields


class Session(Frozen):
    """One multi-turn conversation, the same shape every turn. Checked when built: ``turns`` a positive
    integer, the token counts non-negative integers (ValueError, one line naming the field)."""

    turns: int  # turns in the session (--turns)
    system_prompt_tokens: int = 0
    user_tokens_per_turn: int  # visible: what the user sends a turn
    answer_tokens_per_turn: int  # visible: the assistant's answer a turn
    reasoning_tokens_per_turn: int = 0
    tool_tokens_per_turn: int = 0  # tool calls and their results a turn (always carried)
    carry_reasoning: bool = True  # K3 requires earlier reasoning carried back

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in fields(self):
            v, least = getattr(self, name), 1 if name == "turns" else 0
            if name == "carry_reasoning":
                if not isinstance(v, bool):
                    raise ValueError(f"{name} {v!r}: expected true or false")
            elif not isinstance(v, int) or isinstance(v, bool) or v < least:
                raise ValueError(f"{name} {v!r}: expected a {'positive' if least else 'non-negative'} integer")

    @property
    def visible_tokens_per_turn(self) -> int:
        return self.user_tokens_per_turn + self.answer_tokens_per_turn

    @property
    def carried_tokens_per_turn(self) -> int:
        """What a finished turn leaves in the context: C above."""
        return (
            self.visible_tokens_per_turn
            + self.tool_tokens_per_turn
            + (self.reasoning_tokens_per_turn if self.carry_reasoning else 0)
        )


class SessionGrowth(Frozen):
    session: Session
    prompt_tokens: tuple[int, ...]  # prefill at each turn, turn 1 first
    peak_context_tokens: tuple[int, ...]  # context at the end of each turn's generation
    visible_context_tokens: tuple[int, ...]  # what the conversation shows: S + t (U + A)
    max_context_tokens: int | None  # the fit's memory-allowed context, when given
    turns_fitting: int | None  # turns whose peak fits max_context_tokens
    first_turn_not_fitting: int | None  # None: every turn fits (or no max given)

    @property
    def growth_over_visible(self) -> float:
        """Last turn's peak context over its visible conversation (1.0: no hidden growth)."""
        return self.peak_context_tokens[-1] / max(1, self.visible_context_tokens[-1])


def turns_that_fit(session: Session, *, max_context_tokens: int) -> int:
    """Largest t with S + (t-1) C + U + A + T + R <= max (closed form; may exceed session.turns)."""
    require(max_context_tokens >= 1, f"max context {max_context_tokens}: expected a positive number of tokens")
    s = session
    first = s.system_prompt_tokens + s.visible_tokens_per_turn + s.tool_tokens_per_turn + s.reasoning_tokens_per_turn
    if first > max_context_tokens:
        return 0
    c = s.carried_tokens_per_turn
    return 1 + (max_context_tokens - first) // c if c else s.turns


def session_growth(session: Session, *, max_context_tokens: int | None = None) -> SessionGrowth:
    require(
        max_context_tokens is None or max_context_tokens >= 1,
        f"max context {max_context_tokens}: expected a positive number of tokens",
    )
    s = session
    t = np.arange(1, s.turns + 1, dtype=np.int64)
    before = s.system_prompt_tokens + (t - 1) * s.carried_tokens_per_turn
    prompt = before + s.user_tokens_per_turn
    peak = prompt + s.answer_tokens_per_turn + s.tool_tokens_per_turn + s.reasoning_tokens_per_turn
    visible = s.system_prompt_tokens + t * s.visible_tokens_per_turn
    fitting = first_bad = None
    if max_context_tokens is not None:
        over = np.nonzero(peak > max_context_tokens)[0]
        first_bad = int(over[0]) + 1 if over.size else None
        fitting = (first_bad - 1) if first_bad is not None else s.turns
    return SessionGrowth(
        session=s,
        prompt_tokens=tuple(int(x) for x in prompt),
        peak_context_tokens=tuple(int(x) for x in peak),
        visible_context_tokens=tuple(int(x) for x in visible),
        max_context_tokens=max_context_tokens,
        turns_fitting=fitting,
        first_turn_not_fitting=first_bad,
    )
