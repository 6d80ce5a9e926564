"""Headline findings, written from the numbers (nothing typed in): fewest chips, what cannot fit,
fastest decode a chip, infeasible prefill, what binds, cost where a price is known."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from k3plan.engines.stack import REFUSED
from k3plan.report.capacity_model import ContextRow, DecodeAt, PlatformReport, PrefillAt, RowSetup, RowTerms
from k3plan.units import fmt_gib, fmt_tokens


@dataclass(frozen=True)
class Viable:
    """A row that fits, its optional parts narrowed (a report row carries them only when it fits)."""

    row: ContextRow
    setup: RowSetup
    terms: RowTerms
    decode: DecodeAt  # at the requested concurrency
    most: DecodeAt  # at the most sequences that fit
    prefill: PrefillAt

    @classmethod
    def of(cls, row: ContextRow) -> Optional[Viable]:
        if not row.fits or row.setup is None or row.per_device is None or row.decode is None or row.prefill is None:
            return None
        return cls(row, row.setup, row.per_device, row.decode.concurrency, row.decode.most, row.prefill)


def viable(reports: Sequence[PlatformReport]) -> list[tuple[PlatformReport, Viable]]:
    """Every (platform, row) that fits, in report order."""
    out = []
    for r in reports:
        for row in r.rows:
            v = Viable.of(row)
            if v is not None:
                out.append((r, v))
    return out


def refuses(warnings: Sequence[str]) -> bool:
    """Whether a row's warnings hold a stack refusal (Stack.refused)."""
    return any(f": {REFUSED}: " in w for w in warnings)


def findings(reports: Sequence[PlatformReport]) -> list[str]:
    out: list[str] = []
    contexts = sorted({row.context_tokens for r in reports for row in r.rows})
    every = viable(reports)
    for c in contexts:
        ok = [(r, v) for r, v in every if v.row.context_tokens == c]
        bad = [r.hardware for r in reports for row in r.rows if row.context_tokens == c and not row.fits]
        if ok:
            r, v = min(ok, key=lambda x: (x[1].setup.chips, -x[1].terms.free_bytes))
            out.append(
                f"At a {fmt_tokens(c)}-token context the fewest chips that hold K3 are **{v.setup.chips} {r.hardware}** "
                f"({v.setup.topology}, tp={v.setup.tp}{f' pp={v.setup.pp}' if v.setup.pp > 1 else ''}), with {fmt_gib(v.terms.free_bytes, 1)} "
                f"a device free and room for {v.row.max_sequences:,} sequence(s)."
            )
            best, bv = max(ok, key=lambda x: x[1].most.tokens_per_s_per_chip)
            d = bv.most
            out.append(
                f"At {fmt_tokens(c)} tokens the best decode throughput a chip is {best.hardware}'s: "
                f"{d.tokens_per_s_per_chip:,.1f} tokens/s a chip at batch {d.batch:,} ({d.binding}-bound)."
            )
        if bad:
            out.append(
                f"At a {fmt_tokens(c)}-token context **{', '.join(bad)} cannot hold K3** at any allowed size "
                "(see the platform sections for the closest miss)."
            )
    refused = sorted({(r.hardware, r.stack) for r in reports for row in r.rows if row.fits and refuses(row.warnings)})
    for hw, stack in refused:
        out.append(
            f"**{hw} with {stack}: {REFUSED}** -- its engine's code refuses or cannot run the deployment this "
            "report prices (the cited checks are in the platform section's warnings)."
        )
    for r, v in every:
        where = f"{r.hardware} {v.setup.topology}"
        if not v.prefill.feasible:
            out.append(
                f"{where}: prefill at {fmt_tokens(v.row.context_tokens)} tokens is infeasible — {v.prefill.note}."
            )
        if v.decode.binding == "communication":
            out.append(
                f"{where} at {fmt_tokens(v.row.context_tokens)} tokens: single-sequence decode is "
                f"bound by collectives ({v.decode.comm_share:.0%} of the step)."
            )
    for r, v in every:
        price = r.price_usd_per_chip_hour
        if price is None:
            continue
        d = v.most
        out.append(
            f"{r.hardware} at {fmt_tokens(v.row.context_tokens)} tokens: ${d.usd_per_mtok:,.2f} a million decode tokens at "
            f"batch {d.batch:,}, ${v.prefill.usd_per_mtok:,.2f} a million prefill tokens "
            f"(${price:,.2f} a chip-hour)."
        )
    unpriced = sorted({r.hardware for r in reports if r.price_usd_per_chip_hour is None})
    if unpriced:
        out.append(f"No price in the hardware specs of {', '.join(unpriced)}: no cost per token for them.")
    return out
