"""The flags of SGLang's launch_server k3plan writes, each with the engine code that defines it, SGLang's
spelling of the KV-cache dtypes, its all-to-all backend flag and its prefill chunk by GPU memory."""

from __future__ import annotations

SOURCE = ("sgl-project/sglang", "python/sglang/srt/server_args.py", "ServerArgs")
FLAGS: dict[str, tuple[str, str, str]] = {
    f: SOURCE
    for f in (
        "--model-path",
        "--tp-size",
        "--dp-size",
        "--ep-size",
        "--pp-size",
        "--enable-dp-attention",
        "--context-length",
        "--chunked-prefill-size",
        "--kv-cache-dtype",
        "--mem-fraction-static",
        "--max-running-requests",
        "--max-mamba-cache-size",
        "--trust-remote-code",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--moe-a2a-backend",
        "--language-model-only",
        "--enable-dp-lm-head",
    )
}
KV: dict[str, str | None] = {
    "bf16": "bf16",
    "fp8": "fp8_e4m3",
    "fp8_ds_mla": None,
    "fp32": None,
}  # kv_cache_dtype choices
# SGLang's moe_a2a_backend defaults to "none" (the all-reduce MoE; sgl-project/sglang
# python/sglang/srt/server_args.py ServerArgs.moe_a2a_backend): an all-to-all stack writes "deepep"; a command or a
# published run that sets no backend runs SGLANG_A2A_DEFAULT
SGLANG_A2A = ("--moe-a2a-backend", "deepep")
SGLANG_A2A_DEFAULT = "none"

# SGLang's --chunked-prefill-size (its token budget a prefill batch) when unset: by the GPU's memory
# (sgl-project/sglang python/sglang/srt/server_args.py ServerArgs, the chunked-prefill default: 2,048 below 35 GB,
# 8,192 below 160 GB -- "H100, H200, A100, H20" -- else 16,384, "B200, MI300")
SGLANG_CHUNK_SOURCE = "SGLang's --chunked-prefill-size default by GPU memory (server_args.py ServerArgs)"


def sglang_default_chunk(hbm_bytes_per_device: int) -> int:
    mib = hbm_bytes_per_device / 2**20
    return 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384
