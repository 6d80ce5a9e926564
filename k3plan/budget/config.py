"""One configuration, typed, and the one assembly of a device's memory over it.

A ``Config`` is a row (``row``: every figure an int, what ``fit`` evaluates) or a space of rows (``columns``:
one numpy entry a configuration, what ``plan`` evaluates): the same fields, read from a model and a stack by
the same functions (``step.cache.cache_inputs``, ``stack_inputs``, ``temp_inputs``), ``Config.analytic_temps``
is the one analytic bound of the temporaries, and ``Config.memory`` is the one place a
device's memory terms (weights, KV, state, temporaries, reserve, free) are assembled from them
(``step.stages.stage_budgets``: each pipeline stage's ``step.memory.budget_terms``, the binding one's). fit is
row 0 of plan: tests/budget/test_fit_is_plan_row.py holds them equal field by field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Optional, Sequence

from k3plan.columns import C, where
from k3plan.engines.stack import Stack
from k3plan.models.formats import get_format
from k3plan.models.spec import ModelSpec
from k3plan.sharding.mesh import Parallel
from k3plan.step.cache import cache_inputs
from k3plan.step.dtypes import BYTES
from k3plan.step.memory import BudgetTerms, CacheCols, CacheTerms, cache_terms
from k3plan.step.stages import stage_budgets
from k3plan.step.temporaries import (
    DecodeTemp,
    GraphTemp,
    PrefillTemp,
    TempTerm,
    decode_temp_terms,
    prefill_temp_terms,
    xla_prefill_temp_terms,
)

if TYPE_CHECKING:
    import numpy as np


def stack_inputs(stack: Stack) -> dict[str, Any]:
    """What the budget reads of a stack besides its cache layout and reserve (each a ``Config`` field)."""
    return dict(
        split_across_dp=stack.kv_cache.split_across_dp,  # the batch splits over the DP groups
        temp_in_reserve=bool(stack.kv_pool and stack.kv_pool.temps_in_reserve),  # SGLang's mem_fraction_static
        state_slots=stack.state.slots_per_request,
        state_layer_groups=stack.state.layer_groups,  # vLLM's hybrid manager
    )


def temp_inputs(stack: Stack, expert_fmt: str) -> dict[str, Any]:
    """What the analytic temporaries read of a stack: its activation bytes, whether it runs the experts
    (checkpoint format ``expert_fmt``) quantized through a dequantization buffer (not where its kernels read the
    quantized weights in-kernel: ``experts.fused_dequant``), and whether its engine's graph is written in XLA ops
    (``Engine.temp_graph``; then ``converted``: its experts are written in the activation dtype before their
    matmuls, quantized or stored in another dtype)."""
    from k3plan.engines.registry import engine_rules

    fmt = get_format(stack.runtime_format("expert", expert_fmt))
    return dict(
        act=BYTES[stack.activation_dtype],
        # an engine whose kernels dequantize in-kernel holds no buffer
        quantized=fmt.quantized and stack.experts.fused_dequant is None,
        xla_graph=engine_rules(stack.name).temp_graph == "xla",
        converted=fmt.quantized or fmt.bits_per_param != 8 * BYTES[stack.activation_dtype],
    )


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class Config(Generic[C]):
    """One configuration (ints: ``row``) or one entry a configuration (numpy columns: ``columns``)."""

    spec: ModelSpec
    usable: C  # usable HBM bytes a device
    reserve_fraction: Any  # the stack's reserve at this split and chunk (Stack.reserve_fraction): float or column
    tp: C
    ep: C
    dp: C
    chunk: C  # prefill chunk tokens
    context: int  # tokens a sequence
    batch: int  # sequences in flight
    cache: CacheCols[C]  # a device's KV and state layout (step.memory.cache_terms)
    stages: tuple[tuple[Any, Any, Any], ...]  # a pipeline stage's (weights bytes a device, MLA layers, KDA layers)
    split_across_dp: Any
    temp_in_reserve: Any
    state_slots: Any
    state_layer_groups: Any
    act: Any  # activation bytes (temp_inputs)
    quantized: Any  # the experts run quantized (temp_inputs)
    xla_graph: Any  # the engine's graph is XLA ops: its own prefill temporaries (temp_inputs)
    converted: Any  # the experts are written in the activation dtype before their matmuls (temp_inputs)
    valid: Optional[tuple[Any, ...]] = None  # which stages exist (plan's rows mix pp values); None: every one

    def analytic_temps(self) -> tuple[PrefillTemp[C] | GraphTemp[C], DecodeTemp[C]]:
        """The analytic lower bound of each stage's temporaries (``step.temporaries``): one prefill chunk
        attending over the context, and one decode step of the batch. A stack whose graph is XLA ops
        (``xla_graph``) counts that graph's prefill (``xla_prefill_temp_terms``; not for DeepSeek-V4's attention,
        which it does not describe); its decode keeps the kernels' terms (the graph's decode holds a number of
        layers' experts dequantized ahead of use that only a compiled point sizes: reports/validation/README.md)."""
        kw: dict[str, Any] = dict(act=self.act, quantized=self.quantized, tp=self.tp, ep=self.ep, context=self.context)
        pre: PrefillTemp[C] | GraphTemp[C] = prefill_temp_terms(self.spec, chunk=self.chunk, **kw)
        xla = self.xla_graph
        if self.spec.dsv4 is None and (xla is True or (hasattr(xla, "shape") and bool(xla.any()))):
            own = xla_prefill_temp_terms(self.spec, act=self.act, converted=self.converted, tp=self.tp, ep=self.ep,
                                         chunk=self.chunk, context=self.context)  # fmt: skip
            if xla is True:
                pre = own
            else:  # plan's rows mix stacks: each row counts its own graph's terms
                pre = GraphTemp(
                    terms=tuple(TempTerm(t.label, where(xla, 0, t.bytes)) for t in pre.labelled())
                    + tuple(TempTerm(t.label, where(xla, t.bytes, 0)) for t in own.terms)
                )
        return pre, decode_temp_terms(self.spec, dp=self.dp, batch=self.batch, **kw)

    def memory(self, temp: Any) -> tuple[list[BudgetTerms[C]], BudgetTerms[C]]:
        """The one assembly of a device's memory with ``temp`` bytes of temporaries: every pipeline stage's
        budget terms and the binding stage's (``step.stages.stage_budgets``)."""
        return stage_budgets(
            self.spec,
            stages=list(self.stages),
            valid=None if self.valid is None else list(self.valid),
            usable=self.usable,
            reserve_fraction=self.reserve_fraction,
            split_across_dp=self.split_across_dp,
            dp=self.dp,
            temp=temp,
            cache=self.cache,
            context=self.context,
            batch=self.batch,
            temp_in_reserve=self.temp_in_reserve,
            state_slots=self.state_slots,
            state_layer_groups=self.state_layer_groups,
        )


def row(
    *,
    spec: ModelSpec,
    stack: Stack,
    expert_fmt: str,
    cache: CacheCols[int],
    usable: int,
    reserve_fraction: float,
    parallel: Parallel,
    chunk: int,
    context: int,
    batch: int,
    stages: Sequence[tuple[int, int, int]],
) -> Config[int]:
    """fit's one configuration: ``cache`` its layout (``step.cache.cache_layout``, the same ``cache_terms``)."""
    return Config(
        spec=spec,
        usable=usable,
        reserve_fraction=reserve_fraction,
        tp=parallel.tp,
        ep=parallel.ep,
        dp=parallel.dp,
        chunk=chunk,
        context=context,
        batch=batch,
        cache=cache,
        stages=tuple(stages),
        **stack_inputs(stack),
        **temp_inputs(stack, expert_fmt),
    )


def gather_columns(per: list[dict[str, Any]], variant: np.ndarray) -> dict[str, np.ndarray]:
    """Each key's values, one a stack variant (what one function reads of each stack), gathered to the rows by
    ``variant`` (the index of a row's stack variant): bools stay bool, the rest int64."""
    import numpy as np

    keys = per[0] if per else {}
    return {
        k: np.array([p[k] for p in per], dtype=bool if isinstance(keys[k], bool) else np.int64)[variant] for k in keys
    }


def cache_columns(
    *,
    spec: ModelSpec,
    variants: Sequence[Stack],
    variant: np.ndarray,
    tp: np.ndarray,
    hw: np.ndarray | None = None,
    hardware: Sequence[Any] = (),
    chunk: np.ndarray | None = None,
    context: int = 0,
) -> CacheTerms:
    """plan's cache layout, a row each: ``cache_terms`` over what ``cache_layout`` reads of each stack variant, and
    for a model whose engines may charge a request by their own pool accounting (DeepSeek-V4: ``cache_inputs``) of each
    (variant, machine ``hardware[hw]``, ``chunk``) the rows hold, at ``context`` tokens; for a dense-MLA model, whose
    block the engine's release sets by GPU (``Stack.dense_mla_block``), of each (variant, machine)."""
    import numpy as np

    by_hw = hw is not None and len(variant) and (spec.dsv4 is not None and chunk is not None or spec.dense_mla)
    if not by_hw or hw is None:
        return cache_terms(spec, tp=tp, **gather_columns([cache_inputs(spec, s) for s in variants], variant))
    steps = chunk if spec.dsv4 is not None and chunk is not None else np.zeros_like(variant)
    keys, at = np.unique(np.stack([variant, hw, steps], axis=1), axis=0, return_inverse=True)
    per = [
        cache_inputs(
            spec,
            variants[int(v)],
            hardware=hardware[int(h)].name,
            vendor=hardware[int(h)].vendor,
            chunk=int(k),
            context=context,
        )
        for v, h, k in keys
    ]
    return cache_terms(spec, tp=tp, **gather_columns(per, at.reshape(-1)))


def columns(
    *,
    spec: ModelSpec,
    variants: Sequence[Stack],
    variant: np.ndarray,
    expert_fmt: str,
    cache: CacheTerms,
    tp: np.ndarray,
    ep: np.ndarray,
    dp: np.ndarray,
    chunk: np.ndarray,
    usable: np.ndarray,
    reserve_fraction: np.ndarray,
    context: int,
    batch: int,
    stages: Sequence[tuple[Any, Any, Any]],
    valid: Sequence[Any],
) -> Config[np.ndarray]:
    """plan's space: each stack variant's inputs read once (the functions ``row`` reads them with) and gathered
    to its rows by ``variant`` (the index of a row's stack variant); ``cache``: ``cache_columns``."""
    return Config(
        spec=spec,
        usable=usable,
        reserve_fraction=reserve_fraction,
        tp=tp,
        ep=ep,
        dp=dp,
        chunk=chunk,
        context=context,
        batch=batch,
        cache=cache,
        stages=tuple(stages),
        valid=tuple(valid),
        **gather_columns([stack_inputs(s) for s in variants], variant),
        **gather_columns([temp_inputs(s, expert_fmt) for s in variants], variant),
    )
