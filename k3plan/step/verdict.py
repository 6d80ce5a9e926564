"""Why a configuration is rejected: the first check it fails, 0 = feasible.

One definition for ``fit`` (one configuration) and ``plan`` (columns), so neither accepts what the
other refuses. A configuration whose attention heads or experts do not divide (a dimension falls
back to replication) is refused by both. An EP group that spans slices is *not* a rejection in
either: its collectives are costed over the scale-out link (step.comm) and both warn; plan used to
refuse it while fit accepted it (issue 10). Plan enumerates no TPU multi-slice shapes, so the rule
only ever hit GPU hosts over InfiniBand, where docs/k3-facts.md §4 (DCN, 12x less than ICI) says nothing.
"""

from __future__ import annotations

from enum import Enum

from k3plan.columns import first_true
from k3plan.units import fmt_gib


class ReasonCode(str, Enum):
    """The stable ``reason_code`` of every verdict in JSON (fit, roofline, plan, curve), defined once.

    The first seven are the checks of REASONS, in order (plan's ``reasons`` counts use the same keys);
    the others are verdicts outside that ladder. A CI job reads the code, a person the ``reason`` text.
    """

    FEASIBLE = "feasible"
    FALLBACK = "fallback"
    WEIGHTS = "weights"
    BUDGET = "budget"
    CONCURRENCY = "concurrency"
    TPOT = "tpot"
    UNPRICED = "unpriced"
    # a calibration's compiled graph ran out of memory at this chunk or context (fit, roofline)
    CALIBRATION = "calibration"
    # plan --strict: every configuration passed the memory checks but misses a latency target
    SLA = "sla"
    # curve: no prefill chunk size leaves room for the batch at the context
    NO_CHUNK = "no_chunk"
    # curve --turns: no context fits at the batch
    NO_CONTEXT = "no_context"
    # plan: the search found no configuration at all (no hardware, stack or topology to try)
    NO_CONFIGURATION = "no_configuration"
    # plan: fits and meets the targets, but its stack's engine cannot launch the split as priced (the launch line
    # cannot be written: k3plan.engines.launch); left out of the ranking unless --include-unlaunchable
    LAUNCH = "launch"
    # fit (issue 50): every check passes, but a stage's temporaries are the analytic lower bound, no evidence:
    # it fits only if they stay under the free bytes it leaves (exit status 3, not 0)
    UNVERIFIED_TEMP = "fits_if_temp_unverified"


# code -> (key, text); a configuration gets the first that applies, 0 = feasible
REASONS = (
    (ReasonCode.FEASIBLE.value, "feasible"),
    (ReasonCode.FALLBACK.value, "heads or experts do not divide: a dimension falls back to replication"),
    (ReasonCode.WEIGHTS.value, "does not fit: weights alone exceed usable HBM"),
    (
        ReasonCode.BUDGET.value,
        "does not fit: weights + temporaries + reserve + one sequence at the context exceed usable HBM",
    ),
    (
        ReasonCode.CONCURRENCY.value,
        "does not fit: not enough room for the batch of sequences (--batch in fit, --concurrency in plan)",
    ),
    (ReasonCode.TPOT.value, "misses the TPOT target"),
    (ReasonCode.UNPRICED.value, "no price in the hardware spec (--minimize cost)"),
    # plan only (reject_code never returns it): set on the rows that pass the checks above (k3plan.plan.launchable)
    (
        ReasonCode.LAUNCH.value,
        "its stack's engine cannot launch the split as priced (no launch line; --include-unlaunchable ranks it last)",
    ),
)
CALIBRATION_REFUSED = "a compiled graph was refused by calibration"


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


def unverified_text(max_temp_bytes: int) -> str:
    """The reason of a fit that rests on the analytic lower bound of its temporaries (issue 50)."""
    return (
        f"fits if temporaries <= {fmt_gib(max_temp_bytes)} (unverified: the temp is the analytic lower bound, "
        "no measured or compiled evidence)"
    )


def fit_reason(*, fits: bool, code: int, unverified_max_temp_bytes: int | None = None) -> tuple[ReasonCode, str]:
    """(reason_code, reason) of one configuration's verdict: the text after "DOES NOT FIT: ", or
    "fits"; a configuration that passes every check but is refused by its calibration is CALIBRATION; one that
    fits only on the analytic lower bound of its temporaries is UNVERIFIED_TEMP (issue 50)."""
    if fits and unverified_max_temp_bytes is not None:
        return ReasonCode.UNVERIFIED_TEMP, unverified_text(unverified_max_temp_bytes)
    if fits:
        return ReasonCode.FEASIBLE, "fits"
    if code:
        return ReasonCode(REASONS[int(code)][0]), why_not(code)
    return ReasonCode.CALIBRATION, CALIBRATION_REFUSED
