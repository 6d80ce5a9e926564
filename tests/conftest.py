"""Shared fixtures: the CLI runner, the bundled K3 config, a scaled-down kimi_linear config and a
safetensors header writer (no dependency on the safetensors package)."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import pytest
from hypothesis import settings
from k3_testing import bundled_raw, tiny_kimi_raw
from typer.testing import CliRunner

from k3plan.cli.app import app

# CI runs the same hypothesis examples every time (a property failure found at random must not make
# one run of .ci/run red and the next green); HYPOTHESIS_PROFILE=explore draws new examples locally.
settings.register_profile("k3plan", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "k3plan"))


ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I32": 4, "I64": 8, "F64": 8}


@pytest.fixture
def no_shipped_records(monkeypatch, tmp_path_factory):
    """The shipped probe records (k3plan/evidence/probes) out of sight: a test of the records machinery that
    writes its own records sees only those (--probes DIR still adds; the default answer reads none)."""
    import k3plan.evidence.value as value

    monkeypatch.setattr(value, "SHIPPED_DIR", tmp_path_factory.mktemp("no-shipped-records"))


@pytest.fixture
def cli():
    """cli(*args) -> click Result (stdout in .stdout, stderr in .stderr)."""
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], *, sparse: bool = True) -> int:
    """Write a safetensors file: 8-byte LE header length, JSON header, a data section of the
    right size (a sparse hole). ``tensors``: name -> (dtype, shape). Returns the data size."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        n = ITEMSIZE[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)
    return offset


@pytest.fixture
def tiny_raw() -> dict:
    return tiny_kimi_raw()


@pytest.fixture
def k3_raw() -> dict:
    return bundled_raw("kimi-k3")


@pytest.fixture
def write_st():
    """write_st(path, {name: (dtype, shape)}) -> data bytes: see write_safetensors."""
    return write_safetensors
