"""Plots of token counts: K = 1,000 on the axis, said in its label, and the 1M-token line at the true
1,048,576 tokens (issue 10 item 6: the table said 344,064 and the plot 336K, K = 1,024)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("matplotlib")


def _capture(monkeypatch, module) -> list:
    figs: list = []
    monkeypatch.setattr(module, "save_figure", lambda fig, path, **kw: figs.append(fig))
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "close", lambda fig=None: None)  # keep the figure to read back
    return figs


def _pt(chunk: int, ctx: int, status: str = "ok"):
    return SimpleNamespace(chunk_tokens=chunk, max_context_tokens=ctx, status=status)


def test_curve_plot_puts_n_tokens_at_n_over_1000(monkeypatch, tmp_path):
    from k3plan.report import plots

    figs = _capture(monkeypatch, plots)
    pts = [_pt(4096, 344064), _pt(8192, 316224)]
    plots.plot_curve(pts, title="t", path=Path(tmp_path / "c.png"))
    ax = figs[0].axes[0]
    assert "K = 1,000" in ax.get_ylabel() and "thousand tokens" in ax.get_ylabel()
    assert list(ax.lines[0].get_ydata()) == pytest.approx([344.064, 316.224])  # 344,064 / 1,000, not / 1,024


def test_capacity_curve_plot_draws_1m_at_1048_576_tokens(monkeypatch, tmp_path):
    from k3plan.report import capacity_plots

    figs = _capture(monkeypatch, capacity_plots)
    r = SimpleNamespace(hardware="tpu-v7x", curve_setup="2x2x4 tp=32, vllm-tpu", curve=[_pt(4096, 316224)])
    capacity_plots.plot_curves([r], path=Path(tmp_path / "c.png"))
    ax = figs[0].axes[0]
    assert "K = 1,000" in ax.get_ylabel()
    assert list(ax.lines[0].get_ydata()) == pytest.approx([316.224])
    ref = ax.lines[1]  # axhline: the 1M-token context, 2^20 = 1,048,576 tokens
    assert list(ref.get_ydata()) == pytest.approx([1048.576, 1048.576])
    assert any("1,048,576 tokens" in t.get_text() for t in ax.texts)
