"""fit --compile (issue 50 item 2): the step compiled deviceless at fit's point settles a FITS IF. Here without a
compile: the wiring with validate's compile stubbed (its temps become the stages' temps, named as the compile),
the missing jax extra as one line and exit 2, and --compile's bad input. The real compile of a tiny model is
tests/validate/test_fit_compile.py (slow, libtpu)."""

from __future__ import annotations

import json
import sys

import pytest

from k3plan.budget.result import CompiledPoint
from k3plan.units import GiB

SOURCE = "compiled (deviceless tpu7x:2x2x4, jax 0.0.0, libtpu 0.0.0, 93 layers, this point: k3plan fit --compile)"
ARGS = ("fit", "-t", "2x2x4", "--tp", "32", "--compile")


@pytest.fixture
def stub_compile(monkeypatch):
    """validate's compile replaced: the stages' temps given, the point it was asked at kept."""
    import k3plan.extras
    import k3plan.validate.fit_compile as fc

    asked = {}

    def give(prefill, decode, decode_refused=""):
        def compile_point(setup, workload, **_):
            asked.update(topology=setup.topology.text, workload=workload, target=fc.compile_target(setup))
            return CompiledPoint(source=SOURCE, prefill_bytes=prefill, decode_bytes=decode,
                                 decode_refused=decode_refused)  # fmt: skip

        monkeypatch.setattr(fc, "compile_point", compile_point)
        return asked

    monkeypatch.setattr(k3plan.extras, "installed", lambda module: True)  # no test needs the jax extra
    return give


def test_compiled_temps_are_the_stages_temps_and_settle_the_verdict(cli, stub_compile):
    asked = stub_compile(int(20 * GiB), int(22 * GiB))
    r = cli(*ARGS, "--batch", 2, "--context", 16384, "--json")
    assert r.exit_code == 0, r.output[-500:]
    d = json.loads(r.stdout)
    assert (d["temp"]["prefill_bytes"], d["temp"]["decode_bytes"]) == (int(20 * GiB), int(22 * GiB))
    assert d["per_device"]["temp_bytes"] == int(22 * GiB) and "unverified" not in d
    assert d["provenance"]["temp_prefill"] == d["provenance"]["temp_decode"] == SOURCE
    assert asked["target"] == "tpu7x:2x2x4" and asked["workload"].context_tokens == 16384
    assert asked["workload"].batch == 2


def test_a_compile_too_large_for_the_device_does_not_fit(cli, stub_compile):
    stub_compile(int(20 * GiB), int(60 * GiB))  # 63.2 GiB of weights + 60 GiB of temporaries > 94.75
    r = cli(*ARGS, "--json")
    assert r.exit_code == 1, r.output[-500:]
    assert json.loads(r.stdout)["fits"] is False


def test_a_compile_out_of_memory_refuses_the_stage(cli, stub_compile):
    stub_compile(int(20 * GiB), None, decode_refused="the compile at this point ran out of HBM")
    r = cli(*ARGS)
    assert r.exit_code == 1, r.output[-500:]
    assert "decode refused by the compile: the compile at this point ran out of HBM" in " ".join(r.stdout.split())


def test_without_jax_it_is_one_line_naming_the_extra(cli, monkeypatch):
    for m in [m for m in sys.modules if m == "jax" or m.startswith(("jax.", "jaxlib"))]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "jax", None)
    r = cli(*ARGS)
    assert r.exit_code == 2, r.output[-500:]
    (line,) = r.output.strip().splitlines()
    assert "k3plan fit --compile needs the optional extra 'jax'" in line and "pip install 'k3plan[jax]'" in line


@pytest.mark.parametrize(
    "args, words",
    [
        (("-H", "nvidia-b200", "-t", "2x8", "--stack", "sglang"), "no deviceless compile for nvidia-b200"),
        (("-t", "2x2x4", "--tp", "32", "--calibration", "k3-tpu7x-2x2x4-tp32-vllm-tpu-compiled"), "drop --calibration"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, stub_compile, args, words):
    stub_compile(1, 1)
    r = cli("fit", "--compile", *args)
    assert r.exit_code == 2, r.output[-500:]
    assert words in r.output and len(r.output.strip().splitlines()) == 1
