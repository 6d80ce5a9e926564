"""Shared fixtures: the CLI runner, the bundled K3 config, a scaled-down kimi_linear config and a
safetensors header writer (no dependency on the safetensors package)."""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from k3_testing import bundled_raw, tiny_kimi_raw
from typer.testing import CliRunner

from k3plan.cli.app import app

# pytest keeps the test modules it rewrites for their asserts only where bytecode may be written; under
# PYTHONDONTWRITEBYTECODE (this machine's environment sets it) each worker rewrote every test module on every run,
# ~10 s of a 2-core run's collection. The cache goes to the __pycache__ folders .gitignore already leaves out.
sys.dont_write_bytecode = False

# CI runs the same hypothesis examples every time (a property failure found at random must not make
# one run of .ci/run red and the next green); HYPOTHESIS_PROFILE=explore draws new examples locally.
settings.register_profile("k3plan", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "k3plan"))


ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I32": 4, "I64": 8, "F64": 8}


@pytest.fixture
def no_shipped_records(monkeypatch, tmp_path_factory):
    """The shipped probe records (k3plan/evidence/probes) out of sight: a test of the records machinery that
    writes its own records sees only those (--probes DIR still adds; the default answer reads none)."""
    import k3plan.evidence.value as value

    monkeypatch.setattr(value, "SHIPPED_DIR", tmp_path_factory.mktemp("no-shipped-records"))


@pytest.fixture
def cli():
    """cli(*args) -> click Result (stdout in .stdout, stderr in .stderr)."""
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], *, sparse: bool = True) -> int:
    """Write a safetensors file: 8-byte LE header length, JSON header, a data section of the
    right size (a sparse hole). ``tensors``: name -> (dtype, shape). Returns the data size."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        n = ITEMSIZE[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)
    return offset


@pytest.fixture
def tiny_raw() -> dict:
    return tiny_kimi_raw()


@pytest.fixture
def k3_raw() -> dict:
    return bundled_raw("kimi-k3")


@pytest.fixture
def write_st():
    """write_st(path, {name: (dtype, shape)}) -> data bytes: see write_safetensors."""
    return write_safetensors


# Modules that compile or run JAX programs for seconds to minutes each (measured with --durations on the
# 2-core dev machine, 2026-12-04: 1.7-102 s a module, 340 s of the suite's 630 s). They carry the `slow`
# marker: plain `python3 -m pytest` (the README's command) leaves them out, `.ci/run` runs them after it
# with `python3 -m pytest -m slow`. A module is listed here rather than marked in its own file so that the
# list is one place to read and to keep current.
SLOW_MODULES = frozenset(
    {
        "tests/validate/test_abstract_model.py",
        "tests/validate/test_cli.py",
        "tests/validate/test_collective_check.py",
        "tests/validate/test_compile_cpu.py",
        "tests/validate/test_deepseek_family.py",
        "tests/validate/test_expert_forms.py",
        "tests/validate/test_fit_compile.py",
        "tests/validate/test_kda_math.py",
        "tests/validate/test_local_target.py",
        "tests/validate/test_phases_and_libtpu_env.py",
        "tests/probes/test_device_timing.py",
        "tests/step/test_graph_temp_compile.py",
        "tests/probes/test_mosaic_check.py",
        "tests/probes/test_probe_attnres.py",
        "tests/probes/test_probe_collectives.py",
        "tests/probes/test_probe_compute.py",
        "tests/probes/test_probe_distributed.py",
        "tests/probes/test_probe_gmm.py",
        "tests/probes/test_probe_kda_engine.py",
        "tests/probes/test_probe_mla_engine.py",
        "tests/probes/test_probe_moe_glue.py",
        "tests/probes/test_probe_plan.py",
        "tests/probes/test_probe_step.py",
        "tests/speed/test_admission.py",
        "tests/docs/test_readme_run.py",  # the README run three ways (benchmarks/readme_run.py): ~10 minutes
    }
)
# Single tests that run `report` over several platforms (6-8 s a process alone since plan's rows carry the served
# model under a load, 20-30 s under the suite's two workers): the same marker, by node id -- a test's name (all its
# parameters) or one parametrized id. The README's and `k3plan --help`'s default `report --html` is the same run
# as tests/newcomer/test_plots_readable.py::test_report_plots, which checks what those two do (its exit code, no
# engine refusal) in the plain run; their own copies of it run in the slow one.
SLOW_TESTS = frozenset(
    {
        "tests/app/test_dsv41_engram_matrix.py::test_report_answers",
        "tests/sharding/test_uneven_every_command.py::test_report_pick_on_an_uneven_split_says_so",
        # 1,500 mutations of the logged cases' serve commands through fit (80 s of one core; its 60-example twin runs
        # in the plain suite)
        "tests/fuzz/test_serve_fuzz.py::test_many_mutated_logged_commands_are_read_or_refused_in_one_line",
        # builds the sdist and the wheel, installs the wheel in a fresh venv and runs seven commands there: 15 s
        "tests/test_packaging.py::test_wheel_installed_outside_the_checkout_matches_the_checkout",
        "tests/cli/test_help_examples.py::test_each_help_example_exits_as_documented[k3plan report --out "
        "reports/k3.md --html]",
        "tests/newcomer/test_readme_engine_refusals.py::test_no_readme_example_prints_an_engine_refusal[k3plan "
        "report --out reports/k3-capacity.md --html]",
    }
)
_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    matched: set[str] = set()
    functions: dict[str, int] = {}  # where::function -> items collected of it
    for item in items:
        where = Path(str(item.fspath)).resolve().relative_to(_ROOT).as_posix()
        func = f"{where}::{item.originalname}"
        functions[func] = functions.get(func, 0) + 1
        hit = {func, f"{where}::{item.name}"} & SLOW_TESTS
        matched |= hit
        if where in SLOW_MODULES or hit:
            item.add_marker(pytest.mark.slow)
    # a listed parametrized id that no longer exists (the README's or a --help example's text changed) would leave
    # its run in the plain suite silently: refused wherever its function's parameters were all collected
    for entry in SLOW_TESTS - matched:
        func = entry.split("[", 1)[0]
        if "[" in entry and functions.get(func, 0) > 1:
            raise pytest.UsageError(f"tests/conftest.py SLOW_TESTS: {entry} matches no collected test; update it")
