"""The `k3plan` command (its console script and `python -m k3plan`): a question already answered
is answered from the answer cache (k3plan.answers) before typer and pydantic are imported; any other
run goes to the typer app (k3plan.cli.app.main)."""

from __future__ import annotations

import sys


def _cli(args: list[str]) -> None:
    from k3plan.cli.app import main as cli_main

    cli_main(args)


def main() -> None:
    try:  # Ctrl-C while the CLI imports: one line and exit 130, as during a command
        from k3plan import answers

        answers.run(sys.argv[1:], _cli)
    except KeyboardInterrupt:
        from k3plan.errors import interrupted

        interrupted()


if __name__ == "__main__":
    main()
