"""Issue 36 point 5: installed without extras. probe and validate without jax print one line naming the
extra and the install command for this install (pip or pipx, not the checkout's -e) and exit 2; report
without matplotlib writes the Markdown without its plots and says so (the missing module is simulated:
a None in sys.modules makes its import raise ModuleNotFoundError)."""

from __future__ import annotations

import sys

import pytest

from k3plan import extras


@pytest.mark.parametrize(
    "args", [("probe", "hbm"), ("probe", "a2a"), ("validate", "-t", "2x2x4", "--tp", "32")], ids=lambda a: a[0]
)
def test_no_jax_is_one_line_exit_2(cli, monkeypatch, args):
    for m in [m for m in sys.modules if m == "jax" or m.startswith(("jax.", "jaxlib"))]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "jax", None)
    r = cli(*args)
    assert r.exit_code == 2, r.output[-500:]
    (line,) = r.output.strip().splitlines()  # the whole output: no progress line before it
    assert f"k3plan {args[0]} needs the optional extra 'jax'" in line
    assert "pip install 'k3plan[jax]'" in line and "-e" not in line.split(":", 2)[-1].split()


@pytest.mark.parametrize("args", [("probe", "--help"), ("probe", "hbm", "--help"), ("validate", "--help")])
def test_help_needs_no_jax(cli, monkeypatch, args):
    monkeypatch.setitem(sys.modules, "jax", None)
    r = cli(*args)
    assert r.exit_code == 0 and "Usage:" in r.output


def test_the_install_command_follows_the_install(monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/home/u/.local/share/pipx/venvs/k3plan")
    assert extras.install_command("plot") == "pipx install --force 'k3plan[plot]'"
    monkeypatch.setattr(sys, "prefix", "/usr")
    assert extras.install_command("plot") == "pip install 'k3plan[plot]'"


def test_a_module_of_no_extra_still_raises():
    assert extras.missing_extra(ModuleNotFoundError("x", name="numpy")) is None
    assert extras.missing_extra(ModuleNotFoundError("x", name="matplotlib.pyplot")) == "plot"


def test_report_without_matplotlib_writes_the_markdown(cli, monkeypatch, tmp_path):
    for m in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "r.md"
    r = cli("report", "-H", "tpu-v7x", "-c", "128k", "--out", out)
    assert r.exit_code == 0, r.output[-800:]
    text = out.read_text()
    assert "Plots not drawn: matplotlib is not installed" in text and "pip install 'k3plan[plot]'" in text
    assert not list(tmp_path.glob("r-memory.*")) and not list(tmp_path.glob("r-curve.*"))
    assert not list(tmp_path.glob("r-pareto.*"))  # matplotlib's too (it was Pillow's); its table is there
    assert "Deployment: Pareto front and cost" in text
    assert "plots not drawn: matplotlib is not installed" in r.output


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "-H", "tpu-v7x", "--isl", "4000", "--osl", "500", "--plot", "p.png"),
        ("curve", "-t", "2x2x4", "--tp", "32", "--plot", "c.png"),
    ],
    ids=lambda a: a[0],
)
def test_a_plot_without_matplotlib_is_one_line_exit_2(cli, monkeypatch, tmp_path, args):
    """issue 51 item 4: every plot is matplotlib's (the Pareto plot was Pillow's); without it, --plot is one line
    naming the extra, before the search, and nothing is written."""
    from k3_testing import one_error_line

    for m in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.chdir(tmp_path)
    line = one_error_line(cli(*args))
    assert "--plot needs matplotlib" in line and "pip install 'k3plan[plot]'" in line
    assert not list(tmp_path.iterdir())


def test_matplotlib_keeps_its_font_cache_out_of_home(tmp_path):
    """Without MPLCONFIGDIR, matplotlib would write ~/.config/matplotlib (its font cache) on the first plot; k3plan
    points it at a folder of the user's under the temporary directory. A MPLCONFIGDIR given is kept."""
    import json
    import os
    import subprocess
    from pathlib import Path

    pytest.importorskip("matplotlib")
    root = Path(__file__).resolve().parents[2]
    probe = "import os, json; from k3plan.extras import pyplot; pyplot(); print(json.dumps(os.environ['MPLCONFIGDIR']))"
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=str(root), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    used = Path(json.loads(run.stdout.strip().splitlines()[-1]))
    assert used.parent == tmp_path / "tmp" and used.is_dir() and list(home.iterdir()) == []
    given = tmp_path / "mine"
    run = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "MPLCONFIGDIR": str(given)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == str(given)
