"""DeepSeek-V4.1's Engram tables in fit's budget: a memory tier of their own (k3plan.step.dsv4_cache.engram_tier).

Where the stack's engine keeps the tables by default decides what a device holds: in HBM (SGLang: rows split
over the TP group) they are counted with the weights; in host memory (vLLM: pinned, looked up in place) only the
projections are, and the host must hold the tables and feed ``bytes_per_token`` a token over its host-to-HBM
link (the hardware spec's ``memory_tiers.host_dram``). fit says which, with the figures, in its notes; where a
model does not fit with the tables in HBM, the first advice is to move them to host memory (engines offer it:
SGLang ``SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1`` (its wheels 0.5.21-0.5.23; no release's parser registers the
``--engram-config`` its docs page shows), vLLM's default) before buying chips.
"""

from __future__ import annotations

from k3plan.step.dsv4_cache import (
    EngramTier,
    engram_hbm_bytes_per_device,
    engram_placement,
    engram_split,
    engram_tier,
)
from k3plan.units import fmt_gib


def tier_for(setup) -> EngramTier | None:
    """The Engram tier of a Setup; None for a model without Engram."""
    spec = setup.model.spec
    if spec.dsv4 is None or spec.dsv4.engram is None:
        return None
    topo = setup.topology
    return engram_tier(
        spec,
        setup.model.inventory,
        setup.stack.name,
        tp=setup.parallel.tp,
        devices_per_host=max(1, topo.devices // max(topo.hosts, 1)),
        hosts=topo.hosts,
        placement=setup.stack.engram_placement,
        dp=setup.parallel.dp,
        host_copies=setup.stack.engram_host_copies,
    )


def has_engram(model) -> bool:
    spec = model.spec
    return spec.dsv4 is not None and spec.dsv4.engram is not None


def engine_default(stack):
    """(placement, cited Source) of the Engram tables under ``stack``'s engine by default (``Engine.engram``, in
    the engine's folder)."""
    from k3plan.engines.registry import engine_rules

    engram = engine_rules(stack.name).engram
    return engram.placement, engram.source


def placement_for(stack, asked: str | None = None) -> str:
    """Where the Engram tables live under ``stack``: ``asked`` (--engram), the stack's ``engram_placement``, else
    its engine's default (``Engine.engram``, cited in its folder)."""
    return engram_placement(stack.name, asked or stack.engram_placement)


def hbm_bytes_per_device(model, stack, tp):
    """What a device holds of the Engram tensors under ``stack`` (its ``engram_placement``, else its engine's
    default) at TP ``tp`` (an int or plan's numpy column): ``EngramTier.hbm_bytes_per_device`` over columns, which
    plan counts with the weights as fit does; 0 for a model without Engram."""
    if not has_engram(model):
        return 0
    table, proj = engram_split(model.inventory)
    return engram_hbm_bytes_per_device(table=table, projections=proj, placement=placement_for(stack), tp=tp)


def notes(setup, tier: EngramTier, *, fits: bool, free_bytes: int) -> list[str]:
    """fit's lines on the Engram tier: where the tables are and what they cost; the host's room and link where
    they are in host memory; the offload advice where the model does not fit with them in HBM."""
    from k3plan.tiers.model import memory_tiers

    out = [tier.text()]
    host = next((t for t in memory_tiers(setup.hardware) if t.name == "host_dram"), None)
    if tier.placement == "host":
        if host is None:
            out.append(
                f"Engram in host memory: {setup.hardware.name}'s spec lists no host_dram tier to check it against"
            )
        else:
            room = host.size_bytes_per_host
            held = "" if room is None else f" of {room:,} B ({tier.host_bytes_per_host / room:.0%})"
            out.append(
                f"Engram in host memory: {tier.host_bytes_per_host:,} B a host{held}; its host-to-HBM link "
                f"({host.bw_bytes_per_s_per_host / 1e9:,.0f} GB/s a host: {host.source}) feeds "
                f"{host.bw_bytes_per_s_per_host / tier.bytes_per_token:,.0f} tokens/s of Engram rows"
                + (" -- the tables do not fit the host" if room is not None and tier.host_bytes_per_host > room else "")
            )
    elif not fits:
        rows = tier.hbm_bytes_per_device - tier.projection_bytes
        short = max(0, -free_bytes)
        enough = "enough on its own" if rows >= short else f"not enough on its own ({fmt_gib(short)} short)"
        out.append(
            f"advice: offload Engram before buying chips: its tables take {fmt_gib(rows)} a device here, {enough}; "
            f"in host memory (SGLang SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1, vLLM's default) a token reads "
            f"{tier.bytes_per_token:,} B of rows from the host instead"
        )
    return out


def link_note(setup, tier: EngramTier, *, decode_tokens_per_s: float, prefill_tokens_per_s: float) -> str | None:
    """roofline's line on the Engram rows a second: where the tables are in host memory, what the decode and the
    prefill rates ask of a host's host-to-HBM link (the rows are addressed by the input tokens alone, so they are
    fetched ahead of their layer: the link binds only past 100%); in HBM, the rows are a negligible read beside the
    weights. None for a hardware spec without a host_dram tier."""
    from k3plan.tiers.model import memory_tiers

    if tier.placement == "hbm":
        return (
            f"Engram in HBM: a token reads {tier.bytes_per_token:,} B of rows, "
            f"{decode_tokens_per_s * tier.bytes_per_token / 1e9:,.3f} GB/s at the decode rate (beside the weights)"
        )
    host = next((t for t in memory_tiers(setup.hardware) if t.name == "host_dram"), None)
    if host is None:
        return None
    hosts = max(setup.topology.hosts, 1)
    bw = host.bw_bytes_per_s_per_host

    def share(rate: float) -> str:
        need = rate / hosts * tier.bytes_per_token
        return f"{need / 1e9:,.3f} GB/s a host ({need / bw:.2%} of its link)"

    worst = max(decode_tokens_per_s, prefill_tokens_per_s) / hosts * tier.bytes_per_token / bw
    head = "warning: " if worst > 1 else ""
    return (
        f"{head}Engram in host memory: decode at {decode_tokens_per_s:,.0f} tok/s reads {share(decode_tokens_per_s)}, "
        f"prefill at {prefill_tokens_per_s:,.0f} tok/s {share(prefill_tokens_per_s)} over the host-to-HBM link "
        f"({bw / 1e9:,.0f} GB/s a host); prefetched ahead of its layer, it "
        + ("binds the step" if worst > 1 else "does not bind")
    )
