"""The wheel is the tool: built from the sdist (python -m build), installed into a fresh virtual
environment outside the checkout, it carries every file k3plan reads and answers fit, plan, curve
and report exactly as the checkout does. Marked `packaging` (pytest -m "not packaging" skips it)."""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import pytest

import k3plan
from k3plan.engines.registry import engines
from k3plan.hardware.loader import SPECS_DIR
from k3plan.resources import data_dir

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {  # name -> arguments; run in an empty folder by each install
    "fit": ["fit", "--topology", "2x2x4", "--tp", "32"],  # the README's main command: 0.33 GiB short (exit 1)
    "fit 1m": ["fit", "--topology", "2x2x4", "--tp", "32", "--context", "1048576"],  # does not fit (exit 1)
    "fit jax-native": ["fit", "--topology", "2x2x4", "--tp", "32", "--stack", "jax-native"],  # FITS IF (exit 3)
    "plan": ["plan", "--context", "131072"],
    "curve": ["curve", "-t", "2x2x4", "-c", "8192"],
    "report": ["report", "-H", "tpu-v7x", "-c", "131072", "--out", "rep/k3.md"],  # one platform: 2 s, not 8
    # issue 46: the speed figures read the shipped probe records (package data), alike from any folder
    "roofline": [
        "roofline",
        "-t",
        "2x2x4",
        "--tp",
        "32",
        "--batch",
        "1",
        "--context",
        "8192",
        "--chunk",
        "512",
        "--json",
    ],
}
SPEED = (
    ("expected", "decode", "expected_s"),
    ("expected", "prefill", "expected_s"),
    ("decode", "tpot_s"),
    ("prefill", "ttft_s"),
)


def _speed(text: str) -> tuple[str, ...]:
    """roofline's four speed figures as its JSON prints them (compared byte for byte)."""
    d = json.loads(text)
    out = []
    for path in SPEED:
        v = d
        for k in path:
            v = v[k]
        out.append(json.dumps(v))
    return tuple(out)


def _why_not() -> str | None:
    if Path(k3plan.__file__).resolve().parents[1] != REPO:
        return f"k3plan under test ({k3plan.__file__}) is not this checkout"
    try:
        import build  # noqa: F401
    except ImportError:
        return "needs the `build` package: pip install -e '.[test]'"
    if tuple(int(p) for p in version("setuptools").split(".")[:2]) < (70, 1):
        return f"needs setuptools>=70.1 (bdist_wheel built in), have {version('setuptools')}: pip install -e '.[test]'"
    return None


def _shipped_files() -> set[str]:
    """Every file the checkout ships, as its path inside the wheel (hardware_specs/ -> k3plan/)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "k3plan", "hardware_specs"], cwd=REPO, check=True, capture_output=True, text=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk
        listed = [
            str(p.relative_to(REPO))
            for d in ("k3plan", "hardware_specs")
            for p in (REPO / d).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return {f"k3plan/{p}" if p.startswith("hardware_specs/") else p for p in listed}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "COLUMNS": "160", **extra}


EXIT = {"fit": 1, "fit 1m": 1, "fit jax-native": 3}  # a failed fit exits 1, an unverified one 3; the rest 0


def _run(cmd: list[str], cwd: Path, env: dict[str, str], code: int = 0) -> str:
    r = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == code, f"{' '.join(map(str, cmd))} -> {r.returncode}\n{r.stderr[-2000:]}"
    return r.stdout


def _outputs(k3plan_cmd: list[str], cwd: Path, env: dict[str, str]) -> dict[str, str]:
    cwd.mkdir()
    (cwd / "rep").mkdir()
    took = re.compile(r"\bin\s+[\d.,]+\s+m?s\b")  # "(searched ...) in 97 ms": a timing, not an answer
    out = {
        name: took.sub("in T", _run([*k3plan_cmd, *args], cwd, env, EXIT.get(name, 0)))
        for name, args in COMMANDS.items()
    }
    out["report.md"] = re.sub(r" on \d{4}-\d\d-\d\d: ", " on DATE: ", (cwd / "rep" / "k3.md").read_text())
    out["report files"] = " ".join(sorted(p.name for p in (cwd / "rep").iterdir()))
    return out


def test_checkout_finds_the_top_level_hardware_specs():
    assert SPECS_DIR == data_dir("hardware_specs") == REPO / "hardware_specs"
    # each engine's stack.yaml in its folder (k3plan.engines.registry), found from the checkout's package
    assert {e.stack_path for e in engines()} == set((REPO / "k3plan" / "engines").glob("*/stack.yaml"))


@pytest.mark.packaging
def test_wheel_installed_outside_the_checkout_matches_the_checkout(tmp_path):
    why = _why_not()
    if why:
        pytest.skip(why)
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
    )  # the sdist, then the wheel built from the sdist
    (sdist,) = dist.glob("k3plan-*.tar.gz")
    (wheel,) = dist.glob("k3plan-*.whl")
    assert wheel.name == f"k3plan-{k3plan.__version__}-py3-none-any.whl", "version written once: k3plan.__version__"
    with tarfile.open(sdist) as tar:  # the sdist keeps the repository's layout
        assert f"k3plan-{k3plan.__version__}/hardware_specs/tpu-v7x.yaml" in tar.getnames()

    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_shipped_files() - in_wheel)
    assert not missing, f"the wheel lacks {missing}"
    assert "k3plan/py.typed" in in_wheel and "k3plan/hardware_specs/tpu-v7x.yaml" in in_wheel

    # A fresh environment: k3plan only from the wheel; its dependencies (and pip) from this interpreter's
    # site-packages, listed in a .pth file: nothing is downloaded, and the .pth files there (an editable
    # k3plan) are not read, as they would be with --system-site-packages.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, _env()).strip()
    (Path(purelib) / "k3plan-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", "--no-compile", str(wheel)],
        check=True,
        env=_env(),
        cwd=tmp_path,
    )
    where = _run(
        [py, "-c", "import k3plan, k3plan.hardware.loader as h; print(k3plan.__file__); print(h.SPECS_DIR)"],
        tmp_path,
        _env(),
    ).split()
    assert all(Path(p).is_relative_to(venv) for p in where), where
    assert _run([py, "-m", "k3plan", "--version"], tmp_path, _env()) == f"k3plan {k3plan.__version__}\n"

    with ThreadPoolExecutor(2) as pool:  # the two installs side by side: the step's wall time halves on 2 cores
        installed = pool.submit(_outputs, [str(venv / "bin" / "k3plan")], tmp_path / "wheel", _env())
        checkout = pool.submit(
            _outputs, [sys.executable, "-m", "k3plan"], tmp_path / "checkout", _env(PYTHONPATH=str(REPO))
        )
        installed, checkout = installed.result(), checkout.result()
    assert "does not fit" in installed["fit 1m"].lower() and "fits" in installed["fit jax-native"].lower()
    assert "fits" in installed["fit"].lower()
    # the shipped evidence travels in the wheel and is named by its package path, never a checkout path
    assert "k3-tpu7x-2x2x4-tp32-vllm-tpu-compiled" in installed["fit"]  # the table wraps the name's end
    assert "k3-tpu7x-2x2x4-tp32-jax-native-measured" in installed["fit jax-native"]
    assert not any(str(REPO) in text for text in (*installed.values(), *checkout.values()))
    for name, text in checkout.items():
        assert installed[name] == text, f"{name}: the wheel-installed k3plan answers differently"
    # issue 46: the checkout run from its own top (where ./reports/probes once changed the answer) gives the wheel's
    # speed figures from an empty folder, and the records they used are named by their package path
    at_top = _run([sys.executable, "-m", "k3plan", *COMMANDS["roofline"]], REPO, _env(PYTHONPATH=str(REPO)))
    assert _speed(installed["roofline"]) == _speed(at_top)
    used = json.loads(installed["roofline"])["records_used"]
    assert used and all(u.startswith("k3plan/evidence/probes/") for u in used)
    assert json.loads(at_top)["records_used"] == used
