"""tpu-inference's spelling of the KV-cache dtypes (k3plan dtype -> the spelling ``vllm serve`` takes on a TPU;
None: no such dtype there), which the torch_tpu plugin shares."""

from __future__ import annotations

# tpu-inference (vLLM on TPU) turns the KV-cache dtype string into a JAX dtype (vllm-project/tpu-inference
# tpu_inference/utils.py to_jax_dtype @811f8e20: its fp8 aliases -> float8_e4m3fn, else jnp.dtype(name)), so
# vLLM's CUDA layout fp8_ds_mla is no dtype there; "fp8" is e4m3. The torch_tpu plugin (torchtpu-vllm) takes
# the same two (kowalski-4831/vllm-torchtpu src/vllm_torchtpu/platforms/tpu_block_size_utils.py
# _TPU_CACHE_DTYPE_TO_TORCH_DTYPE @1b4d7d61: "fp8" float8_e4m3fn; its "fp8_ds_mla" is a uint8 row of the padded
# MLA cache, not vLLM's 656 B layout that k3plan's fp8_ds_mla prices)
KV: dict[str, str | None] = {"bf16": "bfloat16", "fp8": "fp8", "fp8_ds_mla": None, "fp32": None}
