"""A multi-turn session from curve's and plan's session options (issue 14), and its context growth a turn
against the longest context the fit leaves a sequence (FitResult.capacity.memory_context_tokens). The
options themselves are declared once, in cli/sessions.py."""

from __future__ import annotations

from typing import Optional

from k3plan.structs import Frozen


class SessionOptions(Frozen):
    """curve's and plan's session options as parsed (their questions' base): the turns and the tokens a turn
    adds. ``session()`` is the Session they describe (``session_from``)."""

    __coerce__ = False  # the options as given

    turns: Optional[int] = None
    system_tokens: int = 0
    user_tokens: int = 0
    answer_tokens: int = 0
    reasoning_tokens: int = 0
    tool_tokens: int = 0
    drop_reasoning: bool = False

    def session(self):  # -> Optional[k3plan.workload.sessions.Session]
        return session_from(
            turns=self.turns,
            system_tokens=self.system_tokens,
            user_tokens=self.user_tokens,
            answer_tokens=self.answer_tokens,
            reasoning_tokens=self.reasoning_tokens,
            tool_tokens=self.tool_tokens,
            drop_reasoning=self.drop_reasoning,
        )


def session_from(
    *,
    turns: Optional[int],
    system_tokens: int,
    user_tokens: int,
    answer_tokens: int,
    reasoning_tokens: int,
    tool_tokens: int,
    drop_reasoning: bool,
):
    """The Session the options describe; None without --turns, where any other session option is a one-line
    K3PlanError (it describes no session: not an option ignored); bad values a K3PlanError naming the flag."""
    from k3plan.errors import K3PlanError
    from k3plan.workload.sessions import Session

    if turns is None:
        for flag, given in (
            ("--system-tokens", system_tokens),
            ("--user-tokens", user_tokens),
            ("--answer-tokens", answer_tokens),
            ("--reasoning-tokens", reasoning_tokens),
            ("--tool-tokens", tool_tokens),
            ("--drop-reasoning", drop_reasoning),
        ):
            if given:
                raise K3PlanError(f"{flag}: only with --turns N (a multi-turn session); without it nothing reads it")
        return None
    for flag, v in (
        ("--turns", turns),
        ("--system-tokens", system_tokens),
        ("--user-tokens", user_tokens),
        ("--answer-tokens", answer_tokens),
        ("--reasoning-tokens", reasoning_tokens),
        ("--tool-tokens", tool_tokens),
    ):
        if v < (1 if flag == "--turns" else 0):
            raise K3PlanError(f"{flag} {v}: expected a {'positive' if flag == '--turns' else 'non-negative'} integer")
    if user_tokens + answer_tokens + reasoning_tokens + tool_tokens == 0:
        raise K3PlanError(
            "--turns: a turn has no tokens; pass --user-tokens/--answer-tokens (and --reasoning-tokens, --tool-tokens)"
        )
    try:
        return Session(
            turns=turns,
            system_prompt_tokens=system_tokens,
            user_tokens_per_turn=user_tokens,
            answer_tokens_per_turn=answer_tokens,
            reasoning_tokens_per_turn=reasoning_tokens,
            tool_tokens_per_turn=tool_tokens,
            carry_reasoning=not drop_reasoning,
        )
    except ValueError as e:
        raise K3PlanError(f"session options: {e}") from None


def session_growth_at(setup, workload, calibration, session):
    """The session's growth against fit's memory-allowed context; None when no context fits at all
    (a workload that does not fit: the caller exits 1, it is not bad input)."""
    from k3plan.budget.fit import fit
    from k3plan.workload.sessions import session_growth

    cap = fit(setup, workload, calibration=calibration).capacity.memory_context_tokens
    if cap < 1:
        return None
    return session_growth(session, max_context_tokens=cap)
