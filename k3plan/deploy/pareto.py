"""The Pareto front of the searched configurations: tokens/s per user against tokens/s per chip
(or tokens per dollar), both maximised.

``pareto_front`` works on two numpy columns and returns row indices; ``ParetoPoint`` is the typed
row the table, the JSON and the plot share. The plot is drawn by k3plan.deploy.chart (matplotlib).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from k3plan.errors import K3PlanError
from k3plan.structs import Frozen


def pareto_front(x, y) -> np.ndarray:
    """Indices of the rows no other row dominates, maximising both ``x`` and ``y``, ordered by ``x``
    ascending (so ``y`` descends along the front).

    A row is dominated when another is >= on both and > on one. Rows with NaN in either column are
    never on the front (an unpriced row has no tokens-per-dollar). Exact duplicates: the first kept.
    """
    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    if xs.shape != ys.shape:
        raise K3PlanError(f"pareto_front: columns differ in length ({xs.size} vs {ys.size})")
    ok = np.flatnonzero(~(np.isnan(xs) | np.isnan(ys)))
    # sweep by x descending (ties: y descending, then row order); keep each row whose y beats every
    # y seen so far -- an O(n log n) skyline.
    order = ok[np.lexsort((ok, -ys[ok], -xs[ok]))]
    front: list[int] = []
    best_y = -np.inf
    for i in order:
        if ys[i] > best_y:
            front.append(int(i))
            best_y = ys[i]
    return np.array(front[::-1], dtype=np.int64)


class ParetoPoint(Frozen):
    """One configuration on (or off) the front, as the table, JSON and plot show it."""

    hardware: str
    topology: str
    chips: int
    split: str  # e.g. "TP8 EP64 DP8" -- the label a plotted point carries
    stack: str
    batch: int  # sequences decoding together
    tokens_per_s_per_user: float
    tokens_per_s_per_chip: float
    usd_per_hour: float | None = None
    usd_per_million_output_tokens: float | None = None
    tokens_per_usd: float | None = None

    @property
    def label(self) -> str:
        return f"{self.hardware} {self.topology} {self.split}"


def render_pareto_table(points: Sequence[ParetoPoint], *, title: str = "Pareto front"):
    """A rich Table, one row a point, in the order given (pareto_front's order)."""
    from k3plan.tables import Column, build_table, cell

    headers = (
        "hardware",
        "topology",
        "split",
        "stack",
        "chips",
        "batch",
        "tok/s/user",
        "tok/s/chip",
        "$/hour",
        "$/M out",
        "tok/$",
    )
    columns = [Column(c, "left" if c in ("hardware", "topology", "split", "stack") else "right") for c in headers]
    rows = [
        (
            p.hardware,
            p.topology,
            p.split,
            p.stack,
            str(p.chips),
            str(p.batch),
            f"{p.tokens_per_s_per_user:,.1f}",
            f"{p.tokens_per_s_per_chip:,.1f}",
            cell(p.usd_per_hour, ",.2f"),
            cell(p.usd_per_million_output_tokens, ",.2f"),
            cell(p.tokens_per_usd, ",.0f"),
        )
        for p in points
    ]
    return build_table(columns, rows, title=title)


def plot_pareto(
    path: str | Path,
    points: Sequence[ParetoPoint],
    *,
    front: Sequence[ParetoPoint] = (),
    y: str = "tokens_per_s_per_chip",
    title: str = "tokens/s per user vs per chip",
) -> Path:
    """Write a PNG (or an SVG, by the suffix): every point grey, the front joined and labelled with
    hardware, topology and split.

    ``y`` is ``tokens_per_s_per_chip`` or ``tokens_per_usd``; points without that figure are left
    out. Drawn by k3plan.deploy.chart with matplotlib (the 'plot' extra), imported only here.
    """
    if y not in ("tokens_per_s_per_chip", "tokens_per_usd"):
        raise K3PlanError(f"plot_pareto: y {y!r}: expected tokens_per_s_per_chip or tokens_per_usd")
    from k3plan.deploy.chart import BLUE, FRONT_R, GREY, POINT_R, Chart, Series, write_chart

    def series(ps: Sequence[ParetoPoint], **kw) -> Series:
        kept = [p for p in ps if getattr(p, y) is not None]
        return Series(xs=[p.tokens_per_s_per_user for p in kept], ys=[getattr(p, y) for p in kept], **kw)

    # the points off the front only: a point on it is drawn by the front, and a grey series all of whose points
    # hide under the front's was a legend entry with nothing to see (issue 36: hidden series)
    on_front = {(p.label, p.tokens_per_s_per_user, getattr(p, y)) for p in front}
    off = [p for p in points if (p.label, p.tokens_per_s_per_user, getattr(p, y)) not in on_front]
    chart = Chart(
        title=title,
        x_label="tokens/s per user",
        y_label="tokens/s per chip" if y == "tokens_per_s_per_chip" else "tokens per US dollar",
        series=[series(off, name="searched, off the front", color=GREY, radius=POINT_R)] if off else [],
    )
    if front:
        kept = [p for p in front if getattr(p, y) is not None]
        chart.series.append(
            series(kept, name="Pareto front", color=BLUE, radius=FRONT_R, joined=True, labels=[p.label for p in kept])
        )
    return write_chart(path, chart)
