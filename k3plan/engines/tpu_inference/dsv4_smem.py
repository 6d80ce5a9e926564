"""tpu-inference's DeepSeek-V4 compressor kernel and the TPU's scalar memory (SMEM): compress_norm_rope_store
scalar-prefetches a DP rank's whole state-cache block table (int32, max_num_seqs rows of cdiv(max_model_len,
state block) pages) into SMEM, which Mosaic caps at 1 MiB a core; a table over it stops the start when the step is
compiled ("RESOURCE_EXHAUSTED: Allocation (size=1179648) would exceed memory (size=1048576) ('prefetched SMEM operand
0')", the #3310 nightly).

Read at vllm-project/tpu-inference@b8692ff0 (main 2026-08-22) and v0.27.0 (e1c03382, the same files but for an
optimization barrier and the weight's transpose at load), both after #3319 (55054439, 2026-08-03), which hosts HCA's
compressor state on CSA's no-rope pages:
- kernels/experimental/deepseek_v4/compress_and_store/kernel.py compress_norm_rope_store: ``scalar_prefetch =
  (block_table, positions, token_to_req_indices, kv_slot_mapping, ...)``, the block table first (operand 0), flattened
  [num_reqs x block_table_stride] int32;
- layers/vllm/custom_ops/experimental/deepseek_v4/deepseek_v4_compressor.py VllmDeepseekCompressor.forward: the state
  block tables P(ATTN_DATA) into a shard_map, so each DP rank's kernel gets its rows (max_num_reqs / dp);
  VllmCompressorStateCache.__init__: the state cache's block = config.Configs(...).state_block_size at
  kv_cache_block_size = cache_config.block_size;
- compress_and_store/config.py: physical_page_size (CSA: block / 4 rows of 512 B; indexer: block / 16 rows of 1,024
  B), state_host_page_size (HCA: CSA's page), state_rows_per_token = 2 fields x state_width x 4 B / row bytes
  (state_width = head_dim x 2 where windows overlap: CSA 512 x 2, HCA 512, indexer 128 x 2), state_block_size = host
  page rows // state_rows_per_token: CSA block / 64, HCA block / 32, indexer block / 32;
- runner/tpu_runner.py TPUModelRunner._init_inputs: max_num_reqs = max(dp_size x max_num_seqs, MIN_NUM_SEQS = 8);
  runner/block_table.py MultiGroupBlockTable: a group's width max(cdiv(max_model_len, block), 1 + speculative tokens);
- the block: platforms/tpu_platform.py check_and_update_config, PallasMLAttentionBackend.get_page_size = 1,024
  (layers/vllm/backends/flash_attn_mla.py), DeepSeek-V4's --block-size refused by this reader (serve.py).
Between #3310 (8ead48e6, 2026-07-31) and #3319 HCA's state sat on its own compressed-KV page, (block / 128) x 2 rows
(config.py physical_page_size @8ead48e6), a 2-token state block: 64 x 4,608 x 4 = 1,179,648 B, the engine's figure
(786e8753's message); no release holds those commits (v0.26.0, 2026-07-30, predates #3310; v0.27.0 holds #3319): fit
--engine-version names them as main commits (commits.py), this layout from #3310 (``HCA_OWN_PAGE``) to #3319
(``CSA_PAGE``). Before #3310 (v0.26.0 and before) the compressor is another kernel (kernels/experimental/deepseek_v4/
compressor.py, removed by #3310), not read: no check there.

The SMEM capacity: jax's jax/_src/pallas/mosaic/tpu_info.py (jax 0.10.2) ChipVersion.TPU_7 / TPU_7X, TPU_V6E, TPU_V5E,
TPU_V5P: smem_capacity_bytes = 1024 * 1024 ("1 MiB per core"), the engine's logged size=1048576. The table alone is
compared (the operand the engine names); the kernel's other prefetched arrays (a rank's token positions, request
indices, slot mapping) add to it, so a table just under 1 MiB may still fail: not priced. The kernel itself, compiled
deviceless for tpu7x (reports/compile/tpu-inference-dsv4-smem/records.json, benchmarks/
tpu_inference_dsv4_smem_compile.py): 8ead48e6's HCA 64 x 4,608 table fails with the engine's error, b8692ff0's CSA 64 x
576 compiles, 64 x 4,064 (1,040,384 B) compiles and 64 x 4,095 fails by 4.1K at 64 tokens (that unpriced margin).
"""

from __future__ import annotations

from k3plan.engines.release import EngineCommit
from k3plan.engines.tpu_inference.commits import Gate, holds
from k3plan.units import MiB

# jax/_src/pallas/mosaic/tpu_info.py (jax 0.10.2): smem_capacity_bytes, 1 MiB per core on v4 to 7x
SMEM_BYTES = MiB
SMEM_SOURCE = (
    "jax/_src/pallas/mosaic/tpu_info.py (jax 0.10.2) ChipVersion.TPU_7X smem_capacity_bytes = 1024 * 1024 "
    "('1 MiB per core'), the size=1048576 of the engine's error"
)
# the first release whose compressor kernel is read (the layout of #3319, 55054439, through b8692ff0)
READ_FROM = (0, 27, 0)
# on main: compress_norm_rope_store from #3310 (8ead48e6), HCA's state on its own page until #3319 (55054439)
HCA_OWN_PAGE = Gate(READ_FROM, "8ead48e6")
CSA_PAGE = Gate(READ_FROM, "55054439")
# the fix on branch cuiq-fix-dsv4-smem (786e8753, "[DSv4] Prefetch per-token window pages instead of the full block
# table"): the kernel prefetches a [num_tokens, pages_to_buffer_per_token] array, which scales with the scheduled
# tokens, not the table; not priced, so no check at a commit that holds it
PER_TOKEN_PAGES = Gate(None, "786e8753")
MIN_NUM_SEQS = 8  # runner/tpu_runner.py MIN_NUM_SEQS
INT32 = 4
# config.py (b8692ff0): a compressor's f32 state rows a token and its host page's rows a block, per mode, as
# (state rows a token, host page rows per kv block token divisor): CSA 16 rows of block / 4; HCA 8 rows of CSA's
# block / 4 (state_host_page_size); indexer 2 rows of block / 16
_MODES = {"csa": (16, 4), "hca": (8, 4), "indexer": (2, 16)}
# config.py @8ead48e6 (#3310, before #3319): HCA's state on its own page, (block / 128) x 2 rows
_HCA_OWN_PAGE_DIVISOR = 64
AT = (
    "vllm-project/tpu-inference@b8692ff0 (v0.27.0 alike) tpu_inference/kernels/experimental/deepseek_v4/"
    "compress_and_store/kernel.py compress_norm_rope_store (scalar_prefetch = (block_table, ...)), called from "
    "compressor_v1.py compressor_forward (layers/vllm/custom_ops/experimental/deepseek_v4/deepseek_v4_compressor.py "
    "VllmDeepseekCompressor.forward), compiled by the precompile after the KV cache"
)

AT_HCA_OWN_PAGE = (
    "vllm-project/tpu-inference@8ead48e6 (#3310, main before #3319) tpu_inference/kernels/experimental/deepseek_v4/"
    "compress_and_store/kernel.py compress_norm_rope_store (scalar_prefetch = (block_table, ...)) and config.py "
    "physical_page_size (HCA's state on its own (block / 128) x 2-row page), compiled by the precompile after the KV "
    "cache"
)


def state_blocks(block: int, *, hca_own_page: bool = False) -> dict[str, int]:
    """Each compressor's state-cache block (tokens a page) at kv_cache_block_size ``block``: config.py
    state_block_size; ``hca_own_page``: HCA's state on its own compressed-KV page, as from #3310 to #3319."""
    out = {mode: block // divisor // rows for mode, (rows, divisor) in _MODES.items()}
    if hca_own_page:
        out["hca"] = block // _HCA_OWN_PAGE_DIVISOR // _MODES["hca"][0]
    return out


def table_bytes(*, max_model_len: int, max_num_seqs: int, dp: int, state_block: int, spec_tokens: int = 0) -> int:
    """A DP rank's state block table as the kernel prefetches it: max_num_reqs / dp rows (max_num_reqs = max(dp x
    max_num_seqs, 8)) of max(cdiv(max_model_len, state_block), 1 + spec_tokens) int32 pages."""
    rows = max(dp * max_num_seqs, MIN_NUM_SEQS) // dp
    pages = max(-(-max_model_len // state_block), 1 + spec_tokens)
    return rows * pages * INT32


def smem_refusal(
    *,
    release: tuple[int, int, int] | None,
    commit: EngineCommit | None = None,
    max_model_len: int,
    max_num_seqs: int,
    dp: int,
    block: int,
    options: dict[str, str],
) -> tuple[str, str] | None:
    """(the engine's error, where it is raised) where DeepSeek-V4's largest compressor state block table overflows
    SMEM at the code read (``READ_FROM`` on, or no release given: main b8692ff0; a main ``commit`` from #3310, HCA's
    own page before #3319); None where it fits, where the release's compressor was not read, or where
    SKIP_JAX_PRECOMPILE=1 compiles no step at start (the first batch then fails instead)."""
    if holds(HCA_OWN_PAGE, release, commit) is False or holds(PER_TOKEN_PAGES, release, commit):
        return None
    if options.get("skip_jax_precompile") == "1":
        return None
    blocks = state_blocks(block, hca_own_page=holds(CSA_PAGE, release, commit) is False)
    mode = min(blocks, key=lambda m: blocks[m])
    size = table_bytes(max_model_len=max_model_len, max_num_seqs=max_num_seqs, dp=dp, state_block=blocks[mode])
    if size <= SMEM_BYTES:
        return None
    rows = max(dp * max_num_seqs, MIN_NUM_SEQS) // dp
    pages = size // INT32 // rows
    message = (
        f"RESOURCE_EXHAUSTED: Allocation (size={size}) would exceed memory (size={SMEM_BYTES}) ('prefetched SMEM "
        f"operand 0'): the {mode.upper() if mode != 'indexer' else 'indexer'} compressor's state block table, "
        f"{rows:,} sequences a DP rank x {pages:,} pages of {blocks[mode]} tokens (--max-model-len {max_model_len:,}, "
        f"{block:,}-token KV block) in int32, over the 1 MiB of SMEM ({SMEM_SOURCE})"
    )
    return message, AT if holds(CSA_PAGE, release, commit) is not False else AT_HCA_OWN_PAGE
