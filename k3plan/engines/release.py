"""An engine release, as ``fit --serve ... --engine-version X`` names it (issue 47: a command read "exactly as that
engine and version would"). Most of an engine's rules are read at one commit and cite it; the few that changed
between releases in what k3plan prices follow the release named here, each rule saying in which releases it was
read (``Engine.by_release`` lists them an engine). Without ``--engine-version`` a GPU command of an engine that
names its newest release read (``Engine.newest_release_read``: vLLM's 0.33.0, SGLang's 0.5.23) is read as that release;
every other rule is the one read at its cited commit."""

from __future__ import annotations

import re

from k3plan.errors import K3PlanError

Release = tuple[int, int, int]
# a release number as engines tag them: 0.11.1, v0.5.15, 0.5.15.post1 (a post-release prices as its release, save
# for the rules that read its number: parse_post)
_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.post(\d+))?")


def parse_release(text: str) -> Release:
    """(major, minor, patch) of a release number; bad input is a one-line K3PlanError (exit 2)."""
    m = _RELEASE.fullmatch(text.strip())
    if m is None:
        raise K3PlanError(
            f"--engine-version {text!r}: expected a release number such as 0.11.1 or v0.5.15 (a nightly: the "
            "release it precedes)"
        )
    return int(m[1]), int(m[2]), int(m[3] or 0)


def parse_post(text: str) -> int:
    """The post-release number of a release number (0.4.8.post1: 1; 0 without one), for the few rules that changed
    within a release's post-releases (engines/sglang/ep_moe_copy.py); bad input as parse_release."""
    parse_release(text)
    m = _RELEASE.fullmatch(text.strip())
    return int(m[4]) if m is not None and m[4] else 0


def release_text(release: Release) -> str:
    """0.11.1 for (0, 11, 1)."""
    return ".".join(str(n) for n in release)
