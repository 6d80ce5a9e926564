"""The torch_tpu vLLM plugin's storage of DeepSeek-V4's cache and where it keeps DeepSeek-V4.1's Engram tables,
each cited (k3plan.engines.dsv4_layout; step/dsv4_cache derives the figures)."""

from __future__ import annotations

from dataclasses import replace

from k3plan.engines.dsv4_layout import EngramPlacement, Source
from k3plan.engines.vllm.dsv4 import LAYOUT as VLLM

# its configs run vLLM's DeepSeek-V4 model code (MODEL_IMPL_TYPE=vllm) with the plugin's own caches: the plugin
# subclasses vLLM's attention, indexer, compressor and window cache and gives each its own KV-cache spec (the last
# three sources), which memory (step/dsv4_cache) and speed (step/dsv4_ops) both read through ``sizes``
_PLUGIN = "kowalski-4831/vllm-torchtpu"
_OPS = "src/vllm_torchtpu/layers/adapter/custom_ops/deepseek_v4"
LAYOUT = replace(
    VLLM,
    engine="torchtpu-vllm",
    entry_align=128,
    index_align=128,
    raw_bf16=frozenset({"hca", "window"}),
    block=1024,
    block_source="the plugin's block for DeepseekV4ForCausalLM without --block-size: kowalski-4831/vllm-torchtpu "
    "src/vllm_torchtpu/platforms/tpu_platform.py TpuPlatform.update_block_size_for_backend (is_ds_v4: block_size = "
    "PallasMLAttentionBackend.get_page_size), src/vllm_torchtpu/layers/adapter/attention.py "
    "PallasMLAttentionBackend.get_page_size (returns 1024) @0095cdcb",
    sources=(
        Source(
            _PLUGIN,
            "src/vllm_torchtpu/models/vllm/deepseek_v4/attention.py",
            "VllmDeepseekV4MLAAttention.get_kv_cache_spec (CSA: head_size = get_packed_mla_head_size = align_to(448 + "
            "64 x 2 + 448 // 64, 128) = 640 B, the no-rope record and its rope companion array; HCA: raw bf16 "
            "latents, 512 x 2 = 1,024 B; MLAAttentionSpec(block_size = cache_config.block_size, alignment=None))",
            "0095cdcbda2a44e2b3cd5975d2954765e2e95629",
        ),
        Source(
            _PLUGIN,
            f"{_OPS}/deepseek_v4_attention_op.py",
            "VllmDeepseekV4SWACache.get_kv_cache_spec (SlidingWindowMLASpec head_size=1024: the window's entries raw "
            "bf16; block = cache block // 4 // 2, overlaying CSA's no-rope array) and get_packed_mla_head_size",
            "080c3762d736344dc1ad7d91ecfd796d4c7c9118",
        ),
        Source(
            _PLUGIN,
            f"{_OPS}/deepseek_v4_indexer.py",
            "VllmDeepseekV4IndexerCache.get_kv_cache_spec (head_size = align_to(128 + 1, 128) = 256 B a key, "
            "alignment=None); deepseek_v4_compressor.py VllmCompressorStateCache.get_kv_cache_spec (f32 state rows, "
            "align_to(state_dim x 4, 128): vLLM's rings)",
            "0095cdcbda2a44e2b3cd5975d2954765e2e95629",
        ),
        Source(
            _PLUGIN,
            f"{_OPS}/deepseek_v4_compressor.py",
            "VllmCompressorStateCache._derive_block_size (the states overlay their hosts' pages: 'the physical "
            "overlay onto that host is done by the runner'), the pool's charge of the window and state pages",
            "0095cdcbda2a44e2b3cd5975d2954765e2e95629",
            found=False,
            note="read, not modelled: the plugin overlays the window and compressor-state pages on the CSA arrays "
            "(the runner's physical overlay, not read), so k3plan charges a request the records' bytes a token and "
            "its fixed state, not the plugin's page groups",
        ),
    ),
    note="the plugin's own records (640 B CSA entries, raw bf16 HCA and window entries, 256 B indexer keys, pages "
    "unaligned), in 1,024-token blocks; its pool is charged the records' bytes a token (the last source)",
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
