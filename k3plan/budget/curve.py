"""The prefill-chunk vs longest-context trade-off: weights, the temporaries of the prefill graph at
each chunk size and of the decode graph, KDA state and KV share one budget (docs/k3-facts.md §6)."""

from __future__ import annotations

from typing import Optional, Sequence

from k3plan.budget.fit import Workload, fit
from k3plan.evidence.calibration import Calibration
from k3plan.setup import Setup
from k3plan.sharding.resolve import fallback_summary
from k3plan.structs import Frozen, replace

DEFAULT_CHUNKS = (1024, 2048, 4096, 8192, 16384, 32768, 49152, 65536)


class CurvePoint(Frozen):
    chunk_tokens: int
    prefill_temp_bytes: Optional[int]
    decode_temp_bytes: Optional[int]
    max_context_tokens: int  # what memory allows; may exceed the model's max position
    max_sequences: int
    # "ok", "outside calibration" (ok, not measured), "refused" (measured OOM), "replicated" (a dimension the
    # mesh does not divide: fit refuses the split), "no room"
    status: str
    temp_source: str
    detail: str = ""


def chunk_sizes(requested: Optional[Sequence[int]], cal: Optional[Calibration]) -> list[int]:
    if requested:
        return sorted(set(requested))
    sizes = set(DEFAULT_CHUNKS)
    if cal is not None:
        sizes |= {p.tokens for p in cal.prefill}
    return sorted(sizes)


def curve(
    setup: Setup, *, workload: Workload, chunks: Sequence[int], calibration: Optional[Calibration]
) -> list[CurvePoint]:
    points = []
    for c in chunks:
        r = fit(setup, replace(workload, prefill_chunk_tokens=c), calibration=calibration)
        refused = r.temp.prefill_refused
        # a dimension the mesh does not divide fails the fit at every chunk, as fit and plan refuse it
        replicated = fallback_summary(r.replicated)
        # room: a context for the batch, and the workload's --batch sequences of its context (fit's
        # concurrency rule: one sequence is not room for a batch of 32)
        held = r.capacity.max_sequences
        room = r.capacity.memory_context_tokens > 0 and held >= workload.batch
        if refused:
            status, detail = "refused", refused
        elif replicated:
            status, detail = "replicated", f"{replicated}: the split falls back to replication; see k3plan fit"
        elif not room:
            status, detail = "no room", _no_room(held, workload)
        else:
            status, detail = ("outside calibration" if r.temp.prefill_outside else "ok"), ""
        points.append(
            CurvePoint(
                chunk_tokens=c,
                prefill_temp_bytes=r.temp.prefill_bytes,
                decode_temp_bytes=r.temp.decode_bytes,
                max_context_tokens=r.capacity.memory_context_tokens,
                max_sequences=r.capacity.max_sequences,
                status=status,
                temp_source=r.provenance.temp_prefill,
                detail=detail,
            )
        )
    return points


def _no_room(held: int, workload: Workload) -> str:
    if held == 0:
        return f"no sequence of {workload.context_tokens:,} tokens fits beside this chunk"
    return f"only {held} of the {workload.batch} sequences of {workload.context_tokens:,} tokens fit beside this chunk"
