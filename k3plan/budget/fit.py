"""The fit: every per-device term, the verdict, the capacity, and where each number came from."""

from __future__ import annotations

from typing import Any, Optional

import msgspec

from k3plan.budget.engram import notes as engram_notes
from k3plan.budget.engram import tier_for as engram_tier_for
from k3plan.budget.result import (
    Capacity,
    HardwareFacts,
    ModelFacts,
    ModelState,
    PerDevice,
    Provenance,
    Speed,
    Temp,
    Unverified,
)
from k3plan.budget.temp import decode_temp, prefill_temp
from k3plan.engines.flags import engine_offers_kv
from k3plan.engines.stack import Stack
from k3plan.errors import K3PlanError
from k3plan.evidence.calibration import Calibration, envelope
from k3plan.models.spec import ModelSpec
from k3plan.setup import Setup, engine_refusals
from k3plan.sharding.mesh import Parallel
from k3plan.sharding.resolve import Fallback
from k3plan.step.cache import (
    CacheLayout,
    cache_layout,
    kv_state_crossover_tokens,
    stack_kv_bytes_per_token,
    state_bytes_per_slot,
)
from k3plan.step.collective import Collective, cross_node_ep_warning, scale_out_note
from k3plan.step.memory import BudgetTerms
from k3plan.step.stages import stage_budgets
from k3plan.step.terms import Named, RolesBytes, term_map
from k3plan.step.verdict import ReasonCode, reject_code
from k3plan.structs import Frozen, replace
from k3plan.units import DEFAULT_CONTEXT_TOKENS, DEFAULT_PREFILL_CHUNK_TOKENS, fmt_gib
from k3plan.workload.draft import DraftKv, add_draft_kv

MAX_TOKENS = 1 << 30  # beyond a billion tokens a context or chunk is a typo, not a plan
MAX_SEQUENCES = 1 << 20  # beyond a million concurrent sequences a batch is a typo, not a deployment


class Workload(Named):
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    batch: int = 1
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS


def check_workload(
    *, context_tokens: int, batch: int, prefill_chunk_tokens: Optional[int], batch_flag: str = "--batch"
) -> Workload:
    """``batch_flag``: the option the batch came from, named in the error (report's is --concurrency)."""
    for flag, v in (("--context", context_tokens), (batch_flag, batch), ("--chunk", prefill_chunk_tokens)):
        if v is not None and v < 1:
            raise K3PlanError(f"{flag} {v}: expected a positive integer")
        most = MAX_SEQUENCES if flag == batch_flag else MAX_TOKENS
        if v is not None and v > most:
            raise K3PlanError(f"{flag} {v}: absurdly large; expected at most {most:,}")
    return Workload(
        context_tokens=context_tokens,
        batch=batch,
        prefill_chunk_tokens=prefill_chunk_tokens or min(DEFAULT_PREFILL_CHUNK_TOKENS, context_tokens),
    )


class FitResult(Frozen):
    model: ModelFacts
    hardware: HardwareFacts
    parallel: Parallel
    stack: str
    workload: Workload
    model_state: ModelState
    per_device: PerDevice
    capacity: Capacity
    fits: bool
    weights_fit: bool
    replicated: list[Fallback]
    warnings: list[str]
    notes: list[str]
    provenance: Provenance
    temp: Temp = msgspec.field(default_factory=Temp)
    weights_by_role: RolesBytes = ()  # bytes a device by tensor role
    cache_layout: Optional[CacheLayout] = None
    speed: Optional[Speed] = None  # filled by the CLI: decode bound at this workload
    reason: int = 0  # k3plan.step.verdict code; 0 = feasible; not in the JSON
    # issue 50: set where it fits only on the analytic lower bound of a stage's temporaries (exit 3, not 0)
    unverified: Optional[Unverified] = None

    __exclude__ = ("reason",)
    __dump_with__ = {"weights_by_role": term_map}

    @property
    def unverified_max_temp_bytes(self) -> Optional[int]:
        return None if self.unverified is None else self.unverified.max_temp_bytes

    def _dump_extra(self, out):
        for k in ("speed", "cache_layout"):  # absent: {}
            if out[k] is None:
                out[k] = {}
        if out.get("unverified") is None:  # the JSON contract: the key appears when it says something
            out.pop("unverified", None)
        return out


ANALYTIC_TEMP = (
    "analytic temp model (k3plan.budget.temp): live buffers of one layer, a lower bound; compiled "
    "graphs need more (reports/validation/README.md); no shipped calibration matches this "
    "configuration: pass --calibration"
)


class StageEvidence(Frozen):
    """One stage's temp from a calibration at one chunk (prefill) or context (decode)."""

    temp_bytes: Optional[int]  # None: the measured/compiled graph ran out of memory here
    source: str
    refused: str = ""
    outside: str = ""
    warning: str = ""


def calibrated_stage(
    cal: Calibration, *, stage: str, x: int, analytic_bytes: int, kind: str = ""
) -> Optional[StageEvidence]:
    """The calibration's temp for ``stage`` at ``x`` (chunk tokens or context tokens): the envelope of
    measured points (never a fitted slope); outside the measured range max(analytic, largest measured);
    None when the file has no point for the stage. fit and plan both call this, so they agree."""
    points = (
        [(p.tokens, p.temp_bytes, p.fits) for p in cal.prefill]
        if stage == "prefill"
        else [(p.context, p.temp_bytes, p.fits) for p in cal.decode]
    )
    if not points:
        return None
    label = f"{kind} calibration" if kind else "calibration"
    env = envelope(points, x, what="chunk" if stage == "prefill" else "context")
    if env.status == "measured":
        return StageEvidence(temp_bytes=env.temp_bytes, source=f"{label} {cal.path} ({cal.backend}, {env.detail})")
    if env.status == "refused":
        return StageEvidence(
            temp_bytes=None,
            source=f"{label} {cal.path}: refused",
            refused=env.detail,
            warning=f"prefill chunk refused by calibration: {env.detail}" if stage == "prefill" else env.detail,
        )
    measured_max = max(p[1] for p in points)
    return StageEvidence(
        temp_bytes=max(analytic_bytes, measured_max),
        outside=env.detail,
        source=f"max(analytic, largest measured in {label} {cal.path}) — {env.detail}; not extrapolated",
        warning=f"{stage} temp: {env.detail}; using max(analytic, largest measured), not extrapolated",
    )


def default_evidence(setup: Setup) -> Optional[tuple[Calibration, str]]:
    """The best shipped calibration for this configuration (k3plan.evidence: measured > compiled)."""
    from k3plan.evidence.calibrations import best_calibration

    par = setup.parallel
    return best_calibration(
        model=setup.model.name,
        hardware=setup.hardware.name,
        topology=setup.topology.text,
        tp=par.tp,
        ep=par.ep,
        dp=par.dp,
        stack=setup.stack.name,
        kv_dtype=setup.stack.kv_cache.dtype,
    )


class _StageTemp(Frozen):
    """One stage's temp bytes (None: the calibration refuses the graph), where they come from, and
    the calibration's remarks."""

    bytes: Optional[int]
    source: str = ANALYTIC_TEMP
    refused: Optional[str] = None
    outside: Optional[str] = None
    band: Optional[tuple[int, int]] = None


def modelled_stage(setup: Setup, w: Workload, *, stage: str, analytic_bytes: int) -> Optional[_StageTemp]:
    """Tier (c): the shipped temp model's band for one stage (k3plan.budget.temp_model), counted at its
    upper end and never under the analytic bound; None where the model was not checked on this model,
    hardware kind and stack. A prefill chunk is read into a cache of the chunk's size, as the calibrations
    are keyed."""
    from k3plan.budget.temp_model import describe_model, load_temp_model, modelled

    tm = load_temp_model()
    if not tm.applies_to(setup):
        return None
    if stage == "prefill":
        at = dict(batch=1, tokens=w.prefill_chunk_tokens, context=w.prefill_chunk_tokens)
    else:
        at = dict(batch=w.batch, tokens=1, context=w.context_tokens)
    _, lo, hi = modelled(tm, setup, stage=stage, **at)
    lo, hi = max(lo, analytic_bytes), max(hi, analytic_bytes)
    return _StageTemp(bytes=hi, source=describe_model(tm, setup.stack.name), band=(lo, hi))


def _stage_temp(
    cal: Optional[Calibration],
    *,
    stage: str,
    x: int,
    analytic_bytes: int,
    kind: str,
    warnings: list[str],
    model: Optional[tuple[Setup, Workload]] = None,
) -> _StageTemp:
    """``model``: where no calibration answers the stage, try the temp model for this (setup, workload)."""
    ev = None if cal is None else calibrated_stage(cal, stage=stage, x=x, analytic_bytes=analytic_bytes, kind=kind)
    if ev is None:
        got = None if model is None else modelled_stage(*model, stage=stage, analytic_bytes=analytic_bytes)
        return got or _StageTemp(bytes=analytic_bytes)
    if ev.warning:
        warnings.append(ev.warning)
    return _StageTemp(bytes=ev.temp_bytes, source=ev.source, refused=ev.refused or None, outside=ev.outside or None)


def _temp(
    setup: Setup,
    w: Workload,
    cal: Optional[Calibration],
    kind: str,
    warnings: list[str],
    expert_fmt: str,
    evidence: bool = True,
) -> tuple[Temp, _StageTemp, _StageTemp]:
    kw: dict[str, Any] = dict(spec=setup.model.spec, stack=setup.stack, parallel=setup.parallel, expert_fmt=expert_fmt)
    pre = prefill_temp(chunk_tokens=w.prefill_chunk_tokens, context_tokens=w.context_tokens, **kw)
    dec = decode_temp(batch=w.batch, context_tokens=w.context_tokens, **kw)
    if cal is not None and not kind:
        check_calibration_matches(setup, cal, warnings)
    # tier (c) only where no calibration applies at all (plan's apply_temp_model models the same rows): a
    # calibration without points for a stage leaves that stage analytic in both
    model = (setup, w) if evidence and cal is None else None
    p = _stage_temp(
        cal,
        stage="prefill",
        x=w.prefill_chunk_tokens,
        analytic_bytes=pre.total,
        kind=kind,
        warnings=warnings,
        model=model,
    )
    d = _stage_temp(
        cal, stage="decode", x=w.context_tokens, analytic_bytes=dec.total, kind=kind, warnings=warnings, model=model
    )
    temp = Temp(
        prefill_terms=pre.terms,
        decode_terms=dec.terms,
        prefill_bytes=p.bytes,
        decode_bytes=d.bytes,
        prefill_refused=p.refused,
        prefill_outside=p.outside,
        decode_refused=d.refused,
        decode_outside=d.outside,
        prefill_band=p.band,
        decode_band=d.band,
    )
    return temp, p, d


def check_calibration_matches(setup: Setup, cal: Calibration, warnings: list[str]) -> None:
    have = {
        "model": setup.model.name,
        "hardware": setup.hardware.name,
        "topology": setup.topology.text,
        "tp": setup.parallel.tp,
        "stack": setup.stack.name,
    }
    want = {"model": cal.model, "hardware": cal.hardware, "topology": cal.topology, "tp": cal.tp, "stack": cal.stack}
    diff = [f"{k} {want[k]} (here {have[k]})" for k in have if str(have[k]) != str(want[k])]
    if diff:
        warnings.append(f"calibration {cal.path} was measured for a different configuration: " + ", ".join(diff))
    if cal.backend.lower() == "cpu":
        warnings.append(
            f"calibration {cal.path} comes from the CPU backend: its temp is not representative of {setup.hardware.kind.upper()}"
        )


def fit(
    setup: Setup,
    workload: Workload,
    *,
    calibration: Optional[Calibration] = None,
    draft_bytes_per_device: int = 0,
    evidence: bool = True,
    draft_kv: Optional[DraftKv] = None,
) -> FitResult:
    """The per-device budget of one Setup: ``k3plan.step.stages.stage_budgets`` at one point, the
    verdict ``k3plan.step.verdict.reject_code`` (the same checks plan applies to every column).
    ``draft_bytes_per_device``: a speculative-decoding draft's weights (k3plan.workload.draft),
    counted with the weights, so the verdict and the free bytes include them; ``draft_kv``: the draft's
    KV a token a device (k3plan.workload.draft.DraftKv), counted with the KV of every sequence. Temp evidence: the
    ``calibration`` given, else (``evidence``) the best shipped one for this configuration
    (default_evidence), else the analytic model, named as such."""
    spec, inv, hw, stack, par = setup.model.spec, setup.model.inventory, setup.hardware, setup.stack, setup.parallel
    warnings: list[str] = []
    wb = setup.weights
    if draft_bytes_per_device < 0:
        raise K3PlanError(f"draft bytes a device {draft_bytes_per_device}: expected >= 0")
    engram = engram_tier_for(setup)  # DeepSeek-V4.1: the Engram tables' tier (budget/engram.py); None otherwise
    if engram is not None:  # what a device holds of it counts with the weights, as a draft's does
        draft_bytes_per_device += engram.hbm_bytes_per_device
    if draft_bytes_per_device:
        wb = replace(wb, weights_bytes=wb.weights_bytes + draft_bytes_per_device)
    layout = cache_layout(spec=spec, stack=stack, parallel=par)
    expert_fmt = next((t.fmt for t in inv.text if t.role == "expert"), "bf16")
    kind = ""
    if calibration is None and evidence:
        found = default_evidence(setup)
        if found is not None:
            calibration, kind = found
    temp, temp_prefill, temp_decode = _temp(setup, workload, calibration, kind, warnings, expert_fmt, evidence)
    stages = [b for b in (temp.prefill_bytes, temp.decode_bytes) if b is not None]
    refused = len(stages) < 2
    temp_bytes = max(stages) if stages else 0
    temp = replace(temp, binding="prefill" if (temp.prefill_bytes or 0) >= (temp.decode_bytes or 0) else "decode")

    usable = hw.usable_bytes_per_device
    reserve_auto = stack.reserve_auto(vendor=hw.vendor)
    reserve_fraction = stack.reserve_fraction(
        usable_bytes=usable,
        tp=par.tp,
        pp=par.pp,
        chunk=workload.prefill_chunk_tokens,
        vendor=hw.vendor,
        dp=par.dp,
    )
    whole_layout = layout  # the whole model's layout (pp rebinds ``layout`` to a stage's below)

    def budget_at(temp_b: int) -> tuple[list[BudgetTerms[int]], BudgetTerms[int]]:
        """Every pipeline stage's budget terms with ``temp_b`` of temporaries, and the binding one's."""
        per_stage, b = stage_budgets(
            spec,
            stages=[
                (sw.weights_bytes + draft_bytes_per_device, stage.n_mla, stage.n_kda)
                for stage, sw in zip(setup.stages, setup.stage_weights)  # one stage unless --pp (step/stages.py)
            ],
            usable=usable,
            reserve_fraction=reserve_fraction,
            split_across_dp=stack.kv_cache.split_across_dp,
            dp=par.dp,
            temp=temp_b,
            cache=whole_layout,
            context=workload.context_tokens,
            batch=workload.batch,
            temp_in_reserve=bool(stack.kv_pool and stack.kv_pool.temps_in_reserve),
            state_slots=whole_layout.state_slots_per_sequence,
            state_layer_groups=whole_layout.state_layer_groups,
        )
        if draft_kv is not None and draft_kv.bytes_per_token_per_device:
            b = add_draft_kv(
                b,
                kv=draft_kv,
                context_tokens=workload.context_tokens,
                block_tokens=whole_layout.block_tokens,
                split_across_dp=stack.kv_cache.split_across_dp,
                dp=par.dp,
            )
        return per_stage, b

    def capacity_of(b: BudgetTerms[int]) -> tuple[int, int]:
        """(most sequences, longest context) of a binding stage's budget."""
        lay = layout
        if par.pp > 1:
            st = setup.stages[int(b.stage)]
            lay = layout.for_stage(n_mla=st.n_mla, n_kda=st.n_kda)
        seqs, room = int(b.sequences), int(b.room_bytes)
        extra = 0 if draft_kv is None else draft_kv.bytes_per_token_per_device
        ctx = lay.max_context(room / seqs, extra_bytes_per_token=extra) if room > 0 else 0
        return (0, 0) if refused else (int(b.max_sequences), ctx)  # a refused graph serves nothing

    per_stage, b = budget_at(temp_bytes)
    if par.pp > 1:
        binding = setup.stages[int(b.stage)]
        layout = layout.for_stage(n_mla=binding.n_mla, n_kda=binding.n_kda)
        wb = setup.stage_weights[int(b.stage)]
        if draft_bytes_per_device:
            wb = replace(wb, weights_bytes=wb.weights_bytes + draft_bytes_per_device)
        warnings_pp = [
            f"pp {par.pp}: {st.describe()}: weights {fmt_gib(t.weights_bytes)}, free {fmt_gib(t.free_bytes)}"
            f" a device" + (" (binds)" if st is binding else "")
            for st, t in zip(setup.stages, per_stage)
        ]
    else:
        warnings_pp = []
    seqs, room = int(b.sequences), int(b.room_bytes)
    max_sequences, max_context = capacity_of(b)
    low_temp = temp.band_low()
    low_sequences: Optional[int] = None
    low_context: Optional[int] = None
    if low_temp is not None:  # tier (c): capacity at the band's lower end too (the verdict keeps the upper)
        low_sequences, low_context = capacity_of(budget_at(low_temp)[1])
    topo = setup.topology
    code = int(
        reject_code(
            fallbacks=len(setup.plan.fallbacks),
            weights_bytes=wb.weights_bytes,
            usable=usable,
            room_bytes=room,
            sequence_bytes=int(b.sequence_bytes),
            max_sequences=int(b.max_sequences),
            concurrency=workload.batch,
        )
    )
    fits = code == 0 and not refused
    lower = [
        st
        for st, got, b_st in (("prefill", temp_prefill, temp.prefill_bytes), ("decode", temp_decode, temp.decode_bytes))
        if got.source == ANALYTIC_TEMP and b_st is not None
    ]
    unverified = None
    if fits and lower:  # issue 50: never FITS on a lower bound; how high may the temporaries go and still fit?

        def passes(t: int) -> bool:
            bt = budget_at(t)[1]
            return 0 == int(
                reject_code(
                    fallbacks=0,
                    weights_bytes=wb.weights_bytes,
                    usable=usable,
                    room_bytes=int(bt.room_bytes),
                    sequence_bytes=int(bt.sequence_bytes),
                    max_sequences=int(bt.max_sequences),
                    concurrency=workload.batch,
                )
            )

        lo, hi = temp_bytes, temp_bytes + max(int(b.free_bytes), 0) + usable  # passes(lo); hi surely does not
        while hi - lo > 1 << 20:  # to a MiB
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if passes(mid) else (lo, mid)
        unverified = Unverified(
            stages=lower, temp_bytes=temp_bytes, max_temp_bytes=lo, settle=settle_command(setup, workload)
        )
        warnings.append(
            f"temp unverified: the {' and '.join(lower)} temporaries ({fmt_gib(temp_bytes)} counted) are the analytic "
            f"lower bound, with no measured or compiled evidence for this configuration: it fits only if they stay "
            f"<= {fmt_gib(lo)} a device (exit 3, reason_code {ReasonCode.UNVERIFIED_TEMP.value}); settle it: "
            f"{unverified.settle}"
        )
    if engram is not None:
        warnings.extend(engram_notes(setup, engram, fits=fits, free_bytes=int(b.free_bytes)))
    if setup.plan.fallbacks:
        warnings.append(
            f"{len(setup.plan.fallbacks)} tensor dimension(s) fell back to replication "
            f"(+{fmt_gib(sum(f.bytes_replicated for f in wb.fallbacks))} a device)"
        )
    beyond = spec.context_warning(workload.context_tokens)
    if beyond:
        warnings.append(beyond)
    warnings += engine_refusals(setup.model, stack)
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
    crossover = kv_state_crossover_tokens(spec, stack)
    copies = wb.role_bytes("mla_absorbed")
    notes_copies = []
    if copies and stack.absorbed_copies is not None:
        src = stack.absorbed_copies.sources[0]
        notes_copies.append(
            f"absorbed MLA: stack {stack.name} splits W_UK / W_UV out of each kv_b_proj at load "
            f"and keeps kv_b_proj for prefill: {copies:,} B a device more "
            f"(weights, mla_absorbed), which decode reads instead of kv_b_proj ({src.text()})"
        )
    return FitResult(
        model=ModelFacts(
            name=spec.name,
            total_params=inv.total_params,
            active_params=inv.active_params,
            checkpoint_bytes=inv.checkpoint_bytes,
            runtime_weight_bytes=wb.runtime_weight_bytes,
        ),
        hardware=HardwareFacts(
            name=hw.name,
            topology=topo.text,
            chips=topo.chips,
            devices=topo.devices,
            hosts=topo.hosts,
            slices=topo.slices,
            hbm_bytes_per_device=hw.hbm_bytes_per_device,
            usable_bytes_per_device=usable,
        ),
        parallel=par,
        stack=stack.label,  # with the options given (vllm:all2all_backend=...), as plan's rows name it
        workload=workload,
        model_state=ModelState(
            kv_bytes_per_token=stack_kv_bytes_per_token(spec, stack),
            state_bytes_per_sequence=state_bytes_per_slot(spec, stack),
            kv_dtype=stack.kv_cache.dtype
            if spec.dsv4 is None
            else "fp8_ds_mla"
            if spec.dsv4.csa2 is None
            else "fp4_csa2",  # V4: the engines' one format; V4.1: its FP4 CSA2 entries (step/dsv4_cache)
            recurrent_dtype=stack.state.recurrent_dtype,
            conv_dtype=stack.state.conv_dtype,
        ),
        per_device=PerDevice(
            weights_bytes=wb.weights_bytes,
            replicated_weights_bytes=wb.replicated_weights_bytes,
            kv_bytes=int(b.kv_bytes),
            state_bytes=int(b.state_bytes),
            temp_bytes=temp_bytes,
            reserve_bytes=int(b.reserve_bytes),
            free_bytes=int(b.free_bytes),
            kv_bytes_per_token=int(b.kv_bytes_per_token),
            state_bytes_per_sequence=int(b.state_bytes_per_sequence),
            sequences=seqs,
        ),
        capacity=Capacity(
            max_context_tokens=min(max_context, spec.max_context or max_context),
            memory_context_tokens=max_context,
            max_sequences=max_sequences,
            kv_state_crossover_tokens=crossover,
            model_max_context_tokens=spec.max_context,
            band_low_max_context_tokens=None
            if low_context is None
            else min(low_context, spec.max_context or low_context),
            band_low_max_sequences=low_sequences,
        ),
        fits=fits,
        weights_fit=wb.weights_bytes <= usable,
        replicated=[f for sw in setup.stage_weights for f in sw.fallbacks],  # every stage's (pp: a tensor is in one)
        warnings=warnings,
        notes=list(setup.notes) + warnings_pp + list(spec.notes) + notes_copies,
        provenance=Provenance(
            weights=f"analytic: inventory x {stack.name} runtime formats x ShardSpecs ({setup.plan.source})"
            + (
                f"; + draft weights {draft_bytes_per_device:,} B a device (speculative decoding)"
                if draft_bytes_per_device
                else ""
            ),
            kv=(
                _dsv4_text(spec, stack, "kv")
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
                _dsv4_text(spec, stack, "state")
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
            temp_prefill=temp_prefill.source,
            temp_decode=temp_decode.source,
            reserve=(
                f"stack {stack.name}: {stack.reserve.fraction_of_usable_hbm:.0%} of usable HBM ({stack.reserve.source})"
                if reserve_auto is None
                else f"stack {stack.name}: {reserve_fraction:.1%} of usable HBM, mem_fraction_static "
                f"{1 - reserve_fraction:.3f} as SGLang derives it for {hw.name}, "
                + (
                    f"DP attention: tp_size {par.tp * par.dp} (tp {par.tp} x dp {par.dp}) x pp {par.pp}, the decode "
                    f"graphs padded for dp_size {par.dp}, chunk {stack.engine_chunk(workload.prefill_chunk_tokens, dp=par.dp)} "
                    f"(the flag, {workload.prefill_chunk_tokens} a DP group"
                    + (f": {stack.dp_attention_chunk.sources[0].text()}" if stack.dp_attention_chunk else "")
                    + ") "
                    if stack.dp_attention
                    else f"tp {par.tp} x pp {par.pp}, chunk {workload.prefill_chunk_tokens} "
                )
                + (
                    "-- a fraction <= 0: the MiB it reserves exceed the GPU's, no room for the weights (a smaller "
                    "--chunk or mem_fraction_static leaves some) "
                    if reserve_fraction >= 1
                    else ""
                )
                + f"({reserve_auto.source.text()}; prefill graph "
                f"{'on' if reserve_auto.prefill_graph else 'off'}: {reserve_auto.prefill_graph_source.text()})"
            )
            + (
                f"; the engine runs the temporaries out of it (kv_pool {stack.kv_pool.method}), so only what they "
                "leave of it is counted here"
                if stack.kv_pool is not None and stack.kv_pool.temps_in_reserve
                else ""
            ),
            hbm=hw.sources().get("usable_hbm_per_device", hw.path),
            stack_sources=f"kv: {stack.kv_cache.source}; state: {stack.state.source}; paging: {stack.paging.source}",
        ),
        temp=temp,
        weights_by_role=wb.by_role,
        cache_layout=layout,
        reason=code,
        unverified=unverified,
    )


# k3plan.validate.targets.TPU_GENERATIONS inverted (budget/ does not import validate/; a test holds them equal)
VALIDATE_TARGET_OF = {"tpu-v7x": "tpu7x", "tpu-v6e": "v6e", "tpu-v5p": "v5p", "tpu-v5e": "v5e"}


def settle_command(setup: Setup, w: Workload) -> str:
    """The command that replaces an analytic temp with the compiler's (issue 50): validate compiled deviceless
    for the TPU topology, its calibration saved and handed back to fit; off a TPU, validate on the machine."""
    hw, par = setup.hardware, setup.parallel
    model = "" if setup.model.name == "kimi-k3" else f" -m {setup.model.name}"
    split = f"-H {hw.name} -t {setup.topology.text} --tp {par.tp}" + (f" --dp {par.dp}" if par.dp > 1 else "")
    split += f" --pp {par.pp}" if par.pp > 1 else ""
    split += f" --stack {setup.stack.name}{model}"
    gen = VALIDATE_TARGET_OF.get(hw.name)
    target = f"{gen}:{setup.topology.text}" if gen else "local"
    cmd = (
        f"k3plan validate --target {target} {split} --batch {w.batch} --context {w.context_tokens} "
        f"--tokens {w.prefill_chunk_tokens} --save-calibration temp.yaml && k3plan fit {split} --batch {w.batch} "
        f"--context {w.context_tokens} --chunk {w.prefill_chunk_tokens} --calibration temp.yaml"
    )
    return cmd if gen else f"{cmd} (on the machine itself: no deviceless compile for {hw.name})"


def _dsv4_text(spec: ModelSpec, stack: Stack, what: str) -> str:
    """DeepSeek-V4's KV and state provenance (step/dsv4_cache)."""
    from k3plan.step import dsv4_cache

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
