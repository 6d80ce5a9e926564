"""Is a point inside a calibration's measured range? Judged on the quantities the stage's temporaries grow with,
not on one axis (issue 50 item 2).

What a stage's temporaries grow with is read off the stack's analytic temp terms (k3plan/step/temporaries.py):

- decode (``decode_temp_terms``, every stack): the absorbed MLA scores (f32) are batch x context values a layer --
  the cache tokens the step touches -- and the residual, logits, KDA state copy, router, expert inputs and combine
  buffer are batch rows; and the compiled step also holds buffers over one sequence's context, whatever the
  batch (tpu7x:2x2x4, torchtpu-vllm, TP 32, 93 layers: 28.11 GiB at batch 1 x context 131,072 against 22.93 GiB
  at batch 4 x context 32,768, the same 131,072 cache tokens; +55 KB a context token over +18 KB a cache token,
  k3plan/evidence/calibrations/k3-tpu7x-2x2x4-tp32-vllm-tpu-compiled.yaml). And a batch of one holds more than a
  batch of two at the same context (28.11 against 25.42 GiB at 131,072; about 23.5 against 22.90 at 65,536): a
  point of batch >= 2 does not stand for batch 1. So a decode point is (batch x context, batch, context, batch is
  1): the first two alone let a larger batch at a shorter context stand for a longer one, and under-count it.
- prefill of an engine's kernels (``prefill_temp_terms``): residual, KDA projections and chunk states, router,
  expert inputs and combine are chunk rows, the MLA K/V up-projected over the context context rows; a point is
  (chunk, context). The compiles say so too: torchtpu-vllm's 8,192-token chunk holds 25.70 GiB into 8,192 tokens
  and runs out of HBM into 131,072 (99.62 GB required, tpu7x:2x2x4 TP 32). A point written before its context was
  recorded read a cache of its chunk's size (the calibrations' keying); over the chunk alone (such a file, asked
  at a context no longer than the chunk) this is ``evidence.calibration.envelope`` exactly.
- prefill of a graph in XLA ops (``xla_prefill_temp_terms``, ``Engine.temp_graph`` "xla": jax-native): its MLA
  block holds the scores [local heads, chunk, context]; a point is (chunk, chunk x context). A calibration's
  prefill point is one chunk into a cache of the chunk's size (context = chunk), as the calibrations are keyed.

A measured point *dominates* the asked one when it is at least as large in every quantity: if the temporaries do
not shrink as any of them grows, the dominating point's temp bounds the asked one's. Over the dominating points the
bound is the smallest of their envelopes (each the largest temp among the points it dominates, a guard against a
curve that is not monotone); over one quantity this is ``evidence.calibration.envelope`` exactly. A point the
compiler refused (``fits: false``) that the asked point dominates refuses it; the asked point with no dominating
point, or only points with a refusal under them, is outside the range: no evidence there (fit: FITS IF, never a
plain FITS)."""

from __future__ import annotations

from typing import Optional

from k3plan.evidence.calibration import Calibration, envelope
from k3plan.structs import Frozen

# what each stage's temporaries grow with, and the analytic terms that say so (the label fit prints)
DECODE_GROWS = (
    "batch x context, batch and context (batch 1 apart)",
    "decode_temp_terms and the compiled points: k3plan/budget/measured_range.py",
)
PREFILL_GROWS = (
    "chunk and context",
    "prefill_temp_terms' MLA K/V over the context: k3plan/step/temporaries.py; a point without a context read its chunk",
)
XLA_PREFILL_GROWS = (
    "chunk and chunk x context",
    "xla_prefill_temp_terms' scores: k3plan/step/temporaries.py; a prefill point's context is its chunk",
)


class RangePoint(Frozen):
    """One calibration point in the stage's quantities."""

    at: tuple[int, ...]  # the quantities, in the order the stage names them
    temp_bytes: int
    fits: bool
    label: str  # "chunk 8,192", "batch 32 x context 8,192"


class InRange(Frozen):
    """The answer: ``status`` "measured" (inside: ``temp_bytes`` bounds the point), "refused" (a point the
    compiler refused is dominated by the asked one) or "outside" (no point dominates it)."""

    status: str
    temp_bytes: Optional[int]
    detail: str
    asked: str  # the asked point in words: "batch 1 x context 131,072"
    names: str  # the quantities the stage's temporaries grow with, in words
    cite: str  # the analytic terms that say so

    @property
    def grows(self) -> str:
        """The quantities judged and why, for a source label."""
        return f"judged on {self.names}: {self.cite}"


def _dominates(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b))


def judge(points: list[RangePoint], asked: tuple[int, ...], *, asked_label: str, grows: tuple[str, str]) -> InRange:
    """Dominance over the stage's quantities (the module's docstring). ``grows``: (the quantities in words, the
    analytic terms that say so)."""
    names = grows[0]
    said = dict(asked=asked_label, names=names, cite=grows[1])
    refused_below = [p for p in points if not p.fits and _dominates(asked, p.at)]
    if refused_below:
        worst = max(refused_below, key=lambda p: p.at)
        return InRange(
            status="refused",
            temp_bytes=None,
            detail=f"{asked_label}: the measured compile at {worst.label} ran out of memory",
            **said,
        )
    covering = [p for p in points if _dominates(p.at, asked)]
    if not covering:
        largest = max(points, key=lambda p: p.at)
        return InRange(
            status="outside",
            temp_bytes=None,
            detail=f"{asked_label} is beyond the measured points in {names} (largest: {largest.label})",
            **said,
        )

    def bound(p: RangePoint) -> tuple[int, Optional[RangePoint]]:
        """(the envelope at p, the refused point under it or None)."""
        under = [q for q in points if _dominates(p.at, q.at)]
        bad = next((q for q in sorted(under, key=lambda q: q.at) if not q.fits), None)
        return max(q.temp_bytes for q in under), bad

    judged = sorted(((bound(p), p) for p in covering), key=lambda t: (t[0][1] is not None, t[0][0], t[1].at))
    (temp, bad), by = judged[0]
    if bad is not None:  # every covering point has a refused compile under it, none under the asked point: a
        # refusal above the asked point says nothing of it (over one quantity the envelope refuses here)
        largest = max((p for p in points if p.fits), key=lambda p: p.at, default=max(points, key=lambda p: p.at))
        return InRange(
            status="outside",
            temp_bytes=None,
            detail=f"{asked_label} is beyond the measured points that fit in {names} (largest: {largest.label}; "
            f"{bad.label} ran out of memory)",
            **said,
        )
    return InRange(status="measured", temp_bytes=temp, detail=f"envelope of measured points up to {by.label}", **said)


def _chunk_label(p) -> str:
    return f"chunk {p.tokens:,}" + ("" if p.context is None or p.context == p.tokens else f" x context {p.context:,}")


def stage_range(cal: Calibration, *, stage: str, x: int, batch: int = 1, context: Optional[int] = None,
                xla_graph: bool = False) -> Optional[InRange]:  # fmt: skip
    """The calibration's answer for ``stage`` at chunk ``x`` (prefill; ``context``: the context it attends over,
    used where the graph materializes scores over it) or context ``x`` at ``batch`` (decode); None: the file has
    no point for the stage. A decode point whose batch the file does not record is taken at batch 1."""
    if stage == "prefill":
        if not cal.prefill:
            return None
        ctx = x if context is None else max(context, x)
        if xla_graph:
            pts = [RangePoint(at=(p.tokens, p.tokens * (p.context or p.tokens)), temp_bytes=p.temp_bytes, fits=p.fits,
                              label=_chunk_label(p)) for p in cal.prefill]  # fmt: skip
            return judge(pts, (x, x * ctx), asked_label=f"chunk {x:,} x context {ctx:,}", grows=XLA_PREFILL_GROWS)
        if all(p.context is None for p in cal.prefill) and ctx == x:
            # one quantity: the envelope over the chunk (judge() over one quantity, in its words)
            env = envelope([(p.tokens, p.temp_bytes, p.fits) for p in cal.prefill], x, what="chunk")
            return InRange(status=env.status, temp_bytes=env.temp_bytes, detail=env.detail, asked=f"chunk {x:,}",
                           names=PREFILL_GROWS[0], cite=PREFILL_GROWS[1])  # fmt: skip
        pts = [RangePoint(at=(p.tokens, p.context or p.tokens), temp_bytes=p.temp_bytes, fits=p.fits,
                          label=_chunk_label(p)) for p in cal.prefill]  # fmt: skip
        return judge(pts, (x, ctx), asked_label=f"chunk {x:,} x context {ctx:,}", grows=PREFILL_GROWS)
    if not cal.decode:
        return None
    pts = [
        RangePoint(at=((p.batch or 1) * p.context, p.batch or 1, p.context, int((p.batch or 1) == 1)), temp_bytes=p.temp_bytes, fits=p.fits,
                   label=f"batch {p.batch or 1:,}{'' if p.batch else ' (unrecorded)'} x context {p.context:,}")
        for p in cal.decode
    ]  # fmt: skip
    return judge(pts, (batch * x, batch, x, int(batch == 1)), asked_label=f"batch {batch:,} x context {x:,}",
                 grows=DECODE_GROWS)  # fmt: skip
