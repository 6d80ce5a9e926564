"""Predicted (the budget) vs compiled (memory_analysis), term by term, every byte accounted for.

Each term carries its delta and the named reasons that explain it; ``unexplained_bytes`` is what
is left. On CPU the argument, output and alias sizes are exact, so weights and cache must match to
the byte once the named reasons are taken out. On TPU the compiler's layout padding (tiling) is
the one extra reason allowed; it is computed from the compiled entry layout (k3plan.validate.layouts),
not taken as a remainder, so a real difference still shows as unexplained. Temp is compared but never required to match: the
CPU backend's temp is not representative of a TPU's, and the budget's temp is a model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Reason:
    why: str
    bytes: int


@dataclass(frozen=True)
class Term:
    name: str
    predicted_bytes: Optional[int]
    compiled_bytes: Optional[int]
    reasons: tuple[Reason, ...] = ()
    note: str = ""
    must_match: bool = True  # a nonzero unexplained delta is a finding

    @property
    def delta_bytes(self) -> Optional[int]:
        if self.predicted_bytes is None or self.compiled_bytes is None:
            return None
        return self.compiled_bytes - self.predicted_bytes

    @property
    def delta_pct(self) -> Optional[float]:
        d = self.delta_bytes
        if d is None or not self.predicted_bytes:
            return None
        return 100.0 * d / self.predicted_bytes

    @property
    def unexplained_bytes(self) -> Optional[int]:
        d = self.delta_bytes
        if d is None or not self.must_match:
            return None
        return d - sum(r.bytes for r in self.reasons)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(delta_bytes=self.delta_bytes, delta_pct=self.delta_pct, unexplained_bytes=self.unexplained_bytes)
        return d


@dataclass(frozen=True)
class Accounting:
    """What the comparison needs besides memory_analysis(), all per device."""

    budget_weights: int
    budget_kv: int
    budget_kv_dense: int  # the same KV with the dense MLA entry (the stack's kv_cache.layout pads it: budget only)
    budget_state: int
    budget_state_unpadded: int  # the same state without hybrid-paging padding
    budget_temp: Optional[int]
    abstract_weights: int
    abstract_cache: int
    abstract_inputs: int
    platform: str  # cpu | tpu
    weight_notes: tuple[str, ...] = field(default_factory=tuple)
    # layout padding per group (weights, cache, inputs) read from the compiled entry layouts
    padding: Optional[dict[str, int]] = None


def _layout_padding(acc: Accounting, group: str, what: str) -> tuple[Reason, ...]:
    if acc.padding is None or not acc.padding.get(group):
        return ()
    return (
        Reason(
            f"{acc.platform.upper()} layout padding of the {what} (tiles in the compiled entry layout)",
            acc.padding[group],
        ),
    )


def compare(
    *, acc: Accounting, argument: Optional[int], alias: Optional[int], output: Optional[int], temp: Optional[int]
) -> list[Term]:
    terms: list[Term] = []
    # weights: arguments minus the donated (aliased) cache minus the step inputs (as laid out)
    inputs = acc.abstract_inputs + ((acc.padding or {}).get("inputs") or 0)
    compiled_w = None if argument is None or alias is None else argument - alias - inputs
    w_reasons = []
    if acc.abstract_weights != acc.budget_weights:
        w_reasons.append(
            Reason(
                "abstract arrays vs the budget's per-tensor bytes (shards that do not divide: "
                + "; ".join(acc.weight_notes)
                + ")",
                acc.abstract_weights - acc.budget_weights,
            )
        )
    w_reasons += _layout_padding(acc, "weights", "weights")
    terms.append(
        Term(
            "weights",
            acc.budget_weights,
            compiled_w,
            tuple(w_reasons),
            "compiled = arguments - alias (the donated cache) - step inputs",
        )
    )
    # cache: the donated cache is exactly the aliased bytes
    c_reasons = []
    pad = acc.budget_state - acc.budget_state_unpadded
    if pad:
        c_reasons.append(
            Reason(
                "hybrid paging pads each KDA state page up to the attention page: budget only, "
                "the compiled cache holds dense state",
                -pad,
            )
        )
    if acc.budget_kv != acc.budget_kv_dense:
        c_reasons.append(
            Reason(
                "the stack's kv_cache.layout pads each MLA entry as its engine lays it out: budget only, the compiled "
                "cache holds the dense entry",
                acc.budget_kv_dense - acc.budget_kv,
            )
        )
    c_reasons_base = acc.budget_kv_dense + acc.budget_state_unpadded
    if acc.abstract_cache != c_reasons_base:
        c_reasons.append(
            Reason("abstract cache arrays vs the budget's dense cache", acc.abstract_cache - c_reasons_base)
        )
    c_reasons += _layout_padding(acc, "cache", "cache")
    terms.append(
        Term(
            "cache (KV + KDA state)",
            acc.budget_kv + acc.budget_state,
            alias,
            tuple(c_reasons),
            "compiled = alias_size (the cache is donated and returned)",
        )
    )
    terms.append(
        Term(
            "step inputs",
            0,
            inputs,
            (
                Reason("token ids and positions: inputs of the step, not a budget term", acc.abstract_inputs),
                *_layout_padding(acc, "inputs", "step inputs"),
            ),
            "from the abstract arrays and the entry layout",
        )
    )
    arg_reasons = tuple(r for t in terms for r in t.reasons)
    terms.append(
        Term(
            "arguments",
            acc.budget_weights + acc.budget_kv + acc.budget_state,
            argument,
            arg_reasons,
            "argument_size_in_bytes = weights + cache + step inputs",
        )
    )
    if output is not None and alias is not None:
        terms.append(
            Term(
                "outputs",
                alias,
                output,
                (Reason("next-token ids (the rest is the aliased cache)", output - alias),),
                "output_size_in_bytes",
                must_match=False,
            )
        )
    note = (
        "CPU backend, not representative of TPU"
        if acc.platform == "cpu"
        else "the TPU compiler's temp vs k3plan's analytic temp model"
    )
    terms.append(Term("temp", acc.budget_temp, temp, (), note, must_match=False))
    return terms


def unexplained(terms: list[Term]) -> int:
    return sum(abs(t.unexplained_bytes or 0) for t in terms if t.must_match and t.name != "arguments")
