"""Collectives of one step over ``tokens`` tokens (decode: the batch; prefill: the chunk), over
``int | numpy array`` columns.

- all-to-all (EP dispatch/combine): a MoE layer issues one dispatch and one combine, each moving
  the ``expert_in``-wide activation of every token to its k experts (docs/k3-facts.md §5: fp8 latent,
  57.3 KB a token a layer each way), a chip sending its share of the tokens;
- all-reduce (local experts + one all-reduce a MoE layer, as vLLM TPU does): the hidden states of
  the batch are all-reduced over the EP group (ring: 2 (n-1)/n of the message a device);
- attention: one all-reduce over the TP group a layer when TP > 1, on a DP group's tokens.
time = calls x latency a call + bytes a chip / link bandwidth (one-way, a chip).
"""

from __future__ import annotations

from k3plan.models.spec import ModelSpec
from k3plan.step.columns import maximum, where
from k3plan.step.memory import cdiv


def ring_bytes_per_chip(n, message, devices_per_chip):
    """Ring all-reduce: each device sends 2 (n-1)/n of the message; a chip hosts dpc devices."""
    return where(n > 1, devices_per_chip * 2 * (n - 1) / maximum(n, 1) * message, 0.0)


def comm_terms(spec: ModelSpec, *, all_to_all, act, dispatch, tp, dp, ep, devices_per_chip, chips, tokens) -> dict:
    """Calls and bytes a chip of one step's collectives; ``all_to_all``: the stack's expert pattern."""
    moe = spec.moe
    attention_calls = where(tp > 1, spec.num_layers, 0)
    attention_bytes = attention_calls * ring_bytes_per_chip(tp, cdiv(tokens, dp) * spec.hidden_size * act,
                                                            devices_per_chip)
    a2a_per_token_layer = 2 * moe.top_k * moe.expert_in * dispatch
    ar_per_token_layer = spec.hidden_size * act
    expert_calls = where(all_to_all, 2 * spec.n_moe, where(ep > 1, spec.n_moe, 0))
    expert_bytes = where(all_to_all, tokens * a2a_per_token_layer * spec.n_moe / chips,
                            spec.n_moe * ring_bytes_per_chip(ep, tokens * ar_per_token_layer, devices_per_chip))
    return {
        "attention_calls": attention_calls, "expert_calls": expert_calls, "calls": expert_calls + attention_calls,
        "bytes_per_token_per_layer": where(all_to_all, a2a_per_token_layer, ar_per_token_layer),
        "bytes_per_chip": expert_bytes + attention_bytes,
    }


def comm_time(terms: dict, *, latency_s, bw_bytes_per_s) -> tuple:
    """(latency time, bandwidth time) of one step's collectives."""
    return terms["calls"] * latency_s, terms["bytes_per_chip"] / bw_bytes_per_s
