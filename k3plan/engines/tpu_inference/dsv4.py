"""tpu-inference's storage of DeepSeek-V4's cache (k3plan.engines.dsv4_layout; step/dsv4_cache derives the figures):
its experimental V4 model registers TPU cache specs of its own, whose records are the torch_tpu plugin's (640 B CSA
entries, raw bf16 HCA and window entries, 256 B indexer keys, 1,024-token blocks), each cited here at the commit
read. Its Engram placement is the plugin's (no DeepSeek-V4.1 path in either)."""

from __future__ import annotations

from dataclasses import replace

from k3plan.engines.dsv4_layout import Source
from k3plan.engines.torchtpu_vllm.dsv4 import ENGRAM as ENGRAM
from k3plan.engines.torchtpu_vllm.dsv4 import LAYOUT as PLUGIN

_REPO = "vllm-project/tpu-inference"
_OPS = "tpu_inference/layers/vllm/custom_ops/experimental/deepseek_v4"

LAYOUT = replace(
    PLUGIN,
    engine="tpu-inference",
    block_source="tpu-inference's block for an MLA model without --block-size: vllm-project/tpu-inference "
    "tpu_inference/platforms/tpu_platform.py (model_config.use_mla: block_size = "
    "PallasMLAttentionBackend.get_page_size) @ee1e17a1, flash_attn_mla.py PallasMLAttentionBackend.get_page_size "
    "(returns 1024); that DeepSeek-V4 counts as MLA is inferred (vLLM's allowlist not read)",
    sources=(
        Source(
            _REPO,
            f"{_OPS}/deepseek_v4_attention.py",
            "VllmDeepseekV4MLAAttention.get_kv_cache_spec (CSA: head_size = align_to(448 + 64 x 2 + 7, 128) = 640 B, "
            "no-rope record and a rope companion array; HCA: raw bf16, 512 x 2 = 1,024 B) and VllmDeepseekV4SWACache "
            "(1,024 B raw bf16 window entries, 128-token pages overlaying CSA's no-rope arrays)",
            "192c2f7ccf1ba9e9cf87f9a0b2e32d1d3d13d18d",
        ),
        Source(
            _REPO,
            f"{_OPS}/deepseek_v4_indexer.py",
            "VllmDeepseekV4IndexerCache.get_kv_cache_spec (head_size = align_to(128 + 1, 128) = 256 B a key); "
            "deepseek_v4_compressor.py VllmCompressorStateCache (f32 state rows, state_dim = 2 x coff x head_dim)",
            "ad01adfa489d27ee52e9ac8ea88b262254e83b1b",
        ),
        Source(
            _REPO,
            "tpu_inference/runner/kv_cache_manager.py",
            "KVCacheManager._initialize_ds_v4_kv_cache (the overlay plan: window pages on the CSA no-rope arrays, "
            "compressor states on their hosts' arrays), the pool's charge of those pages",
            "e25c90b113d7b408cce9fa3694b83a8fce51e7aa",
            found=False,
            note="read, not modelled: the engine overlays the window and compressor-state pages on the CSA and "
            "indexer arrays, so k3plan charges a request the records' bytes a token and its fixed state, not the "
            "engine's page groups",
        ),
    ),
    note="tpu-inference's experimental V4 records (the torch_tpu plugin's: 640 / 1,024 / 1,024 / 256 B), in "
    "1,024-token blocks; its pool is charged the records' bytes a token (the last source)",
)
