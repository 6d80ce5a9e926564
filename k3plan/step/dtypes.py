"""Bytes per value of runtime dtypes (cache, state, activations)."""

from __future__ import annotations

BYTES = {"bf16": 2, "f32": 4, "fp32": 4, "fp8": 1}

# vLLM's fp8_ds_mla layout: 512 fp8 latent values + 4 fp32 scales + 64 bf16 rope values.
FP8_DS_MLA_BYTES_PER_TOKEN_LAYER = 512 * 1 + 4 * 4 + 64 * 2  # = 656 (docs/k3-facts.md §3)
