"""Loader name resolution and the header-only census API."""

from __future__ import annotations

import json
import time

import pytest

from k3plan.errors import K3PlanError
from k3plan.models import bundled_models, load_model
from k3plan.models.census import census, read_header
from k3plan.structs import dump


def test_bundled_models():
    assert bundled_models() == [
        "deepseek-r1-0528-fp4-v2",
        "deepseek-r1-0528-mxfp4",
        "deepseek-v3",
        "deepseek-v4-flash",
        "deepseek-v4-flash-0731",
        "deepseek-v4-pro",
        "deepseek-v4-pro-0813",
        "deepseek-v4.1-flash",
        "kimi-k2",
        "kimi-k2-thinking",
        "kimi-k2.6",
        "kimi-k3",
        "kimi-linear-48b-a3b",
    ]
    assert load_model().name == "kimi-k3"


def test_folder_name_is_its_basename(tmp_path, tiny_raw):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_raw))
    assert load_model(str(folder)).name == "tiny"  # not the absolute path
    assert load_model(str(folder / "config.json")).name == "tiny"


def test_tiny_config_shape(tiny_raw, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(tiny_raw))
    m = load_model(str(p))
    assert m.spec.mixers == ("kda", "kda", "kda", "mla") and m.spec.mlps == ("dense", "moe", "moe", "moe")
    w2 = m.inventory.get("language_model.model.layers.1.block_sparse_moe.experts.{e}.w2.weight")
    assert w2.shape == (8, 128, 64) and w2.fmt == "mxfp4"


def test_census_reads_headers_only(tmp_path, write_st):
    """A 64 GiB (sparse) data section: reading any of it would take far longer than the bound."""
    f = tmp_path / "big.safetensors"
    size = write_st(f, {"w": ("BF16", (2**17, 2**18)), "s": ("U8", (4, 4))})
    assert size == 2**36 + 16
    t0 = time.perf_counter()
    out = census(f)
    assert time.perf_counter() - t0 < 1.0
    assert out.tensors == 2 and out.bytes == size
    assert [(e.dtype, e.tensors, e.bytes) for e in out.by_dtype] == [("BF16", 1, 2**36), ("U8", 1, 16)]
    assert dump(out)["by_dtype"] == {
        "BF16": {"tensors": 1, "bytes": 2**36},
        "U8": {"tensors": 1, "bytes": 16},
    }
    assert "comparison" not in dump(out)  # no model: no comparison key
    assert {t.name: t.shape for t in read_header(f)} == {"w": (2**17, 2**18), "s": (4, 4)}


def test_census_errors_are_k3plan_errors(tmp_path):
    f = tmp_path / "short.safetensors"
    f.write_bytes(b"1234")
    with pytest.raises(K3PlanError, match="truncated"):
        census(f)


def test_an_overridden_bundled_config_is_named_by_its_place_in_the_package_not_the_install_folder():
    """The notes of a model built with fields set over a bundled config name it k3plan/models/bundled/<name>/..., so
    the answer (fit --json of an --hf-overrides command) is the same from every folder and install."""
    from k3plan.models.loader import BUNDLED_DIR, load_model

    notes = load_model("deepseek-v3", (("num_hidden_layers", 5),)).notes
    said = [n for n in notes if n.startswith("built from ")]
    assert said == ["built from k3plan/models/bundled/deepseek-v3/config.json with num_hidden_layers 5 set over it"]
    assert str(BUNDLED_DIR) not in " ".join(notes)
