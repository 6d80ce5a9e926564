"""The capacity report's expected times beside its ceilings (issue 17): one decode step at each batch
a row shows and the prompt's TTFT, from the step's op list and the device kind's efficiency records
(``speed.stage``). Kept apart from capacity.py / capacity_doc.py so that those only call in:

    x = row_expected(setup, batches=[...], context=c, chunk=..., evidence=evidence)
    x.tpot_s[batch], x.measured[batch], x.ttft_s, x.ttft_measured, x.records  ->  cell(...)
"""

from __future__ import annotations

from typing import Optional

from k3plan.evidence.value import Evidence
from k3plan.structs import Frozen


class RowExpected(Frozen):
    tpot_s: dict[int, float]  # by decode batch
    measured: dict[int, bool]  # by decode batch: did any op use a record (else: the ops' ceiling)
    ttft_s: float
    ttft_measured: bool
    records: str  # which records set the efficiencies, or why none


def row_expected(setup, *, batches: list[int], context: int, chunk: int, evidence: Optional[Evidence]) -> RowExpected:
    from k3plan.speed.peaks import Peaks
    from k3plan.speed.stage import curves_for, decode_stage, expected_speed, records_of

    x = expected_speed(
        setup, batch=batches[0], context_tokens=context, prompt_tokens=context, chunk_tokens=chunk, evidence=evidence
    )
    peaks = Peaks.from_hardware(setup.hardware)
    curves = curves_for(peaks, evidence)[0]
    stages = {batches[0]: x.decode}
    for b in batches[1:]:  # issue 38: as expected_speed's decode step
        stages[b] = decode_stage(setup, batch=b, context=context, peaks=peaks, curves=curves)
    return RowExpected(
        tpot_s={b: s.expected_s for b, s in stages.items()},
        # a record set an op's efficiency or a term's time (gpu-gemm's GEMM table on a GPU): not the ceilings alone
        measured={b: any(o.efficiency.measured for o in s.ops) or bool(records_of(s)) for b, s in stages.items()},
        ttft_s=x.prefill.expected_s,
        ttft_measured=any(o.efficiency.measured for o in x.prefill.ops) or bool(records_of(x.prefill)),
        records=x.records,
    )


def cell(s: Optional[float], measured: Optional[bool], *, seconds: bool = False) -> str:
    """A table cell: the expected time, '(ops at ceiling + engine terms)' where no record applied; '-' where none."""
    if s is None:
        return "-"
    shown = f"{s:,.2f} s" if seconds else f"{s * 1e3:,.2f} ms"
    return shown + ("" if measured else " (no probe record: ops at ceiling)")


def note(records: str) -> str:
    return (
        "Expected: the step's ops one after another, each at its measured efficiency where a probe record "
        f"covers it, else at its ceiling ({records}), plus the engine's fixed terms a step (host time of a "
        "synchronous step, the ops' fixed cost: k3plan/speed/overheads.py)."
    )
