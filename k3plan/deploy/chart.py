"""A small scatter-and-line chart written as PNG (Pillow) or SVG (text), for the Pareto plot.

matplotlib costs ~1.5 s to import, which alone would put `plan --plot` over its 2 s budget
(issue 13); Pillow imports in ~0.03 s. One layout (axes, nice ticks, labels placed so they do not
overlap) is computed once and drawn by either backend, so the PNG and the SVG show the same chart.
The PNG is drawn at twice its size and box-averaged down (anti-aliased lines, points and text).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k3plan.errors import K3PlanError

WIDTH_PX, HEIGHT_PX = 960, 660  # the matplotlib figure it replaces: 8 x 5.5 in at 120 dpi
MARGIN = {"left": 92, "right": 28, "top": 48, "bottom": 64}
FONT_PX = {"title": 17, "axis": 14, "tick": 12, "label": 11, "legend": 12}
GREY, BLUE, INK, GRID = (178, 178, 178), (31, 119, 180), (34, 34, 34), (225, 225, 225)
POINT_R, FRONT_R = 3, 4.5  # marker radii, px
SUPERSAMPLE = 2
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
    color: tuple[int, int, int]
    radius: float
    joined: bool = False
    labels: Sequence[str] = ()


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """Ticks at 1, 2, 2.5 or 5 x 10^k covering [lo, hi], about ``n`` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [k * step for k in range(first, last + 1)]


def _tick_text(v: float, step: float) -> str:
    """As many decimals as the step needs (0.25 -> 2, 20 -> 0)."""
    decimals = next((d for d in range(7) if abs(step * 10**d - round(step * 10**d)) < 1e-6), 6)
    return f"{v:,.{decimals}f}"


def _axis(values: list[float]) -> tuple[list[float], float, float]:
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.05
    ticks = nice_ticks(lo - pad if lo - pad >= 0 or lo < 0 else 0.0, hi + pad)  # rates: no axis below 0
    return ticks, ticks[0], ticks[-1]


class _Font:
    """Pillow's bundled scalable font (ImageFont.load_default(size)), used to measure text for both
    backends and to draw it in the PNG."""

    def __init__(self) -> None:
        from PIL import ImageFont

        self._fonts: dict[int, Any] = {}
        self._load = ImageFont.load_default

    def get(self, size: float) -> Any:
        px = int(round(size))
        if px not in self._fonts:
            self._fonts[px] = self._load(size=px)
        return self._fonts[px]

    def width(self, text: str, size: float) -> float:
        """At the PNG's drawing size (hinting makes small sizes a little narrower than scaled ones)."""
        return float(self.get(size * SUPERSAMPLE).getlength(text)) / SUPERSAMPLE


def layout(chart: Chart, font: _Font) -> list[tuple]:
    """The chart as drawing operations in output pixels: ('line', pts, color, width),
    ('dot', x, y, r, color), ('text', x, y, text, size, color, anchor, rotate)."""
    ops: list[tuple] = []
    left, top = MARGIN["left"], MARGIN["top"]
    right, bottom = WIDTH_PX - MARGIN["right"], HEIGHT_PX - MARGIN["bottom"]
    xt, x0, x1 = _axis([float(v) for s in chart.series for v in s.xs])
    yt, y0, y1 = _axis([float(v) for s in chart.series for v in s.ys])

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (right - left)

    def py(y: float) -> float:
        return bottom - (y - y0) / (y1 - y0) * (bottom - top)

    for t in xt:
        ops.append(("line", [(px(t), top), (px(t), bottom)], GRID, 1))
        ops.append(("text", px(t), bottom + 6, _tick_text(t, xt[1] - xt[0]), FONT_PX["tick"], INK, "ma", 0))
    for t in yt:
        ops.append(("line", [(left, py(t)), (right, py(t))], GRID, 1))
        ops.append(("text", left - 6, py(t), _tick_text(t, yt[1] - yt[0]), FONT_PX["tick"], INK, "rm", 0))
    ops.append(("line", [(left, top), (right, top), (right, bottom), (left, bottom), (left, top)], INK, 1))
    ops.append(("text", (left + right) / 2, HEIGHT_PX - 14, chart.x_label, FONT_PX["axis"], INK, "ms", 0))
    ops.append(("text", 18, (top + bottom) / 2, chart.y_label, FONT_PX["axis"], INK, "mm", 90))
    ops.append(("text", WIDTH_PX / 2, top - 16, chart.title, FONT_PX["title"], INK, "ms", 0))

    taken: list[tuple[float, float, float, float]] = []
    for s in chart.series:
        pts = [(px(float(x)), py(float(y))) for x, y in zip(s.xs, s.ys)]
        if s.joined and len(pts) > 1:
            ops.append(("line", pts, s.color, 2))
        ops.extend(("dot", x, y, s.radius, s.color) for x, y in pts)
        taken.extend((x - s.radius, y - s.radius, x + s.radius, y + s.radius) for x, y in pts)
    for s in chart.series:
        for (x, y), text in zip(((px(float(a)), py(float(b))) for a, b in zip(s.xs, s.ys)), s.labels):
            ops.extend(_place_label(x, y, text, font, taken, (left, top, right, bottom)))
    ops.extend(_legend(chart.series, font, right, top))
    return ops


def _overlaps(box: tuple[float, float, float, float], boxes: list[tuple[float, float, float, float]]) -> bool:
    return any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes)


def _place_label(x: float, y: float, text: str, font: _Font, taken: list, frame: tuple) -> list[tuple]:
    """The label up-right of its point, else the first free place nearby (right or left, moved up or
    down a line at a time), with a leader line when it had to move; boxes placed are remembered."""
    size = FONT_PX["label"]
    w, h = font.width(text, size), size + 3
    left, top, right, bottom = frame
    first = None
    for step in (0, -1, 1, -2, 2, -3, 3, -4, 4, -5, 5):
        for side in (1, -1):
            bx = x + 6 if side > 0 else x - 6 - w
            by = y - 6 - h + step * h
            box = (bx, by, bx + w, by + h)
            inside = box[0] >= left + 2 and box[2] <= right - 2 and box[1] >= top + 2 and box[3] <= bottom - 2
            if first is None and inside:
                first = box
            if inside and not _overlaps(box, taken):
                taken.append(box)
                ops: list[tuple] = [("text", bx, by, text, size, INK, "la", 0)]
                if step:
                    ops.insert(0, ("line", [(x, y), (bx if side > 0 else bx + w, by + h / 2)], GREY, 1))
                return ops
    bx, by = (first or (x + 6, y - 6 - h))[:2]
    return [("text", bx, by, text, size, INK, "la", 0)]


def _legend(series: list[Series], font: _Font, right: float, top: float) -> list[tuple]:
    size, row = FONT_PX["legend"], FONT_PX["legend"] + 8
    w = max((font.width(s.name, size) for s in series), default=0) + 46
    x0, y0 = right - w - 10, top + 10
    ops: list[tuple] = [("box", x0, y0, x0 + w, y0 + row * len(series) + 8)]
    for i, s in enumerate(series):
        cy = y0 + 4 + row * i + row / 2
        if s.joined:
            ops.append(("line", [(x0 + 8, cy), (x0 + 32, cy)], s.color, 2))
        ops.append(("dot", x0 + 20, cy, s.radius, s.color))
        ops.append(("text", x0 + 38, cy, s.name, size, INK, "lm", 0))
    return ops


def render_png(ops: list[tuple], font: _Font) -> bytes:
    import io

    from PIL import Image, ImageDraw

    k = SUPERSAMPLE
    img = Image.new("RGB", (WIDTH_PX * k, HEIGHT_PX * k), "white")
    draw = ImageDraw.Draw(img)
    for op in ops:
        if op[0] == "line":
            draw.line([(x * k, y * k) for x, y in op[1]], fill=op[2], width=op[3] * k, joint="curve")
        elif op[0] == "dot":
            _, x, y, r, color = op
            draw.ellipse((k * (x - r), k * (y - r), k * (x + r), k * (y + r)), fill=color)
        elif op[0] == "box":
            _, a, b, c, d = op
            draw.rectangle((a * k, b * k, c * k, d * k), fill="white", outline=(200, 200, 200), width=k)
        else:
            _, x, y, text, size, color, anchor, rotate = op
            f = font.get(size * k)
            if rotate:
                w, h = int(f.getlength(text)) + 4, int(size * k * 1.4)
                tile = Image.new("L", (w, h), 0)
                ImageDraw.Draw(tile).text((w / 2, h / 2), text, font=f, fill=255, anchor="mm")
                tile = tile.rotate(rotate, expand=True)
                img.paste(color, (int(x * k - tile.width / 2), int(y * k - tile.height / 2)), tile)
            else:
                draw.text((x * k, y * k), text, font=f, fill=color, anchor=anchor)
    out = io.BytesIO()
    # reduce(): a box average of each k x k block, ~10x faster than a LANCZOS resize for the same
    # anti-aliasing here; zlib level 1: ~12% larger, a third of the time of the default 6
    img.reduce(k).save(out, format="PNG", compress_level=1)
    return out.getvalue()


_SVG_ANCHOR = {"l": "start", "m": "middle", "r": "end"}
_SVG_BASELINE = {"a": "hanging", "m": "central", "s": "alphabetic"}


def render_svg(ops: list[tuple]) -> str:
    def rgb(c: tuple[int, int, int]) -> str:
        return "#%02x%02x%02x" % c

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{HEIGHT_PX}" '
        f'viewBox="0 0 {WIDTH_PX} {HEIGHT_PX}" font-family="DejaVu Sans, Arial, sans-serif">',
        f'<rect width="{WIDTH_PX}" height="{HEIGHT_PX}" fill="white"/>',
    ]
    for op in ops:
        if op[0] == "line":
            pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in op[1])
            out.append(f'<polyline points="{pts}" fill="none" stroke="{rgb(op[2])}" stroke-width="{op[3]}"/>')
        elif op[0] == "dot":
            _, x, y, r, color = op
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{rgb(color)}"/>')
        elif op[0] == "box":
            _, a, b, c, d = op
            out.append(
                f'<rect x="{a:.1f}" y="{b:.1f}" width="{c - a:.1f}" height="{d - b:.1f}" fill="white" stroke="#c8c8c8"/>'
            )
        else:
            _, x, y, text, size, color, anchor, rotate = op
            turn = f' transform="rotate({-rotate} {x:.1f} {y:.1f})"' if rotate else ""
            out.append(
                f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{rgb(color)}" '
                f'text-anchor="{_SVG_ANCHOR[anchor[0]]}" dominant-baseline="{_SVG_BASELINE[anchor[1]]}"'
                f"{turn}>{html.escape(text, quote=False)}</text>"
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_chart(path: str | Path, chart: Chart) -> Path:
    """Write ``chart`` to ``path`` as PNG or SVG (by suffix), atomically (k3plan.io_safe)."""
    from k3plan.io_safe import write_bytes, write_text

    fmt = chart_format(path)
    font = _Font()
    ops = layout(chart, font)
    if fmt == "svg":
        return write_text(Path(path), render_svg(ops), label="plot")
    return write_bytes(Path(path), render_png(ops, font), label="plot")
