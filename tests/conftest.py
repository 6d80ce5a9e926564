"""Shared fixtures: the CLI runner, the bundled K3 config, a scaled-down kimi_linear config and a
safetensors header writer (no dependency on the safetensors package)."""

from __future__ import annotations

import copy
import json
import math
import os
import struct
from pathlib import Path

import pytest
from hypothesis import settings
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.models.loader import BUNDLED_DIR

# CI runs the same hypothesis examples every time (a property failure found at random must not make
# one run of .ci/run red and the next green); HYPOTHESIS_PROFILE=explore draws new examples locally.
settings.register_profile("k3plan", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "k3plan"))

ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "I32": 4, "I64": 8, "F64": 8}


@pytest.fixture
def cli():
    """cli(*args) -> click Result (stdout in .stdout, stderr in .stderr)."""
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def one_error_line(result) -> str:
    """Bad input: exit 2, no traceback, exactly one line on stderr starting with 'error:'."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:")
    return lines[0]


def bundled_raw(name: str) -> dict:
    return json.loads((BUNDLED_DIR / name / "config.json").read_text())


def tiny_kimi_raw() -> dict:
    """K3's config shrunk to 4 layers (KDA, KDA, KDA, MLA), 8 experts: every K3 feature, tiny dims."""
    raw = copy.deepcopy(bundled_raw("kimi-k3"))
    raw.pop("vision_config")
    t = raw["text_config"]
    t.update(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
             num_experts=8, num_experts_per_token=2, routed_expert_hidden_size=128,
             moe_intermediate_size=64, intermediate_size=512, vocab_size=1024, q_lora_rank=64,
             kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32)
    t["linear_attn_config"].update(kda_layers=[1, 2, 3], full_attn_layers=[4], num_heads=4, head_dim=32)
    return raw


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
