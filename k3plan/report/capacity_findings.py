"""Headline findings, written from the numbers (nothing typed in): fewest chips, what cannot fit,
fastest decode a chip, infeasible prefill, what binds, cost where a price is known."""

from __future__ import annotations

from typing import Sequence


def _ctx(c: int) -> str:
    return f"{c // 1048576}M" if c % 1048576 == 0 else f"{c // 1024}K"


def findings(reports: Sequence) -> list[str]:
    out: list[str] = []
    contexts = sorted({row.context_tokens for r in reports for row in r.rows})
    for c in contexts:
        ok = [(r, row) for r in reports for row in r.rows if row.context_tokens == c and row.fits]
        bad = [r.hardware for r in reports for row in r.rows if row.context_tokens == c and not row.fits]
        if ok:
            fewest = min(ok, key=lambda x: (x[1].setup["chips"], -x[1].per_device["free_bytes"]))
            r, row = fewest
            out.append(
                f"At {_ctx(c)} context the fewest chips that hold K3 are **{row.setup['chips']} {r.hardware}** "
                f"({row.setup['topology']}, tp={row.setup['tp']}), with {row.per_device['free_bytes'] / 2**30:,.1f} "
                f"GiB a device free and room for {row.max_sequences:,} sequence(s)."
            )
            best = max(ok, key=lambda x: x[1].decode.get("full", x[1].decode["concurrency"])["tokens_per_s_per_chip"])
            d = best[1].decode.get("full", best[1].decode["concurrency"])
            out.append(
                f"At {_ctx(c)} the best decode throughput a chip is {best[0].hardware}'s: "
                f"{d['tokens_per_s_per_chip']:,.1f} tokens/s a chip at batch {d['batch']:,} ({d['binding']}-bound)."
            )
        if bad:
            out.append(
                f"At {_ctx(c)} context **{', '.join(bad)} cannot hold K3** at any allowed size "
                "(see the platform sections for the closest miss)."
            )
    for r in reports:
        for row in r.rows:
            if row.fits and not row.prefill["feasible"]:
                out.append(
                    f"{r.hardware} {row.setup['topology']}: prefill at {_ctx(row.context_tokens)} is infeasible — "
                    f"{row.prefill['note']}."
                )
            if row.fits and row.decode["concurrency"]["binding"] == "communication":
                out.append(
                    f"{r.hardware} {row.setup['topology']} at {_ctx(row.context_tokens)}: single-sequence decode is "
                    f"bound by collectives ({row.decode['concurrency']['comm_share']:.0%} of the step)."
                )
    priced = [(r, row) for r in reports for row in r.rows if row.fits and r.price_usd_per_chip_hour is not None]
    for r, row in priced:
        d = row.decode.get("full", row.decode["concurrency"])
        out.append(
            f"{r.hardware} at {_ctx(row.context_tokens)}: ${d['usd_per_mtok']:,.2f} a million decode tokens at "
            f"batch {d['batch']:,}, ${row.prefill['usd_per_mtok']:,.2f} a million prefill tokens "
            f"(${r.price_usd_per_chip_hour:,.2f} a chip-hour)."
        )
    unpriced = sorted({r.hardware for r in reports if r.price_usd_per_chip_hour is None})
    if unpriced:
        out.append(f"No price in the hardware specs of {', '.join(unpriced)}: no cost per token for them.")
    return out
