"""The smallest viable topology and split of one platform, per context length: the standard
topologies smallest first, each with the stack's default split plus every TP size that divides
the attention heads.

Viable at context C = fit() says yes for ``concurrency`` sequences of C tokens. Among the viable
splits of the smallest viable topology, the one with the most free HBM wins. (`k3plan plan`
searches wider; this stays small so that a report needs no planner.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from k3plan.budget.fit import FitResult, check_workload, fit
from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware, topologies_up_to
from k3plan.setup import Setup, attention_heads, make_setup


@dataclass(frozen=True)
class Choice:
    context_tokens: int
    setup: Optional[Setup]  # None: nothing fits
    result: Optional[FitResult]  # the fit at this context (for a miss: the closest one)
    reason: str = ""  # why nothing fits


def _candidates(*, model: str, hardware: str, topology: str, stack: str, devices: int):
    """Setups for the stack's default split and each TP dividing the heads (distinct splits)."""
    seen, heads = set(), None
    for tp in [None] + list(range(devices, 0, -1)):
        if tp is not None and (devices % tp or (heads is not None and heads % tp)):
            continue
        try:
            setup = make_setup(model=model, hardware=hardware, topology=topology, tp=tp, stack=stack)
        except K3PlanError:
            continue
        heads = math.gcd(*attention_heads(setup.model))
        if tp is not None and heads % tp:
            continue
        key = (setup.parallel.tp, setup.parallel.dp)
        if key not in seen:
            seen.add(key)
            yield setup


def _miss_reason(hw_name: str, model: str, limit: str, concurrency: int, c: int, miss) -> str:
    text = f"no standard {hw_name} topology {limit} holds {model} with {concurrency} sequence(s) of {c:,} tokens"
    if miss is None:
        return text + ": not even one copy of the weights fits"
    r = miss.result
    d, hw = r.per_device, r.hardware
    return (text + f"; closest: {hw['topology']} ({hw['chips']} chips) tp={r.parallel['tp']} dp={r.parallel['dp']}, "
            f"short by {-d['free_bytes'] / 2**30:,.1f} GiB a device (weights {d['weights_bytes'] / 2**30:,.1f}, "
            f"KV {d['kv_bytes'] / 2**30:,.1f}, temporaries {d['temp_bytes'] / 2**30:,.1f}, reserve "
            f"{d['reserve_bytes'] / 2**30:,.1f} of {hw['usable_bytes_per_device'] / 2**30:,.1f} GiB usable)")


def smallest_viable(*, model: str, hardware: str, stack: str, contexts: Sequence[int], concurrency: int,
                    max_chips: int) -> tuple[dict[int, Choice], int]:
    """-> ({context: Choice}, candidates evaluated)."""
    hw = load_hardware(hardware)
    work = {c: check_workload(context_tokens=c, batch=concurrency, prefill_chunk_tokens=None) for c in contexts}
    chosen: dict[int, Choice] = {}
    misses: dict[int, Choice] = {}
    tried = 0
    for topo in topologies_up_to(hw, max_chips):
        open_ctx = [c for c in contexts if c not in chosen]
        if not open_ctx:
            break
        found: dict[int, list[Choice]] = {}
        for setup in _candidates(model=model, hardware=hardware, topology=topo.text, stack=stack, devices=topo.devices):
            if topo.devices * hw.usable_bytes_per_device < setup.model.inventory.checkpoint_bytes:
                break  # not even one copy of the weights fits this topology
            tried += 1
            for c in open_ctx:
                r = fit(setup, work[c])
                ch = Choice(context_tokens=c, setup=setup, result=r)
                if r.fits:
                    found.setdefault(c, []).append(ch)
                elif c not in misses or r.per_device["free_bytes"] > misses[c].result.per_device["free_bytes"]:
                    misses[c] = ch
        for c, options in found.items():
            chosen[c] = max(options, key=lambda ch: ch.result.per_device["free_bytes"])
    limit = f"up to {max_chips:,} chips" if max_chips < hw.max_chips else "up to its largest standard size"
    for c in contexts:
        if c not in chosen:
            miss = misses.get(c)
            chosen[c] = Choice(context_tokens=c, setup=None, result=miss.result if miss else None,
                               reason=_miss_reason(hw.name, model, limit, concurrency, c, miss))
    return {c: chosen[c] for c in contexts}, tried
