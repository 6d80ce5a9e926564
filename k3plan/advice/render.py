"""Render a fit's advice (k3plan.advice.wiring.FitAdvice) after the verdict: warnings, ranked
suggestions with their computed effects, the speculative-decoding line and the offload cost."""

from __future__ import annotations

from rich.markup import escape

from k3plan.units import fmt_gib


def spec_decode_lines(sd) -> list[str]:
    s, sp = sd.spec, sd.speed
    rates = ",".join(f"{a:g}" for a in s.acceptance)
    return [
        (
            f"speculative decoding: --spec-tokens {s.draft_tokens} --acceptance {rates}: "
            f"{s.expected_tokens_per_step:.3f} tokens a verify step ({s.expected_accepted_tokens:.3f} accepted of "
            f"{s.draft_tokens} drafted + 1)"
        ),
        (
            f"  draft: {sd.draft}; {sd.draft_bytes:,} B, {fmt_gib(sd.draft_bytes_per_device)} a device (assumed "
            f"sharded over tp {sd.draft_shards}; counted in the weights above)"
        ),
        (
            f"  draft KV: {sd.draft_kv.bytes_per_token_per_device:,} B a token a device, counted in the KV above "
            f"for every sequence; {sd.draft_kv.source}"
            if sd.draft_kv
            else "  draft KV: none in the budget"
        ),
        (
            f"  step {sp.step_s * 1e3:.2f} ms (verify {sp.verify_step_s * 1e3:.2f} over {sp.forward_tokens_per_step:,} "
            f"tokens = batch {sp.batch} x {s.forward_tokens_per_step}; drafting {sp.draft_s * 1e3:.2f}); "
            f"plain decode {sd.plain_step_s * 1e3:.2f} ms"
        ),
        (
            f"  a step: {sp.forward_tokens_per_step:,} forward, {sp.drafted_tokens_per_step:,} drafted, "
            f"{sp.accepted_tokens_per_step:,.2f} accepted, {sp.emitted_tokens_per_step:,.2f} emitted tokens"
            + (
                f"; {sp.draft_forwards_per_step} draft forward(s) for {s.draft_tokens} drafted position(s)"
                if sp.draft_forwards_per_step and sp.draft_forwards_per_step != s.draft_tokens
                else ""
            )
        ),
        (
            f"  tokens/s: {sp.emitted_tokens_per_s:,.0f} emitted, {sp.forward_tokens_per_s:,.0f} forward, "
            f"{sp.drafted_tokens_per_s:,.0f} drafted, {sp.accepted_tokens_per_s:,.0f} accepted; TPOT "
            f"{sp.s_per_emitted_token * 1e3:.2f} ms, x{sp.speedup:.2f} over plain decode"
        ),
        f"  pricing: {sd.pricing}",
    ]


def offload_lines(o) -> list[str]:
    held = "no capacity limit known" if o.sessions_held is None else f"holds {o.sessions_held:,} suspended sessions"
    recompute = (
        ""
        if o.recompute_s is None
        else f"; prefilling it again instead: {o.recompute_s:.2f} s ("
        + ("offload is cheaper" if o.cheaper_than_recompute else "recompute is cheaper")
        + ")"
    )
    return [
        (
            f"offload to {o.tier}: {held}; frees {fmt_gib(o.hbm_freed_bytes_per_device)} a device per suspended "
            f"session; TTFT +{o.ttft_added_s * 1e3:,.1f} ms to bring one back{recompute}"
        ),
        f"  source: {o.source}",
    ]


def render_fit_advice(fa, console) -> None:
    render_advice_rules(fa.rules, console, alternatives=fa.alternatives)
    for line in (spec_decode_lines(fa.spec_decode) if fa.spec_decode else []) + (
        offload_lines(fa.offload) if fa.offload else []
    ):
        console.print(escape(line))


def render_advice_rules(a, console, *, alternatives=()) -> None:
    console.print(
        f"[bold]advice[/] ({a.verdict}: free {fmt_gib(a.free_bytes)} = {a.headroom_fraction:.1%} of usable HBM"
        + (f"; computed from: {escape('; '.join(alternatives))}" if alternatives else "")
        + ")"
    )
    for w in a.warnings:
        console.print(f"  [yellow]warning:[/] {escape(w)}")
    for s in a.suggestions:
        console.print(escape(f"  - [{s.rule}] {s.text}"))
    if not a.warnings and not a.suggestions:
        console.print("  nothing to suggest: the budget leaves at least 10% headroom and no rule applies")


def bytes_share_line(dec) -> str:
    """A memory-bound step: which part of the bytes it reads dominates (the decode bound's own terms)."""
    total = dec.bytes_per_device.total()
    parts = sorted(dec.bytes_per_device.items(), key=lambda kv: -kv[1])
    return (
        f"{dec.binding}-bound decode: "
        + ", ".join(f"{k} {v / total:.0%}" for k, v in parts)
        + f" of the {fmt_gib(total)} a device a step reads"
    )
