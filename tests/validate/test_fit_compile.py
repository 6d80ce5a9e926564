"""fit --compile on the tiny K3 (slow: a deviceless TPU compile, needs libtpu): each stage's temp is the
compiler's memory_analysis() temp at fit's own point, named as the compile, and the verdict rests on it (no
FITS IF). The wiring without a compiler is tests/cli/test_fit_compile.py."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app

from .conftest import has_libtpu


@pytest.mark.skipif(not has_libtpu(), reason='libtpu not installed: pip install -e ".[tpu]"')
def test_fit_compile_counts_the_compiled_temps(tiny_config):
    args = ["--model", tiny_config, "-t", "2x2x1", "--tp", "8", "--batch", "2", "--context", "256", "--chunk", "128"]
    r = CliRunner().invoke(app, ["fit", *args, "--compile", "--json"])
    assert r.exit_code == 0, r.output[-800:]
    d = json.loads(r.stdout)
    v = CliRunner().invoke(app, ["validate", *args[:-2], "--tokens", "128", "--target", "tpu7x:2x2x1", "--json"])
    assert v.exit_code == 0, v.output[-800:]
    temps = {x["stage"]: x["memory"]["temp_bytes"] for x in json.loads(v.stdout)["results"]}
    assert (d["temp"]["prefill_bytes"], d["temp"]["decode_bytes"]) == (temps["prefill"], temps["decode"])
    src = d["provenance"]["temp_decode"]
    assert src.startswith("compiled (deviceless tpu7x:2x2x1, jax ") and "8 layers, this point" in src
    assert d["reason_code"] == "feasible" and "unverified" not in d
