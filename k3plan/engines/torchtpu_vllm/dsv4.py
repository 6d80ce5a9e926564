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
            "src/vllm_torchtpu/models/vllm/deepseek_v4/attention.py",
            "VllmDeepseekV4MLAAttention.get_kv_cache_spec (CSA: get_packed_mla_head_size = align_to(448 + 128 + 7, "
            "128) = 640 B; HCA: raw bf16 latents, 1,024 B; block_size = cache_config.block_size, alignment None)",
            "0095cdcbda2a44e2b3cd5975d2954765e2e95629",
            found=False,
            note="read, not modelled: the plugin's own layout differs from vLLM's, which k3plan prices here. Its "
            "entries are 640 B (CSA) and 1,024 B (HCA), its window entries raw bf16 1,024 B (deepseek_v4_attention_op"
            ".py VllmDeepseekV4SWACache @080c3762), its indexer keys 256 B (deepseek_v4_indexer.py "
            "VllmDeepseekV4IndexerCache @0095cdcb), pages unaligned, and its platform sets a 1,024-token block "
            "for DeepseekV4ForCausalLM (platforms/tpu_platform.py update_block_size_for_backend): 4,864 B a token of "
            "V4-Flash against vLLM's 3,850.25; how its pool charges the windows was not settled",
        ),
    ),
    note="assumed vLLM's layout; the plugin's own was read and differs (its third source), not yet modelled",
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
