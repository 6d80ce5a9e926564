"""Suspended sessions below HBM: how many each tier holds, how long one takes to come back, what a
prefix-cache hit saves on TTFT, and what ``--offload`` costs.

Stored: one copy of a session, whole model -- KV (kv_bytes_per_token x context) + KDA state
(state_bytes_per_slot: one slot, what a parked session keeps), both from k3plan.step.cache. A tier holds
floor(size a host x hosts / stored bytes) sessions.
Restored: each device needs its own shard back in HBM (its per-device KV + state, which under TP
may repeat the MLA latent on every rank); the hosts load in parallel, so a restore takes
latency + per-device bytes x devices on a host / the host's tier bandwidth.
Prefix cache: of a P-token prompt, a fraction h is cached; the hit skips h P tokens of prefill at
prefill_s_per_token (an input: the roofline's prefill time a token) but pays the load from its tier.
"""

from __future__ import annotations

import math

from k3plan.engines.stack import Stack
from k3plan.errors import require
from k3plan.models.spec import ModelSpec
from k3plan.step.cache import stack_kv_bytes_per_token_layer, state_bytes_per_slot
from k3plan.step.memory import kv_sequence_bytes
from k3plan.structs import Frozen
from k3plan.tiers.model import Tier

_Frozen = Frozen


def stored_session_bytes(*, spec: ModelSpec, stack: Stack, context_tokens: int) -> int:
    """One session, whole model, one copy, in the stack's KV and state dtypes."""
    require(context_tokens >= 0, f"context {context_tokens}: expected >= 0 tokens")
    kv = kv_sequence_bytes(  # unpaged: a parked session is stored as its tokens' entries (blocks of 1)
        context_tokens,
        block_tokens=1,
        layers=spec.n_mla,
        kv_bytes_per_token_layer=stack_kv_bytes_per_token_layer(spec, stack),
    )
    return int(kv) + state_bytes_per_slot(spec, stack)


def restore_s(tier: Tier, *, bytes_per_device: int, devices_per_host: int) -> float:
    """Time to bring one session's shards back into HBM from ``tier`` (hosts load in parallel)."""
    require(devices_per_host >= 1, f"devices a host {devices_per_host}: expected >= 1")
    return tier.latency_s + bytes_per_device * devices_per_host / tier.bw_bytes_per_s_per_host


class TierSessions(_Frozen):
    tier: str
    capacity_bytes: int | None  # size a host x hosts
    sessions_held: int | None  # None: no capacity limit known
    restore_s: float
    recompute_s: float | None  # prefill of the whole context instead, when prefill_s_per_token is given
    source: str


def suspended_sessions(
    *,
    tiers: tuple[Tier, ...],
    hosts: int,
    devices_per_host: int,
    stored_bytes_per_session: int,
    hbm_bytes_per_session_per_device: int,
    context_tokens: int,
    prefill_s_per_token: float | None = None,
) -> tuple[TierSessions, ...]:
    """Per tier: suspended sessions it holds and the time to bring one back (vs recomputing it)."""
    require(hosts >= 1, f"hosts {hosts}: expected >= 1")
    require(stored_bytes_per_session > 0, "stored bytes a session must be > 0")
    out = []
    for t in tiers:
        cap = None if t.size_bytes_per_host is None else t.size_bytes_per_host * hosts
        out.append(
            TierSessions(
                tier=t.name,
                capacity_bytes=cap,
                sessions_held=None if cap is None else cap // stored_bytes_per_session,
                restore_s=restore_s(
                    t, bytes_per_device=hbm_bytes_per_session_per_device, devices_per_host=devices_per_host
                ),
                recompute_s=None if prefill_s_per_token is None else context_tokens * prefill_s_per_token,
                source=t.source,
            )
        )
    return tuple(out)


class PrefixCacheEffect(_Frozen):
    prompt_tokens: int
    hit_rate: float
    cached_tokens: int
    ttft_cold_s: float  # the whole prompt prefilled
    ttft_s: float  # the uncached part prefilled + the cached part loaded
    saved_s: float


def prefix_cache_ttft(
    *, prompt_tokens: int, hit_rate: float, prefill_s_per_token: float, load_s_per_token: float = 0.0
) -> PrefixCacheEffect:
    """TTFT with a prefix-cache hit rate; ``load_s_per_token`` is 0 for a hit already in HBM, else
    the tier's restore time over the tokens restored (see ``restore_s``)."""
    require(0.0 <= hit_rate <= 1.0, f"prefix hit rate {hit_rate}: expected a fraction in [0, 1]")
    require(
        prompt_tokens >= 0 and prefill_s_per_token >= 0 and load_s_per_token >= 0,
        "prompt tokens, prefill and load time a token must be >= 0",
    )
    cached = math.floor(hit_rate * prompt_tokens)
    cold = prompt_tokens * prefill_s_per_token
    warm = (prompt_tokens - cached) * prefill_s_per_token + cached * load_s_per_token
    return PrefixCacheEffect(
        prompt_tokens=prompt_tokens,
        hit_rate=hit_rate,
        cached_tokens=cached,
        ttft_cold_s=cold,
        ttft_s=warm,
        saved_s=cold - warm,
    )


class OffloadCost(_Frozen):
    """``--offload``: a session waiting between turns leaves HBM for ``tier`` and comes back."""

    tier: str
    hbm_freed_bytes_per_device: int  # a suspended session's KV + state, per device
    ttft_added_s: float  # restore before the next turn's prefill
    recompute_s: float | None  # dropping the session and prefilling its context again
    cheaper_than_recompute: bool | None
    sessions_held: int | None
    source: str


def offload_cost(
    *,
    tier: Tier,
    hosts: int,
    devices_per_host: int,
    stored_bytes_per_session: int,
    hbm_bytes_per_session_per_device: int,
    context_tokens: int,
    prefill_s_per_token: float | None = None,
) -> OffloadCost:
    held = suspended_sessions(
        tiers=(tier,),
        hosts=hosts,
        devices_per_host=devices_per_host,
        stored_bytes_per_session=stored_bytes_per_session,
        hbm_bytes_per_session_per_device=hbm_bytes_per_session_per_device,
        context_tokens=context_tokens,
        prefill_s_per_token=prefill_s_per_token,
    )[0]
    return OffloadCost(
        tier=tier.name,
        hbm_freed_bytes_per_device=hbm_bytes_per_session_per_device,
        ttft_added_s=held.restore_s,
        recompute_s=held.recompute_s,
        cheaper_than_recompute=None if held.recompute_s is None else held.restore_s < held.recompute_s,
        sessions_held=held.sessions_held,
        source=tier.source,
    )


def session_tiers(setup, *, context_tokens: int, prefill_s_per_token: float | None = None) -> tuple[TierSessions, ...]:
    """The tiers of ``setup.hardware`` for one session at ``context_tokens``: per-device HBM bytes from
    the stack's cache layout (k3plan.step.cache), stored bytes one whole-model copy."""
    from k3plan.step.cache import cache_layout
    from k3plan.tiers.model import memory_tiers

    layout = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel)
    topo = setup.topology
    return suspended_sessions(
        tiers=memory_tiers(setup.hardware),
        hosts=topo.hosts,
        devices_per_host=math.ceil(topo.devices / topo.hosts),
        stored_bytes_per_session=stored_session_bytes(
            spec=setup.model.spec, stack=setup.stack, context_tokens=context_tokens
        ),
        hbm_bytes_per_session_per_device=layout.sequence_bytes(context_tokens),
        context_tokens=context_tokens,
        prefill_s_per_token=prefill_s_per_token,
    )
