"""An engine release, as ``fit --serve ... --engine-version X`` names it (issue 47: a command read "exactly as that
engine and version would"). Most of an engine's rules are read at one commit and cite it; the few that changed
between releases in what k3plan prices follow the release named here, each rule saying in which releases it was
read (``Engine.by_release`` lists them an engine). Without ``--engine-version`` a GPU command of an engine that
names its newest release read (``Engine.newest_release_read``: vLLM's 0.33.0, SGLang's 0.5.23) is read as that release;
every other rule is the one read at its cited commit. An engine that ships a table of its main branch's history
(``Engine.commit_of``: tpu-inference's) also takes a commit of it, ``--engine-version <sha>`` or ``<engine>@<sha>``:
placed by ancestry on main, its rules gated by a commit compare by that order and those gated by a release only read
it as the release it follows (``EngineCommit``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3plan.errors import K3PlanError

Release = tuple[int, int, int]
# a release number as engines tag them: 0.11.1, v0.5.15, 0.5.15.post1 (a post-release prices as its release, save
# for the rules that read its number: parse_post); ASCII digits only (\d alone also matches other scripts' digits)
_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.post(\d+))?", re.ASCII)


def parse_release(text: str) -> Release:
    """(major, minor, patch) of a release number; bad input is a one-line K3PlanError (exit 2)."""
    m = _RELEASE.fullmatch(text.strip())
    if m is None:
        raise K3PlanError(
            f"--engine-version {text!r}: expected a release number such as 0.11.1 or v0.5.15 (a nightly: the "
            "release it precedes)"
        )
    return int(m[1]), int(m[2]), int(m[3] or 0)


# a commit as fit --engine-version names it: hex digits, optionally after the engine's name and '@'
_COMMIT = re.compile(r"(?:([a-z][a-z0-9_-]*)@)?([0-9a-fA-F]{7,40})")


@dataclass(frozen=True)
class EngineCommit:
    """A commit of an engine's main branch placed by the table of main's first-parent history k3plan ships for it
    (``Engine.commit_of``): ``position`` orders it against the commits its rules are gated at (0: the table's first),
    ``follows`` is the release last cut from main at or before it (a rule gated by a release only reads the commit as
    that release), ``cut`` that cut's commit and ``head`` the table's newest commit."""

    engine: str
    sha: str
    position: int
    date: str
    follows: Release
    cut: str
    head: str
    # a commit off main the table lists (a dev branch's build k3plan names): ``position`` is then that of the main
    # commit it branched from (``base``), and ``holds`` the other listed branch commits it holds
    base: str | None = None
    holds: tuple[str, ...] = ()

    def text(self) -> str:
        """'tpu-inference main 8ead48e6 (2026-07-31, following 0.26.0's cut from main at 7bad4320)'; a branch commit
        names the main commit it branched from."""
        if self.base is not None:
            return (
                f"{self.engine} {self.sha} ({self.date}), a commit off main that branched from main at {self.base} "
                f"(following {release_text(self.follows)}'s cut at {self.cut}): its main code is read as {self.base}'s, "
                "its branch's own changes only where a rule is gated at a branch commit it holds"
            )
        return (
            f"{self.engine} main {self.sha} ({self.date}, following {release_text(self.follows)}'s cut from main at "
            f"{self.cut})"
        )


def split_commit(text: str) -> tuple[str | None, str] | None:
    """(the engine named before '@' or None, the hex digits) where ``text`` names a commit rather than a release
    number; None where it does not look like one."""
    m = _COMMIT.fullmatch(text.strip())
    if m is None or _RELEASE.fullmatch(text.strip()) is not None:
        return None
    return m[1], m[2].lower()


def parse_post(text: str) -> int:
    """The post-release number of a release number (0.4.8.post1: 1; 0 without one), for the few rules that changed
    within a release's post-releases (engines/sglang/ep_moe_copy.py); bad input as parse_release."""
    parse_release(text)
    m = _RELEASE.fullmatch(text.strip())
    return int(m[4]) if m is not None and m[4] else 0


def release_text(release: Release) -> str:
    """0.11.1 for (0, 11, 1)."""
    return ".".join(str(n) for n in release)
