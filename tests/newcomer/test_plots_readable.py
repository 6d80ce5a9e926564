"""Issue 36 point 8: every plot the tool writes has readable titles (inside the figure, not clipped) and no
hidden series (a legend entry with nothing visible, two platforms' points drawn over one another)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("matplotlib")


def _inside(fig) -> list[str]:
    """Texts (titles, legend entries) that run past the figure's edges."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.bbox
    out = []
    for ax in fig.axes:
        texts = [ax.title] + (ax.get_legend().get_texts() if ax.get_legend() else [])
        for t in texts:
            if not t.get_text():
                continue
            e = t.get_window_extent(r)
            if e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1 or e.y0 < box.y0 - 1:
                out.append(t.get_text())
    return out


@pytest.fixture
def figures(monkeypatch):
    seen: dict[str, dict] = {}

    def capture(module):
        def save(fig, path, **kw):
            legend = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
            markers = [ln.get_marker() for ax in fig.axes for ln in ax.get_lines() if ln.get_linestyle() == "None"]
            seen[str(path).rsplit("-", 1)[-1] if module == "capacity" else "curve"] = {
                "clipped": _inside(fig),
                "legend": legend,
                "markers": markers,
                "title": fig.axes[0].get_title(),
            }
            return write(fig, path, **kw)  # written as well: report --html embeds the files

        return save

    from k3plan.io_safe import save_figure as write

    monkeypatch.setattr("k3plan.report.capacity_plots.save_figure", capture("capacity"))
    monkeypatch.setattr("k3plan.report.plots.save_figure", capture("plots"))
    return seen


def test_report_plots(cli, tmp_path, figures):
    # the README's and `k3plan --help`'s own example (README.md: `k3plan report --out reports/k3-capacity.md
    # --html`), whose default platforms and contexts are the ones checked below; this run also stands for their
    # copies of it, which run only in the slow suite (tests/conftest.py SLOW_TESTS): exit 0 as the help says, and
    # no engine refusal printed, as the README's examples must not
    from tests.newcomer.test_readme_engine_refusals import REFUSALS

    r = cli("report", "--out", tmp_path / "k3-capacity.md", "--html")
    assert r.exit_code == 0, r.output[-500:]
    out = " ".join(r.output.split())
    assert not any(re.search(p, out) for p in REFUSALS), out[-500:]
    assert "tpu-v7x" in out and "nvidia-gb300-nvl72" in out and (tmp_path / "k3-capacity.html").is_file()
    assert set(figures) == {"memory.png", "curve.png", "roofline.png"}
    assert all(not f["clipped"] for f in figures.values()), {k: f["clipped"] for k, f in figures.items()}
    # KDA state (0.06 GiB at most beside 277 GiB bars) says so rather than show a swatch with nothing drawn
    assert any(t.startswith("KDA state (at most ") and "too thin to see" in t for t in figures["memory.png"]["legend"])
    # platforms whose decode points coincide (B200 and GB300) are told apart by their markers
    marks = figures["roofline.png"]["markers"]
    assert len(marks) == len(set(marks)) >= 2
    assert any("no point: nothing fits" in t for t in figures["roofline.png"]["legend"])  # tpu-v6e


def test_curve_plot_title_is_whole(cli, tmp_path, figures):
    r = cli(
        "curve",
        "-t",
        "2x2x4",
        "--stack",
        "jax-native",
        "--calibration",
        "k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml",
        "--plot",
        tmp_path / "c.png",
    )
    assert r.exit_code == 0, r.output[-500:]
    f = figures["curve"]
    assert not f["clipped"] and "\n" in f["title"]  # was one line running past both edges


def test_pareto_shows_no_empty_searched_series(monkeypatch, tmp_path):
    """report's Pareto plot passes the front as the points too: 'searched' was a legend entry whose grey
    points all hid under the front's."""
    import msgspec

    from k3plan.deploy import chart as chart_mod
    from k3plan.deploy.pareto import ParetoPoint, plot_pareto
    from k3plan.structs import replace

    got = {}

    def write(path, chart):
        got["c"] = chart
        return path

    monkeypatch.setattr(chart_mod, "write_chart", write)
    fields = msgspec.structs.fields(ParetoPoint)
    pts = []
    for i in range(3):
        kw = {f.name: None for f in fields if not f.required}
        kw.update({f.name: (f"p{i}" if f.type is str else i + 1) for f in fields if f.required})
        kw.update(tokens_per_s_per_user=10.0 * (i + 1), tokens_per_s_per_chip=30.0 - i)
        pts.append(ParetoPoint(**kw))
    plot_pareto(tmp_path / "p.png", pts, front=pts)
    assert [s.name for s in got["c"].series] == ["Pareto front"]
    plot_pareto(tmp_path / "p.png", pts + [replace(pts[0], tokens_per_s_per_chip=1.0)], front=pts)
    assert [s.name for s in got["c"].series][0] == "searched, off the front"
