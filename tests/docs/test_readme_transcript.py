"""Issue 48 item 6: docs/readme-transcript.md, the README run top to bottom from a fresh clone, from another folder
and from an installed wheel (benchmarks/readme_run.py; the run itself is tests/docs/test_readme_run.py, slow), is of
the README as it is now: every command the README shows, none found different."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_run", ROOT / "benchmarks" / "readme_run.py")
assert _spec is not None and _spec.loader is not None
readme_run = sys.modules["readme_run"] = importlib.util.module_from_spec(_spec)  # its dataclasses look it up
_spec.loader.exec_module(readme_run)
readme_commands = readme_run.readme_commands

TRANSCRIPT = ROOT / "docs" / "readme-transcript.md"


def test_the_transcript_holds_every_command_the_readme_shows_and_no_difference():
    """Regenerate it (python3 benchmarks/readme_run.py --out docs/readme-transcript.md) when the README's commands
    change."""
    text = TRANSCRIPT.read_text()
    shown = re.findall(r"^## `(k3plan .*)`$", text, re.MULTILINE)
    assert shown == [c.text for c in readme_commands((ROOT / "README.md").read_text())]
    assert "**Differs:**" not in text


def test_every_readme_command_runs_as_written():
    """No placeholder reaches a fenced block, and each command parses to a k3plan subcommand."""
    commands = readme_commands((ROOT / "README.md").read_text())
    assert len(commands) >= 30
    assert all(c.argv and not c.argv[0].startswith("<") for c in commands)
