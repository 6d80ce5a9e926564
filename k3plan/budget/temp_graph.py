"""Which graph's temporaries fit counts (issue 50): the engine's kernels (the default, ``Config.analytic_temps``) or
k3plan's own graph (validate's step, what ``probe step`` and ``validate`` compile: ``graph=TempGraph(...)``).

k3plan's graph is not the engine's: in the plugin's formats it still runs validate's XLA ops (the experts' ragged_dots
on a relaid or dequantized copy of the weight, the attention's scores materialized), so its temporaries are its own
(``k3plan.step.temporaries.validate_temp_terms``), held against the chip's and the deviceless compiler's
memory_analysis (docs/device.md, the grid table; tests/step/test_graph_temp.py). The engine stacks' answers are not
changed by this module: only a caller that names the graph gets its terms.
"""

from __future__ import annotations

from typing import Optional

from k3plan.step.temporaries import GraphTemp, validate_kda_kept, validate_temp_terms
from k3plan.structs import Frozen

VALIDATE_TEMP = (
    "k3plan's graph (validate's step), its buffers from shapes (k3plan/step/temporaries.py validate_temp_terms; "
    "held to the v5e grid's compiled temps, docs/device.md)"
)


class TempGraph(Frozen):
    """k3plan's own graph as fit counts it: the routed experts' formulation the step ran (``ragged`` / ``tiled``;
    None: the stack's, ``k3plan.step.live.form_for``)."""

    form: Optional[str] = None


def graph_form(setup, graph: TempGraph) -> str:
    from k3plan.step.live import form_for

    return graph.form or form_for(setup.stack.name)


def validate_temps(
    setup, *, graph: TempGraph, chunk: int, batch: int, context: int
) -> tuple[GraphTemp[int], GraphTemp[int]]:
    """(prefill, decode) temporaries of k3plan's graph for one Setup: a prefill chunk of ``chunk`` tokens (a
    context of the chunk: the graph's prefill is one chunk into an empty cache) and a decode step of ``batch``
    sequences over a cache of ``context`` tokens (whole cache blocks, as the graph's cache holds them)."""
    from k3plan.models.formats import get_format
    from k3plan.step.cache import cache_layout
    from k3plan.step.dtypes import BYTES
    from k3plan.step.structure import layer_plan

    spec, st, par = setup.model.spec, setup.stack, setup.parallel
    expert_fmt = next((t.fmt for t in setup.model.inventory.text if t.role == "expert"), "bf16")
    fmt = get_format(st.runtime_format("expert", expert_fmt))
    lp = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    scanned = lp.n_blocks >= 2  # a scan of one block the compiler unrolls
    block_kda = sum(m == "kda" for m, _ in lp.block)
    scan_moe = scanned and any(mlp == "moe" for _, mlp in lp.block)
    common = dict(
        form=graph_form(setup, graph),
        act=BYTES[st.activation_dtype],
        quantized=fmt.quantized,
        tp=par.tp,
        ep=par.ep,
        scan_moe=scan_moe,
        stacked_moe=lp.n_blocks >= 1 and any(mlp == "moe" for _, mlp in lp.block),
        n_blocks=lp.n_blocks,
        scan_kda=scanned and block_kda > 0,
        kda_kept=validate_kda_kept(spec, prefix=lp.prefix, block=tuple(m for m, _ in lp.block), scan_moe=scan_moe),
    )  # fmt: skip
    block = cache_layout(spec=spec, stack=st, parallel=par).block_tokens
    capacity = -(-context // block) * block
    pre = validate_temp_terms(spec, stage="prefill", rows=chunk, context=-(-chunk // block) * block, **common)
    dec = validate_temp_terms(spec, stage="decode", rows=batch, context=capacity, **common)
    return pre, dec
