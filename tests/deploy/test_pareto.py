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
Y = np.array([10., 8.0, 8.0, 5.0, 1.0, 9.0, 100.0, 8.0])


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
        ParetoPoint(hardware="tpu-v7x", topology="2x2x4", chips=16, split="TP32", stack="vllm-tpu", batch=1,
                    tokens_per_s_per_user=60.0, tokens_per_s_per_chip=3.75),
        ParetoPoint(hardware="nvidia-b200", topology="2x8", chips=16, split="TP8 DP2 EP16", stack="sglang",
                    batch=64, tokens_per_s_per_user=20.0, tokens_per_s_per_chip=80.0, usd_per_hour=96.48,
                    usd_per_million_output_tokens=math.pi, tokens_per_usd=47_761.0),
    ]


def test_table_shows_labels_and_blanks_for_unpriced():
    console = Console(record=True, width=200)
    console.print(render_pareto_table(_points()))
    text = console.export_text()
    assert "TP8 DP2 EP16" in text and "96.48" in text and "3.14" in text and "47,761" in text
    row = next(line for line in text.splitlines() if "tpu-v7x" in line)
    assert row.count(" - ") >= 3  # $/hour, $/M out, tok/$ all blank for the unpriced row


def test_plot_writes_a_png(tmp_path):
    pts = _points()
    out = plot_pareto(tmp_path / "pareto.png", pts, front=pts)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out2 = plot_pareto(tmp_path / "per_usd.png", pts, front=pts, y="tokens_per_usd")
    assert out2.stat().st_size > 1000
    with pytest.raises(K3PlanError, match="tokens_per_usd"):
        plot_pareto(tmp_path / "x.png", pts, y="chips")
