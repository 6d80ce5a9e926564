"""Why a configuration is rejected (the first check it fails), and each family's account."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from k3plan.plan.space import Space
from k3plan.plan.table import StepColumns
from k3plan.step.verdict import REASONS, reject_code
from k3plan.structs import Frozen, fields
from k3plan.units import GiB

CODE = {key: i for i, (key, _) in enumerate(REASONS)}
# --strict under --isl/--osl: a row that passed every check of REASONS but misses a latency target (plan/wire.py)
SLA_REASON = "misses a latency target or cannot hold the sequences in flight (--strict)"


class _ByReason(Frozen):
    """One field per reason of k3plan.step.verdict.REASONS, in its order, then ``sla``; a field is
    None where it says nothing and then absent from the JSON (the plan JSON contract)."""

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in out.items() if v is not None}

    def items(self) -> list[tuple[str, Any]]:
        """(reason key, value) of the reasons present, in REASONS order."""
        return [(k, v) for k in fields(self) if (v := getattr(self, k)) is not None]


class ReasonCounts(_ByReason):
    """How many of a family's configurations stop at each reason (the first check each fails);
    ``feasible``: how many pass; ``sla``: passed, but miss a latency target under --strict."""

    feasible: Optional[int] = None
    fallback: Optional[int] = None
    weights: Optional[int] = None
    budget: Optional[int] = None
    concurrency: Optional[int] = None
    tpot: Optional[int] = None
    unpriced: Optional[int] = None
    launch: Optional[int] = None
    sla: Optional[int] = None

    def total(self) -> int:
        return sum(n for _, n in self.items())


class ReasonTexts(_ByReason):
    """What each reason key of the families' counts means (``sla`` only under --strict)."""

    feasible: str
    fallback: str
    weights: str
    budget: str
    concurrency: str
    tpot: str
    unpriced: str
    launch: str
    sla: Optional[str] = None


def reason_codes(
    *, cols: StepColumns, concurrency: int, target_tpot_s: Optional[float], need_price: bool
) -> np.ndarray:
    return reject_code(
        fallbacks=cols.fallbacks,
        weights_bytes=cols.weights_bytes,
        usable=cols.usable,
        room_bytes=cols.room_bytes,
        sequence_bytes=cols.sequence_bytes,
        max_sequences=cols.max_sequences,
        concurrency=concurrency,
        tpot_s=cols.tpot_s,
        target_tpot_s=target_tpot_s,
        unpriced=np.isnan(cols.price) if need_price else None,
    )


def _best(values: np.ndarray, family: np.ndarray, mask: np.ndarray, size: int, fn) -> np.ndarray:
    out = np.full(size, np.nan)
    idx = np.flatnonzero(mask)
    if idx.size:
        init = np.full(size, np.inf if fn is np.minimum else -np.inf)
        fn.at(init, family[idx], values[idx].astype(float))
        out = np.where(np.isfinite(init), init, np.nan)
    return out


class Family(Frozen):
    """One (hardware, stack) family's account: configurations searched, how many pass, the count
    of each reason the others fail on (reason code -> count, "feasible" first when any pass) and how
    close the family came on the check that stopped it."""

    hardware: str
    stack: str
    configurations: int
    feasible: int
    reasons: ReasonCounts
    detail: list[str]


def families(
    *,
    space: Space,
    cols: StepColumns,
    codes: np.ndarray,
    kinds: dict[str, np.ndarray],
    concurrency: int,
    target_tpot_s: Optional[float],
    launch: Optional[dict[int, str]] = None,
) -> list[Family]:
    """One account per (hardware, stack): configurations, feasible ones, reasons with counts, and
    how close the family came on the check that stopped it; ``launch``: row index -> why its stack cannot launch
    it (k3plan.plan.launchable), for the rows coded ``launch``."""
    size = len(space.hardware) * len(space.stacks)
    fam = cols.family
    counts = np.bincount(fam * len(REASONS) + codes, minlength=size * len(REASONS)).reshape(size, len(REASONS))
    # the closest each family came on the check that stopped it
    weights_min = _best(cols.weights_bytes / cols.usable, fam, codes == CODE["weights"], size, np.minimum)
    room_best = _best((cols.room_bytes - cols.sequence_bytes) / GiB, fam, codes == CODE["budget"], size, np.maximum)
    seqs_best = _best(cols.max_sequences, fam, codes == CODE["concurrency"], size, np.maximum)
    tpot_best = _best(cols.tpot_s * 1e3, fam, codes == CODE["tpot"], size, np.minimum)
    out = []
    for f in range(size):
        hw, stack = space.family(f)
        total = int(counts[f].sum())
        if total == 0 and f not in space.skipped:
            continue  # not a family of this search (platform mismatch under the default stacks)
        reasons = ReasonCounts(**{REASONS[r][0]: int(counts[f, r]) for r in range(len(REASONS)) if counts[f, r]})
        detail = []
        if f in space.skipped:
            detail.append(space.skipped[f])
        if reasons.fallback:
            mine = fam == f
            detail.append("fallbacks: " + ", ".join(sorted(k for k, m in kinds.items() if (m & mine).any())))
        if reasons.weights:
            detail.append(f"weights alone: at best {weights_min[f]:.0%} of usable HBM a device")
        if reasons.budget:
            detail.append(f"one sequence at the context: short by {-room_best[f]:.2f} GiB a device at best")
        if reasons.concurrency:
            detail.append(f"at most {int(seqs_best[f])} sequences where {concurrency} are needed")
        if reasons.launch and launch:
            why = [e for i, e in launch.items() if int(fam[i]) == f and codes[i] == CODE["launch"]]
            if why:
                top = max(sorted(set(why)), key=why.count)  # ties: the first in order, not a set's hash order
                detail.append(f"cannot launch ({len(why)}): {top}" + (" (and others)" if len(set(why)) > 1 else ""))
        if reasons.tpot and target_tpot_s is not None:
            detail.append(f"best TPOT {tpot_best[f]:.2f} ms against a target of {target_tpot_s * 1e3:g} ms")
        out.append(
            Family(
                hardware=hw,
                stack=stack,
                configurations=total,
                feasible=int(counts[f, 0]),
                reasons=reasons,
                detail=detail,
            )
        )
    return out


def reason_texts(*, strict_sla: bool = False) -> ReasonTexts:
    """The reasons' texts; with ``strict_sla`` (--strict under --isl/--osl) the SLA miss too."""
    return ReasonTexts(**dict(REASONS), sla=SLA_REASON if strict_sla else None)
