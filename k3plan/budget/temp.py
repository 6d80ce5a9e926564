"""Temporaries: what the prefill and decode graphs need beyond weights and cache, per device.

The prefill graph and the decode graph are compiled separately, so the budget takes the larger of
the two, never their sum (docs/k3-facts.md §6: temporaries are not additive). Two models, each
written once over columns:

- the *analytic lower bound* (``budget.config.Config.analytic_temps``, named here by ``point_terms``): the
  buffers one layer of an engine's kernels needs (``k3plan.step.temporaries``); what fit and plan fall back to
  when no compiled or measured calibration applies, labelled so.
- ``stage_live_of_setup``: the *op-level live model* of the graph the stack compiles: the step's op
  list at one point, each op with its buffers at its peak by formulation (``k3plan.step.live``), whose
  coefficients are set from compiled points by ``k3plan.validate.temp_fit`` (benchmarks/bench_temp_grid.py).
"""

from __future__ import annotations

from typing import Any

from k3plan.engines.stack import updated
from k3plan.step.dtypes import BYTES
from k3plan.step.memory import KDA_CHUNK_TOKENS
from k3plan.step.temporaries import DEQUANTIZED_EXPERTS, DecodeTemp, GraphTemp, PrefillTemp
from k3plan.step.terms import TermBytes
from k3plan.structs import Frozen

__all__ = ["KDA_CHUNK_TOKENS", "TempTerms", "point_terms", "stage_live_of_setup"]


class TempTerms(Frozen):
    terms: tuple[TermBytes, ...]  # bytes per device, by name

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.terms)


def point_terms(terms: PrefillTemp[int] | GraphTemp[int] | DecodeTemp[int], quantized: bool) -> TempTerms:
    """Ints of one configuration, under their labels; the dequantization term only where the experts are quantized."""
    return TempTerms(
        terms=tuple(
            TermBytes(name=t.label, bytes=int(t.bytes))
            for t in terms.labelled()
            if quantized or t.label != DEQUANTIZED_EXPERTS
        )
    )


def stage_live_of_setup(setup, *, stage: str, batch: int, tokens: int, context: int, form: str | None = None):
    """The op-level live model (``k3plan.step.live.stage_live``) of one Setup: (the step's ops with their live
    buffers, resident); ``form``: the expert formulation a compiled point ran (default: the one the stack
    compiles today, ``form_for``)."""
    from k3plan.step.cache import cache_layout
    from k3plan.step.live import form_for, stage_live
    from k3plan.step.ops import weight_groups_of_setup

    st = setup.stack
    act = BYTES[st.activation_dtype]
    # the graph k3plan compiles (validate's abstract model, on whose compiled points the temp model's coefficients
    # were set) stores the dense MLA entry: an engine's padded layout (kv_cache.layout) is a budget term, not a
    # temporary of that graph
    dense = updated(st, kv_cache=updated(st.kv_cache, layout=None))
    lay = cache_layout(spec=setup.model.spec, stack=dense, parallel=setup.parallel)
    return stage_live(
        setup.model.spec,
        stage=stage,
        form=form or form_for(st.name),
        act=act,
        weights=weight_groups_of_setup(setup),
        tp=setup.parallel.tp,
        ep=setup.parallel.ep,
        dp=setup.parallel.dp if st.kv_cache.split_across_dp else 1,
        batch=batch,
        tokens=tokens,
        context=context,
        kv_bytes_per_token_layer=lay.kv_bytes_per_token_layer,
        state_bytes_per_layer=lay.state_bytes_per_layer_unpadded,
        scan_bf16_weight_bytes=scan_bf16_weight_bytes(setup),
    )


def _scanned(inventory, spec, stack) -> list:
    """The cache entry [inventory, tensors, classes or None] of an (inventory, stack formats): fit's alternatives
    and plan's variants ask again; the inventory is held too, so its id cannot be reused."""
    from k3plan.step.structure import layer_plan  # jax-free

    key = (id(inventory), stack.name, repr(stack.runtime_formats))
    held = _SCAN_TENSORS.get(key)
    if held is not None and held[0] is inventory:
        return held
    lp = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    scanned = {i for pos in range(len(lp.block)) for i in lp.block_layers(pos)}
    tensors = [
        t
        for t in inventory.text
        if t.layer in scanned
        and t.role != "expert"
        and len(t.shape) >= 2
        and stack.runtime_format(t.role, t.fmt) == "bf16"
    ]
    _SCAN_TENSORS[key] = held = [inventory, tensors, None]
    return held


def scan_bf16_tensors(inventory, spec, stack) -> list:
    """The bf16 weight matrices (2-D or more, not routed experts) of the layers k3plan's graph scans over
    (``k3plan.validate.structure.layer_plan``: the repeated block), in the stack's runtime formats: what the
    TPU compiler copies into the dots' tile layout (``k3plan.step.live.RELAYOUT``)."""
    return _scanned(inventory, spec, stack)[1]


def scan_bf16_classes(inventory, spec, stack) -> list:
    """``scan_bf16_tensors`` as tensor classes (``k3plan.step.weights.tensor_classes``), for plan's columns."""
    from k3plan.step.weights import tensor_classes

    held = _scanned(inventory, spec, stack)
    if held[2] is None:
        held[2] = tensor_classes(inventory, held[1])
    return held[2]


_SCAN_TENSORS: dict[tuple, list] = {}
_SCAN_BYTES: dict[tuple, tuple[Any, int]] = {}


def scan_bf16_weight_bytes(setup) -> int:
    """``scan_bf16_tensors``' bytes a device under the setup's sharding plan (plan's columns:
    ``k3plan.step.weights.mesh_weights`` over the same tensors); once a (sharding plan, stack formats)."""
    from k3plan.step.weight_budget import weight_budget

    inv, st = setup.model.inventory, setup.stack
    key = (id(setup.plan), st.name, repr(st.runtime_formats))
    held = _SCAN_BYTES.get(key)
    if held is not None and held[0] is setup.plan:
        return held[1]
    tensors = scan_bf16_tensors(inv, setup.model.spec, st)
    n = weight_budget(inventory=inv, plan=setup.plan, stack=st, tensors=tensors).weights_bytes
    if len(_SCAN_BYTES) >= 16:  # the last few plans only (a prefill and a decode stage ask for the same one)
        del _SCAN_BYTES[next(iter(_SCAN_BYTES))]
    _SCAN_BYTES[key] = (setup.plan, n)
    return n
