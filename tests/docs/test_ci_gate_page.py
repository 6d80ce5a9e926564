"""docs/ci-gate.md: the seed of section 1 is a baseline `check --update` fills in and `check` then passes, as the
workflow of section 2 runs it; the failing run quoted (lm_head forced to [null, null] on the shipped baseline's
v7x-2x2x4-tp32-vllm-tpu) is what check prints, row by row, figure by figure, with exit 1."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "ci-gate.md").read_text()


def block(after: str, lang: str) -> str:
    return PAGE.split(after, 1)[1].split(f"```{lang}\n", 1)[1].split("```", 1)[0]


def test_the_seed_is_recorded_then_passes(cli, tmp_path):
    seed = block("## 1. Write a seed and record it", "yaml")
    assert seed.startswith("# ci/k3-baseline.yaml")
    path = tmp_path / "k3-baseline.yaml"
    path.write_text(seed)
    r = cli("check", "--baseline", path, "--update")
    assert r.exit_code == 0, r.output
    recorded = yaml.safe_load(path.read_text())
    names = [c["name"] for c in yaml.safe_load(seed)["configurations"]]
    assert [c["name"] for c in recorded["configurations"]] == names
    assert all("per_device" in c["expected"] for c in recorded["configurations"])
    r = cli("check", "--baseline", path, "--tolerance", "256MiB", "--json")  # as the workflow runs it
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["passed"] is True


def test_the_quoted_failing_run_is_what_check_prints(cli, tmp_path):
    quoted = PAGE.split("A failing run prints, for example (lm_head forced to `[null, null]`):", 1)[1]
    quoted = quoted.split("```\n", 1)[1].split("```", 1)[0]
    rows = [
        re.match(r"^ (\S+)\s+(.+?)\s{2,}(-|[\d.]+ GiB)\s+([\d.]+ GiB)\s+([+-][\d.]+ GiB)$", ln)
        for ln in quoted.splitlines()[2:-1]
    ]
    assert len(rows) == 3 and all(rows), quoted
    data = json.loads((ROOT / "reports/baseline/k3.json").read_text())
    data["configurations"] = [c for c in data["configurations"] if c["name"] == rows[0][1]]
    baseline = tmp_path / "k3.json"
    baseline.write_text(json.dumps(data))
    specs = tmp_path / "specs.yaml"
    specs.write_text("shardspecs:\n  'language_model\\.lm_head\\.weight': [null, null]\n")
    r = cli("check", "--baseline", baseline, "--shardspecs", specs)
    assert r.exit_code == 1, r.output
    printed = [
        [" ".join(c.split()) for c in ln.split("│")[1:-1]] for ln in r.stdout.splitlines() if ln.startswith("│ v7x")
    ]
    assert [p[:5] for p in printed] == [list(m.groups()) for m in rows]
    assert quoted.splitlines()[-1] in r.stdout  # the FAIL line
