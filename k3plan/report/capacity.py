"""The numbers of a capacity report, one platform at a time (no rendering here).

For each platform and context: the smallest viable topology and split (report/viable.py: plan's first row), the
per-device terms and headroom (fit), the longest context and most sequences (fit's capacity),
decode and prefill bounds (roofline) at the requested concurrency and at the most sequences that
fit, cost per million tokens where the hardware spec has a price, the chunk-vs-context curve, and
the source of every number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict

from k3plan.budget.curve import DEFAULT_CHUNKS, curve
from k3plan.budget.fit import check_workload
from k3plan.hardware import load_hardware
from k3plan.report.viable import Choice, smallest_viable
from k3plan.roofline.bounds import Efficiency, decode_bound, prefill_bound

TERMS = ("weights_bytes", "kv_bytes", "state_bytes", "temp_bytes", "reserve_bytes", "free_bytes")


class ContextRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    context_tokens: int
    fits: bool
    reason: str = ""
    setup: dict[str, Any] = {}  # topology, chips, hosts, tp, ep, dp, stack
    per_device: dict[str, int] = {}
    usable_bytes_per_device: int = 0
    max_context_tokens: int = 0
    max_sequences: int = 0
    model_max_context_tokens: int | None = None
    decode: dict[str, Any] = {}  # by "concurrency" / "full": batch, tokens_per_s, tpot_s, binding, usd_per_mtok
    prefill: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    warnings: list[str] = []


class PlatformReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    hardware: str
    kind: str
    stack: str
    price_usd_per_chip_hour: Optional[float]
    price_source: str
    candidates_tried: int
    rows: list[ContextRow]
    curve: list[dict[str, Any]] = []
    curve_setup: str = ""
    roofline_points: list[dict[str, Any]] = []  # decode at growing batch: intensity, attained FLOP/s a device
    roof: dict[str, float] = {}  # peak FLOP/s and HBM bytes/s a device
    advice: list[dict[str, Any]] = []  # per viable context: report/capacity_advice.py
    tiers: list[dict[str, Any]] = []  # suspended sessions per memory tier (specs with memory_tiers)
    tiers_setup: str = ""


def _usd_per_mtok(price: Optional[float], chips: int, tokens_per_s: float) -> Optional[float]:
    return None if price is None or tokens_per_s <= 0 else price * chips / 3600 / tokens_per_s * 1e6


def _decode(setup, *, batch: int, context: int, eff: Efficiency, probes: Optional[Path], price) -> dict[str, Any]:
    d = decode_bound(setup, batch=batch, context_tokens=context, eff=eff, probes=probes)
    return {
        "batch": batch,
        "tokens_per_s": d.tokens_per_s,
        "tokens_per_s_per_chip": d.tokens_per_s_per_chip,
        "tpot_s": d.tpot_s,
        "binding": d.binding,
        "comm_share": d.comm_share,
        "latency_source": d.comm.latency_source,
        "usd_per_mtok": _usd_per_mtok(price, setup.topology.chips, d.tokens_per_s),
    }


def _add_expected(setup, *, decode: dict, prefill: dict, context: int, chunk: int, probes: Optional[Path]) -> None:
    """Expected beside each ceiling (issue 17; report/capacity_expected.py)."""
    from k3plan.report.capacity_expected import row_expected

    x = row_expected(setup, batches=[d["batch"] for d in decode.values()], context=context, chunk=chunk, probes=probes)
    for d in decode.values():
        d.update(expected_tpot_s=x.tpot_s[d["batch"]], expected_measured=x.measured[d["batch"]])
    prefill.update(expected_ttft_s=x.ttft_s, expected_measured=x.ttft_measured, expected_records=x.records)


def _row(ch: Choice, *, concurrency: int, eff: Efficiency, probes: Optional[Path], price) -> ContextRow:
    c, r = ch.context_tokens, ch.result
    if ch.setup is None:
        return ContextRow(context_tokens=c, fits=False, reason=ch.reason)
    s = ch.setup
    full = max(concurrency, r.capacity.max_sequences)
    decode = {"concurrency": _decode(s, batch=concurrency, context=c, eff=eff, probes=probes, price=price)}
    if full > concurrency:
        decode["full"] = _decode(s, batch=full, context=c, eff=eff, probes=probes, price=price)
    p = prefill_bound(s, prompt_tokens=c, chunk_tokens=r.workload.prefill_chunk_tokens, eff=eff, probes=probes)
    prefill = {
        "prompt_tokens": c,
        "chunk_tokens": p.chunk_tokens,
        "ttft_s": p.ttft_s,
        "tokens_per_s": p.tokens_per_s,
        "feasible": p.feasible,
        "note": p.note,
        "link_share": p.link_share,
        "usd_per_mtok": _usd_per_mtok(price, s.topology.chips, p.tokens_per_s),
    }
    _add_expected(s, decode=decode, prefill=prefill, context=c, chunk=p.chunk_tokens, probes=probes)
    prov = dict(r.provenance)
    prov["expected"] = prefill.pop("expected_records")
    src = s.hardware.sources()
    prov["hbm_bw"] = src.get("hbm_bw_per_device", s.hardware.path)
    prov["flops"] = src.get(f"flops_per_device.{eff.compute_dtype}", src.get("flops_per_device", s.hardware.path))
    prov["collective_latency"] = decode["concurrency"]["latency_source"]
    prov["efficiency"] = (
        f"assumed: MFU {eff.mfu:.0%}, HBM efficiency {eff.bw_efficiency:.0%} (k3plan roofline defaults)"
    )
    return ContextRow(
        context_tokens=c,
        fits=True,
        setup={
            "topology": s.topology.text,
            "chips": s.topology.chips,
            "devices": s.topology.devices,
            "hosts": s.topology.hosts,
            "tp": s.parallel.tp,
            "ep": s.parallel.ep,
            "dp": s.parallel.dp,
            "stack": s.stack.name,
        },
        per_device={k: int(r.per_device[k]) for k in TERMS},
        usable_bytes_per_device=r.hardware.usable_bytes_per_device,
        max_context_tokens=r.capacity.memory_context_tokens,
        max_sequences=r.capacity.max_sequences,
        model_max_context_tokens=r.capacity.get("model_max_context_tokens"),
        decode=decode,
        prefill=prefill,
        provenance=prov,
        warnings=list(r.warnings),
    )


def _roofline_points(setup, *, context: int, most: int, eff: Efficiency, probes: Optional[Path]) -> list[dict]:
    out, b = [], 1
    while b <= max(1, most):
        d = decode_bound(setup, batch=b, context_tokens=context, eff=eff, probes=probes)
        nbytes, flops = sum(d.bytes_per_device.values()), sum(d.flops_per_device.values())
        out.append({"batch": b, "intensity": flops / nbytes, "flops_per_s": flops / d.step_s, "binding": d.binding})
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
    probes: Optional[Path] = None,
    chunks: Sequence[int] = DEFAULT_CHUNKS,
) -> PlatformReport:
    hw = load_hardware(hardware)
    choices, tried = smallest_viable(
        model=model,
        hardware=hardware,
        stack=stack,
        contexts=contexts,
        concurrency=concurrency,
        max_chips=max_chips,
        probes=probes,
    )
    price = hw.price_usd_per_chip_hour
    rows = [_row(choices[c], concurrency=concurrency, eff=eff, probes=probes, price=price) for c in contexts]
    out = dict(
        hardware=hw.name,
        kind=hw.kind,
        stack=stack,
        price_usd_per_chip_hour=price,
        price_source=hw.sources().get("price", "no price in the hardware spec"),
        candidates_tried=tried,
        rows=rows,
        roof={
            "flops_per_s": hw.flops_per_s_per_device(eff.compute_dtype) * eff.mfu,
            "peak_flops_per_s": hw.flops_per_s_per_device(eff.compute_dtype),
            "hbm_bytes_per_s": hw.hbm_bw_bytes_per_s_per_device * eff.bw_efficiency,
        },
    )
    from k3plan.report.capacity_advice import platform_advice, tier_rows

    out["advice"] = [
        platform_advice(
            choices[c],
            model=model,
            hardware=hardware,
            stack=stack,
            eff=eff,
            probes=probes,
            decode=row.decode["concurrency"],
        )
        for c, row in zip(contexts, rows)
        if choices[c].setup is not None
    ]
    first = next((choices[c] for c in contexts if choices[c].setup is not None), None)
    if first is not None:
        row = rows[list(contexts).index(first.context_tokens)]
        out["tiers"] = tier_rows(first.setup, context_tokens=first.context_tokens, prefill_ttft_s=row.prefill["ttft_s"])
        out["tiers_setup"] = (
            f"{first.setup.topology.text}, {first.context_tokens:,}-token sessions, restore vs the roofline's prefill"
        )
    if first is not None:
        s, c = first.setup, first.context_tokens
        w = check_workload(context_tokens=c, batch=concurrency, prefill_chunk_tokens=None)
        out["curve"] = [p.model_dump() for p in curve(s, workload=w, chunks=chunks, calibration=None)]
        out["curve_setup"] = (
            f"{s.topology.text} tp={s.parallel.tp} dp={s.parallel.dp}, {concurrency} sequence(s), context {c:,}"
        )
        out["roofline_points"] = _roofline_points(
            s, context=c, most=first.result.capacity.max_sequences, eff=eff, probes=probes
        )
    return PlatformReport(**out)
