"""The README's counts not covered by tests/step/test_readme_figures.py: the bundled models it names, the
number of hardware specs, and the jax-native measured jit arguments it quotes beside the analytic weights."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text().split())


def test_hardware_specs_and_bundled_models(cli):
    m = re.search(r"\(bundled: ([^)]+)\), a hardware spec \(`hardware_specs/\*\.yaml`, (\d+) TPUs and GPUs", README)
    assert m, "the README no longer names its bundled models and spec count"
    hw = json.loads(cli("hardware", "list", "--json").stdout)
    assert len(hw) == int(m[2]) == len(list((ROOT / "hardware_specs").glob("*.yaml")))
    named = {n.strip().lower() for n in m[1].split(",")}
    bundled = {d["name"] for d in json.loads(cli("models", "list", "--json").stdout)}
    assert {n.replace(" ", "-") for n in named} == bundled


def test_the_measured_jit_arguments():
    m = re.search(r"the real v7x slice measured ([\d.]+) GiB of jit arguments", README)
    assert m
    cal = yaml.safe_load(
        (ROOT / "k3plan/evidence/calibrations/k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml").read_text()
    )
    assert f"{cal['argument_gib']:.2f}" == m[1]
