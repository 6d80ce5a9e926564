"""The k3plan command line: one module per command, composed here.

Every command module exposes either ``command`` (a function) or ``app`` (a typer.Typer group).
The project's own errors become one line on stderr and exit code 2 (see ``K3Group.invoke``).
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from k3plan import __version__
from k3plan.errors import K3PlanError

# name -> module under k3plan.cli; a module with `app` is a group, with `command` a single command.
COMMANDS: dict[str, str] = {
    "models": "models",
    "census": "census",
    "hardware": "hardware",
    "fit": "fit",
    "roofline": "roofline",
    "curve": "curve",
    "plan": "plan",
    "probe": "probe",
    "validate": "validate",
    "check": "check",
    "report": "report",
}


class K3Group(TyperGroup):
    """Turns K3PlanError, raised anywhere below, into a one-line message and exit 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except K3PlanError as err:
            from rich.markup import escape

            from k3plan.cli.common import err_console

            err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
            raise typer.Exit(err.exit_code) from None

    def list_commands(self, ctx):  # keep the order of COMMANDS in --help
        return list(self.commands)


HELP = """Capacity and roofline planner for frontier MoE models (Kimi K3 first) on TPUs and GPUs.

\b
Examples:
  k3plan fit --topology 2x2x4 --tp 32        does K3 fit a v7x slice at TP=32?
  k3plan plan --context 131072               which machine and split?
  k3plan roofline -t 2x2x4 --batch 64        how fast?
  k3plan report --out reports/k3.md --html   a capacity report
"""

def _version(value: bool) -> None:
    if value:
        typer.echo(f"k3plan {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    """Capacity and roofline planner for frontier MoE models."""


def _first_paragraph(doc: str | None) -> str:
    """The docstring's first paragraph on one line, for the command list of --help."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _new_app() -> typer.Typer:
    # add_completion: --install-completion / --show-completion for bash, zsh, fish, PowerShell
    new = typer.Typer(cls=K3Group, help=HELP, no_args_is_help=True, add_completion=True,
                      pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]})
    new.callback()(_root)
    return new


app = _new_app()


def _register(target: typer.Typer, names) -> None:
    for name in names:
        module = importlib.import_module(f"k3plan.cli.{COMMANDS[name]}")
        if hasattr(module, "app"):
            target.add_typer(module.app, name=name)
        else:
            target.command(name, short_help=_first_paragraph(module.command.__doc__))(module.command)


_register(app, COMMANDS)


def main(argv: list[str] | None = None) -> None:
    """The console script. ``k3plan CMD ...`` builds a group holding CMD alone: typer inspects the
    signature of every registered command (and builds its parameters) on each run, so the full
    group costs ~20 command signatures where fit needs one; help, --version and unknown commands
    get the full group."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in COMMANDS:
        lean = _new_app()
        _register(lean, [args[0]])
        lean(args, prog_name="k3plan")
    else:
        app(args, prog_name="k3plan")


if __name__ == "__main__":
    main()
