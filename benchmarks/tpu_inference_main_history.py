"""Writes k3plan/engines/tpu_inference/main_history.txt, the compact table of vllm-project/tpu-inference's first-parent
main history that fit --engine-version <commit> places a commit by (k3plan/engines/tpu_inference/commits.py): k3plan
runs no git at answer time, so the order of main's commits and where each release was cut from main ship with it.

  python3 benchmarks/tpu_inference_main_history.py --git-dir /work/.mirror/vllm-project+tpu-inference/repo

The table holds main's first-parent commits from the cut of the oldest release tag the mirror holds (an earlier commit
follows no release k3plan can name, and every rule k3plan gates for tpu-inference is later: the oldest, the MLA check of
#2222, lands after v0.18.0's cut) through the mirror's head, oldest first, as 8-hex abbreviations grouped by their
commit (committer) date in UTC; a ``cut`` line marks where a release's tag branched from main (git merge-base of the
tag and main): its commits follow that release. The header names the mirror's head. The script refuses an abbreviation
two commits share."""

from __future__ import annotations

import argparse
import subprocess
from datetime import datetime, timezone
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "k3plan" / "engines" / "tpu_inference" / "main_history.txt"
ABBREV = 8


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True).stdout


def utc_day(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(timezone.utc).strftime("%Y-%m-%d")


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
        "# branched from main at (git merge-base): the commits after it follow X",
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
    a.out.write_text("\n".join(lines) + "\n")
    print(f"{a.out}: {len(kept)} commits, {a.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
