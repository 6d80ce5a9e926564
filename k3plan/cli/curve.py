"""`k3plan curve`: prefill chunk size vs the longest context it leaves room for."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

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
from k3plan.cli.frames import check_csv, csv_option, to_stdout, write_csv
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
    csv: Annotated[
        Optional[Path], csv_option("the curve's points", "--csv curve.csv, then pandas.read_csv('curve.csv')")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """For each prefill chunk size: the temporaries it needs and the longest context (and most
    sequences at --context) that the rest of the budget leaves. Refuses chunk sizes whose measured
    compile ran out of memory. Exit 0 if a chunk size leaves room for the workload, 1 if none does
    (as fit: the workload does not fit), 2 on bad input.

    \b
    Examples:
      k3plan curve -t 2x4x4 --tp 32
      k3plan curve -t 2x2x4 --stack jax-native \\
          --calibration k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml --plot curve.png
      k3plan curve -t 2x4x4 --tp 32 --batch 32 --context 32768 --turns 20 --system-tokens 4000 \\
          --user-tokens 800 --answer-tokens 1200 --tool-tokens 2000 --reasoning-tokens 6000
      k3plan curve -t 2x4x4 --tp 32 --csv curve.csv      the points for pandas (--csv -: to stdout)
    """
    check_csv(csv, json_out=json_out)
    if plot is not None:
        from k3plan.extras import require_matplotlib

        require_matplotlib("--plot")
    from k3plan.app.curve import CurveQuestion, answer

    if plot is not None:  # a folder, a FIFO, a device or a link fails now, not after the curve
        from k3plan.io_safe import check_target

        check_target(plot, label="--plot")
    a = answer(
        CurveQuestion(
            setup_options=setup_options,
            context=context,
            batch=batch,
            chunks=_parse_chunks(chunks),
            calibration=calibration,
            turns=turns,
            user_tokens=user_tokens,
            answer_tokens=answer_tokens,
            reasoning_tokens=reasoning_tokens,
            tool_tokens=tool_tokens,
            system_tokens=system_tokens,
            drop_reasoning=drop_reasoning,
        )
    )
    if plot is not None:
        from k3plan.report.plots import plot_curve

        plot_curve(a.points, title=a.title, path=plot)
    wrote_csv = None
    if csv is not None:
        from k3plan.api import curve_table

        wrote_csv = write_csv(curve_table(a), csv)
    if to_stdout(csv) and plot is not None:  # the CSV is stdout
        typer.echo(f"plot written to {plot}", err=True)
    if json_out:
        from k3plan.budget.curve_output import CurveOutput

        print_json(
            CurveOutput(
                title=a.title,
                context_tokens=a.context,
                batch=a.batch,
                calibration=a.calibration,
                warnings=a.warnings,
                notes=a.notes,
                points=a.points,
                sessions=a.growth,
                reason=a.why_not.removeprefix("DOES NOT FIT: ") or None,
                reason_code=a.reason_code,
            )
        )
    if json_out or to_stdout(csv):
        if a.why_not:
            typer.echo(a.why_not, err=True)
            raise typer.Exit(a.exit_code)
        return
    from k3plan.report.curve_table import render_curve

    render_curve(
        a.points,
        console,
        title=a.title,
        context=a.context,
        model_max=a.model_max_context,
        warnings=a.warnings,
        notes=a.notes,
    )
    if a.growth is not None:
        from k3plan.report.curve_table import render_sessions

        render_sessions(a.growth, console, batch=a.batch)
    if plot is not None:
        console.print(f"plot written to {plot}")
    if wrote_csv is not None:
        console.print(f"CSV written to {wrote_csv}")
    if a.why_not:
        console.print(a.why_not)
        raise typer.Exit(a.exit_code)
