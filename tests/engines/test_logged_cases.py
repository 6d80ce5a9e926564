"""The engines are the referee (issue 34): each case under tests/engines/cases is a configuration an engine
runs, or a startup log, kept with its source; k3plan must reproduce its figures within the stated tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

CASES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))
GiB = 2**30


def _fit_json(cli, case: dict) -> tuple[int, dict]:
    args = ["fit", "-H", case["hardware"], "-t", case["topology"], "--serve", " ".join(case["serve"].split()), "--json"]
    r = cli(*args)
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_k3plan_reproduces_the_engine_s_figures(cli, path):
    case = yaml.safe_load(path.read_text())
    code, d = _fit_json(cli, case)
    exp = case["expect"]
    assert d["fits"] is exp["fits"] and code == (0 if exp["fits"] else 1)
    eng = d["engine"]
    assert eng["engine"] == case["engine"]
    if "kv_pool_gib" in exp:
        assert abs(eng["kv_pool_bytes"] / GiB - exp["kv_pool_gib"]) <= exp["kv_pool_tolerance_gib"]
