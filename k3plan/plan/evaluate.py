"""Every per-configuration figure of the search, as columns: the step's functions
(``k3plan.step``) evaluated over one entry per configuration.

Weights depend only on (stack, tp, dp, ep): they are computed once per unique mesh and stack (a
few hundred to ~1,700 meshes) and gathered; everything else is numpy over all configurations.
Per-stack and per-hardware figures are looked up once and gathered by index.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Any

import numpy as np

from k3plan.budget.config import cache_columns, gather_columns
from k3plan.budget.config import columns as config_columns
from k3plan.engines.dsv4_layout import EntrySizes
from k3plan.engines.registry import engine_rules
from k3plan.evidence.value import Evidence, measures_hardware
from k3plan.models import Model
from k3plan.plan.space import Space
from k3plan.plan.table import Evaluated, StepColumns, TempCols
from k3plan.roofline.bounds import Efficiency
from k3plan.roofline.comm import stack_comm_inputs
from k3plan.roofline.latency import latency
from k3plan.step.collective import Collective
from k3plan.step.comm import comm_terms, comm_time, padded_tokens
from k3plan.step.decode import decode_terms
from k3plan.step.dsv4_cache import stack_sizes
from k3plan.step.dtypes import BYTES
from k3plan.step.memory import CacheTerms
from k3plan.step.op import Op
from k3plan.step.ops import COLLECTIVE_NAMES, WeightGroup
from k3plan.step.p2p import p2p_terms, p2p_time
from k3plan.step.stages import microbatch
from k3plan.step.weights import mesh_weight_groups, mesh_weights, stage_classes


def _per(items: list, fn, index: np.ndarray, dtype=np.int64) -> np.ndarray:
    return np.array([fn(x) for x in items], dtype=dtype)[index]


def _dsv4_sizes(spec, space: Space) -> EntrySizes | None:
    """DeepSeek-V4's records a column, as each column's stack's engine stores them (step.dsv4_cache.stack_sizes);
    None for every other model and DeepSeek-V4.1."""
    per = [stack_sizes(spec, st.name) for st in space.stacks]
    if any(z is None for z in per):
        return None
    return EntrySizes(**{f.name: _per(per, attrgetter(f.name), space.cols.stack) for f in fields(EntrySizes)})


def reserve_columns(*, space) -> np.ndarray:
    """Per configuration: the reserve its stack runs with (``Stack.reserve_fraction``: SGLang derives it
    from the GPU, tp x pp, the chunk and, under DP attention, dp), each distinct point computed once. A fixed reserve
    (``Stack.reserve_auto`` None) does not depend on the split or the chunk, so its rows share one point a
    (variant, hardware); the points are one int64 key, so finding them is a 1-D sort (a 5-row
    ``np.unique(axis=1)`` over the whole space took ~0.4 s of a 1.2 s wide search)."""
    c = space.cols
    n_hw = len(space.hardware)
    auto = np.array(
        [[v.reserve_auto(vendor=h.vendor) is not None for h in space.hardware] for v in space.variants], dtype=bool
    )[c.variant, c.hw]
    key = c.variant.astype(np.int64) * n_hw + c.hw
    dp_attention = np.array([v.dp_attention for v in space.variants], dtype=bool)[c.variant]
    for col in (c.tp, c.pp, c.chunk, np.where(dp_attention, c.dp, 0)):  # dp counts under DP attention only
        part = np.where(auto, col, 0).astype(np.int64)
        key = key * (int(part.max(initial=0)) + 1) + part
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    vals = np.empty(first.shape[0], dtype=float)
    group = c.variant[first].astype(np.int64) * n_hw + c.hw[first]  # one call a (variant, hardware), over its points
    for g in np.unique(group):
        at = np.flatnonzero(group == g)
        i = first[at]
        hw = space.hardware[int(c.hw[i[0]])]
        vals[at] = space.variants[int(c.variant[i[0]])].reserve_fraction(
            usable_bytes=hw.usable_bytes_per_device,
            tp=c.tp[i].astype(np.int64),
            pp=c.pp[i].astype(np.int64),
            chunk=c.chunk[i].astype(np.int64),
            vendor=hw.vendor,
            dp=c.dp[i].astype(np.int64),
        )
    return vals[inverse.reshape(-1)]


@dataclass(frozen=True, slots=True)
class HardwareCols:
    """Per configuration: the hardware and topology figures the formulas need (``hardware_columns``)."""

    usable: np.ndarray  # int64, usable HBM bytes a device
    hbm_bw: np.ndarray  # float, bytes/s a device
    flops: np.ndarray  # float, FLOP/s a device in the compute dtype
    devices_per_chip: np.ndarray
    scale_up_bw: np.ndarray  # float, bytes/s
    scale_out_bw: np.ndarray  # float, bytes/s
    price: np.ndarray  # float, USD a chip-hour; NaN: no price
    chips: np.ndarray
    spans_slices: np.ndarray  # bool: the EP group spans slices (roofline.comm.ep_spans_slices)
    domain_devices: np.ndarray  # devices of one scale-up domain (a wider group crosses it: step.ops.crosses)
    scale_up_latency: np.ndarray  # float, s a call of the stack's expert collective
    scale_out_latency: np.ndarray  # float, s


@dataclass(frozen=True, slots=True)
class WeightCols:
    """Per configuration: the whole model's weights a device (``step.weights.mesh_weights``, ``weight_columns``)."""

    weights_bytes: np.ndarray  # int64
    replicated_bytes: np.ndarray  # int64
    fallbacks: np.ndarray  # int64
    dense_bytes: np.ndarray
    expert_bytes: np.ndarray
    dense_params: np.ndarray
    expert_params: np.ndarray


@dataclass(frozen=True, slots=True)
class StageCols:
    """Per configuration, for one pipeline stage s (``stage_columns``): the weights a device of stage s holds,
    its MLA and KDA layers, its first and end layer, and whether stage s exists (s < pp). Its arrays are
    filled in place while it is built."""

    weights_bytes: np.ndarray  # int64
    replicated_bytes: np.ndarray  # int64
    n_mla: np.ndarray
    n_kda: np.ndarray
    start: np.ndarray
    end: np.ndarray
    valid: np.ndarray  # bool

    @classmethod
    def zeros(cls, n: int) -> StageCols:
        return cls(**{f.name: np.zeros(n, dtype=bool if f.name == "valid" else np.int64) for f in fields(cls)})


def hardware_columns(
    *, space: Space, eff: Efficiency, evidence: Evidence | None = None, allow_cpu_probes: bool = False
) -> tuple[HardwareCols, list[str]]:
    """Per configuration: the hardware and topology figures the formulas need, and the collective
    latency a call of the collective each (hardware, stack) issues (``step.collective.latency``)."""
    c = space.cols
    hws = space.hardware
    topo = space.topologies
    per_slice = _per(topo, lambda t: t.devices_per_slice, c.topo)
    multi = _per(topo, lambda t: t.spans_slices, c.topo, bool)
    notes: list[str] = []
    lat = {}
    for h, hw in enumerate(hws):
        for s, st in enumerate(space.stacks):
            for one in (False, True):  # the experts' op at DP > 1 and at DP 1 (``Stack.for_dp``)
                op = Collective.of_pattern((st.for_dp(1) if one else st).collectives.experts)
                for link in ("scale_up", "scale_out"):
                    lat[h, s, link, one] = latency(hw, op=op, link=link, evidence=evidence, allow_cpu=allow_cpu_probes)
                if measures_hardware(evidence) and st.runs_on(hw) and (not one or st.for_dp(1) is not st):
                    at = lat[h, s, "scale_up", one][1]
                    notes.append(f"{hw.name} {hw.scale_up.name} latency of {st.name}'s {op}{' at dp 1' * one}: {at}")
    n_st = len(space.stacks)

    def latency_col(link: str) -> np.ndarray:
        if not c.hw.size:
            return np.zeros(0)

        def table(one: bool) -> np.ndarray:
            t = np.array([lat[h, s, link, one][0] for h in range(len(hws)) for s in range(n_st)], dtype=float)
            return t[c.hw * n_st + c.stack]

        return np.where(c.dp == 1, table(True), table(False))

    out = HardwareCols(
        usable=_per(hws, lambda h: h.usable_bytes_per_device, c.hw),
        hbm_bw=_per(hws, lambda h: h.hbm_bw_bytes_per_s_per_device, c.hw, float),
        flops=_per(hws, lambda h: h.flops_per_s_per_device(eff.compute_dtype), c.hw, float),
        devices_per_chip=_per(hws, lambda h: h.devices_per_chip, c.hw),
        scale_up_bw=_per(hws, lambda h: h.scale_up.bw_bytes_per_s, c.hw, float),
        scale_out_bw=_per(hws, lambda h: h.scale_out.bw_bytes_per_s, c.hw, float),
        price=_per(
            hws, lambda h: np.nan if h.price_usd_per_chip_hour is None else h.price_usd_per_chip_hour, c.hw, float
        ),
        chips=_per(topo, lambda t: t.chips, c.topo),
        spans_slices=multi & (c.ep > per_slice),  # roofline.comm.ep_spans_slices
        domain_devices=per_slice,
        scale_up_latency=latency_col("scale_up"),
        scale_out_latency=latency_col("scale_out"),
    )
    return out, notes


def scale_out_ops(ops: list[Op]) -> np.ndarray:
    """Per configuration, a bit each collective that issues calls over the scale-out link: bit k for
    ``step.ops.COLLECTIVE_NAMES[k]`` (plan's layout notes name them; uint16: 9 names)."""
    n = next(np.shape(x) for op in ops for x in (op.calls, op.scale_out) if hasattr(x, "shape"))
    mask = np.zeros(n, dtype=np.uint16)
    for op in ops:
        mask |= (np.asarray((op.calls > 0) & op.scale_out)).astype(np.uint16) << COLLECTIVE_NAMES.index(op.name)
    return mask


def _unique_meshes(space: Space, rows: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse) of the distinct (tp, dp, experts over all) meshes among ``rows``: the weights
    depend on nothing else, so they are worked out once a mesh and gathered."""
    c = space.cols
    key = (c.tp[rows] * (c.dp.max(initial=1) + 1) + c.dp[rows]) * 2 + c.ep_all[rows]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def held_stacks(space: Space) -> tuple[list[Any], np.ndarray]:
    """(the distinct stacks as each (stack, machine) of the space runs, each row's index into them): a stack with its
    routed experts in the format its engine's release holds them on the row's GPU (``Stack.on_hardware``: SGLang's
    DeepSeek-V4 FP4 scales packed on SM100), as fit's setup holds them (setup.make_setup); one a stack where no GPU
    moves them. The weights read them per row, as plan's cache columns read each (stack, GPU)'s block."""
    c = space.cols
    held: list[Any] = []
    seen: dict[tuple[int, tuple[tuple[str, str], ...]], int] = {}
    table = np.zeros((len(space.stacks), max(len(space.hardware), 1)), dtype=np.int64)
    for s, st in enumerate(space.stacks):
        for h, hw in enumerate(space.hardware):
            on = st.on_hardware(hw.name)
            key = (s, tuple(sorted(on.runtime_formats.items())))
            if key not in seen:
                seen[key] = len(held)
                held.append(on)
            table[s, h] = seen[key]
    return held, table[c.stack, c.hw] if c.hw.size else np.zeros(0, dtype=np.int64)


def weight_columns(*, space: Space, model: Model) -> tuple[WeightCols, dict[str, np.ndarray]]:
    """(per-configuration weight figures, fallback kind -> bool per configuration): each row's weights by its stack as
    it runs on the row's GPU (``held_stacks``)."""
    c = space.cols
    first, inverse = _unique_meshes(space)
    classes = stage_classes(model.inventory)
    stacks, held = held_stacks(space)
    per_stack = [
        with_engram(
            mesh_weights(
                classes=classes,
                stack=s,
                tp=c.tp[first],
                dp=c.dp[first],
                ep_all=c.ep_all[first],
                family=model.spec.family,
            ),
            model=model,
            stack=s,
            tp=c.tp[first],
        )
        for s in stacks
    ]
    # MeshWeights' fields of the same names, gathered from (held stack, unique mesh) to each configuration
    out = WeightCols(
        **{f.name: np.stack([getattr(w, f.name) for w in per_stack])[held, inverse] for f in fields(WeightCols)}
    )
    # what the row's engine holds with the weights beside the model's tensors (Stack.engine_held), as fit's setup
    held_bytes, tables = engine_held_columns(space=space, model=model)
    if held_bytes.any():
        multi = c.tp * c.dp * c.pp > 1  # step/weight_budget.py: the tables on every device of a mesh of more than one
        out = replace(
            out,
            weights_bytes=out.weights_bytes + held_bytes,
            replicated_bytes=out.replicated_bytes + np.where(multi, tables, 0),
        )
    kinds: dict[str, np.ndarray] = {}
    for i, w in enumerate(per_stack):
        for k, mask in w.fallback_kinds.items():
            hit = mask[inverse] & (held == i)
            kinds[k] = kinds[k] | hit if k in kinds else hit
    return out, kinds


def engine_held_columns(*, space: Space, model: Model) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration, (the bytes a device's engine holds with the weights beside the model's tensors, of them the
    RoPE tables whole on every device): ``Stack.engine_held`` of the row's stack variant (its KV dtype) on the row's
    GPU at the row's attention TP -- SGLang's DeepSeek-V4 RoPE tables and V4.1's bf16 wo_a -- as fit's setup holds
    them (setup.make_setup, Stack.extra_weights; step/weight_budget.py counts the tables as replicated on a mesh of
    more than one device). Zeros where no row's engine holds any."""
    c = space.cols
    held = np.zeros(c.tp.shape[0], dtype=np.int64)
    whole = np.zeros(c.tp.shape[0], dtype=np.int64)
    if not c.tp.size or all(engine_rules(st.name).loaded_extras is None for st in space.stacks):
        return held, whole
    first, inverse = _distinct([c.variant, c.hw, c.tp])
    for k, i in enumerate(first):
        terms = space.variants[int(c.variant[i])].engine_held(model, space.hardware[int(c.hw[i])], attn_tp=int(c.tp[i]))
        rows = inverse == k
        held[rows] = sum(n for _, n, _ in terms)
        whole[rows] = sum(n for role, n, _ in terms if role == "rope_tables")
    return held, whole


def with_engram(w, *, model: Model, stack, tp: np.ndarray):
    """``w`` (MeshWeights) with what a device holds of DeepSeek-V4.1's Engram tensors counted with its weights,
    as fit counts them (``budget.engram.hbm_bytes_per_device``: the projections, and the rows over TP where the
    tables are in HBM); ``w`` itself for a model without Engram."""
    from dataclasses import replace

    from k3plan.budget.engram import hbm_bytes_per_device

    extra = hbm_bytes_per_device(model, stack, tp)
    if isinstance(extra, int) and extra == 0:
        return w
    return replace(w, weights_bytes=w.weights_bytes + extra)


def stage_columns(*, space: Space, model: Model) -> list[StageCols]:
    """One ``StageCols`` a pipeline stage s (0 .. largest pp - 1): per configuration, the weights a device
    of stage s holds (``step.weights.mesh_weights`` over the stage's tensors, step/stages.py), its
    MLA and KDA layer counts, and whether stage s exists (s < pp). With pp = 1 the one stage is the
    whole model (= ``weight_columns``' weights_bytes)."""
    from k3plan.step.stages import stages

    c = space.cols
    n = c.tp.shape[0]
    spec = model.spec
    top = int(c.pp.max(initial=1))
    out = [StageCols.zeros(n) for _ in range(top)]
    stacks, held = held_stacks(space)  # each row's stack as it runs on its GPU (the weights' format)
    # what the row's engine holds with the weights beside the model's tensors, on every stage's devices as fit's
    # budget holds them (Stack.extra_weights in step/weight_budget.py, a stage's weights included)
    held_bytes, tables = engine_held_columns(space=space, model=model)
    multi = c.tp * c.dp * c.pp > 1
    for si, st in enumerate(stacks):
        remainder = st.pipeline.remainder if st.pipeline else "before_last"
        for pp in np.unique(c.pp[held == si]):
            rows = np.flatnonzero((held == si) & (c.pp == pp))
            first, inverse = _unique_meshes(space, rows)
            first = rows[first]
            for stage in stages(spec, int(pp), remainder):
                classes = stage_classes(model.inventory, stage if pp > 1 else None)
                w = mesh_weights(
                    classes=classes,
                    stack=st,
                    tp=c.tp[first],
                    dp=c.dp[first],
                    ep_all=c.ep_all[first],
                    family=model.spec.family,
                )
                w = with_engram(w, model=model, stack=st, tp=c.tp[first])
                o = out[stage.index]
                o.weights_bytes[rows] = w.weights_bytes[inverse] + held_bytes[rows]
                o.replicated_bytes[rows] = w.replicated_bytes[inverse] + np.where(multi[rows], tables[rows], 0)
                o.n_mla[rows] = stage.n_mla
                o.n_kda[rows] = stage.n_kda
                o.start[rows], o.end[rows] = stage.start, stage.end
                o.valid[rows] = True
    return out


def apply_evidence(
    *,
    prefill: np.ndarray,
    decode: np.ndarray,
    usable: np.ndarray,
    space: Space,
    model: Model,
    context: int,
    batch: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Where a shipped calibration matches a configuration (k3plan.evidence, measured > compiled),
    its temps replace the analytic ones in ``prefill`` and ``decode`` (bytes a device, in place), through
    the same ``calibrated_stage`` fit uses; a stage the compiler refused takes all of ``usable`` HBM
    (nothing else fits beside it). -> per configuration: 0 analytic, 1 compiled, 2 measured; and whether a
    stage's point is outside the calibration's measured range (fit: FITS IF, never FITS; issue 50)."""
    from k3plan.budget.fit import calibrated_stage
    from k3plan.engines.registry import engine_rules as _engine_rules
    from k3plan.evidence.calibrations import best_calibration, registry

    c = space.cols
    kind_code = np.zeros(c.tp.shape[0], dtype=np.int8)
    outside = np.zeros(c.tp.shape[0], dtype=bool)
    # only (hardware, stack variant) pairs some shipped calibration names can match (best_calibration
    # compares model, hardware, stack and KV dtype for equality): the rest are never looked up
    from k3plan.engines.stack import STACK_ALIASES

    # a calibration taken under a stack's old name counts for the stack that name loads (same_stack)
    shipped = {
        (
            ev.calibration.model,
            ev.calibration.hardware,
            STACK_ALIASES.get(ev.calibration.stack, ev.calibration.stack),
            ev.kv_dtype,
        )
        for ev in registry()
    }
    can = np.array(
        [
            [
                (model.name, hw.name, STACK_ALIASES.get(st.name, st.name), st.kv_cache.dtype) in shipped
                for st in space.variants
            ]
            for hw in space.hardware
        ],
        dtype=bool,
    ).reshape(len(space.hardware), len(space.variants))
    rows = np.flatnonzero(can[c.hw, c.variant]) if c.hw.size else np.zeros(0, dtype=np.int64)
    key = np.stack([col[rows] for col in (c.hw, c.topo, c.tp, c.ep, c.dp, c.variant)], axis=1)
    if not key.size:
        return kind_code, outside
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    for k, (h, t, tp, ep, dp, v) in enumerate(uniq):
        st = space.variants[v]
        found = best_calibration(
            model=model.name,
            hardware=space.hardware[h].name,
            topology=space.topologies[t].text,
            tp=int(tp),
            ep=int(ep),
            dp=int(dp),
            stack=st.name,
            kv_dtype=st.kv_cache.dtype,
        )
        if found is None:
            continue
        cal, kind = found
        # the range is judged as fit judges it (k3plan.budget.measured_range): decode at the batch, a prefill of
        # a graph in XLA ops on chunk x context too
        at: dict[str, dict[str, Any]] = {
            "prefill": dict(context=context, xla_graph=_engine_rules(st.name).temp_graph == "xla"),
            "decode": dict(batch=batch),
        }
        for i in rows[inverse == k]:
            kind_code[i] = 2 if kind == "measured" else 1
            for stage, x, temp in (("prefill", int(c.chunk[i]), prefill), ("decode", context, decode)):
                ev = calibrated_stage(cal, stage=stage, x=x, analytic_bytes=int(temp[i]), kind=kind, **at[stage])
                if ev is not None:
                    temp[i] = usable[i] if ev.temp_bytes is None else ev.temp_bytes
                    outside[i] |= bool(ev.outside)
    return kind_code, outside


def apply_temp_model(
    temps: TempCols, cache: CacheTerms, *, space: Space, model: Model, context: int, batch: int
) -> None:
    """Tier (c), as fit's ``modelled_stage``: where no calibration answered a configuration (temp_source 0)
    and the shipped temp model was checked on its model, hardware kind and stack, each stage's temp is the
    model's band's upper end (never under the analytic bound), temp_source 3; the band's lower end goes to
    ``<stage>_temp_low_bytes``. A prefill chunk is read into a cache of the chunk's size. ``temps`` is
    written in place."""
    from k3plan.budget.temp import scan_bf16_classes
    from k3plan.budget.temp_model import band, load_temp_model, model_bytes
    from k3plan.step.live import form_for, live_features, stage_live

    c = space.cols
    tm = load_temp_model()
    for si, st in enumerate(space.stacks):  # a stack's KV dtype variants share its form, weights and coefficients
        hw_ok = np.array(
            [tm.applies(model=model.name, hardware_kind=hw.kind, stack=st.name) for hw in space.hardware], dtype=bool
        )
        if not hw_ok.any():
            continue
        rows = np.flatnonzero((c.stack == si) & hw_ok[c.hw] & (temps.temp_source == 0))
        if not rows.size:
            continue
        # the model depends on (KV dtype, tp, ep, dp, experts over all devices, chunk) within a stack: evaluate
        # each distinct one once (a wide search repeats them over topologies and hardware)
        first, inverse = _distinct([col[rows] for col in (c.variant, c.tp, c.ep, c.dp, c.ep_all, c.chunk)])
        tp, ep, dp, ep_all, chunk = (col[rows[first]] for col in (c.tp, c.ep, c.dp, c.ep_all, c.chunk))
        # the weights a device depend on the mesh (tp, dp, experts over all devices) alone: each distinct one once
        m_first, m_of = _distinct([tp, dp, ep_all])
        mesh = dict(tp=tp[m_first], dp=dp[m_first], ep_all=ep_all[m_first].astype(bool))
        scan = mesh_weights(
            classes=scan_bf16_classes(model.inventory, model.spec, st), stack=st, family=model.spec.family, **mesh
        ).weights_bytes
        common = dict(
            form=form_for(st.name),
            act=BYTES[st.activation_dtype],
            weights=[
                WeightGroup(
                    name=g.name,
                    rep=g.rep,
                    count=g.count,
                    bytes=g.bytes[m_of],
                    params=g.params[m_of],
                    decode_bytes=None if g.decode_bytes is None else g.decode_bytes[m_of],
                )
                for g in mesh_weight_groups(inventory=model.inventory, stack=st, family=model.spec.family, **mesh)
            ],
            tp=tp,
            ep=ep,
            dp=dp if st.kv_cache.split_across_dp else 1,
            kv_bytes_per_token_layer=cache.kv_bytes_per_token_layer[rows[first]],
            state_bytes_per_layer=cache.state_bytes_per_layer_unpadded[rows[first]],
            scan_bf16_weight_bytes=scan[m_of],
        )
        at: list[tuple[str, dict[str, Any], np.ndarray, np.ndarray]] = [
            (
                "prefill",
                dict(batch=1, tokens=chunk, context=chunk),
                temps.prefill_temp_bytes,
                temps.prefill_temp_low_bytes,
            ),
            (
                "decode",
                dict(batch=batch, tokens=1, context=context),
                temps.decode_temp_bytes,
                temps.decode_temp_low_bytes,
            ),
        ]
        coef, b = tm.coef_for(st.name), tm.band_for(st.name)
        for stage, where, high_col, low_col in at:
            m = model_bytes(coef, live_features(*stage_live(model.spec, stage=stage, **common, **where)))
            lo, hi = band(np.asarray(m, dtype=np.float64), b)
            analytic = high_col[rows]
            high_col[rows] = np.maximum(np.ceil(hi).astype(np.int64)[inverse], analytic)
            low_col[rows] = np.maximum(lo.astype(np.int64)[inverse], analytic)
        temps.temp_source[rows] = 3


def _distinct(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse) of the distinct tuples over equal-length integer columns: the index of each one's first
    row, and each row's tuple (``np.unique``'s return_index / return_inverse, a tuple a row)."""
    key = np.zeros(cols[0].size, dtype=np.int64)
    for col in cols:  # one int a distinct tuple: each column's codes, mixed
        values, codes = np.unique(col, return_inverse=True)
        key = key * values.size + codes.reshape(-1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


Static = tuple[HardwareCols, list[str], WeightCols, dict[str, np.ndarray], list[StageCols]]


def static_columns(
    *, space: Space, model: Model, eff: Efficiency, evidence: Evidence | None = None, allow_cpu_probes: bool = False
) -> Static:
    """What does not depend on batch or context: (hardware columns, probe notes, weight columns,
    fallback kinds, pipeline-stage columns). plan evaluates two batches over one space; it computes
    these once."""
    hw_cols, notes = hardware_columns(space=space, eff=eff, evidence=evidence, allow_cpu_probes=allow_cpu_probes)
    weights, kinds = weight_columns(space=space, model=model)
    return hw_cols, notes, weights, kinds, stage_columns(space=space, model=model)


def evaluate(
    *,
    space: Space,
    model: Model,
    context: int,
    batch: int,
    eff: Efficiency,
    evidence: Evidence | None = None,
    allow_cpu_probes: bool = False,
    static: Static | None = None,
) -> Evaluated:
    """All columns for ``batch`` sequences at ``context`` tokens: the table (``StepColumns``), the
    fallback kinds and the probe notes. ``static``: static_columns() of the same space, model, eff and
    evidence (computed here if None); its arrays are shared, never written to."""
    spec = model.spec
    c = space.cols
    variants, v = space.variants, c.variant
    expert_fmt = next((t.fmt for t in model.inventory.text if t.role == "expert"), "bf16")
    hw_cols, notes, weights, kinds, stage_cols = static or static_columns(
        space=space, model=model, eff=eff, evidence=evidence, allow_cpu_probes=allow_cpu_probes
    )
    cache = cache_columns(
        spec=spec,
        variants=variants,
        variant=v,
        tp=c.tp,
        hw=c.hw,
        hardware=space.hardware,
        chunk=c.chunk,
        context=context,
    )
    # the one configuration value fit evaluates a row of (budget.config): memory is each pipeline stage's budget
    # (its weights and layers), the tightest binds (step.stages.bind); weights_bytes becomes the binding stage's,
    # the dense/expert sums stay the whole path's (decode)
    cfg = config_columns(
        spec=spec,
        variants=variants,
        variant=v,
        expert_fmt=expert_fmt,
        cache=cache,
        tp=c.tp,
        ep=c.ep,
        dp=c.dp,
        chunk=c.chunk,
        usable=hw_cols.usable,
        reserve_fraction=reserve_columns(space=space),
        context=context,
        batch=batch,
        stages=[(sc.weights_bytes, sc.n_mla, sc.n_kda) for sc in stage_cols],
        valid=[sc.valid for sc in stage_cols],
    )
    act = cfg.act
    prefill_temp, decode_temp = (t.total_bytes for t in cfg.analytic_temps())
    source, outside = apply_evidence(
        prefill=prefill_temp,
        decode=decode_temp,
        usable=hw_cols.usable,
        space=space,
        model=model,
        context=context,
        batch=batch,
    )
    temps = TempCols(
        prefill_temp_bytes=prefill_temp,
        decode_temp_bytes=decode_temp,
        temp_source=source,
        temp_outside=outside,
        prefill_temp_low_bytes=prefill_temp.copy(),  # the calibrated figure where no band refines it
        decode_temp_low_bytes=decode_temp.copy(),
    )
    apply_temp_model(temps, cache, space=space, model=model, context=context, batch=batch)
    temp = np.maximum(temps.prefill_temp_bytes, temps.decode_temp_bytes)
    _, bound = cfg.memory(temp)
    stage = np.asarray(bound.stage)
    # the binding stage's own figures beside its budget (bind: every term but max_sequences is that stage's)
    at = (stage, np.arange(stage.shape[0]))

    def binding_stages(per: list[np.ndarray]) -> np.ndarray:
        return np.stack(per)[at]

    micro = microbatch(batch, c.pp)  # pp microbatches in flight (step.stages.microbatch)
    # the collectives carry the rows each stack's engine pads the step to (Stack.token_buckets), logits the real
    rows = padded_tokens(micro, c.dp, _per(variants, lambda s: s.token_buckets.min_tokens if s.token_buckets else 0, v))
    # what the collectives read of each row's stack as it runs at the row's DP (Stack.for_dp), as fit's
    # collective_args reads its one stack (roofline.comm.stack_comm_inputs)
    at_dp = gather_columns([stack_comm_inputs(s, spec) for s in variants], v)
    at_dp1 = gather_columns([stack_comm_inputs(s.for_dp(1), spec) for s in variants], v)
    comm = comm_terms(
        spec,
        **{k: np.where(c.dp == 1, at_dp1[k], at_dp[k]) for k in at_dp},
        tp=c.tp,
        dp=c.dp,
        ep=c.ep,
        devices_per_chip=hw_cols.devices_per_chip,
        chips=hw_cols.chips,
        tokens=rows,
        sequences=micro,
        domain_devices=hw_cols.domain_devices,
    )
    link_t = comm_time(  # each collective on its own link (step.ops.Op.scale_out)
        comm,
        latency_s=hw_cols.scale_up_latency,
        bw_bytes_per_s=hw_cols.scale_up_bw,
        scale_out_latency_s=hw_cols.scale_out_latency,
        scale_out_bw_bytes_per_s=hw_cols.scale_out_bw,
    )
    p2p = p2p_terms(
        spec,
        pp=c.pp,
        tokens=-(-micro // c.dp),
        act=act,
        tp=c.tp,
        sends=_per(variants, lambda s: len(s.pipeline.sends) if s.pipeline else 2, v),
        devices_per_chip=hw_cols.devices_per_chip,
    )
    # stage boundaries cross the scale-out link when the topology spans scale-up domains
    multi = _per(space.topologies, lambda t: t.spans_slices, c.topo, bool)
    pipe_s = p2p_time(
        p2p,
        latency_s=np.where(
            multi,
            _per(space.hardware, lambda h: h.scale_out.latency_s, c.hw, float),
            _per(space.hardware, lambda h: h.scale_up.latency_s, c.hw, float),
        ),
        bw_bytes_per_s=np.where(multi, hw_cols.scale_out_bw, hw_cols.scale_up_bw),
    )
    comm_s = link_t.latency_s + link_t.bandwidth_s + pipe_s
    d = decode_terms(
        spec,
        dense_bytes=weights.dense_bytes,
        expert_bytes=weights.expert_bytes,
        dense_params=weights.dense_params,
        expert_params=weights.expert_params,
        # decode walks every stage's layers: the whole model's KV and state a sequence on a stage's mesh
        kv_bytes_per_token=spec.n_mla * cache.kv_bytes_per_token_layer,
        state_bytes_per_sequence=spec.n_kda * cache.state_bytes_per_layer,
        tp=c.tp,
        dp=c.dp,
        ep=c.ep,
        batch=micro,
        context=context,
        hbm_bw=hw_cols.hbm_bw,
        flops=hw_cols.flops,
        bw_efficiency=eff.bw_efficiency,
        mfu=eff.mfu,
        comm_s=comm_s,
        dsv4_sizes=_dsv4_sizes(spec, space),
    )
    tpot = np.asarray(d.step_s)  # the step's float figures are arrays over columns (np.asarray: no copy)
    cols = StepColumns(
        hw=c.hw,
        topo=c.topo,
        pp=c.pp,
        tp=c.tp,
        ep_all=c.ep_all,
        dp=c.dp,
        stack=c.stack,
        variant=c.variant,
        chunk=c.chunk,
        ep=c.ep,
        family=c.family,
        usable=hw_cols.usable,
        hbm_bw=hw_cols.hbm_bw,
        flops=hw_cols.flops,
        devices_per_chip=hw_cols.devices_per_chip,
        scale_up_bw=hw_cols.scale_up_bw,
        scale_out_bw=hw_cols.scale_out_bw,
        price=hw_cols.price,
        chips=hw_cols.chips,
        spans_slices=hw_cols.spans_slices,
        domain_devices=hw_cols.domain_devices,
        scale_up_latency=hw_cols.scale_up_latency,
        scale_out_latency=hw_cols.scale_out_latency,
        fallbacks=weights.fallbacks,
        dense_bytes=weights.dense_bytes,
        expert_bytes=weights.expert_bytes,
        dense_params=weights.dense_params,
        expert_params=weights.expert_params,
        kv_bytes_per_token_layer=cache.kv_bytes_per_token_layer,
        state_bytes_per_layer=cache.state_bytes_per_layer,
        block_tokens=cache.block_tokens,
        prefill_temp_bytes=temps.prefill_temp_bytes,
        decode_temp_bytes=temps.decode_temp_bytes,
        temp_source=temps.temp_source,
        temp_outside=temps.temp_outside,
        prefill_temp_low_bytes=temps.prefill_temp_low_bytes,
        decode_temp_low_bytes=temps.decode_temp_low_bytes,
        temp_bytes=temp,
        weights_bytes=bound.weights_bytes,
        reserve_bytes=bound.reserve_bytes,
        sequences=bound.sequences,
        kv_bytes=bound.kv_bytes,
        state_bytes=bound.state_bytes,
        free_bytes=bound.free_bytes,
        room_bytes=bound.room_bytes,
        sequence_bytes=bound.sequence_bytes,
        max_sequences=bound.max_sequences,
        kv_bytes_per_token=bound.kv_bytes_per_token,
        state_bytes_per_sequence=bound.state_bytes_per_sequence,
        binding_stage=stage,
        replicated_bytes=binding_stages([sc.replicated_bytes for sc in stage_cols]),
        stage_mla_layers=binding_stages([sc.n_mla for sc in stage_cols]),
        stage_kda_layers=binding_stages([sc.n_kda for sc in stage_cols]),
        stage_first_layer=binding_stages([sc.start for sc in stage_cols]),
        stage_end_layer=binding_stages([sc.end for sc in stage_cols]),
        scale_out_ops=scale_out_ops(comm.ops),
        scale_out_calls=np.asarray(comm.scale_out_calls),  # an array: the domain is a column
        scale_out_s=np.asarray(link_t.scale_out_s),
        comm_calls=comm.calls + p2p.calls,
        comm_bytes_per_chip=np.asarray(comm.bytes_per_chip + p2p.bytes_per_chip),
        pipeline_s=pipe_s,
        comm_s=comm_s,
        memory_s=np.asarray(d.memory_s),
        compute_s=np.asarray(d.compute_s),
        tpot_s=tpot,
        binding=d.binding,
        tokens_per_s_per_chip=batch / tpot / hw_cols.chips,
        cost_per_hour=hw_cols.price * hw_cols.chips,
    )
    return Evaluated(cols=cols, kinds=kinds, notes=notes)
