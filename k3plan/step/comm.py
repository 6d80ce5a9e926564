"""Collectives of one step over ``tokens`` tokens (decode: the batch; prefill: the chunk), over
``int | numpy array`` columns.

- all-to-all (EP dispatch/combine): a MoE layer issues one dispatch and one combine, each moving
  the ``expert_in``-wide activation of every token to its k experts (docs/k3-facts.md §5: fp8 latent,
  57.3 KB a token a layer each way), a chip sending its share of the tokens;
- all-reduce (local experts + one all-reduce a MoE layer, as vLLM TPU does): the hidden states of
  the batch (a LatentMoE: and the routed latent, ``ops.moe_reduced_width``) are all-reduced over the
  EP group (ring: 2 (n-1)/n of the message a device);
- all-gather + reduce-scatter (vLLM's default all2all backend on GPUs, ``ops.moe_ops``): with DP > 1
  the DP group all-gathers its ranks' expert inputs and reduce-scatters the outputs, then the TP group
  all-reduces a DP group's rows (ring: a device sends dp - 1 of its shards in each);
- attention: one all-reduce over the TP group a layer when TP > 1, on a DP group's tokens;
- the embedding's and the dense MLP's all-reduce and the logits' gather over TP (``ops.tp_edge_ops``).
time = calls x latency a call + bytes a chip / link bandwidth (one-way, a chip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic

from k3plan.models.spec import ModelSpec
from k3plan.step.columns import C, maximum, where

if TYPE_CHECKING:
    from k3plan.step.ops import Op


def ring_bytes_per_chip(n, message, devices_per_chip):
    """Ring all-reduce: each device sends 2 (n-1)/n of the message; a chip hosts dpc devices."""
    return where(n > 1, devices_per_chip * 2 * (n - 1) / maximum(n, 1) * message, 0.0)


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class CommTerms(Generic[C]):
    """Calls and bytes of one step's collectives (``comm_terms``); each figure one int or float (fit) or
    one entry a configuration (plan)."""

    ops: list[Op]  # the collectives, as ``ops.collective_ops`` lists them
    attention_calls: C  # calls of the attention layers' collectives
    expert_calls: C  # calls of the MoE layers' (dispatch + combine, or the all-reduce)
    calls: C  # every call a step: attention + experts + the embedding, dense MLP and logits
    bytes_per_token_per_layer: C  # expert traffic a token a MoE layer (all-to-all: dispatch + combine)
    bytes_per_chip: C | float  # what a chip puts on the link a step (a ring's 2 (n-1)/n share: a float)


def comm_terms(
    spec: ModelSpec,
    *,
    all_to_all,
    act,
    dispatch,
    tp: C,
    dp,
    ep,
    devices_per_chip,
    chips,
    tokens,
    logits_all_gather,
    sequences=None,
    ag_rs=False,
) -> CommTerms[C]:
    """Calls and bytes a chip of one step's collectives (sums over ``collective_ops``);
    ``all_to_all`` / ``ag_rs``: the stack's expert pattern is all_to_all / allgather_reducescatter
    (neither: all_reduce); ``logits_all_gather``: its logits gather."""
    from k3plan.step.ops import TOPK_BYTES_PER_EXPERT, by_category, collective_ops, moe_reduced_width, step_sum

    moe = spec.moe
    ops = collective_ops(
        spec,
        all_to_all=all_to_all,
        act=act,
        dispatch=dispatch,
        tp=tp,
        dp=dp,
        ep=ep,
        devices_per_chip=devices_per_chip,
        chips=chips,
        tokens=tokens,
        logits_all_gather=logits_all_gather,
        sequences=sequences,
        ag_rs=ag_rs,
    )
    calls = by_category(ops, "calls", key="layer_kind")
    attention_calls, expert_calls = calls["attention"], calls.get("moe", 0)
    return CommTerms(
        ops=ops,
        attention_calls=attention_calls,
        expert_calls=expert_calls,
        calls=step_sum(ops, "calls"),
        bytes_per_token_per_layer=where(
            all_to_all,
            2 * moe.top_k * moe.expert_in * dispatch,
            where(
                ag_rs,  # a row all-gathered (input, top-k weights and ids) and one reduce-scattered
                2 * moe.expert_in * act + moe.top_k * TOPK_BYTES_PER_EXPERT,
                moe_reduced_width(spec) * act,
            ),
        ),
        bytes_per_chip=step_sum(ops, "wire_bytes"),
    )


def comm_time(terms: CommTerms, *, latency_s, bw_bytes_per_s) -> tuple:
    """(latency time, bandwidth time) of one step's collectives."""
    return terms.calls * latency_s, terms.bytes_per_chip / bw_bytes_per_s
