"""The numbers of a capacity report, one platform at a time (no rendering here).

For each platform and context: the smallest viable topology and split (report/viable.py: plan's first row), the
per-device terms and headroom (fit), the longest context and most sequences (fit's capacity),
decode and prefill bounds (roofline) at the requested concurrency and at the most sequences that
fit, cost per million tokens where the hardware spec has a price, the chunk-vs-context curve, and
the source of every number.
"""

from __future__ import annotations

from typing import Optional, Sequence

from k3plan.budget.curve import DEFAULT_CHUNKS, CurvePoint, curve
from k3plan.budget.fit import FitResult, check_workload
from k3plan.evidence.value import Evidence
from k3plan.hardware import HardwareSpec, load_hardware
from k3plan.report.capacity_model import (
    ContextRow,
    DecodeAt,
    PlatformReport,
    PrefillAt,
    Roof,
    RooflinePoint,
    RowDecode,
    RowProvenance,
    RowSetup,
    RowTerms,
)
from k3plan.report.viable import Choice, smallest_viable
from k3plan.roofline.bounds import Efficiency, decode_bound, prefill_bound
from k3plan.setup import Setup, uneven_notes
from k3plan.structs import dump, fields, replace
from k3plan.tiers.sessions import TierSessions

__all__ = ["ContextRow", "PlatformReport", "platform_report"]


def _usd_per_mtok(price: Optional[float], chips: int, tokens_per_s: float) -> Optional[float]:
    return None if price is None or tokens_per_s <= 0 else price * chips / 3600 / tokens_per_s * 1e6


def _decode(
    setup: Setup,
    *,
    batch: int,
    context: int,
    eff: Efficiency,
    chunk: int,
    spec: HardwareSpec,
    evidence: Optional[Evidence],
    allow_cpu_probes: bool,
    price: Optional[float],
) -> DecodeAt:
    """``setup`` carries the probed HBM bandwidth (report.viable); ``spec`` is the hardware spec's own, as fit
    hands the serving figures' model both."""
    from k3plan.speed.serving import stands_behind  # issue 38: the TPOT fit, plan and roofline stand behind

    d = decode_bound(
        setup, batch=batch, context_tokens=context, eff=eff, evidence=evidence, allow_cpu_probes=allow_cpu_probes
    )
    tpot, _, _, _ = stands_behind(
        setup,
        spec,
        batch=batch,
        context=context,
        chunk=chunk,
        expected=None,
        ceiling_tpot_s=d.tpot_s,
        ceiling_ttft_s=None,
        evidence=evidence,
    )
    tokens_per_s = batch / tpot.value_s
    return DecodeAt(
        batch=batch,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_chip=tokens_per_s / setup.topology.chips,
        tpot_s=tpot.value_s,
        binding=d.binding,
        comm_share=d.comm_share,
        latency_source=d.comm.latency_source,
        usd_per_mtok=_usd_per_mtok(price, setup.topology.chips, tokens_per_s),
        tpot_source=tpot.source,
        tpot_label=tpot.label,
        ceiling_tpot_s=d.tpot_s,
    )


def _with_expected(
    setup: Setup, *, decode: RowDecode, prefill: PrefillAt, context: int, evidence: Optional[Evidence]
) -> tuple[RowDecode, PrefillAt, str]:
    """Expected beside each ceiling (issue 17; report/capacity_expected.py); the records it used."""
    from k3plan.report.capacity_expected import row_expected

    points = decode.points()
    x = row_expected(
        setup, batches=[d.batch for _, d in points], context=context, chunk=prefill.chunk_tokens, evidence=evidence
    )

    def expect(d: DecodeAt) -> DecodeAt:
        return replace(d, expected_tpot_s=x.tpot_s[d.batch], expected_measured=x.measured[d.batch])

    decode = RowDecode(
        concurrency=expect(decode.concurrency), full=None if decode.full is None else expect(decode.full)
    )
    prefill = replace(prefill, expected_ttft_s=x.ttft_s, expected_measured=x.ttft_measured)
    return decode, prefill, x.records


def _row(
    ch: Choice,
    *,
    concurrency: int,
    eff: Efficiency,
    evidence: Optional[Evidence],
    allow_cpu_probes: bool,
    price: Optional[float],
    spec: HardwareSpec,
) -> ContextRow:
    """``spec``: the platform's hardware spec (its usable HBM a device is stated in a row where nothing fits too)."""
    c, r, s = ch.context_tokens, ch.result, ch.setup
    if s is None or r is None:
        return ContextRow(
            context_tokens=c, fits=False, reason=ch.reason, usable_bytes_per_device=spec.usable_bytes_per_device
        )
    full = max(concurrency, r.capacity.max_sequences)

    def at(batch: int) -> DecodeAt:
        return _decode(
            s,
            batch=batch,
            context=c,
            chunk=r.workload.prefill_chunk_tokens,
            spec=spec,
            price=price,
            eff=eff,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
        )

    decode = RowDecode(concurrency=at(concurrency), full=at(full) if full > concurrency else None)
    p = prefill_bound(
        s,
        prompt_tokens=c,
        chunk_tokens=r.workload.prefill_chunk_tokens,
        eff=eff,
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
    )
    from k3plan.speed.serving import stands_behind  # issue 38: the TTFT fit, plan and roofline stand behind

    _, ttft, _, _ = stands_behind(
        s,
        spec,
        batch=concurrency,
        context=c,
        chunk=p.chunk_tokens,
        expected=None,
        ceiling_tpot_s=decode.concurrency.ceiling_tpot_s or decode.concurrency.tpot_s,
        ceiling_ttft_s=p.ttft_s,
        evidence=evidence,
    )
    assert ttft is not None
    prefill = PrefillAt(
        prompt_tokens=c,
        chunk_tokens=p.chunk_tokens,
        ttft_s=ttft.value_s,
        ttft_source=ttft.source,
        ttft_label=ttft.label,
        ceiling_ttft_s=p.ttft_s,
        tokens_per_s=p.tokens_per_s,
        feasible=p.feasible,
        note=p.note,
        link_share=p.link_share,
        usd_per_mtok=_usd_per_mtok(price, s.topology.chips, p.tokens_per_s),
    )
    decode, prefill, records = _with_expected(s, decode=decode, prefill=prefill, context=c, evidence=evidence)
    src = s.hardware.sources()
    prov = RowProvenance(
        **dump(r.provenance, "python"),
        expected=records,
        hbm_bw=src.get("hbm_bw_per_device", s.hardware.path),
        flops=src.get(f"flops_per_device.{eff.compute_dtype}", src.get("flops_per_device", s.hardware.path)),
        collective_latency=decode.concurrency.latency_source,
        efficiency=f"assumed: MFU {eff.mfu:.0%}, HBM efficiency {eff.bw_efficiency:.0%} (k3plan roofline defaults)",
    )
    return ContextRow(
        context_tokens=c,
        fits=True,
        setup=RowSetup(
            topology=s.topology.text,
            chips=s.topology.chips,
            devices=s.topology.devices,
            hosts=s.topology.hosts,
            tp=s.parallel.tp,
            ep=s.parallel.ep,
            dp=s.parallel.dp,
            pp=s.parallel.pp,
            stack=s.stack.label,
        ),
        per_device=RowTerms(**{k: getattr(r.per_device, k) for k in fields(RowTerms)}),
        usable_bytes_per_device=r.hardware.usable_bytes_per_device,
        max_context_tokens=r.capacity.memory_context_tokens,
        max_sequences=r.capacity.max_sequences,
        model_max_context_tokens=r.capacity.model_max_context_tokens,
        decode=decode,
        prefill=prefill,
        provenance=prov,
        warnings=list(r.warnings),
        notes=uneven_notes(s.plan, s.stack),
    )


def _roofline_points(
    setup: Setup, *, context: int, most: int, eff: Efficiency, evidence: Optional[Evidence], allow_cpu_probes: bool
) -> list[RooflinePoint]:
    out, b = [], 1
    while b <= max(1, most):
        d = decode_bound(
            setup, batch=b, context_tokens=context, eff=eff, evidence=evidence, allow_cpu_probes=allow_cpu_probes
        )
        nbytes, flops = d.bytes_per_device.total(), d.flops_per_device.total()
        out.append(RooflinePoint(batch=b, intensity=flops / nbytes, flops_per_s=flops / d.step_s, binding=d.binding))
        b *= 2
    return out


def platform_report(
    *,
    model: str,
    hardware: str,
    stack: str,
    contexts: Sequence[int],
    concurrency: int,
    max_chips: int,
    eff: Efficiency,
    evidence: Optional[Evidence] = None,
    allow_cpu_probes: bool = False,
    chunks: Sequence[int] = DEFAULT_CHUNKS,
    engram: Optional[str] = None,
) -> PlatformReport:
    """``allow_cpu_probes``: apply CPU-backend probe records to the roofline bounds (HBM bandwidth,
    collective latency), as fit, plan and roofline do under --allow-cpu-probes; the expected times
    (k3plan.speed) never apply them."""
    hw = load_hardware(hardware)
    choices, tried = smallest_viable(
        model=model,
        hardware=hardware,
        stack=stack,
        contexts=contexts,
        concurrency=concurrency,
        max_chips=max_chips,
        evidence=evidence,
        allow_cpu_probes=allow_cpu_probes,
        engram=engram,
    )
    price = hw.price_usd_per_chip_hour
    rows = [
        _row(
            choices[c],
            concurrency=concurrency,
            price=price,
            eff=eff,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
            spec=hw,
        )
        for c in contexts
    ]
    from k3plan.report.capacity_advice import platform_advice, tier_rows

    picks: list[tuple[Choice, Setup, FitResult, RowDecode, PrefillAt]] = []
    for c, row in zip(contexts, rows):
        ch = choices[c]
        if ch.setup is not None and ch.result is not None and row.decode is not None and row.prefill is not None:
            picks.append((ch, ch.setup, ch.result, row.decode, row.prefill))
    advice = [
        platform_advice(
            ch,
            model=model,
            hardware=hardware,
            stack=stack,
            decode=d.concurrency,
            eff=eff,
            evidence=evidence,
            allow_cpu_probes=allow_cpu_probes,
        )
        for ch, _, _, d, _ in picks
    ]
    tiers: list[TierSessions] = []
    curve_points: list[CurvePoint] = []
    points: list[RooflinePoint] = []
    tiers_setup = curve_setup = ""
    if picks:
        first, s, r, _, pre = picks[0]
        c = first.context_tokens
        tiers = tier_rows(s, context_tokens=c, prefill_ttft_s=pre.ttft_s)
        tiers_setup = f"{s.topology.text}, {c:,}-token sessions, restore vs the roofline's prefill"
        w = check_workload(context_tokens=c, batch=concurrency, prefill_chunk_tokens=None)
        curve_points = curve(s, workload=w, chunks=chunks, calibration=None)
        curve_setup = (
            f"{s.topology.text} tp={s.parallel.tp} dp={s.parallel.dp}, {concurrency} sequence(s), context {c:,}"
        )
        points = _roofline_points(
            s, context=c, most=r.capacity.max_sequences, eff=eff, evidence=evidence, allow_cpu_probes=allow_cpu_probes
        )
    return PlatformReport(
        hardware=hw.name,
        kind=hw.kind,
        stack=stack,
        price_usd_per_chip_hour=price,
        price_source=hw.sources().get("price", "no price in the hardware spec"),
        candidates_tried=tried,
        rows=rows,
        curve=curve_points,
        curve_setup=curve_setup,
        roofline_points=points,
        roof=Roof(
            flops_per_s=hw.flops_per_s_per_device(eff.compute_dtype) * eff.mfu,
            peak_flops_per_s=hw.flops_per_s_per_device(eff.compute_dtype),
            hbm_bytes_per_s=hw.hbm_bw_bytes_per_s_per_device * eff.bw_efficiency,
        ),
        advice=advice,
        tiers=tiers,
        tiers_setup=tiers_setup,
    )
