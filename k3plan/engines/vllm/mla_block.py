"""The KV block vLLM runs a dense-MLA model at (DeepSeek-V3 / R1, Kimi-K2: every layer one MLA spec, no linear
attention, no DeepSeek-V4 / V3.2 sparse attention), by release and GPU family, where the command gives no
--block-size: the block of the decode kernel the release picks by default. The budget's page and the engine's pool
read it in one place (step/cache.py cache_inputs, through Stack.engine_block, set by fit from a serve command).

Read in the wheels (PyPI):

- 0.11.0-0.14.x (vllm/platforms/cuda.py CudaPlatform.check_and_update_config; 0.11.0, 0.11.2, 0.13.0, 0.14.0,
  0.14.1): on the SM100 family CUTLASS MLA by default ('Blackwell => Force CutlassMLA'), whose block is forced to 128
  ('Forcing kv cache block size to 128 for CUTLASS_MLA backend'); elsewhere FlashMLA, forced to 64. Under
  ``VLLM_ATTENTION_BACKEND=FLASHINFER_MLA`` the block is 64 (32 or a multiple of 64 kept), under ``FLASHMLA`` 64.
- 0.15.0-0.17.x (the same function; 0.15.0, 0.15.1, 0.16.0, 0.17.0, 0.17.1): on the SM100 family FlashInfer MLA by
  default where qk_nope_head_dim is 128 (DeepSeek-V3, Kimi-K2: 'Blackwell => Force FlashInfer MLA'), forced to 64;
  elsewhere FlashMLA, 64.
- from 0.18.0 (0.18.0, 0.20.0, 0.26.0, 0.28.0, 0.33.0, 0.34.0): no block is forced; Platform.
  update_block_size_for_backend asks the first attention layer's backend for its preferred block
  (AttentionBackend.get_preferred_block_size(CacheConfig.DEFAULT_BLOCK_SIZE 16): 16 where supported, else the
  backend's smallest). The backend is the first valid one of _get_backend_priorities: on the SM100 family
  FLASHINFER_MLA (get_supported_kernel_block_sizes [32, 64], kv dtypes auto / bf16 / fp16 / fp8): 32; on SM90
  FLASH_ATTN_MLA (MultipleOf(16), kv dtypes auto / bf16 / fp16 only): 16, and with an fp8 cache FLASHMLA ([64]): 64.
  A vLLM 0.18.0 start of DeepSeek-R1-0528 on 8 x B200 logs 1,219,424 tokens, 38,107 blocks of 32
  (tests/engines/cases/vllm-kamra-r1-0528-b200-tp8-8k.yaml); its H200 starts of 0.18.0 / 0.19.0 653,808 (a multiple
  of 16, not of 32) and of 0.11.0-0.16.0 multiples of 64.

Not read: 0.19.x, 0.21.0-0.25.x, 0.27.0, 0.29.0-0.32.x (the same code on both sides of each gap); a release before
0.11.0; --attention-backend / --attention-config.backend (and VLLM_ATTENTION_BACKEND values other than the two above),
left at k3plan's stack page (paging align_tokens).
"""

from __future__ import annotations

from k3plan.engines.release import Release
from k3plan.engines.vllm.attention_config import SM100_FAMILY

SM90 = frozenset({"nvidia-h100-sxm", "nvidia-h200", "nvidia-h20"})
READ_FROM: Release = (0, 11, 0)
FLASHINFER_DEFAULT_FROM: Release = (0, 15, 0)  # SM100: FlashInfer MLA forced to 64 instead of CUTLASS MLA's 128
PREFERRED_FROM: Release = (0, 18, 0)  # no block forced: the backend's preferred (update_block_size_for_backend)
ENV = "VLLM_ATTENTION_BACKEND"
ENV_GONE_FROM: Release = (0, 15, 0)  # engines/vllm/backend_env.py ATTENTION_GONE_FROM
FORCED_SOURCE = (
    "vllm {v} wheel (PyPI), vllm/platforms/cuda.py CudaPlatform.check_and_update_config ('Forcing kv cache block "
    "size to {b} for {k} backend')"
)
PREFERRED_SOURCE = (
    "vllm {v} wheel (PyPI), vllm/platforms/interface.py Platform.update_block_size_for_backend "
    "(AttentionBackend.get_preferred_block_size(16)), vllm/platforms/cuda.py _get_backend_priorities ({k} first "
    "valid), v1/attention/backends/mla/{f} get_supported_kernel_block_sizes"
)


def _at(release: Release) -> str:
    return ".".join(str(p) for p in release)


def dense_mla_block(
    release: Release, hardware: str, *, fp8_kv: bool, env: dict[str, str] | None = None
) -> tuple[int, str] | None:
    """(tokens, source) of the block vLLM ``release`` runs a dense-MLA model at on ``hardware`` without --block-size
    (module docstring); None where it was not read (the stack's page holds)."""
    sm100 = hardware in SM100_FAMILY
    if release < READ_FROM or not (sm100 or hardware in SM90):
        return None
    at = _at(release)
    if release < PREFERRED_FROM:
        chosen = (env or {}).get(ENV) if release < ENV_GONE_FROM else None
        if chosen is None:
            kernel = (
                "CUTLASS_MLA"
                if sm100 and release < FLASHINFER_DEFAULT_FROM
                else "FlashInferMLA"
                if sm100
                else "FlashMLA"
            )
        elif chosen in ("FLASHINFER_MLA", "FLASHMLA", "CUTLASS_MLA"):
            kernel = {"FLASHINFER_MLA": "FlashInferMLA", "FLASHMLA": "FlashMLA", "CUTLASS_MLA": "CUTLASS_MLA"}[chosen]
        else:
            return None
        block = 128 if kernel == "CUTLASS_MLA" else 64
        return block, FORCED_SOURCE.format(v=at, b=block, k=kernel)
    if sm100:
        return 32, PREFERRED_SOURCE.format(v=at, k="FLASHINFER_MLA", f="flashinfer_mla.py ([32, 64])")
    if fp8_kv:  # FLASH_ATTN_MLA takes no fp8 cache: FLASHMLA's [64]
        return 64, PREFERRED_SOURCE.format(
            v=at, k="FLASHMLA (FLASH_ATTN_MLA takes no fp8 cache)", f="flashmla.py ([64])"
        )
    return 16, PREFERRED_SOURCE.format(v=at, k="FLASH_ATTN_MLA", f="flashattn_mla.py (MultipleOf(16))")
