"""What fit says beside its numbers: where each figure comes from (``Provenance``), the warnings a
configuration earns whatever its budget, and its notes. Text only: budget/fit.py holds the figures."""

from __future__ import annotations

from typing import Any, Optional

from k3plan.budget.result import Provenance
from k3plan.engines.flags import engine_offers_kv
from k3plan.engines.stack import Stack
from k3plan.models.spec import ModelSpec
from k3plan.setup import Setup, engine_refusals
from k3plan.step.cache import CacheLayout
from k3plan.step.collective import Collective, cross_node_ep_warning, scale_out_note
from k3plan.step.dsv4_cache import EngramTier
from k3plan.step.weight_budget import WeightBudget
from k3plan.units import fmt_gib
from k3plan.workload.draft import DraftKv


def provenance(
    setup: Setup,
    *,
    layout: CacheLayout,
    chunk: int,
    context: int = 0,
    reserve_fraction: float,
    draft_bytes_per_device: int,
    draft_kv: Optional[DraftKv],
    engram: Optional[EngramTier] = None,
    temp_prefill: str,
    temp_decode: str,
) -> Provenance:
    """Where each of fit's figures comes from; ``layout``: the binding stage's, ``draft_bytes_per_device``: what is
    counted with the weights beside the model's for a speculative-decoding draft; ``engram``: DeepSeek-V4.1's Engram
    tier, whose HBM share (projections, and the rows where the tables are in HBM) is counted with them too."""
    spec, stack, hw, par = setup.model.spec, setup.stack, setup.hardware, setup.parallel
    reserve_auto = stack.reserve_auto(vendor=hw.vendor)
    # a release whose engine derives its fraction by another rule (Stack.release_fraction: SGLang before 0.5.3)
    era_source = (
        stack.release_fraction_source(
            usable_bytes=hw.usable_bytes_per_device, tp=par.tp, pp=par.pp, vendor=hw.vendor, dp=par.dp
        )
        if reserve_auto is not None
        else ""
    )
    return Provenance(
        weights=f"analytic: inventory x {stack.name} runtime formats x ShardSpecs ({setup.plan.source})"
        + (f"; {stack.expert_pad[2]}" if stack.expert_pad is not None else "")
        + (
            f"; + the vision tower, {sum(t.nbytes for t in setup.model.inventory.of_kind('vision')):,} B whole on "
            "every device (the serve command's engine builds it: Engine.loads_vision_tower; vLLM unless "
            "--language-model-only or its modalities limited to 0: Engine.tower_off_by_limits)"
            if stack.vision_whole
            else ""
        )
        + "".join(f"; + {role} {n:,} B a device ({src})" for role, n, src in stack.extra_weights)
        + (
            f"; + draft weights {draft_bytes_per_device:,} B a device (speculative decoding)"
            if draft_bytes_per_device
            else ""
        )
        + (
            f"; + Engram {engram.hbm_bytes_per_device:,} B a device ("
            + (
                "its rows over TP and its projections"
                if engram.placement == "hbm"
                else "its projections; the tables in host memory"
            )
            + ")"
            if engram is not None and engram.hbm_bytes_per_device
            else ""
        ),
        kv=(
            _dsv4_text(setup, "kv", layout=layout, chunk=chunk, context=context)
            if spec.dsv4 is not None
            else f"analytic: {layout.n_mla} MLA layers x {_kv_values_text(spec, stack)}, {stack.kv_cache.dtype}"
            + (", whole latent on every TP rank" if stack.kv_cache.replicate_across_tp else ", split over TP")
            + f", {layout.paging} paging, blocks of {layout.block_tokens} tokens"
            + (
                f"; a block holds {layout.layers_held[0]} MLA layer pages (vLLM's hybrid KV-cache manager groups "
                f"the whole model's layers; this stage's largest group has {layout.layers_held[0]} layers), a "
                f"decode step reads {layout.n_mla}"
                if layout.layers_held[0] != layout.n_mla
                else ""
            )
            + (
                f"; + speculative-decoding draft KV {draft_kv.bytes_per_token_per_device:,} B a token a device "
                f"({draft_kv.source})"
                if draft_kv is not None and draft_kv.bytes_per_token_per_device
                else ""
            )
        ),
        state=(
            _dsv4_text(setup, "state", layout=layout, chunk=chunk, context=context)
            if spec.dsv4 is not None
            else f"analytic: {layout.n_kda} KDA layers, recurrent {stack.state.recurrent_dtype} + conv "
            f"{stack.state.conv_dtype}"
            + (", split by heads over TP" if stack.state.shard_by_heads else "")
            + (
                f"; the state pool holds {layout.state_slots_per_sequence} slots a running sequence "
                f"({layout.state_bytes_per_slot:,} B a slot a device; a decode step reads one)"
                if layout.state_slots_per_sequence > 1
                else ""
            )
            + (
                f"; the pool pads the KDA layers to whole layer groups (vLLM's hybrid KV-cache manager): "
                f"{layout.state_layers_held} layer pages held a sequence, a decode step reads {layout.n_kda}"
                if layout.state_layers_held != layout.n_kda
                else ""
            )
        ),
        temp_prefill=temp_prefill,
        temp_decode=temp_decode,
        reserve=(
            f"stack {stack.name}: {stack.reserve.fraction_of_usable_hbm:.0%} of usable HBM ({stack.reserve.source})"
            if reserve_auto is None
            else f"stack {stack.name}: {reserve_fraction:.1%} of usable HBM, mem_fraction_static "
            f"{1 - reserve_fraction:.3f}, the engine's default in release {'.'.join(map(str, stack.engine_release or ()))} for "
            f"{hw.name} at tp_size {par.tp * (par.dp if stack.dp_attention else 1)} x pp {par.pp} ({era_source})"
            if era_source
            else f"stack {stack.name}: {reserve_fraction:.1%} of usable HBM, mem_fraction_static "
            f"{1 - reserve_fraction:.3f} as SGLang derives it for {hw.name}, "
            + (
                f"DP attention: tp_size {par.tp * par.dp} (tp {par.tp} x dp {par.dp}) x pp {par.pp}, the decode "
                f"graphs padded for dp_size {par.dp}, chunk {stack.engine_chunk(chunk, dp=par.dp)} "
                f"(the flag, {chunk} a DP group"
                + (f": {stack.dp_attention_chunk.sources[0].text()}" if stack.dp_attention_chunk else "")
                + ") "
                if stack.dp_attention
                else f"tp {par.tp} x pp {par.pp}, chunk {chunk} "
            )
            + (
                "-- a fraction <= 0: the MiB it reserves exceed the GPU's, no room for the weights (a smaller "
                "--chunk or mem_fraction_static leaves some) "
                if reserve_fraction >= 1
                else ""
            )
            + f"({reserve_auto.source.text()}; {_prefill_graph_text(stack, reserve_auto, hw, par.pp)})"
        )
        + (
            f"; the fraction cut by the engine, {stack.fraction_scale[1]}: mem_fraction_static "
            f"{1 - reserve_fraction:.3f}, {reserve_fraction:.1%} of usable HBM reserved"
            if stack.fraction_scale is not None
            else ""
        )
        + (
            f"; the engine runs the temporaries out of it (kv_pool {stack.kv_pool.method}), so only what they "
            "leave of it is counted here"
            if stack.kv_pool is not None and stack.kv_pool.temps_in_reserve
            else ""
        ),
        hbm=hw.sources().get("usable_hbm_per_device", hw.path),
        stack_sources=f"kv: {stack.kv_cache.source}; state: {stack.state.source}; paging: {stack.paging.source}",
    )


def setup_warnings(setup: Setup, wb: WeightBudget, *, context_tokens: int) -> list[str]:
    """The warnings of a configuration whatever its budget: replicated tensors, a context past the model's, what the
    engine refuses, a KV dtype it does not take, an EP group or collectives crossing slices."""
    spec, stack, hw, par, topo = setup.model.spec, setup.stack, setup.hardware, setup.parallel, setup.topology
    warnings: list[str] = []
    if setup.plan.fallbacks:
        warnings.append(
            f"{len(setup.plan.fallbacks)} tensor dimension(s) fell back to replication "
            f"(+{fmt_gib(sum(f.bytes_replicated for f in wb.fallbacks))} a device)"
        )
    beyond = spec.context_warning(context_tokens)
    if beyond:
        warnings.append(beyond)
    warnings += engine_refusals(setup.model, stack)
    if not stack.runs_on(hw.kind):  # an engine of the other kind of machine: not this machine's engine's rules
        warnings.append(
            f"stack {stack.name} runs on {', '.join(stack.platforms) or stack.platform} (its YAML's platforms_source), "
            f"not on a {hw.kind.upper()}: these are its engine's rules applied to {hw.name}, where it does not start"
        )
    if not engine_offers_kv(stack.name, stack.kv_cache.dtype, hw.kind):
        warnings.append(
            f"KV dtype {stack.kv_cache.dtype}: stack {stack.name}'s engine on {hw.kind} does not take it "
            f"(k3plan.engines.flags.kv_table); priced as asked, but --emit launch refuses it"
        )
    if topo.spans_slices and par.ep > topo.devices_per_slice:  # a warning in fit and plan alike (step.verdict)
        if hw.kind == "gpu":  # cross-node EP over the node fabric, costed over scale_out (roofline.comm)
            op = Collective.pattern_text(stack.collectives.experts)
            warnings.append(cross_node_ep_warning(hw, topo, ep=par.ep, op=op))
        else:
            warnings.append(
                f"the EP group ({par.ep} devices) spans {topo.slices} slices: expert traffic crosses "
                f"{hw.scale_out.name}, infeasible for prefill (docs/k3-facts.md §4); keep EP inside a slice (--ep {par.tp})"
                if par.tp <= topo.devices_per_slice
                else f"the EP group ({par.ep} devices) spans {topo.slices} slices over {hw.scale_out.name}"
            )
    if topo.spans_slices:  # which collectives cross the scale-out link (each runs on its own: roofline.comm)
        from k3plan.roofline.comm import scale_out_collectives

        crossing, _ = scale_out_collectives(setup)
        if crossing:
            warnings.append(scale_out_note(hw, topo, crossing=crossing))
    return warnings


def absorbed_notes(stack: Stack, wb: WeightBudget) -> list[str]:
    """The absorbed-MLA copies a stack keeps beside kv_b_proj, where it keeps them."""
    copies = wb.role_bytes("mla_absorbed")
    notes_copies = []
    if copies and stack.absorbed_copies is not None and stack.absorbed_copies.replaces_source:
        src = stack.absorbed_copies.sources[0]
        notes_copies.append(
            f"absorbed MLA: stack {stack.name} splits W_UK / W_UV out of each kv_b_proj at load and deletes "
            f"kv_b_proj: {copies:,} B a device in its place (weights, mla_absorbed), which every pass reads "
            f"({src.text()})"
        )
    elif copies and stack.absorbed_copies is not None:
        src = stack.absorbed_copies.sources[0]
        notes_copies.append(
            f"absorbed MLA: stack {stack.name} splits W_UK / W_UV out of each kv_b_proj at load "
            f"and keeps kv_b_proj for prefill: {copies:,} B a device more "
            f"(weights, mla_absorbed), which decode reads instead of kv_b_proj ({src.text()})"
        )
    return notes_copies


def _dsv4_text(setup: Setup, what: str, *, layout: CacheLayout, chunk: int, context: int) -> str:
    """DeepSeek-V4's KV and state provenance (step/dsv4_cache): the engine's own charge a request where its pool
    accounting sets the layout (step/dsv4_cache.engine_charge: V4.1 on vLLM's CUDA and ROCm backends, V4 and V4.1 on
    SGLang), else the model's."""
    from k3plan.step import dsv4_cache

    spec, stack, hw = setup.model.spec, setup.stack, setup.hardware
    charge = dsv4_cache.engine_charge(spec, stack, hardware=hw.name, vendor=hw.vendor, chunk=chunk, context=context)
    if charge is not None and what == "kv":
        return (
            f"engine: {stack.name}'s own charge, as its start check sizes the pool (the budget and the engine one "
            f"accounting): a block of {charge.block_tokens} tokens of context costs {charge.block_bytes:,.0f} B a "
            f"device, "
            + (
                "charged in whole blocks of those bytes; "
                if layout.kv_block_bytes
                else f"carried as {layout.kv_bytes_per_token_layer} B a token x {layout.n_mla} layers (rounded up); "
            )
            + f"{charge.source}"
        )
    if charge is not None and charge.apart_bytes:
        return (
            f"engine: {stack.name}'s own charge a request whatever its context: {charge.apart_source} = "
            f"{charge.fixed_bytes:,} B a device (the model's own fixed state, what a decode step reads: "
            f"{layout.fixed_state_bytes:,} B)"
        )
    if charge is not None and charge.fixed_blocks:
        return (
            f"engine: {stack.name}'s own charge a request whatever its context, its windows' pages (each holding the "
            f"window and the {chunk:,} tokens a step in flight) and its compressor rings: {charge.fixed_blocks:,} blocks "
            f"of {charge.block_bytes:,.0f} B = {charge.fixed_bytes:,} B a device (the model's own fixed state, what a "
            f"decode step reads: {layout.fixed_state_bytes:,} B); the groups as on the KV line"
        )
    if charge is not None:
        return (
            f"engine: {stack.name}'s own charge holds none apart: its windows and compressor rings are in its bytes a "
            f"token (the KV line); the model's own fixed state, what a decode step reads: {layout.fixed_state_bytes:,} B"
        )
    if what == "kv":
        return dsv4_cache.kv_source_text(spec, stack.name)
    return dsv4_cache.state_source_text(spec, stack.name, speculative=stack.state.verify_tokens > 1)


def _kv_values_text(spec: ModelSpec, stack: Stack) -> str:
    """The values a token a MLA layer, as the stack lays them out (its padded entry named, with its source)."""
    lay = stack.kv_cache.layout
    if lay is None:
        return f"{spec.mla.cache_values_per_token} values"
    values = lay.values_per_token(kv_lora_rank=spec.mla.kv_lora_rank, qk_rope_head_dim=spec.mla.qk_rope_head_dim)
    src = lay.sources[0]
    return (
        f"{values} values (kv_lora {spec.mla.kv_lora_rank} and rope {spec.mla.qk_rope_head_dim} padded to multiples "
        f"of {lay.latent_align} and {lay.rope_align}: {src.repo} {src.file} {src.symbol.split(' (')[0]})"
    )


def _prefill_graph_text(stack: Any, auto: Any, hw: Any, pp: int) -> str:
    """Whether the derived fraction counts the engine's prefill graph, and why: the engine's rule for the stack's
    release and model (Stack.prefill_graph), else the stack's own AutoFraction.prefill_graph."""
    got = stack.prefill_graph(vendor=hw.vendor, pp=pp)
    if got is None:
        return f"prefill graph {'on' if auto.prefill_graph else 'off'}: {auto.prefill_graph_source.text()}"
    from k3plan.engines.registry import engine_rules

    rule = engine_rules(stack.name).prefill_graph
    where = getattr(rule, "__module__", "")
    return (
        f"prefill graph {'on' if got.on else 'off'}: {got.why}"
        + (f" (+{auto.prefill_graph_mla_mib:g} MiB, MLA)" if got.on else "")
        + (f" (+{auto.prefill_graph_deepep_cuda_mib:g} MiB DeepEP delta)" if got.deepep_delta else "")
        + f" ({where.replace('.', '/')}.py)"
    )
