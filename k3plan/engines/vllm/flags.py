"""The ``vllm serve`` flags k3plan writes, each with the engine code that defines it, and vLLM's spelling of
the KV-cache dtypes (k3plan dtype -> vLLM's; None: it has none)."""

from __future__ import annotations

SOURCE = ("vllm-project/vllm", "vllm/engine/arg_utils.py", "EngineArgs")
FLAGS: dict[str, tuple[str, str, str]] = {
    f: SOURCE
    for f in (
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--enable-expert-parallel",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--kv-cache-dtype",
        "--gpu-memory-utilization",
        "--enable-chunked-prefill",
        "--trust-remote-code",
        "--distributed-executor-backend",
        "--additional-config",
    )
}
KV: dict[str, str | None] = {"bf16": "bfloat16", "fp8": "fp8", "fp8_ds_mla": "fp8_ds_mla", "fp32": None}  # CacheDType
