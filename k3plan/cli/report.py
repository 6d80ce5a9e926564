"""`k3plan report`: a capacity report (Markdown, optional one-file HTML, plots) comparing platforms."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from k3plan.cli.common import AllowCpuProbesOpt, EngramOpt, JsonOpt, ModelOpt, ProbesOpt, err_console, print_json
from k3plan.cli.frames import check_csv, csv_option, write_csv
from k3plan.cli.lists import items, whole_numbers
from k3plan.errors import K3PlanError
from k3plan.io_safe import check_target

DEFAULT_HARDWARE = "tpu-v7x,tpu-v6e,nvidia-b200,nvidia-gb300-nvl72"


def _stacks(text: str) -> dict[str, str]:
    """The stacks asked for, by platform kind: {} for 'auto' (every machine's default stack, as fit and plan pick it:
    ``engines.stack.default_stack_for``), 'tpu=torchtpu-vllm,gpu=sglang' (a kind not named keeps its machines'
    defaults) or one stack for every platform, options and all ('vllm:all2all_backend=deepep_low_latency': its
    '=' is an option's, not a kind's)."""
    if text.strip() == "auto":
        return {}
    if "=" not in text or ":" in text.split("=", 1)[0]:  # a stack's options follow a ':' before any '='
        return {"tpu": text, "gpu": text}
    out: dict[str, str] = {}
    for part in items("--stack", text):
        kind, _, name = part.partition("=")
        if kind.strip() not in ("tpu", "gpu") or not name.strip():
            raise K3PlanError(
                f"--stack {text!r}: expected kind=stack pairs with kind tpu or gpu, e.g. tpu=tpu-inference,gpu=sglang"
            )
        if kind.strip() in out:  # was: the last pair won
            raise K3PlanError(f"--stack {text!r}: {kind.strip()} is given twice; expected each kind once")
        out[kind.strip()] = name.strip()
    return out


def command(
    model: ModelOpt = "kimi-k3",
    hardware: Annotated[
        str,
        typer.Option(
            "--hardware",
            "-H",
            help="Comma-separated platforms (k3plan hardware list).",
            # shown with spaces so that --help wraps the list instead of cutting its last name
            show_default=DEFAULT_HARDWARE.replace(",", ", "),
        ),
    ] = DEFAULT_HARDWARE,
    context: Annotated[
        str,
        typer.Option(
            "--context", "-c", help="Comma-separated context lengths in tokens: 131072,1M (k = 1,024, M = 1,048,576)."
        ),
    ] = "131072,1048576",
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Sequences that must fit at each context for a topology to be viable.")
    ] = 1,
    stack: Annotated[
        str,
        typer.Option(
            "--stack",
            "-s",
            help="Serving stack per platform kind ('tpu=tpu-inference,gpu=sglang') or one stack for all. "
            "auto: each machine's default stack, the one fit prices (plan ranks every stack that runs there).",
        ),
    ] = "auto",
    max_chips: Annotated[
        Optional[int],
        typer.Option("--max-chips", help="Largest topology to consider (chips). Default: every standard topology."),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="Markdown file to write; plots go beside it as STEM-memory/curve/roofline.png."
        ),
    ] = Path("capacity-report.md"),
    html: Annotated[
        bool, typer.Option("--html", help="Also write STEM.html: one self-contained file, plots embedded.")
    ] = False,
    plot_format: Annotated[str, typer.Option("--plot-format", help="png or svg.")] = "png",
    probes: ProbesOpt = None,
    allow_cpu_probes: AllowCpuProbesOpt = False,
    csv: Annotated[
        Optional[Path],
        csv_option(
            "the platforms table (a row a platform and context)", "--csv platforms.csv, then pandas.read_csv(...)"
        ),
    ] = None,
    engram: EngramOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """A capacity report per platform: smallest viable topology and split at each context, headroom
    by term, longest context and most sequences, decode and prefill bounds, cost per million
    tokens where a price is known, the chunk-vs-context curve, plots, and every number's source.
    A platform that cannot hold the model says so in the report. Progress goes to stderr.

    \b
    Examples:
      k3plan report --out reports/k3-capacity.md --html
      k3plan report -H tpu-v7x,nvidia-b200 -c 131072 --concurrency 8 --out /tmp/r.md
      k3plan report -H tpu-v7x -c 131072 --out /tmp/r.md --csv /tmp/platforms.csv   the table for pandas
    """
    from k3plan.app.report import ReportQuestion, answer
    from k3plan.budget.fit import check_workload
    from k3plan.report.capacity_write import output_paths, write

    t0 = time.perf_counter()
    contexts = whole_numbers("--context", context, example="131072,1048576")
    for c in contexts:
        check_workload(context_tokens=c, batch=concurrency, prefill_chunk_tokens=None, batch_flag="--concurrency")
    platforms = items("--hardware", hardware)
    if max_chips is not None and max_chips < 1:
        raise K3PlanError(f"--max-chips {max_chips}: expected a positive integer")
    if out.suffix.lower() != ".md":
        raise K3PlanError(f"--out {out}: expected a .md file name")
    if not out.parent.is_dir():
        raise K3PlanError(f"--out {out}: folder {out.parent} does not exist")
    if plot_format not in ("png", "svg"):
        raise K3PlanError(f"--plot-format {plot_format!r}: expected png or svg")
    check_csv(csv, json_out=json_out)
    for path in output_paths(out, plot_format=plot_format, html=html):  # a folder, a FIFO or a link: now
        check_target(path, label="--out" if path == out else "")
    say = (lambda m: None) if json_out else (lambda m: err_console.print(m, highlight=False))
    q = ReportQuestion(
        model=model,
        platforms=platforms,
        stacks=_stacks(stack),
        contexts=contexts,
        concurrency=concurrency,
        max_chips=max_chips,
        probes=probes,
        allow_cpu_probes=allow_cpu_probes,
        engram=engram,
    )
    a = answer(q, progress=say)
    reports, eff = a.reports, a.eff
    cmd = "k3plan report " + " ".join(a for a in sys.argv[2:]) if len(sys.argv) > 2 else "k3plan report"
    from functools import partial

    from k3plan.report.capacity_deploy import deployment_blocks

    say("deployment: Pareto front and cost (k3plan plan --isl --osl over the same platforms)")
    deploy = partial(
        deployment_blocks,
        model=model,
        hardware=platforms,
        stacks=a.deploy_stacks,
        concurrency=concurrency,
        max_chips=max_chips or 10**9,
        reports=reports,  # issue 48: the cost table prices the summary's picks
        engram=engram,
    )
    written = write(
        reports,
        out=out,
        html=html,
        plot_format=plot_format,
        model=model,
        contexts=contexts,
        concurrency=concurrency,
        command=cmd,
        eff=eff,
        deploy=lambda path: deploy(plot_path=path),
    )
    if csv is not None:
        from k3plan.api import report_table

        wrote_csv = write_csv(report_table(a), csv)
        written = [*written, Path(wrote_csv)] if wrote_csv is not None else written
    from k3plan.extras import have, install_command

    if not have("matplotlib"):  # issue 36: the Markdown is written without the plots; say so
        err_console.print(
            f"[yellow]warning:[/] plots not drawn: matplotlib is not installed ({install_command('plot')}); "
            "the report's tables carry every figure",
            highlight=False,
        )
    if json_out:
        from k3plan.report.capacity_model import ReportOutput

        print_json(ReportOutput(written=[str(p) for p in written], platforms=reports))
        return
    say(f"wrote {', '.join(str(p) for p in written)} in {time.perf_counter() - t0:.1f} s")
