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
Each op runs on its own link: the scale-out link where its group crosses a scale-up domain
(``ops.Op.scale_out``), else the scale-up link, so the calls and bytes split by link and
time = sum over the links of calls x latency a call + bytes a chip / link bandwidth (one-way, a chip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from k3plan.columns import C, add_into, mul_into, where
from k3plan.models.spec import ModelSpec

if TYPE_CHECKING:
    from k3plan.step.op import Op


def padded_tokens(tokens, dp, min_tokens):
    """The tokens a step runs at where its engine pads each DP group's rows to a compiled size (a stack's
    ``token_buckets``: ``min_tokens`` doubling until it holds them; 0 or None: no padding), over ``int | numpy
    array`` columns (``min_tokens`` a column where the stacks differ). Below the token budget's own bucket only:
    a decode step's."""
    rows = -(-tokens // dp)
    if not hasattr(rows, "shape") and not hasattr(min_tokens, "shape"):
        if not min_tokens:
            return tokens
        size = min_tokens
        while size < rows:
            size *= 2
        return size * dp
    import numpy as np

    m = np.asarray(min_tokens if min_tokens is not None else 0)
    base = np.maximum(m, 1)
    size = base * np.exp2(np.ceil(np.log2(np.maximum(rows / base, 1)))).astype(np.int64)
    return np.where(m > 0, size * dp, tokens)


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class CommTerms(Generic[C]):
    """Calls and bytes of one step's collectives (``comm_terms``); each figure one int or float (fit) or
    one entry a configuration (plan)."""

    ops: list[Op]  # the collectives, as ``ops.collective_ops`` lists them
    attention_calls: C  # calls of the attention layers' collectives
    expert_calls: C  # calls of the MoE layers' (dispatch + combine, or the all-reduce)
    calls: C  # every call a step: attention + experts + the embedding, dense MLP and logits
    bytes_per_token_per_layer: C  # expert traffic a token a MoE layer (all-to-all: dispatch + combine)
    bytes_per_chip: C | float  # what a chip puts on the links a step (a ring's 2 (n-1)/n share: a float)
    # (calls, bytes a chip) of those on the scale-out link, whose group crosses a scale-up domain
    # (``Op.scale_out``); one field, not two: each field of a frozen dataclass is compiled into its
    # generated methods at import, on fit's path
    scale_out: tuple

    @property
    def scale_out_calls(self) -> Any:
        return self.scale_out[0]

    @property
    def scale_out_bytes_per_chip(self) -> Any:
        return self.scale_out[1]

    @property
    def scale_up_calls(self) -> Any:  # C (int or a column): the difference of two
        return self.calls - self.scale_out_calls  # type: ignore[operator]

    @property
    def scale_up_bytes_per_chip(self) -> Any:
        return self.bytes_per_chip - self.scale_out_bytes_per_chip  # type: ignore[operator]


class LinkTimes:
    """The collectives' time a step by link (``comm_time``): calls x latency and bytes / bandwidth, each an
    int or float (fit) or a column (plan). A plain class: a dataclass's generated methods cost fit's start
    ~1 ms to build."""

    __slots__ = ("scale_up_latency_s", "scale_up_bandwidth_s", "scale_out_latency_s", "scale_out_bandwidth_s")

    def __init__(self, scale_up_latency_s, scale_up_bandwidth_s, scale_out_latency_s, scale_out_bandwidth_s):
        self.scale_up_latency_s = scale_up_latency_s
        self.scale_up_bandwidth_s = scale_up_bandwidth_s
        self.scale_out_latency_s = scale_out_latency_s
        self.scale_out_bandwidth_s = scale_out_bandwidth_s

    @property
    def latency_s(self):
        return self.scale_up_latency_s + self.scale_out_latency_s

    @property
    def bandwidth_s(self):
        return self.scale_up_bandwidth_s + self.scale_out_bandwidth_s

    @property
    def scale_out_s(self):
        return self.scale_out_latency_s + self.scale_out_bandwidth_s


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
    domain_devices=None,
    latent_calls=1,
    logits_whole_tp=False,
) -> CommTerms[C]:
    """Calls and bytes a chip of one step's collectives (sums over ``collective_ops``), and the share of
    each on the scale-out link (``domain_devices``: the devices of one scale-up domain, None: one domain);
    ``all_to_all`` / ``ag_rs``: the stack's expert pattern is all_to_all / allgather_reducescatter
    (neither: all_reduce); ``logits_all_gather``: its logits gather; ``logits_whole_tp``: over the whole TP group
    (``Stack.lm_head_whole_tp``)."""
    from k3plan.step.ops import TOPK_BYTES_PER_EXPERT, by_category, collective_ops, moe_reduced_width

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
        domain_devices=domain_devices,
        latent_calls=latent_calls,
        logits_whole_tp=logits_whole_tp,
    )
    # one pass: the totals (as step_sum adds them) and, where a group may cross a domain, the calls and bytes
    # of each distinct scale_out column (the ops over one group share it), masked by it once; the products
    # are this loop's own, so the group sums add into them (``add_into``: no new column a step in plan)
    total_calls: Any = 0
    total_bytes: Any = 0
    by_mask: dict[int, list] = {}
    for op in ops:
        c, w = op.count * op.calls, op.count * op.wire_bytes
        total_calls, total_bytes = total_calls + c, total_bytes + w
        if domain_devices is not None:
            held = by_mask.get(id(op.scale_out))
            if held is None:
                by_mask[id(op.scale_out)] = [op.scale_out, c, w]
            else:
                held[1], held[2] = add_into(held[1], c), add_into(held[2], w)
    out_calls: Any = 0
    out_bytes: Any = 0
    for mask, c, w in by_mask.values():
        out_calls, out_bytes = add_into(out_calls, mul_into(c, mask)), add_into(out_bytes, mul_into(w, mask))
    calls = by_category(ops, "calls", key="layer_kind")
    attention_calls, expert_calls = calls["attention"], calls.get("moe", 0)
    return CommTerms(
        ops=ops,
        attention_calls=attention_calls,
        expert_calls=expert_calls,
        calls=total_calls,
        bytes_per_token_per_layer=where(
            all_to_all,
            2 * moe.top_k * moe.expert_in * dispatch,
            where(
                ag_rs,  # a row all-gathered (input, top-k weights and ids) and one reduce-scattered
                2 * moe.expert_in * act + moe.top_k * TOPK_BYTES_PER_EXPERT,
                moe_reduced_width(spec) * act,
            ),
        ),
        bytes_per_chip=total_bytes,
        scale_out=(out_calls, out_bytes),
    )


def comm_time(
    terms: CommTerms, *, latency_s, bw_bytes_per_s, scale_out_latency_s, scale_out_bw_bytes_per_s
) -> LinkTimes:
    """The step's collectives' time by link: on the scale-up link (``latency_s`` a call, ``bw_bytes_per_s``
    a chip) the calls and bytes whose group stays in a domain, on the scale-out link the rest."""
    return LinkTimes(
        scale_up_latency_s=terms.scale_up_calls * latency_s,
        scale_up_bandwidth_s=terms.scale_up_bytes_per_chip / bw_bytes_per_s,
        scale_out_latency_s=terms.scale_out_calls * scale_out_latency_s,
        scale_out_bandwidth_s=terms.scale_out_bytes_per_chip / scale_out_bw_bytes_per_s,
    )
