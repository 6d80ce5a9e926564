"""DeepSeek-V4's state types when a session is parked below HBM (issue #37, item 5).

A V4 session (k3plan.step.dsv4_cache) holds two kinds of state, which a tier treats differently:

- complete compressed blocks (CSA / HCA entries and CSA's indexer keys): they persist -- recomputing one
  means a prefill of everything before it, so a parked session stores them (``classical_bytes``);
- the fixed-size state -- every layer's last ``sliding_window`` entries and the compressors' tails of the
  blocks being filled -- can be handled three ways:
  ``store``: kept with the blocks (``state_bytes``), nothing replayed;
  ``checkpoint``: kept as it was at the last HCA block boundary (the window entries and CSA's overlapping
  tails; HCA's tail is empty there), and the tokens since the boundary replayed (context mod 128);
  ``replay``: dropped, and rebuilt by a bounded replay of the last tokens -- as many as the window holds,
  the HCA tail (context mod 128) or CSA's overlapping tail (context mod 4 + 4) need, whichever is most
  (a replayed token attends to the persisted blocks, so the replay is a short prefill at the full context).
``parked_options`` lists the three for a session; a tier's restore time and the replay's prefill time
(k3plan.tiers.sessions, the roofline's prefill time a token) then say which is cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3plan.models.spec import ModelSpec
from k3plan.step import dsv4_cache


@dataclass(frozen=True)
class ParkedOption:
    name: str  # store | checkpoint | replay
    stored_bytes: int  # whole model, one copy: what the tier keeps
    replay_tokens: int  # tokens re-run (a prefill at the session's context) when it comes back


def _hca_ratio(spec: ModelSpec) -> int:
    d = spec.dsv4
    assert d is not None
    return max((r for r in d.compress_ratios if r not in (0, dsv4_cache.CSA)), default=dsv4_cache.CSA)


def replay_tokens(spec: ModelSpec, context: int) -> int:
    """Tokens a bounded replay re-runs to rebuild the window and every compressor tail."""
    d = spec.dsv4
    assert d is not None
    need = [min(d.sliding_window, context), context % _hca_ratio(spec)]
    if d.n_csa:
        need.append(min(context, context % dsv4_cache.CSA + dsv4_cache.CSA))  # the overlap keeps the previous block
    return max(need)


def parked_options(
    spec: ModelSpec, context: int, layout: dsv4_cache.Dsv4Layout = dsv4_cache.DEFAULT_LAYOUT
) -> list[ParkedOption]:
    classical = dsv4_cache.classical_bytes(spec, context, layout)
    t = dsv4_cache.state_terms(spec, layout)
    d = spec.dsv4
    assert d is not None
    # at an HCA boundary HCA's tails are empty; CSA keeps its overlapping ring (and its indexer's)
    csa_tails = sum(
        layout.ring(dsv4_cache.CSA) * 2 * 2 * (d.head_dim + d.index_head_dim) * dsv4_cache.F32
        for r in d.compress_ratios
        if r == dsv4_cache.CSA
    )
    return [
        ParkedOption("store", classical + t.total, 0),
        ParkedOption("checkpoint", classical + t.window_bytes + csa_tails, context % _hca_ratio(spec)),
        ParkedOption("replay", classical, replay_tokens(spec, context)),
    ]
