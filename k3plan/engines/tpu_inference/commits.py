"""A tpu-inference commit as fit --engine-version names it (``--engine-version 8ead48e6`` or ``tpu-inference@8ead48e6``):
a nightly or dev build runs main between two releases, whose code a release number cannot name. k3plan runs no git at
answer time, so it ships ``main_history.txt``, main's first-parent history (8-hex abbreviations in order, with where
each release tag was cut from main), written by benchmarks/tpu_inference_main_history.py from a git mirror of
vllm-project/tpu-inference (its header names the mirror's head). tpu-inference merges by squash: main's history is
linear, and a commit's position on it is its ancestry (an earlier commit of the table is an ancestor of a later one).

The table also lists the commits off main that k3plan's rules and cases name (``branch`` lines: the dev branches'
builds), each with the main commit it branched from and the other listed branch commits it holds: such a commit is
placed at its branch point for the rules gated on main, and a rule gated at a branch commit (the K3 bring-up's KDA head
split, ad1af3ab) holds where it holds that commit.

A commit is placed at its position; a rule gated at the commit that changed the code (``Gate.commit``) compares
positions, one gated at a release only (``Gate.commit`` None) reads the commit as the release last cut from main at or
before it (its cut on main: the tag's merge-base). A release branch carries a few cherry-picks of later main commits
(v0.21.0 holds #2649, efec1212, cut before it), so a gate's release and its commit may disagree at a cut: the commit
reads main's code, the release its tag's. A release number asked (no commit) compares releases, as before."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from k3plan.engines.release import EngineCommit, Release, release_text

TABLE = Path(__file__).resolve().parent / "main_history.txt"
ENGINE = "tpu-inference"
ABBREV = 8  # the table's abbreviation (benchmarks/tpu_inference_main_history.py ABBREV)


@dataclass(frozen=True)
class History:
    shas: tuple[str, ...]  # main's commits, oldest first (8 hex)
    dates: tuple[str, ...]  # each one's commit date (UTC)
    cuts: tuple[tuple[int, Release], ...]  # (the position of a release's cut commit, the release), in order
    head: str  # the mirror's head the table was written at (the header's full sha)
    # a listed commit off main -> (its date, the main commit it branched from, the other listed branch commits it holds)
    branches: dict[str, tuple[str, str, tuple[str, ...]]]


@lru_cache(maxsize=1)
def history() -> History:
    shas: list[str] = []
    dates: list[str] = []
    cuts: list[tuple[int, Release]] = []
    branches: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    head = ""
    for line in TABLE.read_text().splitlines():
        if line.startswith("#"):
            if " at " in line and not head:
                head = line.split(" at ", 1)[1].split()[0]
            continue
        words = line.split()
        if words[0] == "branch":
            branches[words[1]] = (words[2], words[3], tuple(words[4:]))
            continue
        if words[0] == "cut":
            major, minor, patch = (int(n) for n in words[1].split("."))
            cuts.append((len(shas) - 1, (major, minor, patch)))
            continue
        shas.extend(words[1:])
        dates.extend([words[0]] * (len(words) - 1))
    return History(tuple(shas), tuple(dates), tuple(cuts), head, branches)


@lru_cache(maxsize=1)
def _index() -> dict[str, int]:
    return {sha: i for i, sha in enumerate(history().shas)}


def expected() -> str:
    """What --engine-version takes for tpu-inference, for the one-line refusal of a commit the table does not hold."""
    h = history()
    return (
        f"a commit of tpu-inference's main from {h.shas[0]} ({h.dates[0]}, v{release_text(h.cuts[0][1])}'s cut) "
        f"through {h.head[:ABBREV]} ({h.dates[-1]}), 7 to 40 hex digits (k3plan's table of main's first-parent "
        "history, engines/tpu_inference/main_history.txt, which lists a commit off main only where k3plan's rules or cases "
        "name it)"
    )


def commit_of(digits: str) -> EngineCommit | None:
    """The main commit whose sha starts with ``digits`` (7 to 40 hex), placed; None where the table holds none, or
    more than one (too short a prefix)."""
    h = history()
    key = digits.lower()[:ABBREV]
    found = [sha for sha in (*h.shas, *h.branches) if sha.startswith(key)]
    if len(found) != 1:
        return None
    sha = found[0]
    branch = h.branches.get(sha)
    at = _index()[branch[1] if branch else sha]
    cut_at, follows = max((c for c in h.cuts if c[0] <= at), default=h.cuts[0])
    return EngineCommit(
        engine=ENGINE,
        sha=sha,
        position=at,
        date=branch[0] if branch else h.dates[at],
        follows=follows,
        cut=h.shas[cut_at],
        head=h.head[:ABBREV],
        base=branch[1] if branch else None,
        holds=branch[2] if branch else (),
    )


@dataclass(frozen=True)
class Gate:
    """Where a rule's code starts to hold: the release whose code k3plan read it in first (None: no release holds
    it, a dev branch's change) and, where known, the commit that changed it (an 8-hex abbreviation the table holds,
    on main or a listed branch commit)."""

    release: Release | None
    commit: str | None = None

    def position(self) -> int:
        """The gate's position on main: its commit's, or else the cut of the first release at or after its release
        (a commit from that cut on follows that release); past the table's end for a release cut after its head."""
        h = history()
        if self.commit is not None:
            return _index()[self.commit] if self.commit in _index() else len(h.shas)
        gate = self.release
        return next((at for at, release in h.cuts if gate is not None and release >= gate), len(h.shas))


def holds(gate: Gate, release: Release | None, commit: EngineCommit | None) -> bool | None:
    """Whether the code ``gate`` marks runs at the commit (by position on main; a gate at a branch commit where the
    commit is it or holds it) or, without one, at the release (release >= gate.release); None where neither is named,
    or a release is asked of a branch's gate (each rule's cited code)."""
    if commit is not None:
        if gate.commit is not None and gate.commit in history().branches:
            return commit.sha == gate.commit or gate.commit in commit.holds
        return commit.position >= gate.position()
    if release is None or gate.release is None:
        return None
    return release >= gate.release


def named(release: Release | None, commit: EngineCommit | None) -> str:
    """The version a message names: 'main 8ead48e6' for a commit, '0.26.0' for a release, '' for none."""
    if commit is not None:
        return f"main {commit.sha}"
    return "" if release is None else release_text(release)
