"""What k3plan validate's own step graph (validate/steps.py, validate/experts.py) moves beyond the op list's
ops: priced only where a caller says the step timed IS that graph (``probe step``, ``validate --target
local``), never for an engine's step (roofline, plan, fit and report never pass a ``ValidateGraph``, so
their figures, on every device kind, are unchanged by this module).

Three mechanisms, each seen in the profile of the K3-width step on a TPU v5e (k3plan/evidence/
probes/step-decode-tpu-v5-lite-20261204T060103Z-bd6aea.json and step-prefill-...-060121Z-cab1b1.json,
``device_profile``; the HLO names looked up in the same program compiled deviceless for v5e with the same
libtpu, whose memory_analysis matched the chip's to the byte) and in the code that makes it:

- ``relayout``: a routed expert's weight is held in the checkpoint's [E, out, in] layout and swapped to
  [E, in, out] for ``jax.lax.ragged_dot`` (validate/experts.py ``_rhs``); with the weight in a plain float
  format (no dequantization to fuse it into) the compiler materializes the swapped copy every call, a read
  and a write of the weight (the profile's ``copy.106``-``108``: bf16[32,3072,3584], 2.19 ms each on the
  v5e, = 2 x 704 MB at 643 GB/s). Not on the ops of an MXFP4 expert: its dequantization writes the
  operand anyway (that cost is the dequantization's, which no op of this module prices).
- ``scan slice``: a MoE layer inside the scan over the repeating block (validate/steps.py ``_run_layers``:
  ``dynamic_index_in_dim`` of the stacked weights) has its expert weights sliced out of the stack as a
  copy: the grouped matmul is a custom call (``tpu_custom_call``) that cannot fuse the slice as the dense
  dots do (the profile's ``constant_dynamic-slice_fusion.30``-``32``, 2.1 ms each, before their relayout
  copies ``copy.221``-``223``).
- ``prefill scores``: the prefill's MLA attention attends over the cache's whole capacity (the abstract
  model's ``capacity_tokens``: 5,120 slots for a 1,024-token chunk), masked, and materializes its f32
  scores [heads, tokens, capacity]: the profile's ``fusion.258`` writes them, ``fusion.421`` reads and
  rewrites them (softmax), ``fusion.246`` and ``fusion.248`` read them: ``SCORE_PASSES`` = 5 passes of
  the f32 array (15.4 ms on the v5e for 2.0 GB). Decode's absorbed attention has no op of this kind in
  its profile's top 25 (each under 0.47 ms): not priced there.

Each is an ``hbm`` op priced on the hbm probe's copy records (``OpCost.hbm_curve`` = hbm_copy: each moves
bytes it writes and reads back, as a copy does), the envelope of every hbm record where no copy was probed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3plan.models.spec import ModelSpec
    from k3plan.step.opcost import OpCost
    from k3plan.step.ops import WeightGroup

F32 = 4
SCORE_PASSES = 5  # fusion.258 writes, fusion.421 reads and writes, fusion.246 and fusion.248 read (v5e profile)
SOURCE = (
    "k3plan validate's step graph (step/graph.py; profile of k3plan/evidence/probes/step-*-tpu-v5-lite-20261204T0601*)"
)


@dataclass(frozen=True)
class ValidateGraph:
    """What the timed step's graph is, as far as its extra HBM traffic goes."""

    scanned_moe_layers: int  # MoE layers inside the scan over the repeating block (step.structure.LayerPlan)
    expert_relayout: bool  # experts in a plain float format: the swapped operand is a copy each call
    capacity_tokens: int  # cache slots a sequence's attention spans (validate.abstract_model.capacity_tokens)


def validate_graph(spec: ModelSpec, *, expert_format: str, capacity_tokens: int) -> ValidateGraph:
    """The graph of validate's step for ``spec`` (its layer plan as validate/steps.py folds it)."""
    from k3plan.step.structure import layer_plan

    lplan = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    scanned = lplan.n_blocks * sum(1 for _, mlp in lplan.block if mlp == "moe")
    return ValidateGraph(
        scanned_moe_layers=scanned,
        expert_relayout=expert_format in ("bf16", "fp16", "f16", "f32", "fp32"),
        capacity_tokens=capacity_tokens,
    )


def graph_ops(
    spec: ModelSpec, *, weights: list[WeightGroup], graph: ValidateGraph, stage: str, rows: int, tp: int
) -> list[OpCost]:
    """The HBM ops the graph adds to one step of ``stage`` over ``rows`` tokens (prefill: the chunk's), a device."""
    from k3plan.step.opcost import OpCost

    out: list[OpCost] = []
    hbm: dict = {"kind": "hbm", "hbm_curve": "hbm_copy"}  # a dict: OpCost's optional fields stay unnamed
    for g in weights:
        if g.rep.role != "expert":
            continue
        nbytes = round(2 * float(g.bytes))  # read the weight, write its copy
        if graph.expert_relayout and g.count:
            out.append(OpCost(name=f"{g.name}.relayout", category="experts", count=g.count, bytes=nbytes, **hbm))
        if graph.scanned_moe_layers:
            out.append(
                OpCost(
                    name=f"{g.name}.scan_slice",
                    category="experts",
                    count=min(graph.scanned_moe_layers, g.count),
                    bytes=nbytes,
                    **hbm,
                )
            )
    if stage == "prefill" and spec.n_mla:
        from k3plan.step.op import heads_split

        heads = spec.mla.heads // heads_split(spec.mla.heads, tp)
        scores = heads * rows * graph.capacity_tokens * F32
        out.append(
            OpCost(  # written and read back: the passes are a copy's traffic (hbm_copy)
                name="mla.prefill_scores",
                category="attention",
                count=spec.n_mla,
                bytes=SCORE_PASSES * scores,
                **hbm,
            )
        )
    return out


def validate_graph_note() -> str:
    return f"expected includes the extra HBM ops of {SOURCE}: expert relayout and scan-slice copies, prefill MLA scores"
