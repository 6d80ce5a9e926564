"""What one pipeline stage sends the next a step (``--pp``), over ``int | numpy array`` columns.

The tensors of ``Pipeline.sends`` (hidden_states and residual: vLLM's IntermediateTensors),
``tokens x hidden`` each in the activation dtype, for each of the pp - 1 stage boundaries. A TP rank
sends its 1/tp slice and the receiving group all-gathers it (vLLM
``send_tensor_dict(all_gather_group=tp_group)``), so a device puts 1/tp of it on the link. Which layers
a stage holds: k3plan/step/stages.py. ``send_op`` is the sends as one collective op of the step's op
list (k3plan/step/ops.py), so the expected-time table counts what the bound counts. A module of its own
so that fit without --pp never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic

from k3plan.columns import C, where
from k3plan.models.spec import ModelSpec
from k3plan.step.collective import Collective
from k3plan.step.op import Op


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class P2PTerms(Generic[C]):
    """The stage-to-stage sends of one step (``p2p_terms``); each figure one int or float (fit) or one
    entry a configuration (plan)."""

    calls: C  # sends a step on a device's path: pp - 1 (0 without pipeline parallelism)
    bytes_per_boundary: C  # what a stage sends the next: ``sends`` tensors of tokens x hidden
    bytes_per_chip: C | float  # what a chip puts on the link, summed over the boundaries (1/tp a device: a float)


def p2p_terms(spec: ModelSpec, *, pp: C, tokens, act, tp, sends=2, devices_per_chip=1) -> P2PTerms[C]:
    """The stage-to-stage sends of one step over ``tokens`` tokens (a DP group's): pp - 1 boundaries,
    each ``sends`` tensors of tokens x hidden in ``act`` bytes; a device sends 1/tp of them (the
    receiving TP group all-gathers)."""
    boundary = sends * tokens * spec.hidden_size * act
    per_device = boundary / tp
    return P2PTerms(
        calls=where(pp > 1, pp - 1, 0),
        bytes_per_boundary=boundary,
        bytes_per_chip=where(pp > 1, (pp - 1) * per_device * devices_per_chip, 0.0),
    )


def p2p_time(terms: P2PTerms, *, latency_s, bw_bytes_per_s):
    """Seconds of a step's stage-to-stage sends: a latency a boundary plus the bytes over the link
    (the scale-out link where the stages sit in different scale-up domains)."""
    return terms.calls * latency_s + terms.bytes_per_chip / bw_bytes_per_s


def send_op(terms: P2PTerms, *, tp, link) -> Op:
    """The sends of ``terms`` as one collective op of the step: ``calls`` = pp - 1 sends of a device's
    1/tp of a boundary (``message_bytes``), ``wire_bytes`` the chip's sum over the boundaries (what
    ``p2p_time`` divides by the link's bandwidth), between a device and its peer in the next stage
    (group 2) over ``link`` ("scale_up" | "scale_out": ``roofline.comm.pipeline_link``)."""
    return Op(
        name="pipeline.send",
        kind="collective",
        layer_kind="global",
        category="collectives",
        count=1,
        collective=Collective.SEND,
        group=2,
        calls=terms.calls,
        message_bytes=terms.bytes_per_boundary / tp,
        wire_bytes=terms.bytes_per_chip,
        scale_out=link == "scale_out",
    )
