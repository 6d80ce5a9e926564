"""Issue 10 item 6: every file a source cites resolves inside a clone. The hardware specs' and stacks'
``source:`` strings reach fit's table, the JSON's provenance and the capacity report; the code's
comments and messages cite the facts pages too. The design folder (``../shared/design/``) is not in a
clone, so nothing shipped cites ``design/...``: what is cited is kept in ``docs/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# a repository path, not the tail of a longer one (shared/design/..., a URL's path) nor an --out target
CITED = re.compile(
    r"(?<![\w/.-])(?<!--out )((?:docs|design|reports|benchmarks|k3plan|hardware_specs)/[\w./-]+\.(?:md|yaml|json|py))"
)
SHIPPED = sorted(
    [
        *REPO.glob("hardware_specs/*.yaml"),
        *REPO.glob("k3plan/**/*.yaml"),
        *REPO.glob("k3plan/**/*.py"),
        *REPO.glob("reports/probes/*.json"),  # CPU example records
        *REPO.glob("k3plan/evidence/probes/*.json"),  # probe records: plan and roofline print their label and source
    ],
    key=str,
)


# a facts page named without its folder ("k3-facts.md §3") resolves nowhere in a clone
BARE = re.compile(r"(?<![\w/])(?:k3|hardware)-facts\.md")


def cited(path: Path) -> list[str]:
    return CITED.findall(path.read_text())


def test_the_scan_finds_the_citations_it_checks():
    hw = cited(REPO / "hardware_specs" / "tpu-v7x.yaml")
    assert "docs/k3-facts.md" in hw and "docs/hardware-facts.md" in hw
    assert cited(REPO / "k3plan" / "cli" / "app.py").count("reports/k3.md") == 0  # an --out target, not a source
    assert BARE.findall("(k3-facts.md §3); docs/k3-facts.md §4; shared/design/hardware-facts.md") == ["k3-facts.md"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_cited_file_is_in_the_repository(path):
    for ref in cited(path):
        assert not ref.startswith("design/"), (
            f"{path.relative_to(REPO)} cites {ref}: a clone has no design/; cite docs/"
        )
        assert (REPO / ref).exists(), f"{path.relative_to(REPO)} cites {ref}, which is not in the repository"
    bare = BARE.findall(path.read_text())
    assert not bare, f"{path.relative_to(REPO)} names {bare[0]} without its folder: cite docs/{bare[0]}"


def headings(text: str) -> list[str]:
    return re.findall(r"^#+ .*$", text, flags=re.MULTILINE)


def test_the_facts_pages_in_docs_are_the_design_copies():
    """docs/ holds the design's facts pages as copied (a header line naming the copy, then the text):
    the sections a citation names ("docs/k3-facts.md §4") are the design's."""
    for name in ("k3-facts.md", "hardware-facts.md"):
        text = (REPO / "docs" / name).read_text()
        first, _, rest = text.partition("\n")
        assert first.startswith("<!-- Copied from the design folder") and f"shared/design/{name}" in first
        assert len(headings(rest)) >= 3
        design = REPO.parent / "shared" / "design" / name
        if design.exists():  # beside a checkout, as in CI and on the dev machine
            assert headings(rest) == headings(design.read_text())
