"""The long-context part of a roofline answer (``k3plan.advice.roofline_output.RooflineResult``): where absorbed-MLA
decode attention overtakes the linear part."""

from __future__ import annotations

from k3plan.structs import Frozen


class ContextRatio(Frozen):
    """Absorbed-MLA decode attention FLOPs over the linear part's, a token at this context."""

    context_tokens: int
    ratio: float


def _by_context(entries: tuple[ContextRatio, ...]) -> dict[str, float]:
    return {str(e.context_tokens): e.ratio for e in entries}


class LongContext(Frozen):
    __dump_with__ = {"ratio_by_context": _by_context}  # dumped as {context: ratio}, the JSON contract

    crossover_tokens: float | None  # the context where attention FLOPs overtake the linear part (None: no MLA)
    linear_flops_per_token: int | float
    ratio_by_context: tuple[ContextRatio, ...]

    def ratio(self, context_tokens: int) -> float:
        return next(e.ratio for e in self.ratio_by_context if e.context_tokens == context_tokens)
