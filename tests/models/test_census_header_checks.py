"""census checks every safetensors header against its file (issue 11.3): a header that does not
agree is one stderr line naming the shard and the tensor, exit 2 -- never a number, never a
traceback. Named regressions, then hypothesis-generated malformed headers."""

from __future__ import annotations

import json
import math
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from k3_testing import one_error_line

from k3plan.models.census import DTYPE_BITS, census

BITS = {"BF16": 16, "F32": 32, "U8": 8, "F8_E4M3": 8, "I64": 64, "BOOL": 8}


def header_for(tensors: dict[str, tuple[str, list[int]]]) -> tuple[dict, int]:
    """A valid header (offsets contiguous in order) -> (header, data bytes)."""
    header, pos = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        n = BITS[dtype] * math.prod(shape) // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    return header, pos


def write(path: Path, header, data_bytes: int, raw: bytes | None = None) -> Path:
    blob = raw if raw is not None else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + data_bytes)
    return path


GOOD = {"a.weight": ("BF16", [4, 8]), "a.bias": ("F32", [8]), "b.scale": ("U8", [3, 5])}


def test_the_good_header_passes(tmp_path):
    header, data = header_for(GOOD)
    out = census(write(tmp_path / "m.safetensors", header, data))
    assert out.tensors == 3 and out.bytes == 64 + 32 + 15 == data


def _mutated(tmp_path, mutate, *, data_delta: int = 0):
    header, data = header_for(GOOD)
    mutate(header)
    return write(tmp_path / "model-00001-of-00001.safetensors", header, data + data_delta)


CASES = {
    "unknown dtype": (lambda h: h["a.bias"].update(dtype="F33"), "a.bias", "unknown dtype"),
    "negative dim": (lambda h: h["a.weight"].update(shape=[-4, 8]), "a.weight", ">= 0"),
    "fractional dim": (lambda h: h["a.weight"].update(shape=[4.5, 8]), "a.weight", "int"),
    "boolean dim": (lambda h: h["a.weight"].update(shape=[True, 8]), "a.weight", "int"),
    "shape not a list": (lambda h: h["a.weight"].update(shape="4x8"), "a.weight", "array"),
    "size not dtype x shape": (lambda h: h["a.weight"].update(shape=[4, 9]), "a.weight", "BF16 x [4, 9]"),
    "negative offset": (lambda h: h["a.bias"].update(data_offsets=[-1, 31]), "a.bias", ">= 0"),
    "reversed offsets": (lambda h: h["b.scale"].update(data_offsets=[111, 96]), "b.scale", "data_offsets"),
    "missing field": (lambda h: h["a.bias"].pop("dtype"), "a.bias", "lacks"),
    "metadata value not a string": (lambda h: h["__metadata__"].update(step=3), "__metadata__", "strings"),
    "metadata not an object": (lambda h: h.update(__metadata__=["pt"]), "__metadata__", ""),
    "entry not an object": (lambda h: h.update(c="nonsense"), "c", ""),
}


@pytest.mark.parametrize("case", list(CASES))
def test_named_header_errors(cli, tmp_path, case):
    mutate, tensor, words = CASES[case]
    f = _mutated(tmp_path, mutate)
    line = one_error_line(cli("census", f))
    assert f.name in line and tensor in line and words in line, line


def test_offsets_overlap_gap_and_beyond_the_file(cli, tmp_path):
    def overlap(h):
        h["a.bias"]["data_offsets"] = [60, 92]
        h["b.scale"]["data_offsets"] = [92, 107]

    line = one_error_line(cli("census", _mutated(tmp_path, overlap, data_delta=-4)))
    assert "a.bias" in line and "overlaps" in line

    def gap(h):
        h["a.bias"]["data_offsets"] = [68, 100]
        h["b.scale"]["data_offsets"] = [100, 115]

    line = one_error_line(cli("census", _mutated(tmp_path, gap, data_delta=4)))
    assert "a.bias" in line and "gap of 4 B" in line
    # the data region is shorter than the offsets say (a truncated download)
    line = one_error_line(cli("census", _mutated(tmp_path, lambda h: None, data_delta=-5)))
    assert "b.scale" in line and "beyond the 106 B data region" in line
    # longer than the tensors cover
    line = one_error_line(cli("census", _mutated(tmp_path, lambda h: None, data_delta=7)))
    assert "cover 111 B of a 118 B data region" in line


def test_sub_byte_dtype_must_fill_whole_bytes(tmp_path, cli):
    f = write(tmp_path / "f4.safetensors", {"x": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, 2)
    line = one_error_line(cli("census", f))
    assert "'x'" in line and "F4 x [3] is 1.5 B" in line
    ok = write(tmp_path / "f4ok.safetensors", {"x": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}}, 2)
    assert census(ok).bytes == 2 and DTYPE_BITS["F4"] == 4


def test_tensor_in_two_shards(cli, tmp_path):
    h1, d1 = header_for({"a": ("F32", [2])})
    h2, d2 = header_for({"b": ("F32", [2]), "a": ("F32", [2])})
    write(tmp_path / "model-00001-of-00002.safetensors", h1, d1)
    write(tmp_path / "model-00002-of-00002.safetensors", h2, d2)
    line = one_error_line(cli("census", tmp_path))
    assert "model-00002-of-00002.safetensors" in line and "'a' is also in an earlier shard" in line


def test_a_third_shard_repeating_the_first_is_named(cli, tmp_path):
    # the first shard's names are kept as its dict (no set) until a second shard arrives
    for i, names in enumerate((["a"], ["b"], ["c", "a"]), 1):
        write(tmp_path / f"model-0000{i}-of-00003.safetensors", *header_for({n: ("F32", [2]) for n in names}))
    line = one_error_line(cli("census", tmp_path))
    assert "model-00003-of-00003.safetensors" in line and "'a' is also in an earlier shard" in line


def test_spans_out_of_header_order_and_empty_tensors_tile(tmp_path):
    # spans in header order skip the sort; any other order (or an empty tensor sharing a begin) is sorted
    def e(dtype: str, shape: list[int], begin: int, end: int) -> dict:
        return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}

    for header in (
        {"b": e("F32", [1], 4, 8), "a": e("BF16", [2], 0, 4)},
        {"b": e("F32", [1], 0, 4), "z": e("BF16", [0], 4, 4), "c": e("F32", [1], 4, 8)},
        {"z": e("BF16", [0], 4, 4), "b": e("F32", [1], 0, 4), "c": e("F32", [1], 4, 8)},
    ):
        r = census(write(tmp_path / "x.safetensors", header, 8))
        assert r.bytes == 8 and r.tensors == len(header)
        assert {d.dtype: (d.tensors, d.bytes) for d in r.by_dtype}["F32"][1] == 8 - 4 * ("a" in header)


def test_a_bad_value_before_a_syntax_error_is_one_line(cli, tmp_path):
    # the typed decode stops at the bad dtype; the entry-by-entry decode then met the syntax error (a traceback)
    raw = b'{"a": {"dtype": 5, "shape": [1], "data_offsets": [0, 2]}, "b": [1,,]}'
    line = one_error_line(cli("census", write(tmp_path / "x.safetensors", None, 2, raw=raw)))
    assert "corrupt safetensors header: not valid JSON" in line


def test_a_name_with_a_newline_stays_on_one_line(cli, tmp_path):
    header, data = header_for({"evil\nname": ("F32", [2])})
    header["evil\nname"]["dtype"] = "F99"
    line = one_error_line(cli("census", write(tmp_path / "x.safetensors", header, data)))
    assert "evil\\nname" in line


def test_metadata_keys_that_look_like_tensor_fields_are_fine(tmp_path):
    header, data = header_for(GOOD)
    header["__metadata__"] = {"shape": "not a shape", "dtype": "fine", "data_offsets": "x"}
    assert census(write(tmp_path / "m.safetensors", header, data)).tensors == 3


# --- hypothesis: valid headers pass with exact totals; any one corruption is exit 2, one line ------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda s: s != "__metadata__"
)
tensor = st.tuples(st.sampled_from(sorted(BITS)), st.lists(st.integers(0, 6), min_size=0, max_size=3))
headers = st.dictionaries(names, tensor, min_size=1, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensors=headers)
def test_valid_headers_give_exact_totals(tensors):
    header, data = header_for(tensors)
    with tempfile.TemporaryDirectory() as tmp:
        out = census(write(Path(tmp) / "m.safetensors", header, data))
    assert out.tensors == len(tensors) and out.bytes == data
    for dtype in {d for d, _ in tensors.values()}:
        assert out.dtype(dtype).tensors == sum(1 for d, _ in tensors.values() if d == dtype)


def _corrupt(header: dict, name: str, how: str, value) -> None:
    e = header[name]
    if how == "dtype":
        e["dtype"] = value
    elif how == "dim":
        e["shape"] = [*e["shape"], value]
    elif how == "offset":
        e["data_offsets"] = [value, e["data_offsets"][1]]
    elif how == "drop":
        del e[value]
    elif how == "entry":
        header[name] = value
    elif how == "metadata":
        header["__metadata__"] = value


junk = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
corruptions = st.one_of(
    st.tuples(st.just("dtype"), st.text(max_size=6).filter(lambda d: d not in DTYPE_BITS) | junk),
    st.tuples(
        st.just("dim"), st.integers(max_value=-1) | st.floats(allow_nan=False) | st.booleans() | st.text(max_size=3)
    ),
    st.tuples(st.just("offset"), st.integers(max_value=-1) | st.integers(10**6, 10**30) | junk),
    st.tuples(st.just("drop"), st.sampled_from(["dtype", "shape", "data_offsets"])),
    st.tuples(st.just("entry"), st.integers() | st.text(max_size=4) | st.lists(st.integers(), max_size=3)),
    st.tuples(
        st.just("metadata"),
        st.integers()
        | st.lists(st.text(max_size=2), max_size=2)
        | st.dictionaries(st.text(max_size=3), st.integers() | st.none(), min_size=1, max_size=2),
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensors=headers, which=st.integers(0, 7), corruption=corruptions)
def test_corrupt_headers_are_one_line_exit_2(cli, tensors, which, corruption):
    header, data = header_for(tensors)
    name = list(tensors)[which % len(tensors)]
    how, value = corruption
    if how == "dim" and value is True and header[name]["shape"] == []:
        pass  # [True]: still not an int, still an error
    _corrupt(header, name, how, value)
    with tempfile.TemporaryDirectory() as tmp:
        f = write(Path(tmp) / "model-00001-of-00001.safetensors", header, data)
        line = one_error_line(cli("census", f))
    assert f.name in line


def test_a_second_metadata_key_is_checked_too(cli, tmp_path):
    """The fast metadata check reads the first __metadata__ only when it is the sole one."""
    header, data = header_for(GOOD)
    blob = json.dumps(header)[:-1] + ', "__metadata__": {"step": 3}}'
    f = write(tmp_path / "dup.safetensors", None, data, raw=blob.encode())
    line = one_error_line(cli("census", f))
    assert "__metadata__ must map strings to strings" in line


@pytest.mark.parametrize("where", ["extra field", "metadata", "index"])
def test_values_nested_past_the_decoder_s_depth_are_one_line_exit_2(cli, tmp_path, where):
    """msgspec's decoder recurses a level a nested value: 100,000 levels raised RecursionError (a traceback, exit 1)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    header, data = header_for(GOOD)
    blob = json.dumps(header).encode()
    if where == "extra field":
        blob = blob[:-1] + b', "x": ' + deep + b"}"
    elif where == "metadata":
        blob = blob.replace(b'{"format": "pt"}', b'{"format": ' + deep + b"}")
    f = write(tmp_path / "model-00001-of-00001.safetensors", header, data, raw=blob)
    if where == "index":
        (tmp_path / "model.safetensors.index.json").write_bytes(b'{"weight_map": {"a": ' + deep + b"}}")
    line = one_error_line(cli("census", tmp_path if where == "index" else f))
    assert ("nested too deep" in line) if where != "index" else ("invalid index" in line)
