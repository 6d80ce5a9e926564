"""``--prefix-hit``: a prefix-cache hit rate -> TTFT, for a prompt at the command's context, with the
cached prefix coming from HBM (the engine's own prefix cache) or from a memory tier below it.

Prefill of the uncached part: the roofline's whole-prompt TTFT a token (k3plan.tiers.sessions.
prefix_cache_ttft prices it linearly in the tokens left to prefill -- an estimate; attention over the
cached prefix makes the real tail dearer). Load of the cached part: nothing from HBM; from a tier,
its restore time (k3plan.tiers.sessions.restore_s) for the prefix's per-device KV + one KDA state
checkpoint at the prefix boundary (k3plan.step.cache layout), spread over the cached tokens.
"""

from __future__ import annotations

import math
from typing import Any

from k3plan.errors import K3PlanError
from k3plan.structs import Frozen
from k3plan.tiers.model import OFFLOAD_CHOICES, offload_tier
from k3plan.tiers.sessions import PrefixCacheEffect, prefix_cache_ttft, restore_s
from k3plan.units import fmt_gib

PREFIX_TIERS = ("hbm", *OFFLOAD_CHOICES)  # --prefix-tier spelling


class PrefixHit(Frozen):
    tier: str  # hbm, host_dram, local_ssd, remote
    effect: PrefixCacheEffect
    prefill_s_per_token: float
    load_s: float  # bringing the cached prefix into HBM (0 from HBM)
    loaded_bytes_per_device: int
    source: str


def check_prefix_hit(hit_rate: float, tier: str) -> None:
    """The CLI's --prefix-hit and --prefix-tier, checked before any work."""
    if not (math.isfinite(hit_rate) and 0.0 <= hit_rate <= 1.0):
        raise K3PlanError(f"--prefix-hit {hit_rate}: expected a fraction of the prompt in [0, 1]")
    if tier not in PREFIX_TIERS:
        raise K3PlanError(f"--prefix-tier {tier!r}: expected one of {', '.join(PREFIX_TIERS)}")


def check_prefix_options(hit_rate: float | None, tier: str) -> None:
    """--prefix-hit and --prefix-tier together (fit, roofline and plan share them): a tier only with a hit rate."""
    if hit_rate is None and tier != "hbm":
        raise K3PlanError("--prefix-tier: only with --prefix-hit FRACTION")
    if hit_rate is not None:
        check_prefix_hit(hit_rate, tier)


def prefix_hit(setup: Any, *, prompt_tokens: int, hit_rate: float, tier: str, prefill_ttft_s: float) -> PrefixHit:
    """TTFT of a ``prompt_tokens`` prompt with ``hit_rate`` of it cached in ``tier`` (hbm or an
    --offload tier of ``setup.hardware``); ``prefill_ttft_s``: the roofline's TTFT of the whole prompt."""
    from k3plan.step.cache import cache_layout

    check_prefix_hit(hit_rate, tier)
    per_token = prefill_ttft_s / prompt_tokens
    cached = math.floor(hit_rate * prompt_tokens)
    if tier == "hbm" or cached == 0:
        name = "hbm" if tier == "hbm" else OFFLOAD_CHOICES[tier]
        effect = prefix_cache_ttft(prompt_tokens=prompt_tokens, hit_rate=hit_rate, prefill_s_per_token=per_token)
        src = "cached prefix already in HBM (the engine's prefix cache): no load"
        return PrefixHit(
            tier=name, effect=effect, prefill_s_per_token=per_token, load_s=0.0, loaded_bytes_per_device=0, source=src
        )
    try:
        t = offload_tier(setup.hardware, tier)
    except K3PlanError as e:  # the same lookup as --offload; the message names this flag
        raise K3PlanError(str(e).replace("--offload", "--prefix-tier", 1)) from None
    layout = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel)
    topo = setup.topology
    nbytes = layout.sequence_bytes(cached)
    load = restore_s(t, bytes_per_device=nbytes, devices_per_host=math.ceil(topo.devices / topo.hosts))
    effect = prefix_cache_ttft(
        prompt_tokens=prompt_tokens, hit_rate=hit_rate, prefill_s_per_token=per_token, load_s_per_token=load / cached
    )
    return PrefixHit(
        tier=t.name,
        effect=effect,
        prefill_s_per_token=per_token,
        load_s=load,
        loaded_bytes_per_device=nbytes,
        source=t.source,
    )


def prefix_hit_lines(p: PrefixHit) -> list[str]:
    e = p.effect
    load = (
        "no load (already in HBM)"
        if p.tier == "hbm"
        else f"loaded from {p.tier}: {fmt_gib(p.loaded_bytes_per_device)} a device in {p.load_s * 1e3:,.1f} ms"
    )
    return [
        (
            f"prefix cache --prefix-hit {e.hit_rate:g}: {e.cached_tokens:,} of {e.prompt_tokens:,} prompt tokens cached "
            f"in {p.tier}; TTFT (one prompt's prefill, no queue) {e.ttft_cold_s * 1e3:,.1f} ms without the hit -> {e.ttft_s * 1e3:,.1f} ms with it "
            f"(saves {e.saved_s * 1e3:,.1f} ms)"
        ),
        (
            f"  {e.prompt_tokens - e.cached_tokens:,} tokens prefilled at {p.prefill_s_per_token * 1e6:,.2f} us a token "
            f"(the roofline's whole-prompt TTFT / tokens: linear, an estimate); cached part {load}"
        ),
        f"  source: {p.source}",
    ]
