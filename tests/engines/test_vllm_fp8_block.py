"""vLLM's block-fp8 TP check (engines/vllm/fp8_block.py): a row-parallel layer's share must be whole 128-blocks, read
in the 0.31.0 wheel's fp8_utils.validate_fp8_block_shape; DeepSeek-V4's shared expert is padded instead on NVIDIA
from 0.24.0 (vllm-project/vllm#46001: present in the 0.24.0 wheel, absent from 0.23.0's)."""

from __future__ import annotations

import json

import pytest

V4_TP16 = (
    "vllm serve deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --kv-cache-dtype fp8 --block-size 256 "
    "--enable-expert-parallel --tensor-parallel-size 16 --max-model-len 800000 --gpu-memory-utilization 0.95"
)


def _engine(cli, hardware: str, topology: str, serve: str, *extra: str) -> dict:
    return json.loads(cli("fit", "-H", hardware, "-t", topology, "--serve", serve, *extra, "--json").stdout)["engine"]


@pytest.mark.parametrize(
    ("hardware", "release", "starts"),
    [
        ("nvidia-h100-sxm", "0.20.0", False),  # vllm-project/vllm#42384 (tests/engines/cases/vllm-42384-*)
        ("nvidia-h100-sxm", "0.23.0", False),
        ("nvidia-h100-sxm", "0.24.0", True),  # #46001 pads the shared expert: 3,072 -> 4,096 over 16 ranks
        ("nvidia-h100-sxm", None, True),  # the code read (0.31.0) pads
        ("amd-mi300x", None, False),  # the ROCm model file builds the shared expert without the padding
    ],
)
def test_deepseek_v4_pro_at_tp16_follows_the_release_and_the_vendor(cli, hardware, release, starts):
    extra = () if release is None else ("--engine-version", release)
    eng = _engine(cli, hardware, "2x8", V4_TP16, *extra)
    assert eng["starts"] is starts
    if not starts:
        assert (
            "Weight input_size_per_partition = 192 is not divisible by weight quantization block_k = 128"
            in (eng["message"])
        )
        assert "validate_fp8_block_shape" in eng["raised_at"]


def test_any_block_fp8_model_whose_row_share_is_not_whole_blocks_is_refused(cli):
    # DeepSeek-R1's dense layers (intermediate 18,432): 1,152 a rank at TP 16 (9 blocks), 576 at TP 32
    assert _engine(cli, "nvidia-h200", "2x8", "vllm serve deepseek-ai/DeepSeek-R1 -tp 16")["starts"]
    tp32 = _engine(cli, "nvidia-b200", "4x8", "vllm serve deepseek-ai/DeepSeek-R1 -tp 32")
    assert not tp32["starts"] and "input_size_per_partition = 576" in tp32["message"]
