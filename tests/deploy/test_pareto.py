"""Pareto front: domination worked out by hand on seven points, the table, the PNG."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rich.console import Console

from k3plan.deploy.pareto import (
    ParetoPoint,
    pareto_front,
    plot_pareto,
    render_pareto_table,
)
from k3plan.errors import K3PlanError

#            A    B    C    D    E    F    G       H (= C)
X = np.array([1.0, 2.0, 3.0, 3.0, 4.0, 0.5, np.nan, 3.0])
Y = np.array([10.0, 8.0, 8.0, 5.0, 1.0, 9.0, 100.0, 8.0])


def test_front_by_hand():
    # B (2,8) is beaten by C (3,8); D (3,5) by C; F (0.5,9) by A (1,10); G has no x; H duplicates C.
    # Left on the front, by x ascending: A (1,10), C (3,8), E (4,1).
    assert pareto_front(X, Y).tolist() == [0, 2, 4]


def test_front_is_monotone_and_every_other_row_is_dominated():
    rng = np.random.default_rng(7)
    x, y = rng.random(200), rng.random(200)
    front = pareto_front(x, y)
    assert np.all(np.diff(x[front]) > 0) and np.all(np.diff(y[front]) < 0)
    for i in set(range(200)) - set(front.tolist()):
        assert np.any((x[front] >= x[i]) & (y[front] >= y[i]))


def test_edge_cases():
    assert pareto_front([], []).tolist() == []
    assert pareto_front([np.nan], [1.0]).tolist() == []
    assert pareto_front([5.0], [5.0]).tolist() == [0]
    with pytest.raises(K3PlanError, match="differ in length"):
        pareto_front([1.0, 2.0], [1.0])


def _points():
    return [
        ParetoPoint(
            hardware="tpu-v7x",
            topology="2x2x4",
            chips=16,
            split="TP32",
            stack="vllm-tpu",
            batch=1,
            tokens_per_s_per_user=60.0,
            tokens_per_s_per_chip=3.75,
        ),
        ParetoPoint(
            hardware="nvidia-b200",
            topology="2x8",
            chips=16,
            split="TP8 DP2 EP16",
            stack="sglang",
            batch=64,
            tokens_per_s_per_user=20.0,
            tokens_per_s_per_chip=80.0,
            usd_per_hour=96.48,
            usd_per_million_output_tokens=math.pi,
            tokens_per_usd=47_761.0,
        ),
    ]


def test_table_shows_labels_and_blanks_for_unpriced():
    console = Console(record=True, width=200)
    console.print(render_pareto_table(_points()))
    text = console.export_text()
    assert "TP8 DP2 EP16" in text and "96.48" in text and "3.14" in text and "47,761" in text
    row = next(line for line in text.splitlines() if "tpu-v7x" in line)
    assert row.count(" - ") >= 3  # $/hour, $/M out, tok/$ all blank for the unpriced row


def _dominated():
    # beaten by the b200 point on both axes: drawn grey, off the front
    return ParetoPoint(
        hardware="tpu-v6e",
        topology="4x4",
        chips=16,
        split="TP16",
        stack="vllm-tpu",
        batch=8,
        tokens_per_s_per_user=10.0,
        tokens_per_s_per_chip=40.0,
    )


def _near(img, color, tol=12):
    """Pixels within `tol` of `color` on every channel."""
    px = np.asarray(img.convert("RGB"), dtype=int)
    return int((np.abs(px - np.array(color)).max(axis=2) <= tol).sum())


def test_plot_writes_a_png_with_its_points(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image  # matplotlib's own dependency

    pts = _points()
    out = plot_pareto(tmp_path / "pareto.png", [*pts, _dominated()], front=pts)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 2_000_000
    img = Image.open(out)
    img.load()  # decodes the whole image: a truncated file fails here
    assert img.format == "PNG" and img.size == (960, 660)
    # the front in matplotlib's tab:blue (31, 119, 180): two markers of radius 4.5 and the line
    # between them cover far more than 50 pixels; the dominated point is grey (178, 178, 178)
    assert _near(img, (31, 119, 180)) > 50
    assert _near(img, (178, 178, 178), tol=6) > 10
    # the points are where their values say: the b200 point (x lowest, y highest) is up-left of
    # the v7x point, so the blue is found in both the left and the right half of the plot area
    px = np.asarray(img.convert("RGB"), dtype=int)
    blue = np.abs(px - np.array((31, 119, 180))).max(axis=2) <= 12
    assert blue[:, : 960 // 2].any() and blue[:, 960 // 2 :].any()
    assert blue[: 660 // 2].any() and blue[660 // 2 :].any()


def test_plot_per_dollar_leaves_unpriced_points_out(tmp_path):
    pytest.importorskip("matplotlib")
    pts = _points()
    out = plot_pareto(tmp_path / "per_usd.png", pts, front=pts, y="tokens_per_usd")
    assert out.stat().st_size > 1000
    with pytest.raises(K3PlanError, match="tokens_per_usd"):
        plot_pareto(tmp_path / "x.png", pts, y="chips")


def test_plot_as_svg_and_bad_suffix(tmp_path):
    pytest.importorskip("matplotlib")
    import xml.etree.ElementTree as ET

    pts = _points()
    out = plot_pareto(tmp_path / "pareto.svg", [*pts, _dominated()], front=pts)
    root = ET.fromstring(out.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    # matplotlib draws each marker as a <use> of its series' marker, filled with the series' colour
    fills = [u.get("style", "") for u in root.iter(f"{ns}use") if "fill:" in u.get("style", "")]
    fills = [s.split("fill:")[1].split(";")[0].strip() for s in fills]
    # 1 searched off the front (grey; the 2 on it are drawn by the front only, issue 36) + 2 on the front
    # (blue) + one marker each in the legend
    assert fills.count("#b2b2b2") == 2 and fills.count("#1f77b4") == 3
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "nvidia-b200 2x8 TP8 DP2 EP16" in texts and "tokens/s per user" in texts
    with pytest.raises(K3PlanError, match=r"\.png or \.svg"):
        plot_pareto(tmp_path / "pareto.pdf", pts, front=pts)
