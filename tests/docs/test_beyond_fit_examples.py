"""docs/beyond-fit.md quotes what fit and plan print under "advice": each quoted command is run and
its quoted lines must be what it prints now (whitespace aside: the page wraps lines its own way)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "beyond-fit.md").read_text()
BLOCK = PAGE.split("tests/docs/test_beyond_fit_examples.py runs each and compares):\n\n```\n", 1)[1].split("```", 1)[0]
EXAMPLES = [chunk.partition("\n") for chunk in BLOCK.split("$ k3plan ")[1:]]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_page_quotes_fit_and_plan_examples():
    assert len(EXAMPLES) == 5 and all(quoted.strip() for _, _, quoted in EXAMPLES)


@pytest.mark.parametrize("command, quoted", [(c, q) for c, _, q in EXAMPLES], ids=[c for c, _, _ in EXAMPLES])
def test_each_quoted_advice_is_what_the_command_prints(cli, command, quoted):
    r = cli(*shlex.split(command))
    assert r.exit_code in (0, 1) and "Traceback" not in r.output
    assert flat(quoted) in flat(r.stdout), command


@pytest.mark.parametrize("tier, loaded", [("host", "host DRAM"), ("remote", "remote storage")])
def test_the_prefix_hit_paragraph_quotes_what_fit_prints(cli, tier, loaded):
    """The memory-tiers paragraph's TTFT figures (without and with a 60% hit) are fit's, read off its output."""
    import re

    r = cli("fit", "-t", "2x4x4", "--tp", "32", "--prefix-hit", "0.6", "--prefix-tier", tier)
    assert r.exit_code == 0, r.output
    m = re.search(r"TTFT \(one prompt's prefill, no queue\) ([\d,.]+) ms without the hit -> ([\d,.]+) ms", flat(r.stdout))
    assert m, r.stdout
    para = flat(PAGE.split("## Memory tiers", 1)[1].split("\n## ", 1)[0])
    assert f"TTFT {m[1]} ms without the hit" in para
    assert (f"-> {m[2]} ms with it" if tier == "host" else f"from {loaded} {m[2]} ms") in para
