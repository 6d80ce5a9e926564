"""Plots (matplotlib, imported only here and only when a plot is asked for)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from k3plan.errors import K3PlanError
from k3plan.io_safe import save_figure
from k3plan.units import tokens_k, tokens_k_axis

TITLE_CHARS = 95  # characters a line of a plot title at fontsize 9 on an 8-inch figure


def _pyplot():
    from k3plan.extras import pyplot

    return pyplot()


def legend_or_note(ax, note: str, **legend_kw) -> None:
    """A legend when something labelled was drawn; else ``note`` across the empty axes (matplotlib
    would warn "No artists with labels found" on stderr and draw a blank box)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**legend_kw)
    else:
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="grey")


def _check_path(path: Path) -> None:
    if path.suffix.lower() not in (".png", ".svg"):
        raise K3PlanError(f"--plot {path}: expected a .png or .svg file name")
    if not path.parent.exists():
        raise K3PlanError(f"--plot {path}: folder {path.parent} does not exist")


def plot_curve(points, *, title: str, path: Path) -> None:
    _check_path(path)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ok = [p for p in points if p.status in ("ok", "outside calibration")]
    bad = [p for p in points if p not in ok]
    ax.plot([p.chunk_tokens for p in ok], [tokens_k(p.max_context_tokens) for p in ok], "o-", label="longest context")
    outside = [p for p in ok if p.status == "outside calibration"]
    if outside:
        ax.plot(
            [p.chunk_tokens for p in outside],
            [tokens_k(p.max_context_tokens) for p in outside],
            "o",
            markerfacecolor="white",
            label="beyond the measured chunks (not extrapolated)",
        )
    if bad:
        ax.plot([p.chunk_tokens for p in bad], [0] * len(bad), "x", color="red", label="refused / no room")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("prefill chunk (tokens)")
    ax.set_ylabel(tokens_k_axis("longest context"))
    # issue 36: the title (model, hardware, split, stack, evidence file) ran past both edges; wrapped, it is whole
    ax.set_title(textwrap.fill(title, TITLE_CHARS), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
