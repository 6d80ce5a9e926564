"""The fit: every per-device term, the verdict, the capacity, and where each number came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import msgspec

from k3plan.budget.config import Config
from k3plan.budget.config import row as config_row
from k3plan.budget.engram import notes as engram_notes
from k3plan.budget.engram import tier_for as engram_tier_for
from k3plan.budget.fit_text import absorbed_notes, provenance, setup_warnings
from k3plan.budget.result import (
    Capacity,
    CompiledPoint,
    HardwareFacts,
    ModelFacts,
    ModelState,
    PerDevice,
    Provenance,
    Speed,
    Temp,
    Unverified,
)
from k3plan.budget.temp import point_terms
from k3plan.budget.temp_graph import VALIDATE_TEMP, TempGraph, validate_temps
from k3plan.engines.registry import engine_rules
from k3plan.engines.stack import Stack
from k3plan.errors import K3PlanError
from k3plan.evidence.calibration import Calibration
from k3plan.models.spec import ModelSpec
from k3plan.setup import Setup
from k3plan.sharding.mesh import Parallel
from k3plan.sharding.resolve import Fallback
from k3plan.step.cache import (
    CacheLayout,
    cache_layout,
    kv_state_crossover_tokens,
    stack_kv_bytes_per_token,
    state_bytes_per_slot,
)
from k3plan.step.memory import BudgetTerms
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


# the exit the budget's unverified temporaries give fit (3); under --serve the engine's start check decides the
# exit instead, and k3plan.app.fit says so in this warning's place
UNVERIFIED_EXIT = f"(exit 3, reason_code {ReasonCode.UNVERIFIED_TEMP.value})"
SERVE_UNVERIFIED = "(k3plan's own budget; under --serve the engine's start check above is the verdict and the exit)"


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
    temp_evidence: str = "analytic"  # budget.result.TEMP_EVIDENCE, as plan's row names it ("given": --calibration)
    # issue 50: set where it fits only on the analytic lower bound of a stage's temporaries (exit 3, not 0)
    unverified: Optional[Unverified] = None

    __exclude__ = ("reason", "temp_evidence")
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
    cal: Calibration,
    *,
    stage: str,
    x: int,
    analytic_bytes: int,
    kind: str = "",
    batch: int = 1,
    context: Optional[int] = None,
    xla_graph: bool = False,
) -> Optional[StageEvidence]:
    """The calibration's temp for ``stage`` at ``x`` (chunk tokens or context tokens), judged on the quantities the
    stage's temporaries grow with (k3plan.budget.measured_range: decode batch x context and ``batch``; prefill the
    chunk, and chunk x ``context`` where the graph is XLA ops, ``xla_graph``): inside the measured range
    max(analytic, the envelope of the points that dominate it); outside max(analytic, largest measured) with
    ``outside`` set (no evidence at this point: fit's verdict is FITS IF, never FITS); None when the file has no
    point for the stage. fit and plan both call this, so they agree."""
    from k3plan.budget.measured_range import stage_range

    got = stage_range(cal, stage=stage, x=x, batch=batch, context=context, xla_graph=xla_graph)
    if got is None:
        return None
    label = f"{kind} calibration" if kind else "calibration"
    if got.status == "measured":
        assert got.temp_bytes is not None
        under = " (the analytic bound is larger)" if analytic_bytes > got.temp_bytes else ""
        return StageEvidence(
            temp_bytes=max(analytic_bytes, got.temp_bytes),
            source=f"{label} {cal.path} ({cal.backend}, {got.detail}{under}; inside its range, {got.grows})",
        )
    if got.status == "refused":
        return StageEvidence(
            temp_bytes=None,
            source=f"{label} {cal.path}: refused",
            refused=got.detail,
            warning=f"prefill chunk refused by calibration: {got.detail}" if stage == "prefill" else got.detail,
        )
    points = cal.prefill if stage == "prefill" else cal.decode
    # the largest temp a compile that fitted measured (a refused point's bytes are what its OOM asked for, all of
    # HBM in the arguments' company); a file of refusals alone: those
    measured_max = max((p.temp_bytes for p in points if p.fits), default=max(p.temp_bytes for p in points))
    return StageEvidence(
        temp_bytes=max(analytic_bytes, measured_max),
        outside=got.detail,
        source=f"max(analytic, largest measured in {label} {cal.path}) — {got.detail}; not extrapolated (range {got.grows})",
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
    at: Optional[dict] = None,
    compiled: Optional[CompiledPoint] = None,
) -> _StageTemp:
    """``model``: where no calibration answers the stage, try the temp model for this (setup, workload); ``at``:
    calibrated_stage's batch, context and xla_graph; ``compiled``: fit --compile's temps, which answer first."""
    if compiled is not None:
        got_bytes, why = compiled.of(stage)
        if got_bytes is None:
            warnings.append(f"{stage} refused by the compile: {why}")
        return _StageTemp(bytes=got_bytes, source=compiled.source, refused=why or None)
    ev = None
    if cal is not None:
        ev = calibrated_stage(cal, stage=stage, x=x, analytic_bytes=analytic_bytes, kind=kind, **(at or {}))
    if ev is None:
        got = None if model is None else modelled_stage(*model, stage=stage, analytic_bytes=analytic_bytes)
        return got or _StageTemp(bytes=analytic_bytes)
    if ev.warning:
        warnings.append(ev.warning)
    return _StageTemp(bytes=ev.temp_bytes, source=ev.source, refused=ev.refused or None, outside=ev.outside or None)


def _temp(
    setup: Setup,
    w: Workload,
    cfg: Config[int],
    cal: Optional[Calibration],
    kind: str,
    warnings: list[str],
    evidence: bool = True,
    compiled: Optional[CompiledPoint] = None,
    graph: Optional[TempGraph] = None,
) -> tuple[Temp, _StageTemp, _StageTemp]:
    """Each stage's temporaries: the configuration's analytic bound (``Config.analytic_temps``, plan's too),
    replaced by fit --compile's where given, else the calibration's where one answers, else by the temp model's
    where it applies. ``graph``: k3plan's own graph's buffers instead (``budget.temp_graph``), no calibration or
    temp model consulted."""
    if graph is not None:
        gp, gd = validate_temps(setup, graph=graph, chunk=w.prefill_chunk_tokens, batch=w.batch,
                                context=w.context_tokens)  # fmt: skip
        pre, dec = point_terms(gp, True), point_terms(gd, True)
        p = _StageTemp(bytes=pre.total, source=VALIDATE_TEMP)
        d = _StageTemp(bytes=dec.total, source=VALIDATE_TEMP)
        return Temp(prefill_terms=pre.terms, decode_terms=dec.terms, prefill_bytes=p.bytes, decode_bytes=d.bytes), p, d
    pre, dec = (point_terms(t, bool(cfg.quantized)) for t in cfg.analytic_temps())
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
        at=dict(context=w.context_tokens, xla_graph=bool(cfg.xla_graph)),
        compiled=compiled,
    )
    d = _stage_temp(cal, stage="decode", x=w.context_tokens, analytic_bytes=dec.total, kind=kind, warnings=warnings,
                    model=model, at=dict(batch=w.batch), compiled=compiled)  # fmt: skip
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


@dataclass(frozen=True)
class _Row:
    """fit's configuration as one row of plan's assembly (``budget.config``), with a draft's KV added to every
    sequence where one is given (plan has no draft)."""

    cfg: Config[int]
    setup: Setup
    layout: CacheLayout  # the whole model's
    draft_kv: Optional[DraftKv]

    def at(self, temp: int) -> tuple[list[BudgetTerms[int]], BudgetTerms[int]]:
        """Every pipeline stage's budget terms with ``temp`` bytes of temporaries, and the binding one's."""
        per_stage, b = self.cfg.memory(temp)
        if self.draft_kv is not None and self.draft_kv.bytes_per_token_per_device:
            kv = self.draft_kv
            b = add_draft_kv(b, kv=kv, context_tokens=self.cfg.context, block_tokens=self.layout.block_tokens,
                             split_across_dp=bool(self.cfg.split_across_dp), dp=self.cfg.dp)  # fmt: skip
        return per_stage, b

    def stage_layout(self, b: BudgetTerms[int]) -> CacheLayout:
        """The binding stage's layout (the whole model's at pp 1)."""
        if self.setup.parallel.pp == 1:
            return self.layout
        st = self.setup.stages[int(b.stage)]
        return self.layout.for_stage(n_mla=st.n_mla, n_kda=st.n_kda)

    def capacity(self, b: BudgetTerms[int], refused: bool) -> tuple[int, int]:
        """(most sequences, longest context) of a binding stage's budget; a refused graph serves nothing."""
        room, extra = int(b.room_bytes), 0 if self.draft_kv is None else self.draft_kv.bytes_per_token_per_device
        ctx = self.stage_layout(b).max_context(room / int(b.sequences), extra_bytes_per_token=extra) if room > 0 else 0
        return (0, 0) if refused else (int(b.max_sequences), ctx)

    def code(self, b: BudgetTerms[int], weights_bytes: int, fallbacks: int) -> int:
        """``step.verdict.reject_code`` of a budget: the checks plan applies to every row."""
        return int(reject_code(fallbacks=fallbacks, weights_bytes=weights_bytes, usable=int(self.cfg.usable),
                               room_bytes=int(b.room_bytes), sequence_bytes=int(b.sequence_bytes),
                               max_sequences=int(b.max_sequences), concurrency=self.cfg.batch))  # fmt: skip

    def most_temp(self, temp: int, weights_bytes: int, free_bytes: int) -> int:
        """Issue 50: the most temporaries that still fit (to a MiB), from ``temp`` which does."""
        lo, hi = temp, temp + max(free_bytes, 0) + int(self.cfg.usable)  # fits at lo; hi surely does not
        while hi - lo > 1 << 20:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.code(self.at(mid)[1], weights_bytes, 0) == 0 else (lo, mid)
        return lo


def v41_charge_unread(setup: Setup, workload: Workload) -> str | None:
    """DeepSeek-V4.1 on a stack whose engine has a pool accounting of its own (``Dsv4Layout.request_charge``) that
    k3plan did not read for this model on this machine (the torch_tpu plugin's:
    step/dsv4_cache.engine_charge gives none): the KV and state here are the model's own formats, said so."""
    from k3plan.step.dsv4_cache import engine_charge

    spec, stack, hw = setup.model.spec, setup.stack, setup.hardware
    if spec.dsv4 is None or spec.dsv4.csa2 is None or engine_rules(stack.name).dsv4.request_charge is None:
        return None
    chunk, context = workload.prefill_chunk_tokens, workload.context_tokens
    if engine_charge(spec, stack, hardware=hw.name, vendor=hw.vendor, chunk=chunk, context=context) is not None:
        return None
    return (
        f"DeepSeek-V4.1 on {stack.name} on {hw.name}: the engine's own pool accounting for V4.1 here was not read, so "
        "the KV and state are the model's own formats; where k3plan read one (vLLM's CUDA and ROCm backends, SGLang: "
        "step/dsv4_cache.engine_charge) the engine's records and window pages hold several times fewer sequences"
    )


def _config(setup: Setup, workload: Workload, extra: int = 0) -> tuple[Config[int], CacheLayout]:
    """fit's one configuration row and its cache layout at ``workload`` (``extra``: bytes beside every stage's
    weights)."""
    spec, inv, hw, stack, par = setup.model.spec, setup.model.inventory, setup.hardware, setup.stack, setup.parallel
    chunk = workload.prefill_chunk_tokens
    reserve_fraction = stack.reserve_fraction(usable_bytes=hw.usable_bytes_per_device, tp=par.tp, pp=par.pp,
                                              chunk=chunk, vendor=hw.vendor, dp=par.dp)  # fmt: skip
    whole = cache_layout(spec=spec, stack=stack, parallel=par, hardware=hw.name, vendor=hw.vendor, chunk=chunk,
                         context=workload.context_tokens)  # fmt: skip
    cfg = config_row(spec=spec, stack=stack, expert_fmt=next((t.fmt for t in inv.text if t.role == "expert"), "bf16"),
                     cache=whole, usable=hw.usable_bytes_per_device, reserve_fraction=reserve_fraction, parallel=par,
                     chunk=chunk, context=workload.context_tokens, batch=workload.batch,
                     stages=[(sw.weights_bytes + extra, st.n_mla, st.n_kda)
                             for st, sw in zip(setup.stages, setup.stage_weights)])  # fmt: skip
    return cfg, whole


def forward_temp_at(setup: Setup, workload: Workload, tokens: int) -> tuple[int, str]:
    """The analytic temporaries of one forward of ``tokens`` tokens over ``tokens`` of context (the prefill terms
    fit's budget counts, ``Config.analytic_temps``, at that chunk): one layer's live buffers, a lower bound. For an
    engine's forward at a token count other than the budget's chunk (a CUDA graph's capture size)."""
    cfg, _ = _config(setup, replace(workload, prefill_chunk_tokens=tokens, context_tokens=tokens))
    pre, _ = cfg.analytic_temps()
    terms = point_terms(pre, bool(cfg.quantized))
    said = ", ".join(f"{t.name} {t.bytes:,} B" for t in terms.terms if t.bytes)
    return (
        terms.total,
        f"k3plan's analytic temporaries of a {tokens:,}-token forward (one layer's live buffers): {said}",
    )


def fit(
    setup: Setup,
    workload: Workload,
    *,
    calibration: Optional[Calibration] = None,
    draft_bytes_per_device: int = 0,
    evidence: bool = True,
    draft_kv: Optional[DraftKv] = None,
    compiled: Optional[CompiledPoint] = None,
    graph: Optional[TempGraph] = None,
) -> FitResult:
    """The per-device budget of one Setup: row 0 of plan, i.e. ``budget.config.Config.memory`` over one row
    and the verdict ``step.verdict.reject_code`` (the same checks plan applies to every row).
    ``draft_bytes_per_device``: a speculative-decoding draft's weights (k3plan.workload.draft), counted with the
    weights, so the verdict and the free bytes include them; ``draft_kv``: the draft's KV a token a device,
    counted with the KV of every sequence. Temp evidence: ``compiled`` (fit --compile: the step compiled at this
    point), else the ``calibration`` given, else (``evidence``) the best shipped one for this configuration
    (default_evidence), else the temp model, else the analytic model."""
    spec, inv, hw, stack, par, topo = (setup.model.spec, setup.model.inventory, setup.hardware, setup.stack,
                                       setup.parallel, setup.topology)  # fmt: skip
    if draft_bytes_per_device < 0:
        raise K3PlanError(f"draft bytes a device {draft_bytes_per_device}: expected >= 0")
    engram = engram_tier_for(setup)  # DeepSeek-V4.1: the Engram tables' tier (budget/engram.py); None otherwise
    extra = draft_bytes_per_device + (0 if engram is None else engram.hbm_bytes_per_device)  # with the weights
    warnings: list[str] = []
    kind = ""
    if calibration is None and evidence and compiled is None:
        calibration, kind = default_evidence(setup) or (None, "")
    cfg, whole = _config(setup, workload, extra)
    temp, temp_prefill, temp_decode = _temp(
        setup, workload, cfg, calibration, kind, warnings, evidence, compiled, graph
    )
    stages = [b for b in (temp.prefill_bytes, temp.decode_bytes) if b is not None]
    refused, temp_bytes = len(stages) < 2, max(stages, default=0)
    temp = replace(temp, binding="prefill" if (temp.prefill_bytes or 0) >= (temp.decode_bytes or 0) else "decode")
    one = _Row(cfg=cfg, setup=setup, layout=whole, draft_kv=draft_kv)
    per_stage, b = one.at(temp_bytes)
    layout = one.stage_layout(b)  # the binding stage's
    wb = setup.stage_weights[int(b.stage)] if par.pp > 1 else setup.weights
    wb = replace(wb, weights_bytes=wb.weights_bytes + extra) if extra else wb
    max_sequences, max_context = one.capacity(b, refused)
    low = None if temp.band_low() is None else one.capacity(one.at(int(temp.band_low() or 0))[1], refused)
    code = one.code(b, wb.weights_bytes, len(setup.plan.fallbacks))
    fits = code == 0 and not refused
    # issue 50: a stage's temp that is no evidence at this point never makes a plain FITS
    lower = [(st, why) for st, got, at in (("prefill", temp_prefill, temp.prefill_bytes),
                                           ("decode", temp_decode, temp.decode_bytes))
             for why in [_unverified_why(got)] if why and at is not None]  # fmt: skip
    unverified = None
    if fits and lower:  # how high may the temporaries go and still fit?
        most = one.most_temp(temp_bytes, wb.weights_bytes, int(b.free_bytes))
        unverified = Unverified(stages=[st for st, _ in lower], temp_bytes=temp_bytes, max_temp_bytes=most,
                                settle=settle_command(setup, workload), why=[why for _, why in lower])  # fmt: skip
        whys = list(dict.fromkeys(why for _, why in lower))  # the stages that share a why named together
        said = "; ".join(f"the {' and '.join(st for st, w in lower if w == why)} temporaries are {why}" for why in whys)
        warnings.append(
            f"temp unverified: {said}; no measured or compiled evidence at this point ({fmt_gib(temp_bytes)} counted): "
            f"it fits only if they stay <= {fmt_gib(most)} a device {UNVERIFIED_EXIT}; settle it: {unverified.settle}"
        )
    else:  # the outside stage's own warning where the verdict does not already say it
        warnings += [
            f"{st} temp: {got.outside}; using max(analytic, largest measured), not extrapolated"
            for st, got in (("prefill", temp_prefill), ("decode", temp_decode))
            if got.outside
        ]
    if engram is not None:
        warnings.extend(engram_notes(setup, engram, fits=fits, free_bytes=int(b.free_bytes)))
    unread = v41_charge_unread(setup, workload)
    if unread:
        warnings.append(unread)
    warnings += setup_warnings(setup, wb, context_tokens=workload.context_tokens)
    notes_pp = [
        f"pp {par.pp}: {st.describe()}: weights {fmt_gib(t.weights_bytes)}, free {fmt_gib(t.free_bytes)}"
        f" a device" + (" (binds)" if i == int(b.stage) else "")
        for i, (st, t) in enumerate(zip(setup.stages, per_stage))
    ] if par.pp > 1 else []  # fmt: skip
    return FitResult(
        model=ModelFacts(name=spec.name, total_params=inv.total_params, active_params=inv.active_params,
                         checkpoint_bytes=inv.checkpoint_bytes, runtime_weight_bytes=wb.runtime_weight_bytes),
        hardware=HardwareFacts(name=hw.name, topology=topo.text, chips=topo.chips, devices=topo.devices,
                               hosts=topo.hosts, slices=topo.slices, hbm_bytes_per_device=hw.hbm_bytes_per_device,
                               usable_bytes_per_device=hw.usable_bytes_per_device),
        parallel=par,
        stack=stack.label,  # with the options given (vllm:all2all_backend=...), as plan's rows name it
        workload=workload,
        model_state=model_state(spec, stack),
        per_device=PerDevice(weights_bytes=wb.weights_bytes, replicated_weights_bytes=wb.replicated_weights_bytes,
                             kv_bytes=int(b.kv_bytes), state_bytes=int(b.state_bytes), temp_bytes=temp_bytes,
                             reserve_bytes=int(b.reserve_bytes), free_bytes=int(b.free_bytes),
                             kv_bytes_per_token=int(b.kv_bytes_per_token),
                             state_bytes_per_sequence=int(b.state_bytes_per_sequence), sequences=int(b.sequences)),
        capacity=Capacity(max_context_tokens=min(max_context, spec.max_context or max_context),
                          memory_context_tokens=max_context, max_sequences=max_sequences,
                          kv_state_crossover_tokens=kv_state_crossover_tokens(spec, stack),
                          model_max_context_tokens=spec.max_context,
                          band_low_max_context_tokens=None if low is None else min(low[1], spec.max_context or low[1]),
                          band_low_max_sequences=None if low is None else low[0]),
        fits=fits,
        weights_fit=wb.weights_bytes <= hw.usable_bytes_per_device,
        replicated=[f for sw in setup.stage_weights for f in sw.fallbacks],  # every stage's (pp: a tensor is in one)
        warnings=warnings,
        notes=list(setup.notes) + notes_pp + list(spec.notes) + absorbed_notes(stack, wb),
        provenance=provenance(setup, layout=layout, chunk=workload.prefill_chunk_tokens, context=workload.context_tokens,
                              reserve_fraction=cfg.reserve_fraction,
                              draft_bytes_per_device=draft_bytes_per_device, engram=engram, draft_kv=draft_kv,
                              temp_prefill=temp_prefill.source,
                              temp_decode=temp_decode.source),
        temp=temp,
        weights_by_role=wb.by_role,
        cache_layout=layout,
        reason=code,
        unverified=unverified,
        temp_evidence="compiled" if compiled is not None else _evidence(kind, given=calibration is not None,
                                                                         modelled=bool(temp.prefill_band or temp.decode_band)),
    )  # fmt: skip


def _unverified_why(got: _StageTemp) -> str:
    """Why a stage's temp is no evidence at this point ("": it is evidence): the analytic lower bound, or a
    calibration's stage outside its measured range (k3plan.budget.measured_range)."""
    if got.source == ANALYTIC_TEMP:
        return "the analytic lower bound"
    if got.source == VALIDATE_TEMP:  # fit's --graph: k3plan's own graph's buffers from shapes (budget.temp_graph)
        return "k3plan graph buffers from shapes"
    if got.outside:
        return (
            f"outside the calibration's measured range ({got.outside}; counted at max(analytic, largest measured), "
            f"not extrapolated)"
        )
    return ""


def _evidence(kind: str, *, given: bool, modelled: bool) -> str:
    """Where the temporaries come from, in plan's words (budget.result.TEMP_EVIDENCE; "given": --calibration)."""
    if kind:  # a shipped calibration (default_evidence)
        return "measured" if kind == "measured" else "compiled"
    return "given" if given else "temp model" if modelled else "analytic"


def model_state(spec: ModelSpec, stack: Stack) -> ModelState:
    """The model's cache a token and state a sequence, whole model, one copy, in the stack's dtypes."""
    return ModelState(
        kv_bytes_per_token=stack_kv_bytes_per_token(spec, stack),
        state_bytes_per_sequence=state_bytes_per_slot(spec, stack),
        kv_dtype=stack.kv_cache.dtype
        if spec.dsv4 is None
        else "fp8_ds_mla"
        if spec.dsv4.csa2 is None
        else "fp4_csa2",  # V4: the engines' one format; V4.1: its FP4 CSA2 entries (step/dsv4_cache)
        recurrent_dtype=stack.state.recurrent_dtype,
        conv_dtype=stack.state.conv_dtype,
    )


# k3plan.validate.targets.TPU_GENERATIONS inverted (budget/ does not import validate/; a test holds them equal)
VALIDATE_TARGET_OF = {"tpu-v7x": "tpu7x", "tpu-v6e": "v6e", "tpu-v5p": "v5p", "tpu-v5e": "v5e"}


def settle_command(setup: Setup, w: Workload) -> str:
    """The command that replaces an unverified temp with the compiler's (issue 50): on a TPU, fit --compile with
    the same flags (the step compiled deviceless for the topology at this point); off a TPU, validate on the
    machine itself, its calibration saved and handed back to fit."""
    hw, par = setup.hardware, setup.parallel
    model = "" if setup.model.name == "kimi-k3" else f" -m {setup.model.name}"
    split = f"-H {hw.name} -t {setup.topology.text} --tp {par.tp}" + (f" --dp {par.dp}" if par.dp > 1 else "")
    split += f" --pp {par.pp}" if par.pp > 1 else ""
    split += f" --stack {setup.stack.name}{model}"
    point = f"--batch {w.batch} --context {w.context_tokens}"
    if setup.model.overrides:  # fit has no flag for fields set over the config: the command's model is not -m's
        said = ", ".join(f"{k} {v:,}" for k, v in setup.model.overrides)
        return (
            f"k3plan fit --compile {split} {point} --chunk {w.prefill_chunk_tokens} compiles the bundled "
            f"{setup.model.name}, not the model built with {said} (fit has no flag for those)"
            if hw.name in VALIDATE_TARGET_OF
            else f"no command: fit has no flag for {setup.model.name} built with {said}"
        )
    if hw.name in VALIDATE_TARGET_OF:
        return f"k3plan fit --compile {split} {point} --chunk {w.prefill_chunk_tokens}"
    return (
        f"k3plan validate --target local {split} {point} --tokens {w.prefill_chunk_tokens} --save-calibration "
        f"temp.yaml && k3plan fit {split} {point} --chunk {w.prefill_chunk_tokens} --calibration temp.yaml (on the "
        f"machine itself: no deviceless compile for {hw.name})"
    )
