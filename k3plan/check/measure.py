"""Recompute one baseline configuration: fit() plus the set of fully replicated tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from k3plan.budget.fit import check_workload, fit
from k3plan.check.baseline import Config, DeviceTerms, Expected, Split
from k3plan.check.names import fold
from k3plan.plan.defaults import make_default_setup as make_setup
from k3plan.step.weight_budget import runtime_bytes
from k3plan.structs import dump

NOT_COMPARED = ("free_bytes", "sequences")  # derived from the others / from the workload


@dataclass(frozen=True)
class Measured:
    expected: Expected  # what a baseline records
    replicated_bytes: dict[str, int]  # unfolded: tensor name -> bytes every device holds
    fallback_bytes: dict[str, int]  # unfolded: tensor name -> extra bytes a device from its fallback(s)


def measure(config: Config, *, shardspecs: Optional[str] = None) -> Measured:
    setup = make_setup(
        model=config.model,
        hardware=config.hardware,
        topology=config.topology,
        tp=config.tp,
        ep=config.ep,
        dp=config.dp,
        stack=config.stack,
        kv_dtype=config.kv_dtype,
        shardspecs=shardspecs,
    )
    w = check_workload(context_tokens=config.context_tokens, batch=config.batch, prefill_chunk_tokens=None)
    r = fit(setup, w)
    replicated: dict[str, int] = {}
    if setup.topology.devices > 1:
        for t in setup.model.inventory.text:
            if setup.plan.is_replicated(t):
                replicated[t.name] = runtime_bytes(t, setup.stack)
    fallbacks: dict[str, int] = {}
    for f in r.replicated:
        fallbacks[f.tensor] = fallbacks.get(f.tensor, 0) + int(f.bytes_replicated)
    expected = Expected(
        parallel=Split(tp=r.parallel.tp, ep=r.parallel.ep, dp=r.parallel.dp, pp=r.parallel.pp),
        per_device=DeviceTerms(**dump(r.per_device, "python")),
        kv_bytes_per_token=int(r.model_state.kv_bytes_per_token),
        state_bytes_per_sequence=int(r.model_state.state_bytes_per_sequence),
        fits=r.fits,
        replicated=fold(replicated),
        fallbacks=fold(fallbacks),
    )
    return Measured(expected=expected, replicated_bytes=replicated, fallback_bytes=fallbacks)
