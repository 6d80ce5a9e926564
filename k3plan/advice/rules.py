"""The rules of issue 14, applied to the numbers at hand; every suggestion carries its computed effect.

1. Capacity fails: another topology/split (or machine), a smaller KV dtype, then -- shrinking the
   workload -- a smaller batch or a shorter context; each with the bytes it frees a device.
2. Capacity passes barely: under HEADROOM_MIN_FRACTION of usable HBM free is a warning with the
   margin shown, and the memory rules run with "restores 10% headroom" as the bar.
3. Bandwidth-bound: a larger decode batch (only those that fit memory) and speculative decoding,
   each with its TPOT and tokens/s.
4. Compute-bound: which part of the step dominates, before adding compute.
Ranked: what resolves the problem first, then what keeps the workload, then by effect (bytes freed
over usable HBM, or the fractional speed gain).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from k3plan.advice.inputs import AdviceInputs, KvDtypeOption
from k3plan.step.memory import kv_context_tokens, kv_sequence_bytes
from k3plan.structs import Frozen
from k3plan.units import GiB, fmt_gib, fmt_gib_sig

# "under 10% headroom is usually not a production configuration": the accelerator-requirements
# analysis issue 14 quotes (rule 2); headroom is free HBM over usable HBM, a device.
HEADROOM_MIN_FRACTION = 0.10
MEMORY_BOUND = ("memory", "hbm", "bandwidth")
COMPUTE_BOUND = ("compute", "flops", "mxu")

Rule = Literal["capacity", "headroom", "bandwidth", "compute"]


class Suggestion(Frozen):
    rule: Rule
    action: Literal["topology", "split", "kv_dtype", "batch", "context", "spec_decode", "dominant_part"]
    text: str
    command: str | None = None  # the command that applies it (a split: the fit command); absent from JSON when None
    freed_bytes_per_device: int | None = None
    free_bytes_after: int | None = None
    context_tokens_gained: int | None = None
    speedup: float | None = None
    resolves: bool = False  # fits again (capacity), restores the headroom bar (headroom), or flips the roof
    shrinks_workload: bool = False
    score: float = 0.0

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.command is None:
            out.pop("command", None)
        return out


class Advice(Frozen):
    verdict: Literal["fails", "thin", "ok"]
    free_bytes: int
    headroom_fraction: float
    warnings: tuple[str, ...]
    suggestions: tuple[Suggestion, ...]


def _gib(n: float) -> str:
    """GiB to one decimal; three significant digits under 1 GiB, so a small term never prints as 0.0 GiB."""
    return fmt_gib(n, 1) if abs(n) >= GiB or n == 0 else fmt_gib_sig(n)


def _seq_kv(bpt: int, block: int, context: int) -> int:
    """One sequence's KV at ``bpt`` bytes a token (the pool's pages, a draft's included): the one formula."""
    return int(kv_sequence_bytes(context, block_tokens=block, layers=1, kv_bytes_per_token_layer=bpt))


def _kv_bytes(x: AdviceInputs, bpt: int, block: int, context: int) -> int:
    return x.sequences * _seq_kv(bpt, block, context)


def max_context(x: AdviceInputs, *, bpt: int, block: int, state_per_seq: int, freed_fixed: int = 0) -> int:
    """Longest context, whole blocks, at the current sequences a device (``freed_fixed``: bytes of the weights,
    temporaries or reserve an option frees)."""
    room = (x.usable_bytes - x.fixed_bytes + freed_fixed) / x.sequences - state_per_seq
    return kv_context_tokens(room, block_tokens=block, layers=1, kv_bytes_per_token_layer=bpt)


def max_sequences(x: AdviceInputs) -> int:
    """Most sequences a device holds at the context: fit's capacity (the fewest any pipeline stage
    holds) over the DP groups when both are known, else from the inputs' one budget."""
    if x.fit_max_sequences is not None and x.sequence_groups is not None:
        return x.fit_max_sequences // x.sequence_groups
    per_seq = _seq_kv(x.kv_bytes_per_token, x.block_tokens, x.context_tokens)
    return max(0, (x.usable_bytes - x.fixed_bytes) // (per_seq + x.state_bytes_per_sequence))


def _used(x: AdviceInputs) -> int:
    return x.weights_bytes + x.kv_bytes + x.state_bytes + x.temp_bytes + x.reserve_bytes


def _topology(x: AdviceInputs, rule: Rule, bar: int) -> list[Suggestion]:
    out = []
    for o in x.topology_options:
        usable = o.usable_bytes if o.usable_bytes is not None else x.usable_bytes
        used = (
            o.weights_bytes
            + (x.kv_bytes if o.kv_bytes is None else o.kv_bytes)
            + (x.state_bytes if o.state_bytes is None else o.state_bytes)
            + (x.temp_bytes if o.temp_bytes is None else o.temp_bytes)
            + (x.reserve_bytes if o.reserve_bytes is None else o.reserve_bytes)
        )
        freed, new_free = _used(x) - used, usable - used
        if o.refused:  # its temp is no number: the compiled graph there ran out of memory, nothing is freed
            out.append(
                Suggestion(
                    rule=rule,
                    action="topology",
                    freed_bytes_per_device=0,
                    free_bytes_after=x.free_bytes,
                    text=f"{x.topology} -> {o.topology} ({x.devices} -> {o.devices} devices): does not help, the "
                    f"calibration refuses the graph there ({o.refused})",
                    resolves=False,
                    score=0.0,
                )
            )
            continue
        if new_free <= x.free_bytes:
            continue
        what = f"frees {_gib(freed)} a device" if freed > 0 else f"{_gib(usable - x.usable_bytes)} more usable a device"
        out.append(
            Suggestion(
                rule=rule,
                action="topology",
                freed_bytes_per_device=freed,
                free_bytes_after=new_free,
                text=f"{x.topology} -> {o.topology} ({x.devices} -> {o.devices} devices): {what} "
                f"(free {_gib(x.free_bytes)} -> {_gib(new_free)})",
                resolves=new_free >= bar,
                score=(new_free - x.free_bytes) / x.usable_bytes,
            )
        )
    return out


def _split(x: AdviceInputs, rule: Rule, bar: int) -> list[Suggestion]:
    """Other splits of the same chips that plan's search finds fitting (issue 36: the same chips before
    more chips); each with its free HBM, sequences and the fit command that applies it."""
    out = []
    for o in x.split_options:
        if o.free_bytes <= x.free_bytes and not x.fallback and not x.refused:
            continue
        tpot = f", TPOT {o.tpot_s * 1e3:.2f} ms" if o.tpot_s is not None else ""
        out.append(
            Suggestion(
                rule=rule,
                action="split",
                freed_bytes_per_device=o.free_bytes - x.free_bytes,
                free_bytes_after=o.free_bytes,
                text=f"split {x.split or 'now'} -> {o.split} on the same {x.devices} devices: free "
                f"{_gib(x.free_bytes)} -> {_gib(o.free_bytes)} a device, {o.max_sequences:,} sequence(s) at "
                f"{x.context_tokens:,} tokens{tpot} (plan's search): {o.command}",
                command=o.command,
                resolves=o.free_bytes >= bar,
                score=(o.free_bytes - x.free_bytes) / x.usable_bytes,
            )
        )
    return out


def _kv_dtype(x: AdviceInputs, o: KvDtypeOption, rule: Rule, bar: int) -> Suggestion | None:
    if not x.kv_bytes_per_token or not o.kv_bytes_per_token:
        return None  # no MLA layer: no KV cache for a dtype to shrink
    state = x.state_bytes_per_sequence if o.state_bytes_per_sequence is None else o.state_bytes_per_sequence
    new_kv = _kv_bytes(x, o.kv_bytes_per_token, o.block_tokens, x.context_tokens)
    # the temporaries too where the other dtype's fit counts other ones (its temp evidence is matched on the KV
    # dtype): free after = that fit's free, so the advice and `fit --kv-dtype` agree
    if o.refused:  # the calibration refuses the graph under that dtype: not an option
        return None
    temp_delta = 0 if o.temp_bytes is None else x.temp_bytes - o.temp_bytes
    freed = x.kv_bytes - new_kv + x.state_bytes - x.sequences * state + temp_delta
    if freed <= 0:
        return None
    now = max_context(x, bpt=x.kv_bytes_per_token, block=x.block_tokens, state_per_seq=x.state_bytes_per_sequence)
    new = max_context(x, bpt=o.kv_bytes_per_token, block=o.block_tokens, state_per_seq=state, freed_fixed=temp_delta)
    ctx = (
        f"; max context at {x.sequences} sequence(s) a device {now:,} -> {new:,} tokens ({new - now:+,})" if new else ""
    )
    return Suggestion(
        rule=rule,
        action="kv_dtype",
        freed_bytes_per_device=freed,
        free_bytes_after=x.free_bytes + freed,
        context_tokens_gained=new - now,
        text=f"KV {x.kv_dtype} -> {o.kv_dtype} ({x.kv_bytes_per_token:,} -> {o.kv_bytes_per_token:,} B a token a "
        f"device): frees {_gib(freed)} a device{ctx}"
        + (f" (temporaries {_gib(o.temp_bytes or 0)} there, {_gib(x.temp_bytes)} now)" if temp_delta else ""),
        resolves=x.free_bytes + freed >= bar,
        score=freed / x.usable_bytes,
    )


def _shrink(x: AdviceInputs, rule: Rule, bar: int) -> list[Suggestion]:
    out = []
    per_seq_kv = _seq_kv(x.kv_bytes_per_token, x.block_tokens, x.context_tokens)
    per_seq = per_seq_kv + x.state_bytes_per_sequence
    room = x.usable_bytes - x.fixed_bytes - bar
    seqs = max(0, room // per_seq)
    if 0 < seqs < x.sequences:
        scale = x.batch // x.sequences if x.batch % x.sequences == 0 else 1
        freed = (x.sequences - seqs) * per_seq
        out.append(
            Suggestion(
                rule=rule,
                action="batch",
                freed_bytes_per_device=freed,
                free_bytes_after=x.free_bytes + freed,
                text=f"batch {x.batch} -> {seqs * scale} ({x.sequences} -> {seqs} sequences a device at "
                f"{x.context_tokens:,} tokens): frees {_gib(freed)} a device (free {_gib(x.free_bytes + freed)})",
                resolves=True,
                shrinks_workload=True,
                score=freed / x.usable_bytes,
            )
        )
    ctx = kv_context_tokens(  # no KV (no MLA layer): a shorter context frees nothing (0)
        room / x.sequences - x.state_bytes_per_sequence,
        block_tokens=x.block_tokens,
        layers=1,
        kv_bytes_per_token_layer=x.kv_bytes_per_token,
    )
    if 0 < ctx < x.context_tokens:
        freed = x.kv_bytes - _kv_bytes(x, x.kv_bytes_per_token, x.block_tokens, ctx)
        out.append(
            Suggestion(
                rule=rule,
                action="context",
                freed_bytes_per_device=freed,
                free_bytes_after=x.free_bytes + freed,
                context_tokens_gained=ctx - x.context_tokens,
                text=f"context {x.context_tokens:,} -> {ctx:,} tokens at batch {x.batch}: frees {_gib(freed)} a device",
                resolves=True,
                shrinks_workload=True,
                score=freed / x.usable_bytes,
            )
        )
    return out


def _memory(x: AdviceInputs, rule: Rule, bar: int, warnings: list[str]) -> list[Suggestion]:
    out = _split(x, rule, bar) + _topology(x, rule, bar)
    out += [s for o in x.kv_dtype_options if (s := _kv_dtype(x, o, rule, bar)) is not None]
    one_seq = x.state_bytes_per_sequence + x.block_tokens * x.kv_bytes_per_token
    if x.usable_bytes - x.fixed_bytes < one_seq:
        left = x.usable_bytes - x.fixed_bytes
        how = (
            f"exceed {_gib(x.usable_bytes)} by {_gib(-left)}"
            if left < 0
            else f"leave {_gib(left)} of {_gib(x.usable_bytes)}"
        )
        warnings.append(
            f"weights {_gib(x.weights_bytes)} + temp {_gib(x.temp_bytes)} + reserve "
            f"{_gib(x.reserve_bytes)} {how} a device, less than one sequence's state and first KV "
            f"block ({_gib(one_seq)}): no batch or context fits here; change the "
            + ("split, the " if x.split_options else "")
            + "topology or the machine"
        )
    else:
        out += _shrink(x, rule, bar)
    return out


def _bandwidth(x: AdviceInputs) -> list[Suggestion]:
    out = []
    if x.tpot_s:
        thr = x.batch / x.tpot_s
        cap = max_sequences(x)
        for o in sorted(x.batch_options, key=lambda o: o.batch):
            # sequences a device holds at that batch (at batch 1 the ratio sequences / batch hides the DP split)
            need = (
                math.ceil(o.batch / x.sequence_groups)
                if x.sequence_groups
                else math.ceil(o.batch * x.sequences / x.batch)
            )
            if o.batch <= x.batch or need > cap:
                continue
            gain = (o.batch / o.tpot_s) / thr
            roof = f"stays {o.binding}-bound" if o.binding == x.binding else f"{x.binding}-bound -> {o.binding}-bound"
            out.append(
                Suggestion(
                    rule="bandwidth",
                    action="batch",
                    speedup=gain,
                    resolves=o.binding in COMPUTE_BOUND,
                    # priced on the decode bound, like for like (advice.wiring._bound_tpot): said so, beside a
                    # headline TPOT that may be measured or the model's
                    text=f"batch {x.batch} -> {o.batch}: {roof} at the decode bound's TPOT "
                    f"{o.tpot_s * 1e3:.2f} ms ({x.tpot_s * 1e3:.2f} now), {thr:,.0f} -> {o.batch / o.tpot_s:,.0f} "
                    f"tok/s (x{gain:.2f}); {need} of the {cap} sequences a device memory holds",
                    score=gain - 1,
                )
            )
    sd = x.spec_decode
    if sd is not None and x.tpot_s:
        tpot = sd.step_s / sd.tokens_per_step
        gain = x.tpot_s / tpot
        after = x.free_bytes - sd.draft_weights_bytes
        cost = (
            f"; draft weights {_gib(sd.draft_weights_bytes)} a device (free {_gib(after)})"
            if sd.draft_weights_bytes
            else ""
        )
        out.append(
            Suggestion(
                rule="bandwidth",
                action="spec_decode",
                speedup=gain,
                free_bytes_after=after,
                text=f"speculative decoding, {sd.draft_tokens} draft tokens: {sd.tokens_per_step:.2f} tokens a "
                f"{sd.step_s * 1e3:.2f} ms verify step, the decode bound's TPOT {x.tpot_s * 1e3:.2f} -> {tpot * 1e3:.2f} ms "
                f"(x{gain:.2f}){cost}",
                score=gain - 1,
            )
        )
    return out


def _compute(x: AdviceInputs) -> list[Suggestion]:
    total = sum(p.seconds for p in x.time_by_part_s)
    if total <= 0:
        return []
    ranked = [(p.part, p.seconds) for p in sorted(x.time_by_part_s, key=lambda p: -p.seconds)]
    part, t = ranked[0]
    rest = "".join(f", then {p} {v / total:.0%}" for p, v in ranked[1:3])
    return [
        Suggestion(
            rule="compute",
            action="dominant_part",
            score=t / total,
            text=f"compute-bound: {part} takes {t / total:.0%} of the step ({t * 1e3:.2f} of "
            f"{total * 1e3:.2f} ms){rest}; make it cheaper before adding compute",
        )
    ]


def advise(x: AdviceInputs) -> Advice:
    warnings: list[str] = []
    headroom = x.free_bytes / x.usable_bytes
    bar_thin = math.ceil(HEADROOM_MIN_FRACTION * x.usable_bytes)
    suggestions: list[Suggestion] = []
    verdict: Literal["fails", "thin", "ok"]
    if x.refused:
        warnings.append(
            f"refused by calibration evidence: {x.refused}; no HBM left free can hold that graph -- "
            "use a prefill chunk (--chunk) or batch at or below the largest measured size that fit"
        )
    if x.fallback:
        warnings.append(
            f"{x.fallback}: they fall back to replication, so the split fails whatever HBM is left free (plan "
            "refuses it); expected a --tp / --ep (or a topology) whose sizes divide them"
            + (f" (--tp {x.dividing_tp} divides the heads)" if x.dividing_tp else "")
        )
    if x.free_bytes < 0:
        verdict = "fails"
        suggestions += _memory(x, "capacity", 0, warnings)
    elif x.free_bytes < bar_thin and not x.refused and not x.fallback:
        verdict = "thin"
        warnings.append(
            f"it fits, with thin headroom: {_gib(x.free_bytes)} = {headroom:.1%} of usable HBM "
            f"({_gib(x.usable_bytes)}), under the {HEADROOM_MIN_FRACTION:.0%} margin; {_gib(bar_thin - x.free_bytes)} "
            "more free would leave room for a real workload's KV peak and the graph buckets"
        )
        suggestions += _memory(x, "headroom", bar_thin, warnings)
    else:
        verdict = "fails" if x.refused or x.fallback else "ok"
        if verdict == "fails":  # a split that divides (or whose graph is not refused) on the same chips
            suggestions += _split(x, "capacity", 0)
    if x.binding in MEMORY_BOUND:
        suggestions += _bandwidth(x)
    elif x.binding in COMPUTE_BOUND:
        suggestions += _compute(x)
    # what resolves first, then what keeps the workload, then the same chips before more (issue 36), then effect
    suggestions.sort(key=lambda s: (not s.resolves, s.shrinks_workload, s.action != "split", -s.score))
    return Advice(
        verdict=verdict,
        free_bytes=x.free_bytes,
        headroom_fraction=headroom,
        warnings=tuple(warnings),
        suggestions=tuple(suggestions),
    )
