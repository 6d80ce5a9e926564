"""`k3plan check`: the shipped K3 baseline passes; a replicating shardspec fails naming the tensor
and its bytes; tolerance semantics; --update; corrupt or incompatible baselines exit 2, one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from k3_testing import one_error_line

from k3plan.check.compare import parse_tolerance
from k3plan.errors import K3PlanError

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "reports" / "baseline" / "k3.json"


@pytest.fixture
def small_baseline(tmp_path) -> Path:
    """The shipped baseline cut to one vllm-tpu configuration that fits at 128K: v7x 2x4x4 TP=32 DP=2,
    batch 8. The tests below need a fitting configuration (one whose `fits` can flip, with free bytes
    to spare, so that only the perturbed term fails); v7x 2x2x4 TP=32 vllm-tpu fits at 128K with a few
    GiB to spare only (the shipped compiled decode temp, issue 15), and jax-native upcasts lm_head to fp32."""
    data = json.loads(BASELINE.read_text())
    data["configurations"] = [c for c in data["configurations"] if c["name"] == "v7x-2x4x4-tp32-dp2-torchtpu-vllm"]
    assert len(data["configurations"]) == 1 and data["configurations"][0]["expected"]["fits"]
    path = tmp_path / "k3.json"
    path.write_text(json.dumps(data))
    return path


def test_the_shipped_baseline_passes(cli):
    """The project's own CI gate: the unchanged tree reproduces every recorded configuration."""
    r = cli("check", "--baseline", BASELINE)
    assert r.exit_code == 0, r.output
    assert "PASS" in r.stdout
    names = [e["name"] for e in json.loads(BASELINE.read_text())["configurations"]]
    for stack in ("torchtpu-vllm", "sglang", "jax-native", "dp-attention"):
        assert f"v7x-2x2x4-tp32-{stack}" in names
    assert any("2x4x4" in n for n in names) and any("b200" in n for n in names)


def test_a_shardspec_that_replicates_lm_head_fails_naming_tensor_and_bytes(cli, tmp_path, small_baseline):
    specs = tmp_path / "specs.yaml"
    specs.write_text("shardspecs:\n  'language_model\\.lm_head\\.weight': [null, null]\n")
    r = cli("check", "--baseline", small_baseline, "--shardspecs", specs, "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert not d["passed"]
    rep = [f for f in d["findings"] if f["check"] == "replicated" and f["fail"]]
    assert len(rep) == 1 and "language_model.lm_head.weight" in rep[0]["what"]
    # bf16 [vocab, hidden] on every device: the whole tensor, from the inventory
    from k3plan.models import load_model

    lm = next(t for t in load_model("kimi-k3").inventory.text if t.name == "language_model.lm_head.weight")
    assert rep[0]["now"] == rep[0]["delta_bytes"] == lm.nbytes
    table = cli("check", "--baseline", small_baseline, "--shardspecs", specs)
    assert table.exit_code == 1
    assert "language_model.lm_head.weight newly replicated" in table.stdout
    assert f"{lm.nbytes:+,} B" in table.stdout and "FAIL" in table.stdout


def _shrink(path: Path, term: str, by: int) -> None:
    """Pretend the baseline recorded `by` bytes less: the tree now 'grows' by exactly `by`."""
    data = json.loads(path.read_text())
    data["configurations"][0]["expected"]["per_device"][term] -= by
    path.write_text(json.dumps(data))


def test_tolerance_bytes_and_percent(cli, small_baseline):
    _shrink(small_baseline, "temp_bytes", 100 * 2**20)  # grows by 100 MiB
    assert cli("check", "--baseline", small_baseline, "--tolerance", "128MiB").exit_code == 0
    r = cli("check", "--baseline", small_baseline, "--tolerance", "64MiB", "--json")
    assert r.exit_code == 1
    f = [f for f in json.loads(r.stdout)["findings"] if f["fail"]]
    assert [x["check"] for x in f] == ["temp_bytes"] and f[0]["delta_bytes"] == 100 * 2**20
    temp = json.loads(small_baseline.read_text())["configurations"][0]["expected"]["per_device"]["temp_bytes"]
    pct_needed = 100 * (100 * 2**20) / temp
    assert cli("check", "--baseline", small_baseline, "--tolerance", f"{pct_needed * 1.1:.3f}%").exit_code == 0
    assert cli("check", "--baseline", small_baseline, "--tolerance", f"{pct_needed * 0.9:.3f}%").exit_code == 1


def test_kv_bytes_a_token_change_fails_whatever_the_tolerance(cli, small_baseline):
    data = json.loads(small_baseline.read_text())
    data["configurations"][0]["expected"]["kv_bytes_per_token"] += 1
    small_baseline.write_text(json.dumps(data))
    r = cli("check", "--baseline", small_baseline, "--tolerance", "100%", "--json")
    assert r.exit_code == 1
    assert [f["check"] for f in json.loads(r.stdout)["findings"] if f["fail"]] == ["model kv_bytes_per_token"]


def test_no_longer_fits_fails_and_shrinking_passes_with_a_note(cli, small_baseline):
    data = json.loads(small_baseline.read_text())
    data["configurations"][0]["config"]["context_tokens"] = 2**21  # now it cannot fit; expected says it did
    small_baseline.write_text(json.dumps(data))
    r = cli("check", "--baseline", small_baseline, "--json")
    fails = {f["check"] for f in json.loads(r.stdout)["findings"] if f["fail"]}
    assert r.exit_code == 1 and "fits" in fails


def test_a_term_that_shrank_passes_with_a_note(cli, small_baseline):
    _shrink(small_baseline, "temp_bytes", -(2**30))  # the baseline recorded 1 GiB more: the tree shrank
    r = cli("check", "--baseline", small_baseline, "--json")
    assert r.exit_code == 0, r.output
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["check"] == "temp_bytes"]
    assert not f["fail"] and f["delta_bytes"] == -(2**30)
    assert "temp_bytes shrank by 1.000 GiB" in f["what"]


def test_update_rewrites_and_fills_a_seed(cli, tmp_path, small_baseline):
    _shrink(small_baseline, "weights_bytes", 2**30)
    assert cli("check", "--baseline", small_baseline).exit_code == 1
    assert cli("check", "--baseline", small_baseline, "--update").exit_code == 0
    assert cli("check", "--baseline", small_baseline).exit_code == 0
    seed = tmp_path / "seed.yaml"
    seed.write_text("configurations:\n  - config: {hardware: nvidia-b200, topology: 2x8, tp: 16, stack: sglang}\n")
    assert "without recorded values" in one_error_line(cli("check", "--baseline", seed))
    assert cli("check", "--baseline", seed, "--update").exit_code == 0
    assert "format_version: 1" in seed.read_text()
    assert cli("check", "--baseline", seed).exit_code == 0


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"format_version": 1, "configurations": [', "corrupt JSON"),
        ("[1, 2]", "not a k3plan baseline"),
        ("", "corrupt JSON"),
        (None, "incompatible"),
    ],
)
def test_corrupt_or_incompatible_baseline_exits_2_one_line(cli, small_baseline, content, words):
    if content is None:
        data = json.loads(small_baseline.read_text())
        data.update(format_version=99, k3plan_version="9.0.0")
        content = json.dumps(data)
    small_baseline.write_text(content)
    line = one_error_line(cli("check", "--baseline", small_baseline))
    assert words in line and str(small_baseline) in line


def test_bad_tolerance_and_missing_file(cli, tmp_path):
    assert "--tolerance" in one_error_line(cli("check", "--baseline", BASELINE, "--tolerance", "lots"))
    assert "no such file" in one_error_line(cli("check", "--baseline", tmp_path / "nope.json"))
    with pytest.raises(K3PlanError):
        parse_tolerance("-3%")
    assert parse_tolerance("1%").allowed(1000) == 10 and parse_tolerance("1KiB").allowed(5) == 1024
    assert re.fullmatch(r"\d+", str(parse_tolerance("0").allowed(10**9)))
