"""What k3plan.cli.app keeps beyond typer's own behaviour, where no other test holds it (issue 51 item 4: every
other patch went, or is held by the test its comment names)."""

from __future__ import annotations

import re

from k3plan.cli.app import COMMANDS


def _help_rows(text: str) -> list[str]:
    return re.findall(r"^│ ([a-z]+) {2,}", text, flags=re.M)


def test_the_command_list_is_each_commands_first_paragraph_in_order(cli):
    """short_help=_first_paragraph: without it typer lists a command's whole docstring, its examples too, with the
    source's line breaks. The order is COMMANDS' (typer >= 0.13 keeps it; typer lists the groups after)."""
    r = cli("--help")
    assert r.exit_code == 0
    rows = _help_rows(r.stdout)
    groups = {"models", "hardware", "probe"}
    assert rows == [c for c in COMMANDS if c not in groups] + [c for c in COMMANDS if c in groups]
    flat = " ".join(r.stdout.replace("│", " ").split())
    assert "Does the model fit, per device, with what headroom, for how long a context and how many sequences?" in flat
    assert "sessions parked in host DRAM" not in flat  # fit's examples stay in `k3plan fit --help`


def test_a_group_without_its_subcommand_prints_its_help(cli, monkeypatch):
    """click signals a group given no subcommand with a UsageError (NoArgsIsHelpError) after printing its help: it
    must not become a second, empty "error: ; see 'k3plan probe --help'" line."""
    import k3plan.extras

    monkeypatch.setattr(k3plan.extras, "have", lambda module: True)  # probe's jax check is not this test's
    r = cli("probe")
    assert r.exit_code == 2
    assert "Usage:" in r.output and "error:" not in r.output
