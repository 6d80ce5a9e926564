"""Temporaries: what the prefill and decode graphs need beyond weights and cache, per device.

The prefill graph and the decode graph are compiled separately, so the budget takes the larger of
the two, never their sum (docs/k3-facts.md §6: temporaries are not additive). This is k3plan's
*analytic* temp model; each term is named. It is an estimate of live buffers in one layer at a
time (layers folded in a scan), and is replaced by measured points when a calibration file is
given (see calibration.py). The terms are written once, in ``k3plan.step.memory`` (over columns);
here they are evaluated at one Setup.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from k3plan.budget.dtypes import BYTES
from k3plan.models.formats import get_format
from k3plan.models.spec import ModelSpec
from k3plan.sharding.mesh import Parallel
from k3plan.sharding.stack import Stack
from k3plan.step.memory import KDA_CHUNK_TOKENS, decode_temp_terms, prefill_temp_terms

__all__ = ["KDA_CHUNK_TOKENS", "TempTerms", "decode_temp", "prefill_temp"]
DEQUANTIZED = "one layer's local experts dequantized"


class TempTerms(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    terms: dict[str, int]  # name -> bytes per device

    @property
    def total(self) -> int:
        return sum(self.terms.values())


def _point(terms: dict, quantized: bool) -> TempTerms:
    """Ints of one configuration; the dequantization term only where the experts are quantized."""
    return TempTerms(terms={k: int(v) for k, v in terms.items() if quantized or k != DEQUANTIZED})


def _quantized(stack: Stack, expert_fmt: str) -> bool:
    return get_format(stack.runtime_format("expert", expert_fmt)).quantized


def prefill_temp(
    *, spec: ModelSpec, stack: Stack, parallel: Parallel, chunk_tokens: int, context_tokens: int, expert_fmt: str
) -> TempTerms:
    """One prefill chunk of ``chunk_tokens`` per DP group, attending over ``context_tokens``."""
    q = _quantized(stack, expert_fmt)
    return _point(
        prefill_temp_terms(
            spec,
            act=BYTES[stack.activation_dtype],
            quantized=q,
            tp=parallel.tp,
            ep=parallel.ep,
            chunk=chunk_tokens,
            context=context_tokens,
        ),
        q,
    )


def decode_temp(
    *, spec: ModelSpec, stack: Stack, parallel: Parallel, batch: int, context_tokens: int, expert_fmt: str
) -> TempTerms:
    """One decode step for ``batch`` sequences at ``context_tokens`` (per DP group)."""
    q = _quantized(stack, expert_fmt)
    return _point(
        decode_temp_terms(
            spec,
            act=BYTES[stack.activation_dtype],
            quantized=q,
            tp=parallel.tp,
            ep=parallel.ep,
            dp=parallel.dp,
            batch=batch,
            context=context_tokens,
        ),
        q,
    )
