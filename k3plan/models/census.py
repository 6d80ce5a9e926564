"""Census of a safetensors checkpoint from its headers alone (never the tensor data).

A safetensors file starts with an 8-byte little-endian header length N, then N bytes of JSON:
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``.
Names are compared with the inventory's checkpoint names as they are (the inventory is written in
the checkpoint's own names, experts expanded from their ``{e}`` template); no renaming is applied.
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from k3plan.errors import K3PlanError
from k3plan.models.inventory import TensorInventory

MAX_HEADER_BYTES = 512 * 2**20  # a header larger than this is corrupt, not big


class HeaderTensor(NamedTuple):
    """One header entry (a NamedTuple: a K3 census builds ~500k of these)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


def read_header(path: Path) -> list[HeaderTensor]:
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise K3PlanError(f"{path}: truncated safetensors file (no 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise K3PlanError(f"{path}: corrupt safetensors header: length {n:,} B but file is {size:,} B")
            blob = f.read(n)
    except OSError as err:
        raise K3PlanError(f"{path}: cannot read: {err}") from None
    try:
        header = json.loads(blob)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise K3PlanError(f"{path}: corrupt safetensors header: not valid JSON") from None
    if not isinstance(header, dict):
        raise K3PlanError(f"{path}: corrupt safetensors header: expected a JSON object")
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
            dtype, shape = info["dtype"], tuple(info["shape"])
            # dims are not checked one by one here (500k entries); a bad one shows as a shape mismatch
            ok = type(dtype) is str and type(begin) is int and type(end) is int and 0 <= begin <= end
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise K3PlanError(f"{path}: corrupt safetensors header: entry {name!r} lacks a valid dtype/shape/data_offsets")
        out.append(HeaderTensor(name, dtype, shape, end - begin, path.name))
    return out


def checkpoint_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise K3PlanError(f"census: {path}: no such file or folder")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            weight_map = None
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise K3PlanError(f"{index}: invalid index (expected JSON with a 'weight_map' object of file names)")
        files = sorted(path / f for f in set(weight_map.values()))
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise K3PlanError(f"{index}: names {len(missing)} shard(s) that are not there, e.g. {missing[0]}")
        return files
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise K3PlanError(f"census: {path}: no *.safetensors files and no model.safetensors.index.json")
    return files


def census(path: Path, inventory: TensorInventory | None = None, *, max_listed: int = 20) -> dict:
    files = checkpoint_files(path)
    tensors: dict[str, HeaderTensor] = {}
    for f in files:
        for t in read_header(f):
            tensors[t.name] = t
    by_dtype: dict[str, dict[str, int]] = defaultdict(lambda: {"tensors": 0, "bytes": 0})
    for t in tensors.values():
        by_dtype[t.dtype]["tensors"] += 1
        by_dtype[t.dtype]["bytes"] += t.nbytes
    result = {
        "path": str(path),
        "files": len(files),
        "tensors": len(tensors),
        "bytes": sum(t.nbytes for t in tensors.values()),
        "by_dtype": dict(by_dtype),
    }
    if inventory is not None:
        result["comparison"] = compare(tensors, inventory, max_listed=max_listed)
    return result


def compare(tensors: dict[str, HeaderTensor], inventory: TensorInventory, *, max_listed: int) -> dict:
    expected = {}
    for entry in inventory.tensors:
        for name, dtype, shape in entry.checkpoint_tensors():
            expected[name] = (dtype, tuple(shape))
    missing = [n for n in expected if n not in tensors]
    extra = [n for n in tensors if n not in expected]
    shape_mismatch, dtype_mismatch = [], []
    for name, (dtype, shape) in expected.items():
        got = tensors.get(name)
        if got is None:
            continue
        if got.shape != shape:
            shape_mismatch.append({"name": name, "expected": list(shape), "found": list(got.shape)})
        if got.dtype != dtype:
            dtype_mismatch.append({"name": name, "expected": dtype, "found": got.dtype})
    return {
        "expected_tensors": len(expected),
        "matched": len(expected) - len(missing),
        "missing_count": len(missing), "missing": missing[:max_listed],
        "extra_count": len(extra), "extra": extra[:max_listed],
        "shape_mismatch_count": len(shape_mismatch), "shape_mismatch": shape_mismatch[:max_listed],
        "dtype_mismatch_count": len(dtype_mismatch), "dtype_mismatch": dtype_mismatch[:max_listed],
        "ok": not (missing or extra or shape_mismatch or dtype_mismatch),
    }
