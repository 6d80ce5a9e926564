"""Which collectives a compiled HLO module really contains (jax-free: works on text).

HLO text names the op right before its operand list, after the result shape, which may be a tuple:
    %all-to-all = (f32[4]{0}, f32[4]{0}, /*index=2*/f32[4]{0}) all-to-all(%a, %b, %c), ...
    %ag = f32[256]{0} all-gather(%x), channel_id=1, replica_groups={{0,1}}, dimensions={0}
    %ars = f32[8]{0} all-reduce-start(%y), to_apply=%add
So an op is its name followed by "(" and not preceded by a name character; "-start" (async) counts
as the op, "-done" does not (it would count the same call twice).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional

from k3plan.evidence.probe_record import Verification

COLLECTIVES = (
    "ragged-all-to-all",
    "all-to-all",
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "collective-permute",
    "collective-broadcast",
)
_OP_RE = re.compile(r"(?<![\w.%-])(" + "|".join(re.escape(c) for c in COLLECTIVES) + r")(-start)?\(")


class VerificationError(Exception):
    """The compiled program does not run the collective that was asked for."""


def collective_counts(hlo_text: str) -> dict[str, int]:
    """op name -> number of instructions in the HLO text."""
    return dict(Counter(m.group(1) for m in _OP_RE.finditer(hlo_text)))


def verify_collective(hlo_text: str, *, expected_op: str, expected_calls: Optional[int] = None) -> Verification:
    """Is `expected_op` in the HLO? If not, which collective replaced it (if any)?"""
    found = collective_counts(hlo_text)
    count = found.get(expected_op, 0)
    others = sorted(op for op in found if op != expected_op)
    if count:
        detail = f"{count} {expected_op} instruction(s) in the compiled HLO"
        if expected_calls is not None and count < expected_calls:
            detail += f" for {expected_calls} calls: XLA combined or hoisted calls"
        return Verification(check="hlo-collective", ok=True, expected_op=expected_op, found_ops=found, detail=detail)
    replaced = ", ".join(others) if others else None
    detail = f"asked for {expected_op} but the compiled HLO has none; " + (
        f"XLA replaced it by {replaced}" if replaced else "it has no collective at all"
    )
    return Verification(
        check="hlo-collective", ok=False, expected_op=expected_op, found_ops=found, replaced_by=replaced, detail=detail
    )


def require_collective(hlo_text: str, *, expected_op: str) -> Verification:
    """verify_collective, raising VerificationError when the op is missing."""
    result = verify_collective(hlo_text, expected_op=expected_op)
    if not result.ok:
        raise VerificationError(result.detail)
    return result
