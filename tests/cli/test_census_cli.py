"""`k3plan census`: headers of hand-built safetensors files vs the inventory; corrupt files exit 2."""

from __future__ import annotations

import json
import struct

import pytest
from k3_testing import one_error_line

from k3plan.models import load_model


def expected_tensors(config_path) -> dict[str, tuple[str, tuple[int, ...]]]:
    inv = load_model(str(config_path)).inventory
    return {n: (d, tuple(s)) for t in inv.tensors for n, d, s in t.checkpoint_tensors()}


def write_checkpoint(write_st, folder, tensors: dict, n_shards: int = 3) -> None:
    names = list(tensors)
    shards = [names[i::n_shards] for i in range(n_shards)]
    weight_map = {}
    for k, shard in enumerate(shards, 1):
        fname = f"model-{k:05d}-of-{n_shards:06d}.safetensors"
        write_st(folder / fname, {n: tensors[n] for n in shard})
        weight_map.update({n: fname for n in shard})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.fixture
def ckpt(tmp_path, tiny_raw, write_st):
    """A folder with the tiny config.json and its exact checkpoint in 3 shards + index."""
    folder = tmp_path / "tiny-k3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_raw))
    tensors = expected_tensors(folder / "config.json")
    write_checkpoint(write_st, folder, tensors)
    return folder, tensors


def test_exact_checkpoint_matches(cli, ckpt):
    folder, tensors = ckpt
    r = cli("census", folder, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["files"] == 3
    assert out["tensors"] == len(tensors)
    comp = out["comparison"]
    assert comp["ok"] and comp["matched"] == comp["expected_tensors"] == len(tensors)
    assert comp["missing_count"] == comp["extra_count"] == comp["shape_mismatch_count"] == 0
    # by dtype: U8 holds the mxfp4 experts (3 layers x 8 experts x 3 weights x packed+scale)
    assert out["by_dtype"]["U8"]["tensors"] == 3 * 8 * 3 * 2
    assert set(out["by_dtype"]) == {"BF16", "F32", "U8"}
    # header bytes agree with the inventory's storage bytes (text model: no vision here)
    inv = load_model(str(folder / "config.json")).inventory
    assert out["bytes"] == inv.checkpoint_bytes
    assert sum(v["bytes"] for v in out["by_dtype"].values()) == out["bytes"]


def test_table_output(cli, ckpt):
    folder, _ = ckpt
    r = cli("census", folder)
    assert r.exit_code == 0, r.output
    assert "matches the inventory" in r.stdout and "U8" in r.stdout
    # bytes in GiB (2^30 B), as every command prints them
    total = json.loads(cli("census", folder, "--json").stdout)["bytes"]
    text = " ".join(r.stdout.split())  # the title may wrap
    assert f"{total / 2**30:,.3f} GiB" in text and " GB" not in text


def test_explicit_model_and_single_file(cli, ckpt, tmp_path):
    folder, tensors = ckpt
    r = cli("census", folder, "--model", folder / "config.json", "--json")
    assert r.exit_code == 0
    one = sorted(folder.glob("*.safetensors"))[0]
    r = cli("census", one, "--json")  # a file, no model: a plain census, exit 0
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["files"] == 1 and "comparison" not in out
    r = cli("census", one, "--model", folder / "config.json", "--json")  # one shard of three
    assert r.exit_code == 1
    assert json.loads(r.stdout)["comparison"]["missing_count"] == len(tensors) - out["tensors"]


def test_without_index_globs_shards(cli, ckpt):
    folder, tensors = ckpt
    (folder / "model.safetensors.index.json").unlink()
    r = cli("census", folder, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tensors"] == len(tensors)


def _rewrite(write_st, folder, tensors):
    for f in folder.glob("*.safetensors"):
        f.unlink()
    write_checkpoint(write_st, folder, tensors)


def test_missing_extra_and_mis_shaped_are_named(cli, ckpt, write_st):
    folder, tensors = ckpt
    L = "language_model.model.layers."
    dropped = f"{L}2.block_sparse_moe.experts.5.w2.weight_scale"
    reshaped = f"{L}3.self_attn.kv_b_proj.weight"
    added = f"{L}3.self_attn.rotary_emb.inv_freq"
    changed = dict(tensors)
    del changed[dropped]
    changed[added] = ("F32", (8,))
    dtype, shape = changed[reshaped]
    changed[reshaped] = (dtype, (shape[0] + 1, shape[1]))
    _rewrite(write_st, folder, changed)
    r = cli("census", folder, "--json")
    assert r.exit_code == 1, r.output
    comp = json.loads(r.stdout)["comparison"]
    assert not comp["ok"]
    assert comp["missing"] == [dropped] and comp["missing_count"] == 1
    assert comp["extra"] == [added] and comp["extra_count"] == 1
    assert comp["shape_mismatch"] == [{"name": reshaped, "expected": list(shape), "found": [shape[0] + 1, shape[1]]}]
    r = cli("census", folder)  # the table names them too
    assert r.exit_code == 1
    assert dropped in r.stdout and added in r.stdout and reshaped in r.stdout


def test_dtype_mismatch(cli, ckpt, write_st):
    folder, tensors = ckpt
    name = "language_model.model.layers.0.self_attn.A_log"
    changed = dict(tensors)
    changed[name] = ("BF16", changed[name][1])
    _rewrite(write_st, folder, changed)
    r = cli("census", folder, "--json")
    assert r.exit_code == 1
    comp = json.loads(r.stdout)["comparison"]
    assert comp["dtype_mismatch"] == [{"name": name, "expected": "F32", "found": "BF16"}]


# --- corrupt files: one line, exit 2 --------------------------------------------------------------


def _corrupt(folder, payload: bytes):
    target = sorted(folder.glob("*.safetensors"))[1]
    target.write_bytes(payload)
    return target


def test_truncated_file(cli, ckpt):
    folder, _ = ckpt
    target = _corrupt(folder, b"\x10\x00\x00")
    line = one_error_line(cli("census", folder))
    assert target.name in line and "truncated" in line


def test_header_length_beyond_file(cli, ckpt):
    folder, _ = ckpt
    target = _corrupt(folder, struct.pack("<Q", 10_000) + b"{}")
    line = one_error_line(cli("census", folder))
    assert target.name in line and "10,000" in line


def test_absurd_header_length(cli, tmp_path):
    f = tmp_path / "x.safetensors"
    f.write_bytes(struct.pack("<Q", 2**63) + b"{}")
    one_error_line(cli("census", f))


def test_header_not_json(cli, ckpt):
    folder, _ = ckpt
    blob = b"{not json"
    target = _corrupt(folder, struct.pack("<Q", len(blob)) + blob)
    line = one_error_line(cli("census", folder))
    assert target.name in line and "JSON" in line


@pytest.mark.parametrize(
    "header",
    [
        b"[1, 2]",
        b'{"a": {"dtype": "F32"}}',
        b'{"a": "nonsense"}',
        b'{"a": {"dtype": "F32", "shape": 5, "data_offsets": [0, 4]}}',
        b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}',
        b'{"a": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}}',
        b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": ["0", 4]}}',
        b"\xff\xfe\x00",
    ],
)
def test_header_malformed_entries(cli, tmp_path, header):
    f = tmp_path / "bad.safetensors"
    f.write_bytes(struct.pack("<Q", len(header)) + header)
    one_error_line(cli("census", f))


@pytest.mark.parametrize("index", ["not json", '{"weight_map": ["a"]}', '["a"]', '{"weight_map": {"a": 3}}', "{}"])
def test_bad_index(cli, ckpt, index):
    folder, _ = ckpt
    (folder / "model.safetensors.index.json").write_text(index)
    one_error_line(cli("census", folder))


@pytest.mark.parametrize("same_file", [True, False])
def test_index_naming_a_tensor_twice_is_refused(cli, ckpt, same_file):
    """Issue 48: JSON keeps the last of two entries, so a shard only the first named went unread; refused, naming the
    tensor (keys holding an escaped quote and a comma count as one string each)."""
    folder, _ = ckpt
    index = folder / "model.safetensors.index.json"
    text = index.read_text()
    first = sorted(folder.glob("*.safetensors"))[0].name
    other = first if same_file else "model-00002-of-000003.safetensors"
    index.write_text(
        text.replace(
            '"weight_map": {', f'"weight_map": {{"a\\",b": "{first}", "dup.w": "{first}", "dup.w": "{other}", '
        )
    )
    line = one_error_line(cli("census", folder))
    assert "weight_map names tensor 'dup.w' twice; expected each tensor once" in line


def test_index_with_escaped_quotes_in_names_is_read(cli, ckpt):
    folder, tensors = ckpt
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]['odd \\"name\\\\'] = next(iter(data["weight_map"].values()))  # an escaped quote and backslash
    index.write_text(json.dumps(data))
    r = cli("census", folder, "--json")
    assert r.exit_code == 0, r.output


def test_an_index_naming_many_missing_shards_is_refused_with_their_count(cli, tmp_path):
    """The shards are looked up in one listing of the folder (500,000 names took 9 s of CPU in a stat each; the time
    is benchmarks/bench_large_inputs.py's); a name with a folder in it is looked up where it points."""
    names = {f"w{i}": f"model-{i:05d}-of-20000.safetensors" for i in range(20_000)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": names}))
    line = one_error_line(cli("census", tmp_path))
    assert "names 20000 shard(s) that are not there, e.g. model-00000-of-20000.safetensors" in line


def test_an_index_may_name_a_shard_in_a_subfolder(cli, tmp_path, write_st):
    (tmp_path / "sub").mkdir()
    write_st(tmp_path / "sub" / "a.safetensors", {"w": ("BF16", (2, 2))})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "sub/a.safetensors"}}))
    r = cli("census", tmp_path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tensors"] == 1


def test_index_names_missing_shard(cli, ckpt):
    folder, _ = ckpt
    sorted(folder.glob("*.safetensors"))[0].unlink()
    line = one_error_line(cli("census", folder))
    assert "model-00001-of-000003.safetensors" in line


def test_no_such_path_and_empty_folder(cli, tmp_path):
    one_error_line(cli("census", tmp_path / "nope"))
    one_error_line(cli("census", tmp_path))
