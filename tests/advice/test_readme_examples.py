"""The README's issue-14 examples (advice, --offload, --spec-tokens, sessions) run and exit as the
README says: '(exit N)' in the comment, else 0."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
MARKS = (
    "--batch 32 --context 32768 #",
    "--offload",
    "--spec-tokens",
    "--turns",
    "--prefix-hit",
    "plan -H tpu-v7x --stacks torchtpu-vllm --max-chips 8",
)
# what each later example must print (the advice for plan with the README's figure, the prefix-cache
# TTFTs, the draft's KV: 131,072 B a token over tp 32)
SHOWS = {
    "plan -H tpu-v7x --stacks torchtpu-vllm --max-chips 8": (
        "advice for the closest miss (nothing passes)",
        "2x2x2 -> 2x2x4",
        "does not help, the calibration refuses the graph there",
    ),
    "--prefix-hit": ("ms without the hit ->", "cached in host_dram"),
    "--draft-kv-bytes-per-token": ("draft KV: 4,096 B a token a device", "given, not derived"),
}


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
    assert len(cmds) == 7 and {c.split()[1] for c in cmds} == {"fit", "curve", "plan"}
    assert all(any(k in c for c in cmds) for k in SHOWS)


@pytest.mark.parametrize(("cmd", "code"), _examples())
def test_example_exits_as_the_readme_says(cli, cmd, code):
    args = shlex.split(cmd)
    assert args[0] == "k3plan"
    r = cli(*args[1:])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    if args[1] in ("fit", "plan"):
        assert "advice (" in r.stdout
    for key, shown in SHOWS.items():
        if key in cmd:
            out = " ".join(r.stdout.split())  # rich wraps long lines
            assert all(s in out for s in shown), shown
