"""vLLM's ROCm padding of block-fp8 linear weights (engines/vllm/rocm_fp8_pad.py): _maybe_pad_fp8_weight in
vllm/model_executor/layers/quantization/utils/fp8_utils.py (PyPI wheels 0.11.0-0.25.0; gone from 0.26.0) stores an
[N, K] fp8 weight whose K bytes are a multiple of 512 as [N, K + 256], VLLM_ROCM_FP8_PADDING (default 1, vllm/envs.py)
and current_platform.is_rocm(); the routed experts are not padded."""

from __future__ import annotations

import json

import pytest

R1 = "vllm serve deepseek-ai/DeepSeek-R1-0528 --max-model-len 8192 --tensor-parallel-size 8"


def _weights(cli, hardware: str, serve: str, release: str) -> int:
    out = cli("fit", "-H", hardware, "-t", "8", "--serve", serve, "--engine-version", release, "--json").stdout
    return int(json.loads(out)["engine"]["weights_bytes"])


def _r1_rows_at_tp8() -> int:
    """The rows a device holds of DeepSeek-R1-0528's block-fp8 linears whose input width is a multiple of 512 at TP 8,
    from its config.json (https://huggingface.co/deepseek-ai/DeepSeek-R1-0528/blob/main/config.json: hidden_size 7168,
    q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128,
    num_attention_heads 128, intermediate_size 18432, moe_intermediate_size 2048, n_shared_experts 1,
    first_k_dense_replace 3, num_hidden_layers 61) as vLLM's DeepseekV2 model shards them
    (vllm/model_executor/models/deepseek_v2.py): q_a / kv_a replicated (input 7168), q_b and kv_b column-parallel
    (inputs 1536 and 512), o_proj row-parallel (16,384 / 8 = 2,048 in), the dense and shared-expert gate_up
    column-parallel (input 7168); the down projections' shares (2,304 and 256) are not multiples of 512."""
    tp, heads, layers, dense = 8, 128, 61, 3
    attn = 1536 + (512 + 64) + heads * (128 + 64) // tp + heads * (128 + 128) // tp + 7168
    return attn * layers + dense * 2 * 18432 // tp + (layers - dense) * 2 * 2048 // tp


def test_r1_on_mi300x_holds_256_bytes_a_padded_row(cli):
    rows = _r1_rows_at_tp8()
    assert rows == 1_046_848
    padded = _weights(cli, "amd-mi300x", R1, "0.18.0")
    plain = _weights(cli, "amd-mi300x", f"VLLM_ROCM_FP8_PADDING=0 {R1}", "0.18.0")
    assert padded - plain == rows * 256


@pytest.mark.parametrize(
    ("hardware", "release", "padded"),
    [
        ("amd-mi300x", "0.11.2", True),
        ("amd-mi300x", "0.25.0", True),  # the last wheel with _maybe_pad_fp8_weight
        ("amd-mi300x", "0.26.0", False),  # gone
        ("nvidia-h200", "0.18.0", False),  # ROCm only
    ],
)
def test_the_padding_follows_the_release_and_the_vendor(cli, hardware, release, padded):
    on = _weights(cli, hardware, R1, release)
    off = _weights(cli, hardware, f"VLLM_ROCM_FP8_PADDING=0 {R1}", release)
    assert (on - off == _r1_rows_at_tp8() * 256) is padded
    assert on >= off
