"""`k3plan curve`: prefill chunk size vs the longest context it leaves room for."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from k3plan.app.setup import setup_from
from k3plan.cli.common import (
    DEFAULT_CONTEXT_TOKENS,
    BatchOpt,
    CalibrationOpt,
    ContextOpt,
    JsonOpt,
    console,
    print_json,
    with_setup_options,
)
from k3plan.cli.lists import whole_numbers
from k3plan.cli.sessions import (
    AnswerTokensOpt,
    DropReasoningOpt,
    ReasoningTokensOpt,
    SystemTokensOpt,
    ToolTokensOpt,
    TurnsOpt,
    UserTokensOpt,
)


def _parse_chunks(text: Optional[str]) -> Optional[list[int]]:

    if not text:
        return None
    return whole_numbers("--chunks", text)


@with_setup_options
def command(
    setup_options: dict,
    context: ContextOpt = DEFAULT_CONTEXT_TOKENS,
    batch: BatchOpt = 1,
    chunks: Annotated[
        Optional[str],
        typer.Option(
            "--chunks", help="Comma-separated prefill chunk sizes (default 1K..64K plus every calibrated size)."
        ),
    ] = None,
    calibration: CalibrationOpt = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(
            "--plot", help="Write the curve as FILE.png or FILE.svg (needs matplotlib: pip install 'k3plan[plot]')."
        ),
    ] = None,
    turns: TurnsOpt = None,
    user_tokens: UserTokensOpt = 0,
    answer_tokens: AnswerTokensOpt = 0,
    reasoning_tokens: ReasoningTokensOpt = 0,
    tool_tokens: ToolTokensOpt = 0,
    system_tokens: SystemTokensOpt = 0,
    drop_reasoning: DropReasoningOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """For each prefill chunk size: the temporaries it needs and the longest context (and most
    sequences at --context) that the rest of the budget leaves. Refuses chunk sizes whose measured
    compile ran out of memory. Exit 0 if a chunk size leaves room for the workload, 1 if none does
    (as fit: the workload does not fit), 2 on bad input.

    \b
    Examples:
      k3plan curve -t 2x2x4 --tp 32
      k3plan curve -t 2x2x4 --stack jax-native \\
          --calibration k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml --plot curve.png
      k3plan curve -t 2x4x4 --tp 32 --batch 32 --context 32768 --turns 20 --system-tokens 4000 \\
          --user-tokens 800 --answer-tokens 1200 --tool-tokens 2000 --reasoning-tokens 6000
    """
    from k3plan.budget.curve import chunk_sizes, curve
    from k3plan.budget.fit import check_workload
    from k3plan.evidence.calibration import load_calibration

    w = check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=None)
    setup = setup_from(**setup_options)
    cal = load_calibration(str(calibration)) if calibration else None
    warnings: list[str] = []
    beyond = setup.model.spec.context_warning(context)
    if beyond:  # what memory allows is printed, but the model serves no position past its max
        warnings.append(beyond)
    if cal is not None:  # a calibration measured for another stack/TP/topology: say so, as `fit` does
        from k3plan.budget.fit import check_calibration_matches

        check_calibration_matches(setup, cal, warnings)
    sizes = chunk_sizes(_parse_chunks(chunks), cal)
    for c in sizes:
        check_workload(context_tokens=context, batch=batch, prefill_chunk_tokens=c)
    points = curve(setup, workload=w, chunks=sizes, calibration=cal)
    growth = None
    from k3plan.cli.sessions import session_from

    session = session_from(
        turns=turns,
        system_tokens=system_tokens,
        user_tokens=user_tokens,
        answer_tokens=answer_tokens,
        reasoning_tokens=reasoning_tokens,
        tool_tokens=tool_tokens,
        drop_reasoning=drop_reasoning,
    )
    if session is not None:
        from k3plan.cli.sessions import session_growth_at

        growth = session_growth_at(setup, w, cal, session)
    why_not = _why_not(points, context=context, batch=batch, turns=turns is not None and growth is None)
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
    if plot is not None:
        from k3plan.report.plots import plot_curve

        plot_curve(points, title=title, path=plot)
    from k3plan.setup import uneven_notes

    notes = uneven_notes(setup.plan, setup.stack)  # the weights every point holds are the fullest device's
    if json_out:
        from k3plan.budget.curve_output import CurveOutput

        print_json(
            CurveOutput(
                title=title,
                context_tokens=context,
                batch=batch,
                calibration=cal.path if cal else None,
                warnings=warnings,
                notes=notes,
                points=points,
                sessions=growth,
                reason=why_not.removeprefix("DOES NOT FIT: ") or None,
                reason_code=_reason_code(why_not, turns=turns is not None and growth is None),
            )
        )
        if why_not:
            typer.echo(why_not, err=True)
            raise typer.Exit(1)
        return
    from k3plan.report.curve_table import render_curve

    render_curve(
        points,
        console,
        title=title,
        context=context,
        model_max=setup.model.spec.max_context,
        warnings=warnings,
        notes=notes,
    )
    if growth is not None:
        from k3plan.report.curve_table import render_sessions

        render_sessions(growth, console, batch=batch)
    if plot is not None:
        console.print(f"plot written to {plot}")
    if why_not:
        console.print(why_not)
        raise typer.Exit(1)


def _why_not(points, *, context: int, batch: int, turns: bool) -> str:
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
