"""The k3plan command line: one module per command, composed here.

Every command module exposes either ``command`` (a function) or ``app`` (a typer.Typer group).
The project's own errors become one line on stderr and exit code 2 (see ``K3Group.invoke``).

What here goes beyond typer's own behaviour stays only where a test needs it, named beside it (issue 51
item 4 deleted the rest: a Ctrl-C handler around parsing, a command-order override typer >= 0.13 makes
itself, a ModuleNotFoundError handler that k3plan.extras' one-line errors made dead).
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from k3plan import __version__
from k3plan.errors import K3PlanError, interrupted, reader_gone

try:  # typer >= 0.22 carries its own copy of click; older typer uses click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions  # type: ignore[no-redef]  # the same module, older typer

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
    "explain": "explain",  # issue 36: the terms the output uses
}


# Symbols k3plan prints, as ASCII for a terminal that cannot show them (LANG=C on an old Python,
# PYTHONIOENCODING=ascii, a latin-1 pipe). rich already draws its tables with ASCII boxes there.
ASCII_FALLBACK = {
    "\u2500": "-",
    "\u2502": "|",
    "\u2014": "--",
    "\u2013": "-",
    "\u00a7": "S",
    "\u00b5": "u",
    "\u00d7": "x",
    "\u2248": "~",
    "\u2192": "->",
    "\u2190": "<-",
    "\u2026": "...",
    "\u2713": "ok",
    "\u2717": "x",
    "\u2264": "<=",
    "\u2265": ">=",
    "\u00b7": ".",
    "\u2022": "*",
    "\u2212": "-",
    "\u00b2": "^2",
    "\u221e": "inf",
}
ENCODING_ERRORS = "k3plan-ascii"


def _ascii_fallback(err: UnicodeError):
    import unicodedata

    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = []
    for ch in err.object[err.start : err.end]:
        sub = ASCII_FALLBACK.get(ch)
        if sub is None:
            sub = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode() or "?"
        out.append(sub)
    return "".join(out), err.end


def ensure_encodable_output() -> None:
    """Let stdout/stderr print any text: where their encoding cannot show what k3plan prints
    (box rules, §, ×), unknown characters become ASCII instead of a UnicodeEncodeError.
    Needed by tests/fuzz/test_hostile_regressions.py::test_ascii_terminal."""
    import codecs

    try:
        codecs.lookup_error(ENCODING_ERRORS)
    except LookupError:
        codecs.register_error(ENCODING_ERRORS, _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            "\u2500\u00a7\u00d7\u2014".encode(encoding)
        except UnicodeEncodeError:
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors=ENCODING_ERRORS)
        except LookupError:
            pass


def _print_error(message: str) -> None:
    from rich.markup import escape

    from k3plan.cli.common import err_console

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _refuse_empty_values(cmd) -> None:
    """Every option and argument of ``cmd`` (and of its subcommands) refuses an empty or blank value:
    `--probes ""` was the current folder (Path("") is "."), read through as probe records, and
    `-m ""` a folder without config.json. Checked on the text as given, before click converts it, so
    each command needs nothing of its own. Needed by tests/fuzz/test_qa_input.py::test_empty_option_values_in_one_place
    and ::test_empty_arguments."""
    if getattr(cmd, "_k3_refuses_empty", False):
        return
    cmd._k3_refuses_empty = True
    for sub in getattr(cmd, "commands", {}).values():
        _refuse_empty_values(sub)
    for param in cmd.params:
        if not getattr(param, "is_flag", False):
            param.process_value = _refusing_empty(param, param.process_value)


def _refuse_repeated_options(cmd, args: list[str]) -> None:
    """An option that takes one value, given twice (`fit -t 2x2x4 -t 2x4x4`): click keeps the last and says
    nothing; here it is a one-line error. Options meant to repeat (--price) and flags are left alone.
    Needed by tests/fuzz/test_qa_input.py::test_an_option_given_twice."""
    commands = getattr(cmd, "commands", None)
    if commands is not None:  # a group (models, hardware, probe): its subcommand's options
        if args and args[0] in commands:
            _refuse_repeated_options(commands[args[0]], args[1:])
        return
    by_opt = {o: p for p in cmd.params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}
    seen: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        given, eq, attached = args[i].partition("=") if args[i].startswith("--") else (args[i], "", "")
        param = by_opt.get(given)
        i += 1
        if param is None or param.is_flag or param.count:
            continue
        value = attached if eq else " ".join(args[i : i + param.nargs])
        if not eq:
            i += param.nargs  # its value(s), which may start with '-' (--context -5)
        if param.multiple:
            continue
        if param.name in seen:
            flag = max(param.opts, key=len)
            raise K3PlanError(f"{flag} is given twice ({seen[param.name]!r}, then {value!r}); expected it once")
        seen[param.name] = value


def _refusing_empty(param, process_value):
    def check(ctx, value):
        values = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(v, str) and not v.strip() for v in values):
            if param.param_type_name == "option":
                raise K3PlanError(f"{max(param.opts, key=len)} is empty; leave it out for the default, or give a value")
            raise K3PlanError(f"{param.name.upper()} is empty; expected a value")
        return process_value(ctx, value)

    return check


NEEDS_JAX = ("probe", "validate")  # the commands that run JAX (the 'jax' extra; 'tpu' on a TPU host)


def _serve_hint(ctx) -> str:
    """fit --serve given an unquoted command (``--serve vllm serve MODEL --tensor-parallel-size 32``): the shell
    split it, so the engine's words and flags reach k3plan as its own; say to quote it."""
    args = ctx.meta.get("k3plan.argv", [])
    i = next((n for n, a in enumerate(args) if a == "--serve"), None)
    if i is None or i + 2 >= len(args) or " " in args[i + 1]:
        return ""
    return f"; quote the serve command: --serve '{' '.join(args[i + 1 : i + 4])} ...'"


class K3Group(TyperGroup):
    """Turns K3PlanError, raised anywhere below, into a one-line message and exit 2."""

    def invoke(self, ctx):
        ensure_encodable_output()
        try:
            return super().invoke(ctx)
        except K3PlanError as err:
            _print_error(str(err))
            raise typer.Exit(err.exit_code) from None
        # typer would exit 130 without a word: tests/fuzz/test_qa_input.py::test_ctrl_c_during_a_command_is_one_line...
        except KeyboardInterrupt:
            interrupted()
        # the reader left (`| head -1`): click would exit 1, which here means "does not fit" (test_qa_input.py::
        # test_closed_pipe_exits_141_not_1)
        except BrokenPipeError:
            reader_gone()
        # a bad flag or value: one line too, not click's box (test_hostile_regressions.py::
        # test_click_usage_errors_are_one_line)
        except click_exceptions.UsageError as err:
            # a group without its subcommand (`k3plan probe`) prints its help, not "error: ; see ..." after it
            # (tests/cli/test_app_group.py::test_a_group_without_its_subcommand_prints_its_help)
            if isinstance(err, getattr(click_exceptions, "NoArgsIsHelpError", ())):
                raise
            where = f"; see '{err.ctx.command_path} --help'" if err.ctx is not None else ""
            _print_error(" ".join(err.format_message().split()).rstrip(".") + where + _serve_hint(ctx))
            raise typer.Exit(err.exit_code) from None

    def resolve_command(self, ctx, args):
        ctx.meta["k3plan.argv"] = list(args)  # what the command line held, for _serve_hint
        name, cmd, rest = super().resolve_command(ctx, args)
        # before any progress line (issue 36): tests/newcomer/test_missing_extras.py::test_no_jax_is_one_line_exit_2
        if name in NEEDS_JAX and not {"--help", "-h"} & set(rest):
            from k3plan.extras import installed, missing_extra_line

            if not installed("jax"):  # found, not imported: validate sets XLA_FLAGS before jax starts
                raise K3PlanError(missing_extra_line(ModuleNotFoundError(name="jax"), name) or "jax is missing")
        if cmd is not None:
            _refuse_empty_values(cmd)
            _refuse_repeated_options(cmd, rest)
        return name, cmd, rest


HELP = """Capacity and roofline planner for frontier MoE models (Kimi K3 first) on TPUs and GPUs.

\b
Examples:
  k3plan fit --topology 2x2x4 --tp 32         does K3 fit a v7x slice at TP=32? not at 128k (exit 1)
  k3plan plan --context 131072                which machine and split?
  k3plan roofline -t 2x4x4 --tp 32 --batch 8  how fast?
  k3plan report --out reports/k3.md --html    a capacity report
  k3plan explain KDA                          what a term in the output means (k3plan explain: all of them)

Token counts take k = 1,024 and M = 1,048,576 (128k = 131,072), as model cards count contexts.
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
    """The docstring's first paragraph on one line: typer's ``short_help`` for the command list of --help (without
    it typer prints the whole docstring there, its source line breaks kept: tests/cli/test_app_group.py)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _new_app() -> typer.Typer:
    # add_completion: --install-completion / --show-completion for bash, zsh, fish, PowerShell
    new = typer.Typer(
        cls=K3Group,
        help=HELP,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    new.callback()(_root)
    return new


def _register(target: typer.Typer, names) -> None:
    for name in names:
        module = importlib.import_module(f"k3plan.cli.{COMMANDS[name]}")
        if hasattr(module, "app"):
            target.add_typer(module.app, name=name)
        else:
            target.command(name, short_help=_first_paragraph(module.command.__doc__))(module.command)


def __getattr__(name: str) -> typer.Typer:
    """``app``, the full group of every command, built on first use: importing this module for
    ``main`` (the console script) must not import all eleven command modules when it runs one (the full
    group imports rich: tests/test_fast_path.py::test_fit_json_imports_neither_pydantic_nor_rich)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _full_app()


def _full_app() -> typer.Typer:
    full = globals().get("app")
    if full is None:
        full = _new_app()
        _register(full, COMMANDS)
        globals()["app"] = full
    return full


def main(argv: list[str] | None = None) -> None:
    """The console script. ``k3plan CMD ...`` builds a group holding CMD alone: typer inspects the
    signature of every registered command (and builds its parameters) on each run, so the full
    group costs ~20 command signatures where fit needs one; help, --version and unknown commands
    get the full group."""
    args = sys.argv[1:] if argv is None else argv
    # A command run allocates ~10^6 objects building its values and tables and frees few of them
    # in cycles: the default first-generation threshold (700) collects ~1,500 times for little garbage.
    # At 100,000 a fit runs 3.2% fewer instructions and issue 13's plan 2.0% (callgrind); cycles are
    # still collected, a collection per 100,000 net allocations.
    gc.set_threshold(100_000, *gc.get_threshold()[1:])
    try:  # Ctrl-C while the command modules import (before K3Group.invoke runs) is one line too
        if args and args[0] in COMMANDS:
            lean = _new_app()
            _register(lean, [args[0]])
            lean(args, prog_name="k3plan")
        else:
            _full_app()(args, prog_name="k3plan")
    except KeyboardInterrupt:
        interrupted()


if __name__ == "__main__":
    main()
