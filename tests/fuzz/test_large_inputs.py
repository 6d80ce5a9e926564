"""Issue 48: a 50 MB input is refused or read in under 1 s. Every kind of file a command reads as JSON or YAML is
refused at 50 MB in one line naming the bound (exit 2), having read no more than the bound: YAML past 1 MiB, JSON
past 8 MiB. The files k3plan reads as they come (a safetensors header or index, decoded by msgspec) are read, and
their time at 50 MB is benchmarks/bench_large_inputs.py's, as a ratio to a floor: no timed test here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from k3_testing import one_error_line

FIT = ("fit", "-t", "2x2x4", "--tp", "32")
SIZE = 50 * 2**20


def _yaml(n: int) -> str:
    return "name: big\nnotes:\n" + "  - x\n" * ((n - 20) // 6)


def _json(n: int) -> str:
    return '{"counts": [' + "1, " * ((n - 20) // 3) + "1]}"


def _config(folder: Path) -> tuple[str, ...]:
    (folder / "config.json").write_text('{"model_type": "kimi_k3", "pad": "' + "x" * SIZE + '"}')
    return (*FIT, "-m", folder / "config.json")


def _probes(folder: Path) -> tuple[str, ...]:
    (folder / "probes").mkdir()
    (folder / "probes" / "hbm-big.json").write_text(_json(SIZE))
    return (*FIT, "--probes", folder / "probes")


def _file(name: str, text, *args: str):
    def make(folder: Path) -> tuple[str, ...]:
        (folder / name).write_text(text(SIZE))
        return (*[a.replace("FILE", str(folder / name)) for a in args],)

    return make


KINDS = {  # what a user hands k3plan -> (the files written, the command), and the bound that refuses it
    "config.json": (_config, "8,388,608 bytes"),
    "hardware spec": (_file("hw.yaml", _yaml, *FIT, "-H", "FILE"), "1,048,576 bytes"),
    "stack": (_file("stack.yaml", _yaml, *FIT, "--stack", "FILE"), "1,048,576 bytes"),
    "calibration": (
        _file("cal.yaml", _yaml, "fit", "-t", "2x2x4", "--stack", "jax-native", "--calibration", "FILE"),
        "1,048,576 bytes",
    ),
    "shardspecs": (_file("ss.yaml", _yaml, *FIT, "--shardspecs", "FILE"), "1,048,576 bytes"),
    "probe record": (_probes, "8,388,608 bytes"),
    "baseline (JSON)": (_file("base.json", _json, "check", "--baseline", "FILE"), "8,388,608 bytes"),
    "baseline (YAML)": (_file("base.yaml", _yaml, "check", "--baseline", "FILE"), "1,048,576 bytes"),
    "router histogram": (
        _file("hist.json", _json, "roofline", "-t", "2x2x4", "--router-histogram", "FILE"),
        "8,388,608 bytes",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_50_mb_file_of_every_kind_is_refused_in_one_line_naming_the_bound(cli, tmp_path, kind):
    make, bound = KINDS[kind]
    line = one_error_line(cli(*make(tmp_path)))
    assert re.search(rf"more than {bound}; expected a file of at most {bound} \(\d+ MiB\)$", line), line


def test_a_safetensors_index_is_read_whatever_its_size_up_to_its_own_bound(cli, tmp_path, write_st):
    """An index is decoded by msgspec (~1 GB/s), not refused at 8 MiB: DeepSeek-V4-Pro's names 145,116 tensors."""
    write_st(tmp_path / "a.safetensors", {"w": ("BF16", (2, 2))})
    names = {f"model.layers.{i}.mlp.experts.{i}.w{'x' * 40}": "a.safetensors" for i in range(200_000)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": names}))
    assert (tmp_path / "model.safetensors.index.json").stat().st_size > 8 * 2**20
    r = cli("census", tmp_path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tensors"] == 1
