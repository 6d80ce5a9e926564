"""Probe tests: 8 fake CPU devices, set before anything imports jax."""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "k3plan" / "evidence" / "probes" / "tpu7x-a2a-chained-porting-study.json"
FAST = {"--repeats": "2", "--warmup": "1", "--timeout": "120"}


@pytest.fixture
def run_probe_cli(cli, tmp_path):
    """run_probe_cli(name, *args) -> (result, records, out_dir); writes into a tmp folder. FAST's options
    and --out are defaults: an option in ``args`` replaces its default (k3plan refuses one given twice)."""

    def go(name, *args):
        out = tmp_path / "records"
        given = {str(a).split("=")[0] for a in args}
        defaults = [x for k, v in {**FAST, "--out": out}.items() if k not in given for x in (k, v)]
        result = cli("probe", name, *defaults, "--json", *args)
        records = json.loads(result.stdout) if result.exit_code in (0, 1) and result.stdout.strip() else []
        return result, records, out

    return go
