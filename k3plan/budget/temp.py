"""Temporaries: what the prefill and decode graphs need beyond weights and cache, per device.

The prefill graph and the decode graph are compiled separately, so the budget takes the larger of
the two, never their sum (k3-facts.md §6: temporaries are not additive). This is k3plan's
*analytic* temp model; each term is named. It is an estimate of live buffers in one layer at a
time (layers folded in a scan), and is replaced by measured points when a calibration file is
given (see calibration.py).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from k3plan.budget.dtypes import BYTES
from k3plan.models.formats import get_format
from k3plan.models.spec import ModelSpec
from k3plan.sharding.mesh import Parallel
from k3plan.sharding.stack import Stack

KDA_CHUNK_TOKENS = 64  # chunk of the chunked gated delta rule (fla / tokamax default)


class TempTerms(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    terms: dict[str, int]  # name -> bytes per device

    @property
    def total(self) -> int:
        return sum(self.terms.values())


def _heads_local(heads: int, tp: int) -> int:
    return heads // tp if heads % tp == 0 else heads


def _moe_terms(spec: ModelSpec, stack: Stack, parallel: Parallel, tokens: int, act: int, expert_fmt: str) -> dict[str, int]:
    moe = spec.moe
    local_experts = math.ceil(moe.num_experts / parallel.ep)
    rows = math.ceil(tokens * moe.top_k * local_experts / moe.num_experts)  # token-expert pairs here
    quantized = get_format(stack.runtime_format("expert", expert_fmt)).quantized
    terms = {
        "router logits and top-k (f32)": tokens * (moe.num_experts * 4 + moe.top_k * 8),
        "expert inputs, gate/up and outputs": rows * (2 * moe.expert_in + 2 * moe.expert_intermediate) * act,
        "combine buffer (f32, before the all-reduce / all-to-all)": tokens * spec.hidden_size * 4,
    }
    if quantized:
        per_expert = 3 * moe.expert_in * moe.expert_intermediate
        terms["one layer's local experts dequantized"] = local_experts * per_expert * act
    return terms


def prefill_temp(*, spec: ModelSpec, stack: Stack, parallel: Parallel, chunk_tokens: int, context_tokens: int,
                 expert_fmt: str) -> TempTerms:
    """One prefill chunk of ``chunk_tokens`` per DP group, attending over ``context_tokens``."""
    act = BYTES[stack.activation_dtype]
    n = chunk_tokens
    hidden = spec.hidden_size
    terms = {"residual stream (2 live copies)": 2 * n * hidden * act}
    if spec.kda is not None and spec.n_kda:
        h = _heads_local(spec.kda.heads, parallel.tp)
        d = spec.kda.head_dim
        terms["KDA q/k/v/gate projections"] = 5 * n * h * d * act
        terms["KDA chunk states (f32)"] = math.ceil(n / KDA_CHUNK_TOKENS) * h * d * d * 4
    h = _heads_local(spec.mla.heads, parallel.tp)
    mla = spec.mla
    terms["MLA up-projected K/V over the context"] = (
        context_tokens * h * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) * act
    )
    terms.update(_moe_terms(spec, stack, parallel, n, act, expert_fmt))
    return TempTerms(terms=terms)


def decode_temp(*, spec: ModelSpec, stack: Stack, parallel: Parallel, batch: int, context_tokens: int,
                expert_fmt: str) -> TempTerms:
    """One decode step for ``batch`` sequences at ``context_tokens`` (per DP group)."""
    act = BYTES[stack.activation_dtype]
    b = math.ceil(batch / parallel.dp)
    h = _heads_local(spec.mla.heads, parallel.tp)
    terms = {
        "residual stream": 2 * b * spec.hidden_size * act,
        "absorbed MLA scores (f32)": b * h * context_tokens * 4,
        "logits (f32)": b * math.ceil(spec.vocab_size / parallel.tp) * 4,
    }
    if spec.kda is not None and spec.n_kda:
        hk = _heads_local(spec.kda.heads, parallel.tp)
        terms["KDA state update copy (f32)"] = b * hk * spec.kda.head_dim ** 2 * 4
    terms.update(_moe_terms(spec, stack, parallel, b, act, expert_fmt))
    return TempTerms(terms=terms)
