"""The shipped calibration registry: every file loads, matching is exact on the configuration, and
measured evidence outranks compiled evidence."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from k3plan.errors import K3PlanError
from k3plan.evidence.calibrations import FOLDER, best_calibration, registry

K3 = {"model": "kimi-k3", "hardware": "tpu-v7x", "topology": "2x2x4", "tp": 32, "ep": 32, "dp": 1}


def test_every_shipped_file_is_indexed_and_loads():
    names = {p.name for p in FOLDER.glob("*.yaml")} - {"index.yaml"}
    evs = registry()
    assert {Path(ev.calibration.path).name for ev in evs} == names
    for ev in evs:
        assert ev.calibration.backend == "tpu", "a CPU-backend temp is not evidence"
        assert ev.kind in ("measured", "compiled")


def test_measured_file_is_the_real_slice():
    cal, kind = best_calibration(**K3, stack="jax-native", kv_dtype="fp32")
    assert kind == "measured"
    # k3-facts.md / the porting study: 8.55 GiB at 4K, 29.8 GiB decode, OOM at 57,344
    pre = {p.tokens: p for p in cal.prefill}
    assert pre[4096].temp_gib == 8.55 and not pre[57344].fits
    assert cal.decode[0].temp_gib == 29.8


def test_vllm_tpu_gets_compiled_evidence():
    # the old name loads torchtpu-vllm, whose compiled file it finds (re-taken under that name in issue 50)
    cal, kind = best_calibration(**K3, stack="vllm-tpu", kv_dtype="bf16")
    assert kind == "compiled" and cal.stack == "torchtpu-vllm"
    assert cal.device_kind and cal.jax_version and cal.date, "compiled evidence names its device, jax and date"


@pytest.mark.parametrize(
    "change",
    [
        {"tp": 16},
        {"topology": "2x2x2"},
        {"hardware": "tpu-v6e"},
        {"dp": 2},
        {"ep": 16},
        {"model": "kimi-k2"},
        {"stack": "sglang"},
        {"kv_dtype": "fp8"},
    ],
)
def test_any_difference_is_no_match(change):
    args = {**K3, "stack": "vllm-tpu", "kv_dtype": "bf16", **change}
    assert best_calibration(**args) is None


def _fake(folder: Path, name: str, kind: str, *, points: int, date: str, stack: str = "jax-native"):
    data = {
        "model": "kimi-k3",
        "hardware": "tpu-v7x",
        "topology": "2x2x4",
        "tp": 32,
        "stack": stack,
        "backend": "tpu",
        "date": date,
        "prefill": [{"tokens": 1024 * (i + 1), "temp_gib": 1.0 + i} for i in range(points)],
    }
    (folder / name).write_text(yaml.safe_dump(data))
    return {"file": name, "kind": kind, "kv_dtype": "fp32"}


def test_measured_beats_compiled_then_points_then_date(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"  # the registry is cached per folder
    a.mkdir(), b.mkdir()
    idx = [
        _fake(a, "c-many.yaml", "compiled", points=5, date="2026-11-30"),
        _fake(a, "m-few.yaml", "measured", points=1, date="2026-01-01"),
        _fake(a, "m-old.yaml", "measured", points=2, date="2026-01-01"),
        _fake(a, "m-new.yaml", "measured", points=2, date="2026-02-01"),
    ]
    (a / "index.yaml").write_text(yaml.safe_dump(idx))
    cal, kind = best_calibration(**K3, stack="jax-native", kv_dtype="fp32", folder=str(a))
    assert (Path(cal.path).name, kind) == ("m-new.yaml", "measured")
    # without measured files the compiled one is chosen
    (b / "index.yaml").write_text(yaml.safe_dump([_fake(b, "c-many.yaml", "compiled", points=5, date="2026-11-30")]))
    cal, kind = best_calibration(**K3, stack="jax-native", kv_dtype="fp32", folder=str(b))
    assert (Path(cal.path).name, kind) == ("c-many.yaml", "compiled")


def test_unindexed_file_is_an_error(tmp_path):
    shutil.copy(FOLDER / "index.yaml", tmp_path / "index.yaml")
    for ev in registry():
        shutil.copy(ev.calibration.path, tmp_path)
    _fake(tmp_path, "stray.yaml", "compiled", points=1, date="2026-01-01")
    with pytest.raises(K3PlanError, match="stray.yaml not in index.yaml"):
        registry(str(tmp_path))


def test_bad_index_entry_names_the_key(tmp_path):
    (tmp_path / "index.yaml").write_text(yaml.safe_dump([{"file": "x.yaml", "kind": "guessed", "kv_dtype": "fp32"}]))
    with pytest.raises(K3PlanError, match="entry 1: kind"):
        registry(str(tmp_path))


@pytest.mark.parametrize("stack, kind", [("vllm-tpu", "compiled"), ("jax-native", "measured")])
def test_a_setup_finds_its_evidence(stack, kind):
    """The names a Setup carries are the names the calibration files use (how fit/curve call it)."""
    from k3plan.setup import make_setup

    s = make_setup(
        model="kimi-k3",
        hardware="tpu-v7x",
        topology="2x2x4",
        tp=32,
        ep=None,
        dp=None,
        stack=stack,
        kv_dtype=None,
        shardspecs=None,
    )
    found = best_calibration(
        model=s.model.spec.name,
        hardware=s.hardware.name,
        topology=s.topology.text,
        tp=s.parallel.tp,
        ep=s.parallel.ep,
        dp=s.parallel.dp,
        stack=s.stack.name,
        kv_dtype=s.stack.kv_cache.dtype,
    )
    assert found is not None and found[1] == kind
