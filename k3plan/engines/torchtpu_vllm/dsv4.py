"""The torch_tpu vLLM plugin's storage of DeepSeek-V4's cache and where it keeps DeepSeek-V4.1's Engram tables,
each cited (k3plan.engines.dsv4_layout; step/dsv4_cache derives the figures)."""

from __future__ import annotations

from dataclasses import replace

from k3plan.engines.dsv4_layout import EngramPlacement, Source
from k3plan.engines.vllm.dsv4 import LAYOUT as VLLM

# its configs run vLLM's DeepSeek-V4 model code (MODEL_IMPL_TYPE=vllm): vLLM's layout, assumed where its TPU
# backend was not read (the last source says so)
LAYOUT = replace(
    VLLM,
    engine="torchtpu-vllm",
    sources=(
        Source(
            "kowalski-4831/vllm-torchtpu",
            "scripts/vllm/benchmarking/configs/deepseek-v4-flash-dp8-ep.sh",
            "TP=1 x DP=8 with EP, KV_CACHE_DTYPE=fp8 on v7x-8",
            "686f5c11afd5042063b4d31f9b7d31e746644eb9",
        ),
        Source(
            "kowalski-4831/vllm-torchtpu",
            "scripts/vllm/benchmarking/configs/deepseek-v4-pro-dp16-ep.sh",
            "TP=1 x DP=16 with EP on v7x-16, MODEL_IMPL_TYPE=vllm (vLLM's DeepSeek-V4 model code), "
            "KV_CACHE_DTYPE=fp8_e4m3",
            "5e1723dbf012cb9663dd800bb0fc58991eccfa72",
        ),
        Source(
            "kowalski-4831/vllm-torchtpu",
            "tpu_inference/",
            "the TPU attention backend's DeepSeek-V4 cache layout",
            "",
            found=False,
            note="no DeepSeek-V4 attention backend file found in the stored tree; the layout is assumed to be "
            "vLLM's (the configs run vLLM's model code, MODEL_IMPL_TYPE=vllm, with an fp8 KV cache)",
        ),
    ),
    note="assumed vLLM's layout (found: false for the TPU backend's own)",
)

ENGRAM = EngramPlacement(
    placement="host",
    source=Source(
        "kowalski-4831/vllm-torchtpu",
        "tpu_inference/",
        "the plugin's Engram placement",
        "",
        found=False,
        note="no DeepSeek-V4.1 path found for the TPU plugin; assumed vLLM's default (cpu_offload True)",
    ),
    host_copies="replica",
)
