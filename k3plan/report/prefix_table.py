"""The prefix-cache TTFT lines (fit, roofline and plan print the same; k3plan.tiers.prefix computes them)."""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.markup import escape

from k3plan.tiers.prefix import PrefixHit, prefix_hit_lines


def render_prefix_hit(ph: Optional[PrefixHit], hit_rate: Optional[float], console: Console) -> None:
    """``ph``'s lines; nothing without --prefix-hit; a note when it was asked for a workload that does not fit."""
    if ph is not None:
        for line in prefix_hit_lines(ph):
            console.print(escape(line))
    elif hit_rate is not None:
        console.print("no prefix-cache TTFT for a workload that does not fit")
