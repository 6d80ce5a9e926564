"""Issue 10 item 3: a census is typed (models.census_result): each mismatch says which tensor, what the
inventory expects and what the header has, under those names."""

from __future__ import annotations

import json

from k3plan.models import load_model
from k3plan.models.census import census
from k3plan.models.census_result import DtypeMismatch, ShapeMismatch


def _write(write_st, folder, tensors: dict) -> None:
    """One shard and its index, as a checkpoint folder has them."""
    write_st(folder / "model-00001-of-000001.safetensors", tensors)
    index = {"metadata": {}, "weight_map": dict.fromkeys(tensors, "model-00001-of-000001.safetensors")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def test_each_mismatch_is_named(tmp_path, tiny_raw, write_st):
    (tmp_path / "config.json").write_text(json.dumps(tiny_raw))
    inv = load_model(str(tmp_path / "config.json")).inventory
    tensors = {n: (d, tuple(s)) for t in inv.tensors for n, d, s in t.checkpoint_tensors()}
    names = sorted(n for n, (d, s) in tensors.items() if d == "BF16" and len(s) == 2)
    wide, retyped, gone = names[0], names[1], names[2]
    d, s = tensors[wide]
    tensors[wide] = (d, (s[0] + 1, s[1]))  # one row too many
    tensors[retyped] = ("F32", tensors[retyped][1])
    del tensors[gone]
    _write(write_st, tmp_path, tensors)
    r = census(tmp_path, inv)
    c = r.comparison
    assert c is not None and not c.ok
    assert c.shape_mismatch == [ShapeMismatch(name=wide, expected=list(s), found=[s[0] + 1, s[1]])]
    assert c.dtype_mismatch == [DtypeMismatch(name=retyped, expected="BF16", found="F32")]
    assert (c.missing, c.missing_count, c.extra_count) == ([gone], 1, 0)
    assert c.matched == c.expected_tensors - 1 == len(tensors)
    assert r.dtype("F32").tensors == sum(1 for dt, _ in tensors.values() if dt == "F32")
