"""The Pareto plot's chart (scatter and line, labelled points) drawn by matplotlib as PNG or SVG.

matplotlib is imported only when a chart is written (k3plan.extras.pyplot: ~1.5 s, paid by `plan --plot` and
`report` alone); the chart itself is plain data (``Chart``, ``Series``), built without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from k3plan.errors import K3PlanError

SIZE_IN, DPI = (8, 5.5), 120  # 960 x 660 px
GREY, BLUE = "#b2b2b2", "#1f77b4"  # off the front; the front (matplotlib's tab:blue)
POINT_R, FRONT_R = 3, 4.5  # marker radii, px at DPI
FORMATS = {".png": "png", ".svg": "svg"}


def chart_format(path: str | Path) -> str:
    """'png' or 'svg' from the file's suffix; anything else is a K3PlanError (no silent PNG in a .pdf)."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise K3PlanError(f"--plot {path}: expected a file name ending in .png or .svg")
    return fmt


@dataclass
class Series:
    """Points of one legend entry: ``joined`` draws a line through them in the order given."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: str
    radius: float
    joined: bool = False
    labels: Sequence[str] = ()


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)


def write_chart(path: str | Path, chart: Chart) -> Path:
    """Write ``chart`` to ``path`` as PNG or SVG (by suffix; the SVG keeps its text as text), atomically
    (k3plan.io_safe). Each labelled point's label sits beside it, alternately above and below along the line,
    so the labels of neighbouring points on a front do not run into each other."""
    from k3plan.extras import pyplot
    from k3plan.io_safe import save_figure

    fmt = chart_format(path)
    plt = pyplot()
    px = 72 / DPI  # a pixel in points (marker sizes are in points)
    with plt.rc_context({"svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=SIZE_IN, dpi=DPI)
        for s in chart.series:
            ax.plot(
                s.xs,
                s.ys,
                "o-" if s.joined else "o",
                color=s.color,
                markersize=2 * s.radius * px,
                linewidth=2 * px if s.joined else 0,
                label=s.name,
                zorder=3 if s.joined else 2,
            )
        xs = [float(x) for s in chart.series for x in s.xs] or [1.0]
        ys = [float(y) for s in chart.series for y in s.ys] or [1.0]
        x_hi, y_hi = max(max(xs), 0.0) or 1.0, max(max(ys), 0.0) or 1.0
        for s in chart.series:
            for i, (x, y, text) in enumerate(zip(s.xs, s.ys, s.labels)):
                right = float(x) > 0.55 * x_hi  # a label on the right half reads leftwards: inside the axes
                ax.annotate(
                    text,
                    (x, y),
                    xytext=(-6 if right else 6, 6 if i % 2 == 0 else -14),
                    textcoords="offset points",
                    ha="right" if right else "left",
                    fontsize=8,
                )
        ax.set_title(chart.title, fontsize=11)
        ax.set_xlabel(chart.x_label)
        ax.set_ylabel(chart.y_label)
        ax.set_xlim(0, x_hi * 1.08)  # rates: no axis below 0
        ax.set_ylim(0, y_hi * 1.15)  # room above the top point for its label and the legend
        ax.grid(True, color="#e1e1e1")
        ax.set_axisbelow(True)
        if chart.series:
            ax.legend(loc="upper right", fontsize=9)
        fig.tight_layout()
        try:
            return save_figure(fig, Path(path), label="plot", format=fmt)
        finally:
            plt.close(fig)
