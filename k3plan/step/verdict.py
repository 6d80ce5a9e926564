"""Why a configuration is rejected: the first check it fails, 0 = feasible.

One definition for ``fit`` (one configuration) and ``plan`` (columns), so neither accepts what the
other refuses. A configuration whose attention heads or experts do not divide (a dimension falls
back to replication) is refused by both. An EP group that spans slices is *not* a rejection in
either: its collectives are costed over the scale-out link (step.comm) and both warn; plan used to
refuse it while fit accepted it (issue 10). Plan enumerates no TPU multi-slice shapes, so the rule
only ever hit GPU hosts over InfiniBand, where docs/k3-facts.md §4 (DCN, 12x less than ICI) says nothing.
"""

from __future__ import annotations

from k3plan.columns import first_true

# code -> (key, text); a configuration gets the first that applies, 0 = feasible
REASONS = (
    ("feasible", "feasible"),
    ("fallback", "heads or experts do not divide: a dimension falls back to replication"),
    ("weights", "does not fit: weights alone exceed usable HBM"),
    ("budget", "does not fit: weights + temporaries + reserve + one sequence at the context exceed usable HBM"),
    ("concurrency", "does not fit: not enough room for the batch of sequences (--batch in fit, --concurrency in plan)"),
    ("tpot", "misses the TPOT target"),
    ("unpriced", "no price in the hardware spec (--minimize cost)"),
)


def reject_code(
    *,
    fallbacks,
    weights_bytes,
    usable,
    room_bytes,
    sequence_bytes,
    max_sequences,
    concurrency,
    tpot_s=None,
    target_tpot_s=None,
    unpriced=None,
):
    """The index in REASONS of the first failed check (an int, or an array of them)."""
    return first_true(
        [
            fallbacks > 0,
            weights_bytes > usable,
            room_bytes < sequence_bytes,
            max_sequences < concurrency,
            tpot_s > target_tpot_s if target_tpot_s is not None else False,
            unpriced if unpriced is not None else False,
        ]
    )


def reason_text(code: int) -> str:
    return REASONS[int(code)][1]


def why_not(code: int) -> str:
    """The reason as it follows "DOES NOT FIT: " (fit and roofline print the same line)."""
    return reason_text(code).removeprefix("does not fit: ")
