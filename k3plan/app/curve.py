"""What `k3plan curve` answers, typed: a CurveQuestion (the options cli/curve.py parsed) to a CurveAnswer: for
each prefill chunk size the temporaries it needs and the longest context (and most sequences) the rest of the
budget leaves, the session growth with --turns, and why the workload does not fit where no chunk size leaves
room. cli/curve.py only parses, asks and renders (issue 33: one typed question and one typed answer a
command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from k3plan.app.sessions import SessionOptions
from k3plan.structs import Frozen


class CurveQuestion(SessionOptions):
    """curve's options as parsed: the setup options (k3plan.app.setup.setup_from's keywords), the workload, the
    chunk sizes asked (None: the default sizes), the evidence and the session options."""

    __coerce__ = False  # the options as given

    setup_options: dict[str, Any]
    context: int
    batch: int = 1
    chunks: Optional[list[int]] = None
    calibration: Optional[Path] = None


class CurveAnswer(Frozen):
    """The curve's points with its title, warnings and notes; the session growth (--turns); ``why_not``: one
    line saying why the workload does not fit ("" when a chunk size leaves room) and its reason code."""

    __coerce__ = False

    title: str
    context: int
    batch: int
    model_max_context: Optional[int]
    calibration: Optional[str]  # the calibration file given (its path), else None
    warnings: list[str]
    notes: list[str]
    points: list[Any]  # k3plan.budget.curve.CurvePoint
    growth: Any = None  # k3plan.workload.sessions' growth, with --turns
    why_not: str = ""
    reason_code: Optional[str] = None

    @property
    def exit_code(self) -> int:
        """1 when no chunk size leaves room (as fit: the workload does not fit), else 0."""
        return 1 if self.why_not else 0


def answer(q: CurveQuestion) -> CurveAnswer:
    """The chunk-size curve of the question's configuration. Without a topology: the smallest standard one whose
    weights leave room (plan.defaults), not fit's rule of moving up while the workload does not fit (a curve
    shows where it stops fitting)."""
    from k3plan.app.sessions import session_growth_at
    from k3plan.app.setup import setup_from
    from k3plan.budget.curve import chunk_sizes, curve
    from k3plan.budget.fit import check_workload
    from k3plan.evidence.calibration import load_calibration

    context, batch = q.context, q.batch
    w = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=None)
    setup = setup_from(**q.setup_options)
    cal = load_calibration(str(q.calibration)) if q.calibration else None
    warnings: list[str] = []
    beyond = setup.model.spec.context_warning(context)
    if beyond:  # what memory allows is printed, but the model serves no position past its max
        warnings.append(beyond)
    if cal is not None:  # a calibration measured for another stack/TP/topology: say so, as `fit` does
        from k3plan.budget.fit import check_calibration_matches

        check_calibration_matches(setup, cal, warnings)
    sizes = chunk_sizes(q.chunks, cal)
    for c in sizes:
        check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=c)
    points = curve(setup, workload=w, chunks=sizes, calibration=cal)
    growth = None
    session = q.session()
    if session is not None:
        growth = session_growth_at(setup, w, cal, session)
    no_context = q.turns is not None and growth is None
    why_not = _why_not(points, context=context, batch=batch, turns=no_context)
    if cal is not None:
        evidence = f", calibration {Path(cal.path).name}"
    else:  # fit takes the best shipped calibration by default: the title names it too
        from k3plan.budget.fit import default_evidence

        found = default_evidence(setup)
        if found:
            evidence = f", {found[1]} calibration {Path(found[0].path).name}"
        else:
            from k3plan.budget.temp_model import load_temp_model

            modelled = load_temp_model().applies_to(setup)
            evidence = ", temp model (upper end of its band)" if modelled else ", analytic temp"
    title = (
        f"{setup.model.name} on {setup.hardware.name} {setup.topology.text}, {setup.parallel.label}, "
        f"stack {setup.stack.name}, batch {batch}" + evidence
    )
    from k3plan.setup import uneven_notes

    return CurveAnswer(
        title=title,
        context=context,
        batch=batch,
        model_max_context=setup.model.spec.max_context,
        calibration=cal.path if cal else None,
        warnings=warnings,
        notes=uneven_notes(setup.plan, setup.stack),  # the weights every point holds are the fullest device's
        points=points,
        growth=growth,
        why_not=why_not,
        reason_code=_reason_code(why_not, turns=no_context),
    )


def _why_not(points: list[Any], *, context: int, batch: int, turns: bool) -> str:
    """One line saying why the workload does not fit (exit 1, as fit), or "" when a chunk size leaves
    room: no chunk size leaves room for --batch sequences of --context tokens, or (--turns) no context
    fits at all at the default chunk."""
    if not any(p.status in ("ok", "outside calibration") for p in points):
        counts = {s: sum(p.status == s for p in points) for s in ("no room", "refused", "replicated")}
        what = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return (
            f"DOES NOT FIT: no prefill chunk size leaves room for {batch:,} sequence(s) of {context:,} tokens "
            f"({what}); see k3plan fit"
        )
    if turns:
        return f"DOES NOT FIT: --turns: no context fits at batch {batch:,} on this setup; see k3plan fit"
    return ""


def _reason_code(why_not: str, *, turns: bool) -> str | None:
    """The k3plan.step.verdict.ReasonCode of ``_why_not``'s line (None: it fits)."""
    from k3plan.step.verdict import ReasonCode

    if not why_not:
        return None
    return (ReasonCode.NO_CONTEXT if turns and "--turns" in why_not else ReasonCode.NO_CHUNK).value
