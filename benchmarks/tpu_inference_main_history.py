"""Writes k3plan/engines/tpu_inference/main_history.txt, the compact table of vllm-project/tpu-inference's first-parent
main history that fit --engine-version <commit> places a commit by (k3plan/engines/tpu_inference/commits.py): k3plan
runs no git at answer time, so the order of main's commits and where each release was cut from main ship with it.

  python3 benchmarks/tpu_inference_main_history.py --git-dir /work/.mirror/vllm-project+tpu-inference/repo

The table holds main's first-parent commits from the cut of the oldest release tag the mirror holds (an earlier commit
follows no release k3plan can name, and every rule k3plan gates for tpu-inference is later: the oldest, the MLA check of
#2222, lands after v0.18.0's cut) through the mirror's head, oldest first, as 8-hex abbreviations grouped by their
commit (committer) date in UTC; a ``cut`` line marks where a release's tag branched from main (git merge-base of the
tag and main): its commits follow that release. The header names the mirror's head. The script refuses an abbreviation
two commits share.

A ``branch`` line places a commit off main that k3plan's tpu-inference rules or cases name (the 8-hex or longer
words of k3plan/engines/tpu_inference/ and tests/engines/cases/tpu-inference-*.yaml that the mirror resolves to a
commit main does not hold: the dev branches' builds, a release tag's own commits): its date, where it branched from main
(git merge-base: the main commits it holds) and which other listed branch commits it holds (git rev-list <it> --not
main), so a rule gated at a branch commit (commits.py Gate) reads it by ancestry too."""

from __future__ import annotations

import argparse
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "k3plan" / "engines" / "tpu_inference" / "main_history.txt"
ABBREV = 8
# where the branch commits k3plan names are looked for
NAMED_IN = (
    *sorted((REPO / "k3plan" / "engines" / "tpu_inference").glob("*.py")),
    REPO / "k3plan" / "engines" / "tpu_inference" / "stack.yaml",
    *sorted((REPO / "tests" / "engines" / "cases").glob("tpu-inference-*.yaml")),
)


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True).stdout


def utc_day(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(timezone.utc).strftime("%Y-%m-%d")


def branch_lines(git_dir: str, ref: str, position: dict[str, int]) -> list[str]:
    """A line for each commit off ``ref`` that the files of NAMED_IN name (see the module's doc)."""
    words = sorted({w for f in NAMED_IN for w in re.findall(r"\b[0-9a-f]{8,40}\b", f.read_text())})
    found = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch-check"],
        input="".join(f"{w}^{{commit}}\n" for w in words),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    named = sorted({line.split()[0] for line in found if line.endswith(tuple("0123456789")) and " commit " in line})
    off = [c for c in named if c not in position]
    lines = []
    for c in sorted(off, key=lambda c: (git(git_dir, "log", "-1", "--format=%cI", c).strip(), c)):
        base = git(git_dir, "merge-base", c, ref).strip()
        held = set(git(git_dir, "rev-list", c, "--not", ref).split())
        others = " ".join(o[:ABBREV] for o in off if o != c and o in held)
        when = utc_day(git(git_dir, "log", "-1", "--format=%cI", c).strip())
        lines.append(f"branch {c[:ABBREV]} {when} {base[:ABBREV]}" + (f" {others}" if others else ""))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--git-dir", default="/work/.mirror/vllm-project+tpu-inference/repo")
    p.add_argument("--ref", default="main")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args()
    head, head_date = git(a.git_dir, "log", "-1", "--format=%H %cI", a.ref).split()
    rows = [line.split() for line in git(a.git_dir, "log", "--first-parent", "--format=%H %cI", a.ref).splitlines()]
    rows.reverse()  # oldest first
    position = {sha: i for i, (sha, _) in enumerate(rows)}
    cuts: dict[int, list[str]] = {}
    for tag in git(a.git_dir, "tag", "--list", "v*").split():
        base = git(a.git_dir, "merge-base", tag, a.ref).strip()
        tagged = git(a.git_dir, "rev-list", "-n1", tag).strip()
        if base in position:
            cuts.setdefault(position[base], []).append(f"cut {tag.lstrip('v')} {tagged[:ABBREV]}")
    first = min(cuts)
    kept = rows[first:]
    shorts = [sha[:ABBREV] for sha, _ in kept]
    if len(set(shorts)) != len(shorts):
        raise SystemExit(f"two kept commits share an {ABBREV}-hex abbreviation; raise ABBREV")
    lines = [
        "# vllm-project/tpu-inference: main's first-parent history, oldest first (k3plan/engines/tpu_inference/commits.py)",
        f"# written by benchmarks/tpu_inference_main_history.py from the mirror's {a.ref} at {head} ({utc_day(head_date)})",
        f"# {len(kept)} of main's {len(rows)} commits: from the cut of the oldest release tag through the head; each line",
        f"# a commit date (UTC) and that day's commits ({ABBREV} hex); 'cut X T' after the commit release X's tag T",
        "# branched from main at (git merge-base): the commits after it follow X; 'branch C D B H...': a commit off main",
        "# k3plan names (its rules, its tpu-inference cases), its date, the main commit it branched from (merge-base) and",
        "# the other listed branch commits it holds",
    ]
    day = ""
    for i, (sha, when) in enumerate(kept, start=first):
        d = utc_day(when)
        if d != day or not lines[-1][:1].isdigit():
            lines.append(d)
            day = d
        lines[-1] += f" {sha[:ABBREV]}"
        for cut in cuts.get(i, ()):
            lines.append(cut)
    lines += [b for b in branch_lines(a.git_dir, a.ref, position) if position[git(a.git_dir, "rev-parse", b.split()[3]).strip()] >= first]
    a.out.write_text("\n".join(lines) + "\n")
    print(f"{a.out}: {len(kept)} commits, {a.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
