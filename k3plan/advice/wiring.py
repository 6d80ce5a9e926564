"""Advice wired to a fit: the alternatives the rules need, each computed by ``fit`` itself.

The rules (k3plan.advice.rules) never evaluate a model; this module does, cheaply: the next
standard topology up (the hardware spec's ``topology.standard`` list, as plan and setup use it),
the fp8_ds_mla KV cache when the stack's engine has it, and the decode roofline at larger batches
when the step is memory-bound. Each extra fit reuses the loaded model (load_model is cached) and
costs tens of milliseconds, no numpy-heavy search.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Optional

from k3plan.advice.inputs import (
    AdviceInputs,
    BatchOption,
    PartTime,
    SpecDecodeOption,
    inputs_from_fit,
    kv_dtype_option_from_fit,
    topology_option_from_fit,
)
from k3plan.advice.rules import HEADROOM_MIN_FRACTION, MEMORY_BOUND, Advice, advise
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen
from k3plan.tiers.sessions import OffloadCost
from k3plan.workload.draft import DraftKv
from k3plan.workload.specdecode import SpecDecode, SpecDecodeSpeed

DraftKvOf = Callable[[Any], Optional[DraftKv]]  # a setup -> the draft's KV there (its tp, its KV dtype)

SMALL_KVS = ("fp8_ds_mla", "fp8")  # the smaller KV caches the advice prices, the first the engine offers
BATCH_STEPS = 3  # larger batches priced for the bandwidth rule: x2, x4, x8 (and the most that fit)


_Frozen = Frozen


class SpecDecodeReport(_Frozen):
    """--spec-tokens: the draft in the budget and the verify step in the speed line."""

    spec: SpecDecode
    draft: str  # what drafts: the model's MTP head, an external draft model, or none (n-gram)
    draft_bytes: int  # whole draft, one copy
    draft_bytes_per_device: int  # sharded over the TP group like the target's weights (an assumption)
    draft_shards: int  # the TP size it is split over
    draft_kv: DraftKv | None = None  # its KV cache a token, in the budget; None: none known (see draft)
    draft_s_per_token: float  # one drafted position: the draft's weights read once at HBM bandwidth
    plain_step_s: float  # the decode step without speculation, same batch
    # KDA state slots the verify step reads and writes a sequence a KDA layer (Stack.verify_state_slots) and
    # the state bytes it moves a device (read + written, its DP group's sequences, every KDA layer)
    verify_state_slots: tuple[int, int] = (1, 1)
    verify_state_bytes: int = 0
    speed: SpecDecodeSpeed
    pricing: str


class FitAdvice(_Frozen):
    rules: Advice  # the four rules applied (k3plan.advice.rules)
    alternatives: tuple[str, ...]  # the fits and bounds computed to get the options
    spec_decode: SpecDecodeReport | None = None
    offload: OffloadCost | None = None


def next_topology_up(setup):
    """The smallest standard topology of the machine with more chips than ``setup``'s, or None."""
    from k3plan.hardware.topology import topologies_up_to

    hw = setup.hardware
    return next((t for t in topologies_up_to(hw, hw.max_chips) if t.chips > setup.topology.chips), None)


def topology_alternative(
    setup_options: dict, setup, workload, draft_bytes: int = 0, draft_kv_of: DraftKvOf | None = None
):
    """The same model, stack and workload fitted at the next standard topology up; the split
    scaled with the devices when the heads still divide it, else the stack's default split."""
    from k3plan.budget.fit import fit
    from k3plan.setup import make_setup, tp_must_divide

    nxt = next_topology_up(setup)
    if nxt is None:
        return None
    tp, dp = setup_options.get("tp"), setup_options.get("dp")
    if tp is not None:
        ratio, rem = divmod(nxt.devices, setup.topology.devices)
        scaled = tp * ratio
        if rem or any(h % scaled for h in tp_must_divide(setup.model, setup.stack)):
            tp = dp = None
        else:
            tp = scaled
    try:
        alt = make_setup(**{**setup_options, "topology": nxt.text, "tp": tp, "dp": dp, "ep": None})
        return fit(
            alt,
            workload,
            draft_bytes_per_device=draft_bytes_per_device(alt, draft_bytes),
            draft_kv=draft_kv_of(alt) if draft_kv_of else None,
        )
    except K3PlanError:
        return None


def stack_has_kv(stack, kv_dtype: str, platform: str | None = None) -> bool:
    """Whether the stack's engine on ``platform`` offers ``kv_dtype`` (k3plan.engines.flags' engine
    spellings, which cite vLLM's CacheDType, tpu-inference's to_jax_dtype and SGLang's kv_cache_dtype
    choices); jax-native is k3plan's own. The engine is the one --emit launch writes for it there
    (dp-attention: SGLang on a GPU)."""
    from k3plan.engines.flags import engine_for_stack, engine_offers_kv

    try:
        engine_for_stack(stack.name, platform)
    except K3PlanError:
        return False  # no engine known: the advice prices no KV dtype it cannot launch
    return engine_offers_kv(stack.name, kv_dtype, platform)


def small_kv(setup) -> str | None:
    """The smaller KV cache the advice prices for this setup: the first of SMALL_KVS its stack's engine offers on
    the machine (vLLM on a GPU: fp8_ds_mla; tpu-inference: fp8); None when it already runs it."""
    kv = next((d for d in SMALL_KVS if stack_has_kv(setup.stack, d, setup.hardware.kind)), None)
    return None if kv == setup.stack.kv_cache.dtype else kv


def kv_alternative(
    setup, workload, kv: str, calibration=None, draft_bytes: int = 0, draft_kv_of: DraftKvOf | None = None
):
    """fit at the KV dtype ``kv`` (small_kv), the rest as ``setup``."""
    from k3plan.budget.fit import fit

    alt = dataclasses.replace(setup, stack=setup.stack.with_kv_dtype(kv))
    return fit(
        alt,
        workload,
        calibration=calibration,
        draft_bytes_per_device=draft_bytes_per_device(setup, draft_bytes),
        draft_kv=draft_kv_of(alt) if draft_kv_of else None,
    )


def batch_options(speed_setup, result, *, eff, evidence=None, allow_cpu_probes=False) -> tuple[BatchOption, ...]:
    """The decode bound at x2, x4, x8 the batch and at the most sequences that fit."""
    from k3plan.roofline.bounds import decode_bound

    b, cap = result.workload.batch, result.capacity.max_sequences
    batches = sorted({b * 2**i for i in range(1, BATCH_STEPS + 1) if b * 2**i <= cap} | ({cap} if cap > b else set()))
    out = []
    for n in batches:
        d = decode_bound(
            speed_setup,
            batch=n,
            context_tokens=result.workload.context_tokens,
            eff=eff,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
        )
        out.append(BatchOption(batch=n, tpot_s=d.tpot_s, binding=d.binding))
    return tuple(out)


def draft_bytes_for(setup, draft_bytes: int | None) -> tuple[int, str]:
    """The draft's bytes and what it is: the model's MTP head from the inventory, or ``--draft-bytes``
    for an external draft model (0: a weightless drafter such as n-gram lookup)."""
    from k3plan.workload.draft import DSPARK_WINDOW_SOURCE, draft_head

    head = draft_head(setup.model, kv_dtype=setup.stack.kv_cache.dtype)
    if draft_bytes is not None:
        return draft_bytes, (
            f"external draft model, --draft-bytes {draft_bytes:,}"
            if draft_bytes
            else "no draft weights (--draft-bytes 0: n-gram / prompt lookup)"
        )
    if head.params and head.drafter == "dspark":
        return head.checkpoint_bytes, (
            f"{head.model}'s DSpark drafter: {head.params:,} params ({head.source}); its {head.mtp_layers} windows, "
            f"{head.window_bytes_per_sequence:,} B a sequence ({DSPARK_WINDOW_SOURCE}), fixed, not in the budget"
        )
    if head.params:
        return head.checkpoint_bytes, (
            f"{head.model}'s MTP head: {head.params:,} params ({head.source}); its KV, "
            f"{head.kv_bytes_per_token:,} B a token whole ({head.kv_dtype}), is in the budget"
        )
    raise K3PlanError(
        f"--spec-tokens: {head.model} ships no draft head ({head.source}); pass --draft-bytes N "
        "for an external draft model's size (e.g. 30GB; 0 for n-gram drafting)"
    )


def draft_kv_for(setup, *, external: bool, given_bytes_per_token: int | None) -> DraftKv | None:
    """The draft's KV a token a device at ``setup``: ``--draft-kv-bytes-per-token`` when given (not
    derived), else the model's MTP head laid out by the stack (derived), else None (an external
    draft whose KV is unknown, or a weightless drafter)."""
    from k3plan.step.cache import cache_layout
    from k3plan.workload.draft import draft_head, given_draft_kv, mtp_draft_kv

    if given_bytes_per_token is not None:
        if given_bytes_per_token < 0:
            raise K3PlanError(f"--draft-kv-bytes-per-token {given_bytes_per_token}: expected >= 0 bytes")
        return given_draft_kv(given_bytes_per_token, tp=setup.parallel.tp) if given_bytes_per_token else None
    if external:
        return None
    head = draft_head(setup.model, kv_dtype=setup.stack.kv_cache.dtype)
    if not head.mla_layers:
        return None
    layout = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel)
    where = "whole latent on every TP rank" if setup.stack.kv_cache.replicate_across_tp else "split over TP"
    return mtp_draft_kv(
        head,
        kv_bytes_per_token_layer_per_device=layout.kv_bytes_per_token_layer,
        layout_source=f"{setup.stack.name}: {where}",
    )


def draft_bytes_per_device(setup, draft_bytes: int) -> int:
    """Sharded over the TP group like the target's weights: an assumption, printed with the figure
    (an engine that replicates a small draft holds its whole size on every device)."""
    return math.ceil(draft_bytes / setup.parallel.tp)


def spec_decode_report(
    speed_setup,
    *,
    spec: SpecDecode,
    batch: int,
    context_tokens: int,
    draft_bytes: int,
    draft_what: str,
    eff,
    evidence=None,
    allow_cpu_probes=False,
    draft_kv: DraftKv | None = None,
) -> SpecDecodeReport:
    """Verify step: the decode roofline at batch x (k+1) tokens (each sequence's KV read once a token:
    an upper bound on the verify step's bytes); drafting: the draft's per-device weights and its KV
    for the sequences a device holds (``draft_kv``) read once a drafted position at the HBM bandwidth
    the roofline uses."""
    from k3plan.roofline.bounds import decode_bound
    from k3plan.workload.specdecode import spec_decode_speed

    kw = {"context_tokens": context_tokens, "eff": eff, "evidence": evidence, "allow_cpu_probes": allow_cpu_probes}
    plain = decode_bound(speed_setup, batch=batch, **kw)
    k1 = spec.forward_tokens_per_step
    verify = decode_bound(speed_setup, batch=batch * k1, verify_tokens=k1, **kw)
    slots = speed_setup.stack.verify_state_slots(k1)
    rule = speed_setup.stack.state.verify
    state_how = (
        f"KDA state {slots[0]} slot(s) read and {slots[1]} written a sequence a layer"
        + (
            f" ({rule.sources[0].repo} {rule.sources[0].file.rsplit('/', 1)[-1]}"
            + (f"; {rule.caveat}" if rule.caveat else "")
            + ")"
            if rule is not None
            else f": stack {speed_setup.stack.name} has no verify rule, each token checked priced as a sequence"
        )
        if speed_setup.model.spec.n_kda
        else ""
    )
    per_dev = draft_bytes_per_device(speed_setup, draft_bytes)
    bw = speed_setup.hardware.hbm_bw_bytes_per_s_per_device * eff.bw_efficiency
    par = speed_setup.parallel
    seqs = -(-batch // par.dp) if speed_setup.stack.kv_cache.split_across_dp else batch  # as budget_terms
    kv_read = seqs * context_tokens * draft_kv.bytes_per_token_per_device if draft_kv else 0
    from k3plan.workload.draft import draft_head

    head = draft_head(speed_setup.model, kv_dtype=speed_setup.stack.kv_cache.dtype)
    dspark = head.drafter == "dspark" and draft_what.startswith(f"{head.model}'s DSpark")
    forwards = head.forwards(spec.draft_tokens) if dspark else None
    if dspark:  # each block reads its window of every sequence a device holds (whole on every TP rank)
        kv_read = seqs * head.window_bytes_per_sequence
    draft_s = (per_dev + kv_read) / bw
    speed = spec_decode_speed(
        spec=spec,
        batch=batch,
        verify_step_s=verify.step_s,
        draft_s_per_token=draft_s,
        baseline_step_s=plain.step_s,
        draft_forwards=forwards,
    )
    return SpecDecodeReport(
        spec=spec,
        draft=draft_what,
        draft_bytes=draft_bytes,
        draft_bytes_per_device=per_dev,
        draft_shards=speed_setup.parallel.tp,
        draft_kv=draft_kv,
        draft_s_per_token=draft_s,
        plain_step_s=plain.step_s,
        verify_state_slots=slots,
        verify_state_bytes=verify.bytes_per_device.state,
        speed=speed,
        pricing=(
            f"verify step = k3plan decode roofline at batch {batch} x {k1} tokens "
            f"({verify.binding}-bound, KV read a token: an upper bound"
            + (f"; {state_how}" if state_how else "")
            + "); drafting = draft weights "
            f"{per_dev:,} B a device"
            + (
                f" + its KV {kv_read:,} B ({seqs} sequence(s) x {context_tokens:,} tokens x "
                f"{draft_kv.bytes_per_token_per_device:,} B)"
                if draft_kv
                else ""
            )
            + (
                f" read once a draft forward, {forwards} a step for {spec.draft_tokens} drafted position(s) "
                f"(DSpark: {head.positions_per_pass} positions a forward; + its windows {kv_read:,} B, {seqs} "
                f"sequence(s) x {head.window_bytes_per_sequence:,} B)"
                if dspark
                else " read once a drafted position"
            )
            + f" at {bw / 1e9:,.0f} GB/s"
        ),
    )


def offload_report(setup, workload, choice: str, *, eff, evidence=None) -> OffloadCost:
    """--offload host|ssd|remote: a session at the fit's context parked in that tier between turns."""
    from k3plan.roofline.bounds import prefill_bound
    from k3plan.step.cache import cache_layout
    from k3plan.tiers.model import offload_tier
    from k3plan.tiers.sessions import offload_cost, stored_session_bytes

    tier = offload_tier(setup.hardware, choice)
    ctx = workload.context_tokens
    pre = prefill_bound(
        setup, prompt_tokens=ctx, chunk_tokens=workload.prefill_chunk_tokens, eff=eff, evidence=evidence
    )
    hw = setup.hardware
    layout = cache_layout(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel, hardware=hw.name,
                          vendor=hw.vendor, chunk=workload.prefill_chunk_tokens, context=ctx)  # fmt: skip
    topo = setup.topology
    return offload_cost(
        tier=tier,
        hosts=topo.hosts,
        devices_per_host=math.ceil(topo.devices / topo.hosts),
        stored_bytes_per_session=stored_session_bytes(spec=setup.model.spec, stack=setup.stack, context_tokens=ctx),
        hbm_bytes_per_session_per_device=layout.sequence_bytes(ctx),
        context_tokens=ctx,
        prefill_s_per_token=pre.ttft_s / ctx,
    )


def inputs_from_fit_result(
    result,
    *,
    spec_decode: SpecDecodeReport | None = None,
    binding: str | None = None,
    tpot_s: float | None = None,
    **alternatives: Any,
) -> AdviceInputs:
    """AdviceInputs from a typed FitResult (k3plan.advice.inputs.inputs_from_fit); ``binding`` and
    ``tpot_s`` override the fit's speed line (roofline passes its own decode bound)."""
    if spec_decode is not None:  # its draft is already in the fit's weights
        alternatives["spec_decode"] = SpecDecodeOption(
            draft_tokens=spec_decode.spec.draft_tokens,
            tokens_per_step=spec_decode.spec.expected_tokens_per_step,
            step_s=spec_decode.speed.step_s,
            draft_weights_bytes=0,
        )
    return inputs_from_fit(result, binding=binding, tpot_s=tpot_s, **alternatives)


def fit_advice(
    setup_options: dict,
    setup,
    workload,
    result,
    *,
    calibration=None,
    speed_setup=None,
    eff=None,
    evidence=None,
    allow_cpu_probes=False,
    spec_decode: SpecDecodeReport | None = None,
    offload: OffloadCost | None = None,
    time_by_part_s: tuple[PartTime, ...] = (),
    binding: str | None = None,
    tpot_s: float | None = None,
    draft_bytes: int = 0,
    draft_kv_of: DraftKvOf | None = None,
    splits: bool = False,
) -> FitAdvice:
    """The rules applied to ``result`` (a FitResult) with the alternatives computed here; ``binding``
    and ``tpot_s``: the decode bound when the result carries no speed line (report); ``draft_bytes``:
    a speculative-decoding draft (whole), in every alternative's budget as in ``result``'s; ``splits``:
    also run plan's search for other splits of the same chips (k3plan.advice.splits; fit asks for it)."""
    from k3plan.roofline.bounds import Efficiency

    eff = eff or Efficiency()
    done: list[str] = []
    topo_opts, kv_opts = [], []
    batch_opts: tuple[BatchOption, ...] = ()
    headroom_short = result.per_device.free_bytes < HEADROOM_MIN_FRACTION * result.hardware.usable_bytes_per_device
    if headroom_short:
        alt = topology_alternative(setup_options, setup, workload, draft_bytes, draft_kv_of)
        if alt is not None:
            topo_opts.append(topology_option_from_fit(alt))
            done.append(
                f"fit at {alt.hardware.topology} tp={alt.parallel.tp} dp={alt.parallel.dp} (next standard "
                f"{setup.hardware.name} topology up)"
            )
        kv_dtype = small_kv(setup)
        if kv_dtype is not None:
            kv_opts.append(
                kv_dtype_option_from_fit(
                    kv_alternative(setup, workload, kv_dtype, calibration, draft_bytes, draft_kv_of)
                )
            )
            done.append(f"fit with --kv-dtype {kv_dtype}")
    from k3plan.advice.splits import dividing_tp

    split_opts: tuple = ()
    # issue 36: the same chips before more chips, for a fit that fails; a fit that fits (thin or not) stays
    # numpy-free and fast (tests/budget/test_fit_numpy_free.py): plan's search is numpy
    if splits and not result.fits:
        from k3plan.advice.splits import split_options

        split_opts, how = split_options(
            setup_options, setup, workload, calibration=calibration, draft_bytes=draft_bytes
        )
        if how:
            done.insert(0, how)
    if binding is None and result.speed is not None:  # the options below are priced on the decode bound: like for like
        binding, tpot_s = result.speed.binding, _bound_tpot(result.speed)
    if binding in MEMORY_BOUND and speed_setup is not None and not headroom_short:  # thin: no larger batch
        batch_opts = batch_options(speed_setup, result, eff=eff, evidence=evidence, allow_cpu_probes=allow_cpu_probes)
        if batch_opts:
            done.append("decode roofline at batch " + ", ".join(str(o.batch) for o in batch_opts))
    x = inputs_from_fit_result(
        result,
        binding=binding,
        tpot_s=tpot_s,
        topology_options=tuple(topo_opts),
        split_options=split_opts,
        dividing_tp=dividing_tp(setup) if result.replicated else None,
        split=setup.parallel.label.replace("=", " ").replace(",", ""),
        kv_dtype_options=tuple(kv_opts),
        batch_options=batch_opts,
        time_by_part_s=time_by_part_s,
        spec_decode=spec_decode,
        sequence_groups=setup.parallel.dp if setup.stack.kv_cache.split_across_dp else 1,
    )
    return FitAdvice(rules=advise(x), alternatives=tuple(done), spec_decode=spec_decode, offload=offload)


def decode_time_by_part(dec, setup, eff) -> tuple[PartTime, ...]:
    """A compute-bound decode step's time by part: each part's FLOPs a device at the roofline's
    attained FLOP/s (peak x MFU), from the decode bound's own ``flops_per_device``."""
    rate = setup.hardware.flops_per_s_per_device(eff.compute_dtype) * eff.mfu
    return tuple(PartTime(part=k, seconds=v / rate) for k, v in dec.flops_per_device.items() if v > 0)


class Draft(_Frozen):
    """--spec-tokens' draft as the CLI resolves it: its bytes, what it is, its KV a token a device."""

    bytes: int  # whole draft, one copy
    what: str
    kv: DraftKv | None
    external: bool
    given_kv_bytes_per_token: int | None


def resolve_draft(setup, *, draft_bytes: str | None, draft_kv_bytes_per_token: int | None) -> Draft:
    """``--draft-bytes`` (text, e.g. 30GB) and ``--draft-kv-bytes-per-token`` -> the draft at ``setup``;
    an external draft with weights and no KV figure says its KV is not in the budget."""
    from k3plan.units import parse_bytes

    given = None if draft_bytes is None else parse_bytes(draft_bytes, what="--draft-bytes")
    nbytes, what = draft_bytes_for(setup, given)
    if draft_kv_bytes_per_token is not None and draft_kv_bytes_per_token > nbytes:
        # a layer's K and V projections hold kv_heads x head_dim x hidden parameters each, hidden (>= 8) times the
        # kv_heads x head_dim values a token writes to each, so even 4-bit weights outweigh an fp32 KV a token
        raise K3PlanError(
            f"--draft-kv-bytes-per-token {draft_kv_bytes_per_token:,}: more than the draft's weights ({nbytes:,} B); "
            "expected at most the weights (a layer's K and V projections alone hold hidden x the values a token "
            "writes; an n-gram drafter, 0 B, has no KV)"
        )
    kv = draft_kv_for(setup, external=given is not None, given_bytes_per_token=draft_kv_bytes_per_token)
    if kv is None and nbytes and given is not None:
        what += "; its KV cache is NOT in the budget (unknown): pass --draft-kv-bytes-per-token N"
    return Draft(
        bytes=nbytes,
        what=what,
        kv=kv,
        external=given is not None,
        given_kv_bytes_per_token=draft_kv_bytes_per_token,
    )


def fit_with_draft(
    setup,
    workload,
    *,
    spec_decoding: bool,
    draft_bytes: str | None,
    draft_kv_bytes_per_token: int | None,
    calibration=None,
):
    """The fit of ``setup`` with the speculative-decoding draft's weights and KV in the budget (none
    without ``spec_decoding``): (FitResult, Draft or None). fit and roofline both judge a setup so."""
    from k3plan.budget.fit import fit

    d = None
    if spec_decoding:
        d = resolve_draft(setup, draft_bytes=draft_bytes, draft_kv_bytes_per_token=draft_kv_bytes_per_token)
    result = fit(
        setup,
        workload,
        calibration=calibration,
        draft_bytes_per_device=draft_bytes_per_device(setup, d.bytes) if d else 0,
        draft_kv=d.kv if d else None,
    )
    return result, d


def draft_kv_of(d: Draft) -> DraftKvOf:
    """The draft's KV at another setup (an alternative's tp and KV dtype), for fit_advice."""
    import functools

    return functools.partial(draft_kv_for, external=d.external, given_bytes_per_token=d.given_kv_bytes_per_token)


def _bound_tpot(speed) -> float:
    """The decode bound's step of a fit's speed line: the TPOT the advice compares its options with (each option,
    a larger batch or a verify step, is priced on the bound; the headline may be measured, transferred or the
    model's: issue 46 item 7)."""
    return speed.ceiling_tpot_s if speed.ceiling_tpot_s is not None else speed.tpot_s
