"""The README's issue-14 examples (advice, --offload, --spec-tokens, sessions) run and exit as the
README says: '(exit N)' in the comment, else 0."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
MARKS = ("--batch 32 --context 32768 #", "--offload", "--spec-tokens", "--turns")


def _examples() -> list[tuple[str, int]]:
    block = README.read_text().split("Examples:\n\n```bash\n", 1)[1].split("```", 1)[0]
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        if not any(m in line for m in MARKS):
            continue
        cmd, _, comment = line.partition("#")
        m = re.search(r"\(exit (\d)\)", comment)
        out.append((cmd.strip(), int(m.group(1)) if m else 0))
    return out


def test_each_issue_14_example_is_in_the_readme():
    cmds = [c for c, _ in _examples()]
    assert len(cmds) == 4 and {c.split()[1] for c in cmds} == {"fit", "curve"}


@pytest.mark.parametrize(("cmd", "code"), _examples())
def test_example_exits_as_the_readme_says(cli, cmd, code):
    args = shlex.split(cmd)
    assert args[0] == "k3plan"
    r = cli(*args[1:])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    if args[1] == "fit":
        assert "advice (" in r.stdout
