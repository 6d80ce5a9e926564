"""What vLLM's profile run holds for DeepSeek-V4's sparse attention on CUDA beyond a layer's activations (issue 47
item 2): the shared workspace the indexer and the FlashMLA prefill reserve in the dummy run, sized by max_model_len,
and the indexer's logits buffer. Read at vLLM upstream commit e18fe932 (vllm-project/vllm#45061, 2026-06-15, carried
in the yhfgyyf/vllm-deepseek-v4-sm89 fork's history):

- the indexer (vllm/models/deepseek_v4/attention.py DeepseekV4Indexer.max_total_seq_len =
  get_max_prefill_buffer_size(vllm_config) // compress_ratio, vllm/v1/attention/backends/mla/indexer.py
  get_max_prefill_buffer_size = 40 x max_model_len) reserves, when the forward has no metadata (the profile run),
  ``(T, index_head_dim)`` fp8 keys + ``(T, 4)`` scales + RADIX_TOPK_WORKSPACE_SIZE (1 MiB) in one request, and then
  allocates VLLM_SPARSE_INDEXER_MAX_LOGITS_MB (512 MiB) of logits, freed at once
  (vllm/model_executor/layers/sparse_attn_indexer.py sparse_attn_indexer, 'Reserve workspace for indexer during
  profiling run');
- the FlashMLA attention (vllm/models/deepseek_v4/nvidia/flashmla.py forward_mqa, 'Warmup dummy run') reserves
  ``(PREFILL_CHUNK_SIZE 4, cdiv(max_model_len, ratio) + window + max_num_batched_tokens, head_dim)`` bf16;
- both go through one WorkspaceManager buffer (vllm/v1/worker/workspace.py get_simultaneous: each request's views
  rounded up to 256 B, the buffer grown to the largest request, never shrunk), so it holds the larger request.

The buffer stays allocated through the profile, so it is in the torch peak increase vLLM subtracts
(gpu_worker.py Worker.determine_available_memory); the logits buffer adds to the peak only where it exceeds the
layer's other temporaries. ROCm's V4 attention (vllm/models/deepseek_v4/amd/rocm.py) reserves its own shapes, not
read here.
"""

from __future__ import annotations

from k3plan.models.spec import DSV4Dims
from k3plan.units import GiB

WORKSPACE_SOURCE = (
    "vllm-project/vllm@e18fe932 vllm/models/deepseek_v4/attention.py DeepseekV4Indexer.max_total_seq_len, "
    "vllm/v1/attention/backends/mla/indexer.py get_max_prefill_buffer_size (40 x max_model_len), "
    "vllm/model_executor/layers/sparse_attn_indexer.py sparse_attn_indexer (profile-run reservation, 512 MiB logits), "
    "vllm/models/deepseek_v4/nvidia/flashmla.py forward_mqa (dummy-run reservation), vllm/v1/worker/workspace.py "
    "WorkspaceManager.get_simultaneous (one buffer, the largest request): read in yhfgyyf/vllm-deepseek-v4-sm89's history"
)
PREFILL_BUFFER_FACTOR = 40  # get_max_prefill_buffer_size: max_model_len x 40
# From 0.32.0 the indexer's prefill buffer is max_model_len x (576 x 2 // 132 = 8) x AttentionConfig.
# sparse_mla_prefill_workspace_factor, which VllmConfig resolves once to 5 up to 256K tokens and 2 above ('Lower
# values return memory to the KV cache at long max_model_len'): 40 x max_model_len up to 262,144 tokens, 16 x above
# (vllm 0.32.0 wheel (PyPI), vllm/v1/attention/backends/mla/indexer.py get_max_prefill_buffer_size and
# vllm/config/vllm.py VllmConfig.__post_init__; the same in the 0.33.0 and 0.34.0 wheels; 0.31.0's is 40 flat)
# Not priced: from 0.32.0 the indexer's dummy run also reserves the TP row-sharded top-k exchange's transient, 2 x
# topk_indices_buffer ([max_num_batched_tokens, index_topk] int32: 2 x 8,192 x 512 x 4 B = 32 MiB) beside the 512 MiB
# logits, on CUDA at TP > 1 without DCP / PCP and with a mixed CUDA-graph mode other than FULL (the 0.32.0 wheel's
# model_executor/layers/sparse_attn_indexer.py _reserve_row_shard_exchange_transient, v1/attention/backends/mla/
# indexer.py tp_prefill_row_sharding_supported; the same in 0.33.0)
WORKSPACE_FACTOR_FROM = (0, 32, 0)
ENTRIES_PER_FACTOR = 576 * 2 // 132  # get_max_prefill_buffer_size's fp8 keys a FlashMLA sparse workspace row: 8
LONG_CONTEXT = 256 * 1024  # above it the factor resolves to 2, else 5
WORKSPACE_FACTOR_SOURCE = (
    "vllm 0.32.0 wheel (PyPI) vllm/v1/attention/backends/mla/indexer.py get_max_prefill_buffer_size (max_model_len x "
    "8 x sparse_mla_prefill_workspace_factor) and vllm/config/vllm.py VllmConfig.__post_init__ (the factor 5 up to "
    "256K tokens, else 2)"
)


def prefill_buffer_factor(max_model_len: int, release: tuple[int, int, int] | None) -> int:
    """The indexer's prefill K buffer in multiples of max_model_len: 40 before 0.32.0 (or with no release named:
    the code read at e18fe932), from 0.32.0 8 x the workspace factor vLLM resolves (``WORKSPACE_FACTOR_SOURCE``)."""
    if release is None or release < WORKSPACE_FACTOR_FROM:
        return PREFILL_BUFFER_FACTOR
    return ENTRIES_PER_FACTOR * (5 if max_model_len <= LONG_CONTEXT else 2)


PREFILL_CHUNK_SIZE = 4  # DeepseekV4Attention.PREFILL_CHUNK_SIZE
RADIX_TOPK_WORKSPACE = 1024 * 1024  # sparse_attn_indexer.RADIX_TOPK_WORKSPACE_SIZE
LOGITS_BYTES = 512 * 1024 * 1024  # envs.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB default 512
FP8_SCALE_BYTES = 4  # the (T, 4) uint8 scale view of the fp8 key gather
ALIGN = 256  # get_simultaneous rounds each view up to 256 B
BF16 = 2


def _up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _indexer_gather(t: int, values: int, scales: int) -> int:
    """The sparse indexer's profile-run request (sparse_attn_indexer: _gather_workspace_shapes, the RADIX top-k
    workspace): ``t`` keys of ``values`` + ``scales`` bytes, each view rounded to 256 B."""
    return _up(t * values) + _up(t * scales) + _up(RADIX_TOPK_WORKSPACE)


def dsv4_profile_workspace(
    d: DSV4Dims, *, max_model_len: int, max_num_batched_tokens: int, release: tuple[int, int, int] | None = None
) -> tuple[int, int, str]:
    """(the shared workspace's bytes, the logits buffer's bytes, how) for V4 at ``max_model_len`` with
    ``max_num_batched_tokens`` (module docstring); ``release``: the vLLM release (its indexer buffer factor,
    ``prefill_buffer_factor``)."""
    factor = prefill_buffer_factor(max_model_len, release)
    indexer = 0
    for ratio in sorted({r for r in d.compress_ratios if r and d.index_head_dim}):
        if ratio != 4:  # only the CSA layers (ratio 4) carry an indexer
            continue
        t = factor * max_model_len // ratio
        indexer = max(indexer, _indexer_gather(t, d.index_head_dim, FP8_SCALE_BYTES))
    attention = 0
    for ratio in {*d.compress_ratios, 0}:
        n = 0 if ratio <= 1 else -(-max_model_len // ratio)
        m = n + d.sliding_window + max_num_batched_tokens
        attention = max(attention, _up(PREFILL_CHUNK_SIZE * m * d.head_dim * BF16))
    workspace = max(indexer, attention)
    gib = GiB
    how = (
        f"V4 profile-run workspace {workspace / gib:.2f} GiB (the larger of the indexer's {indexer / gib:.2f} GiB: "
        f"{factor} x {max_model_len:,} // 4 keys of {d.index_head_dim} + {FP8_SCALE_BYTES} B, and "
        f"FlashMLA's {attention / gib:.2f} GiB: {PREFILL_CHUNK_SIZE} x (cdiv({max_model_len:,}, 4) + "
        f"{d.sliding_window} + {max_num_batched_tokens:,}) x {d.head_dim} bf16) + the indexer's "
        f"{LOGITS_BYTES // 2**20} MiB logits where they exceed the layer's temporaries ({WORKSPACE_SOURCE}"
        + (f"; {WORKSPACE_FACTOR_SOURCE}" if factor != PREFILL_BUFFER_FACTOR else "")
        + ")"
    )
    return workspace, (LOGITS_BYTES if indexer else 0), how


V41_WORKSPACE_SOURCE = (
    "vllm-project/vllm vllm/models/deepseek_v41/attention.py @02ee13be DeepseekV4Indexer.__init__ (on the index "
    "sources: max_total_seq_len = get_max_prefill_buffer_size(vllm_config) // compress_ratio, SparseAttnIndexer), "
    "vllm/model_executor/layers/sparse_attn_indexer.py (profile-run reservation: _gather_workspace_shapes, "
    "RADIX_TOPK_WORKSPACE_SIZE, VLLM_SPARSE_INDEXER_MAX_LOGITS_MB of logits), vllm/v1/attention/backends/mla/"
    "indexer.py get_max_prefill_buffer_size (40 x max_model_len): the last two read in yhfgyyf/vllm-deepseek-v4-sm89's "
    "history; the attention's own dummy-run reservation in the same buffer from 0.30.0: V41_ATTENTION_RESERVE_SOURCE"
)
# V4.1's attention reserves its own view of the same WorkspaceManager buffer in the profile run (read in the 0.30.0,
# 0.31.0, 0.32.0, 0.33.0 and 0.34.0 wheels, PyPI): models/deepseek_v41/nvidia/flashmla.py
# DeepseekV4FlashMLAAttention.forward_mqa ('Warmup dummy run: no real metadata. Reserve the same bf16 gather workspace
# _forward_prefill would') and, the SM100 default from 0.31.0, nvidia/flash_mla_mega_attn.py
# DeepseekV4MegaAttnAttention._reserve_prefill_workspace, alike: get_simultaneous of (PREFILL_CHUNK_SIZE 4,
# cdiv(max_model_len, ratio) + window + max_num_batched_tokens, head_dim) bf16 (no compressed part on a window-only
# layer, ratio 0), (max_num_batched_tokens, round_up(index_topk + window, 128)) int32 (top-k 0 on a window-only
# layer) and (max_num_batched_tokens,) int32 (models/deepseek_v41/attention.py PREFILL_CHUNK_SIZE). The buffer holds
# the larger of it and the indexer's gather; with the 40 x max_model_len gather to 0.31.x the gather is the larger
# at every point a logged case has, from 0.32.0 (16 x above 256K tokens) the attention's is the larger at long
# contexts (at 1M and 8,192 tokens 4.05 GiB against 2.06)
V41_ATTENTION_RESERVE_FROM: tuple[int, int, int] = (0, 30, 0)
V41_ATTENTION_RESERVE_SOURCE = (
    "vllm 0.30.0-0.34.0 wheels (PyPI): vllm/models/deepseek_v41/nvidia/flashmla.py DeepseekV4FlashMLAAttention."
    "forward_mqa (warmup dummy run) and nvidia/flash_mla_mega_attn.py DeepseekV4MegaAttnAttention."
    "_reserve_prefill_workspace (0.31.0 on), vllm/v1/worker/workspace.py WorkspaceManager.get_simultaneous"
)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def dsv41_attention_reserve(d: DSV4Dims, *, max_model_len: int, max_num_batched_tokens: int) -> tuple[int, int]:
    """(bytes, the compress ratio of the layer that asks most) of V4.1's attention dummy-run reservation in the shared
    workspace (``V41_ATTENTION_RESERVE_SOURCE``): the largest over the layers' compress ratios."""
    t = max_num_batched_tokens
    best, at = 0, 0
    for ratio in sorted(set(d.compress_ratios)):
        n = 0 if ratio == 0 else -(-max_model_len // ratio)
        top_k = 0 if ratio == 0 else d.index_topk
        size = (
            _up(PREFILL_CHUNK_SIZE * (n + d.sliding_window + t) * d.head_dim * BF16)
            + _up(t * _round_up(top_k + d.sliding_window, 128) * 4)
            + _up(t * 4)
        )
        if size > best:
            best, at = size, ratio
    return best, at


def dsv41_profile_workspace(
    d: DSV4Dims,
    *,
    max_model_len: int,
    fp4_indexer: bool,
    release: tuple[int, int, int] | None = None,
    max_num_batched_tokens: int = 0,
) -> tuple[int, int, str]:
    """(the shared workspace's bytes, the logits buffer's bytes, how) for DeepSeek-V4.1 on vLLM's CUDA backends: the
    largest index source's K gather (its compress ratio the smallest), FP8 keys (T, 128) + (T, 4) scales or MXFP4
    (T, 64) + (T, 4), T = 40 x max_model_len // ratio (from 0.32.0 the factor ``prefill_buffer_factor`` resolves),
    and the RADIX top-k workspace, in the shared buffer; from 0.30.0 (``release``) with ``max_num_batched_tokens``
    given, the larger of it and the attention's own dummy-run reservation (``dsv41_attention_reserve``)."""
    assert d.csa2 is not None
    ratio = min(max(1, d.compress_ratios[i]) for i in d.csa2.index_source_layer_ids)
    factor = prefill_buffer_factor(max_model_len, release)
    t = factor * max_model_len // ratio
    values, scales = (
        (d.index_head_dim // 2, d.index_head_dim // 32) if fp4_indexer else (d.index_head_dim, FP8_SCALE_BYTES)
    )
    ws = _indexer_gather(t, values, scales)
    how = (
        f"V4.1 profile-run workspace {ws / GiB:.2f} GiB: the index source at ratio {ratio}, {factor} x "
        f"{max_model_len:,} // {ratio} keys of {values} + {scales} B ({'MXFP4' if fp4_indexer else 'FP8'}), + the "
        f"indexer's {LOGITS_BYTES // 2**20} MiB logits where they exceed the layer's temporaries ({V41_WORKSPACE_SOURCE}"
        + (f"; {WORKSPACE_FACTOR_SOURCE}" if factor != PREFILL_BUFFER_FACTOR else "")
        + ")"
    )
    if max_num_batched_tokens and release is not None and release >= V41_ATTENTION_RESERVE_FROM:
        attention, at = dsv41_attention_reserve(
            d, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens
        )
        larger = "the attention's" if attention > ws else "the gather's"
        how += (
            f"; the one buffer {larger}: the attention's dummy-run reservation {attention / GiB:.2f} GiB at ratio "
            f"{at} ({PREFILL_CHUNK_SIZE} x (cdiv({max_model_len:,}, {at}) + {d.sliding_window} + "
            f"{max_num_batched_tokens:,}) x {d.head_dim} bf16 + the top-k and length views; "
            f"{V41_ATTENTION_RESERVE_SOURCE})"
        )
        ws = max(ws, attention)
    return ws, LOGITS_BYTES, how


# Not priced (scored, session 53): V4.1's eager dummy forward on CUDA, read in the 0.30.0 and 0.31.0 wheels (PyPI),
# where k3plan's analytic one-layer temporaries stand for it. At an index source's profile-run logits
# (models/deepseek_v41/attention.py DeepseekV4Attention._sparse_indexer_and_attn -> model_executor/layers/
# sparse_attn_indexer.py, the VLLM_SPARSE_INDEXER_MAX_LOGITS_MB torch.empty) a layer holds: the caller's residual
# stream and MoE output and the layer's own of each (nvidia/model.py DeepseekV4Model.forward keeps hidden_states /
# residual while DeepseekV4DecoderLayer.forward's nvidia/ops/mhc.py mhc_shifted_post_pre returns new ones), o_padded
# (bf16 [T, 64 or 128 heads, 512]: 0.30.0 forward, 0.31.0 _alloc_attn_out), qr_kv and its fused_q_kv_rmsnorm halves,
# the kv source's compressor kv_score (torch.mm out_dtype float32, [T, 2 x 512] at ratio 2, [T, 512] at 1), the
# indexer's weights_proj output, q padded to the FlashMLA heads (_fused_qnorm_rope_kv_insert's profile F.pad; the
# compressor returns None there, compressor.py DeepseekV4Compressor.forward), the indexer's fp8 q and float32 weights
# (DeepseekV4Indexer.forward_q), then the 512 MiB. DeepSeek-V4.1-Flash at 8,192 tokens and 8 local heads: 2.40 GiB
# where k3plan prices max(0.75 GiB of temporaries, the 512 MiB). Scored over the vLLM V4.1 cases (fit's pools,
# logged -> k3plan before -> after): vllm-dsserving-dsv41-flash-h100-tp8-ep-262k 29.14 -> 32.08 -> 30.43 GiB;
# -prefix-v030 29.42 -> 32.08 -> 30.43 (+1.01, 3.4%); vllm-inferencex-3216-dsv41-flash-b200-tp2 21.50 -> 14.02 ->
# 14.08; -3321-...-gb300-tp2-c128 -5.34 -> 98.65 -> 97.37 (still STARTS); -3310-...-h200-tp8 69.01 unchanged (DSpark's
# all-gather leads); no pool within 3% that was not, no verdict moved: not adopted (a term enters only where it
# raises a count). The v030 log itself puts vLLM's graph estimate at 1.25 GiB where k3plan transfers 0.92
# (tests/engines/cases/vllm-dsserving-dsv41-flash-h100-tp8-ep-262k-prefix-v030's gap).

V41_MODEL_SOURCE = (
    "vllm-project/vllm vllm/models/deepseek_v41/nvidia/model.py @0130d488 DeepseekV4Model.__init__ (topk_indices_buffer "
    "[max_num_batched_tokens, index_topk] int32; candidate_block_buffer [max_num_batched_tokens, candidate_topk_blocks] "
    "int32 where a candidate source is named; _mtp_hidden_buffer [max_num_batched_tokens, hc_mult x hidden] in the "
    "model dtype on the last PP rank where spec_config.use_eagle() or uses_draft_model()), allocated while the model "
    "is built, inside the load's measurement (use_eagle() takes mtp and dspark: vllm/config/speculative.py @002e77c1)"
)


def dsv41_model_buffers(d: DSV4Dims, *, max_num_batched_tokens: int, drafter_row_bytes: int = 0) -> tuple[int, str]:
    """The buffers vLLM's V4.1 model allocates while it is built (``V41_MODEL_SOURCE``), and its RoPE tables
    (``rope_tables``): counted in the weights the engine logs ("Model loading took"), as the load's memory
    measurement holds them. ``drafter_row_bytes``: a row of the hidden states it keeps for a drafter that reads them
    (``DraftPricing.target_hidden_row_bytes``; 0: no such drafter). (bytes, where they come from)."""
    assert d.csa2 is not None
    topk = max_num_batched_tokens * d.index_topk * 4
    c = d.csa2
    named = c.candidate_source_layer_id is not None and c.candidate_source_layer_id >= 0
    cand = max_num_batched_tokens * c.candidate_topk_blocks * 4 if named else 0
    hidden = max_num_batched_tokens * drafter_row_bytes
    rope, rope_how = rope_tables(d, d.compress_ratios, v41=True)
    total = topk + cand + hidden + rope
    return total, (
        f"the model's buffers {total:,} B (topk_indices_buffer {max_num_batched_tokens:,} x "
        f"{d.index_topk} int32"
        + (f", candidate_block_buffer {max_num_batched_tokens:,} x {c.candidate_topk_blocks} int32" if cand else "")
        + (
            f", _mtp_hidden_buffer {max_num_batched_tokens:,} x {drafter_row_bytes:,} B (hc_mult x hidden bf16, kept "
            "for the drafter: spec_config.use_eagle())"
            if hidden
            else ""
        )
        + f"; {rope_how}: {V41_MODEL_SOURCE})"
    )


ROPE_SOURCE = (
    "vllm/model_executor/layers/rotary_embedding/__init__.py get_rope (one table a distinct set of RoPE parameters, "
    "cached) and deepseek_scaling_rope.py DeepseekV4ScalingRotaryEmbedding (cos_sin_cache, float32 [original max "
    "position x factor, rope_dim], a buffer built with the model); which parameters a layer takes: V4 "
    "models/deepseek_v4/common/rope.py build_deepseek_v4_rope in the 0.26.0 wheel (compress_rope_theta where "
    "compress_ratio > 1, else rope_theta; YaRN on every layer), V4.1 models/deepseek_v41/common/rope.py in the 0.31.0 "
    "wheel (compress_rope_theta and YaRN where compress_ratio > 0; the window-only layers plain RoPE, factor 1 over "
    "max_position_embeddings)"
)
ROPE_TABLE_BYTES = 4  # float32 cos / sin, rope_dim values a position


def rope_tables(d: DSV4Dims, ratios, *, v41: bool) -> tuple[int, str]:
    """(bytes, how) of the RoPE tables vLLM builds for layers of these compress ratios (``ROPE_SOURCE``): one
    float32 [positions, rope_dim] table a distinct (theta, positions). Without YaRN in the config: 0, not read."""
    if not d.yarn_positions:
        return 0, "no RoPE table priced (no YaRN rope_scaling in the config: that path was not read)"
    tables = set()
    for r in set(ratios):
        if v41:
            tables.add((d.compress_rope_theta, d.yarn_positions) if r > 0 else (d.rope_theta, d.max_position))
        else:
            tables.add((d.compress_rope_theta if r > 1 else d.rope_theta, d.yarn_positions))
    nbytes = sum(positions * d.rope_dim * ROPE_TABLE_BYTES for _, positions in tables)
    shown = ", ".join(f"theta {theta:g} x {positions:,} positions" for theta, positions in sorted(tables))
    return nbytes, f"RoPE tables {nbytes:,} B ({shown}, {d.rope_dim} float32 values a position; {ROPE_SOURCE})"


V4_MODEL_SOURCE = (
    "vllm 0.26.0 wheel (PyPI): vllm/models/deepseek_v4/nvidia/model.py DeepseekV4Model.__init__ (topk_indices_buffer "
    "[max_num_batched_tokens, index_topk] int32; _mtp_hidden_buffer [max_num_batched_tokens, hc_mult x hidden] in the "
    "model dtype on the last PP rank, whatever the speculative config), nvidia/mtp.py "
    "DeepSeekV4MultiTokenPredictor.__init__ (its own topk_indices_buffer), allocated while the model is built, "
    "inside the load's measurement (platforms/cuda.py get_current_memory_usage over load_model)"
)


# DeepseekV4EagerScratchPool (vllm 0.27.0 and 0.28.0 wheels, PyPI: models/deepseek_v4/eager_scratch.py, built by
# nvidia/model.py DeepseekV4Model.__init__ unless parallel_config.use_ubatching, k3plan refusing --enable-dbo): a
# model-wide pool allocated while the model is built, so inside the load's measurement and resident, not a transient
# of the profile run (whose _fused_qnorm_rope_kv_insert still returns F.pad(q) without attention metadata; the pool's
# q_out serves the kernel path only). It holds q at the padded heads, [max_num_batched_tokens, padded heads, head_dim]
# bf16, and one uint8 storage the size of the largest of three packed spec sets (each view aligned to 256 B): the FP4
# indexer's q values [T, index heads, index_head_dim / 2] and scales [T, index heads, index_head_dim / 32] uint8 with
# its float32 weights [T, index heads]; the global top-k indices [T, index_topk] and lengths [T] int32; the
# compressor's float32 scratch [T, head_dim]. The 0.29.0 wheel drops it (no eager_scratch.py; attention.py's kernel
# path allocates its padded q again).
SCRATCH_POOL_FROM: tuple[int, int, int] = (0, 27, 0)
SCRATCH_POOL_UNTIL: tuple[int, int, int] = (0, 29, 0)
SCRATCH_POOL_ALIGN = 256
MXFP4_BLOCK = 32  # models/deepseek_v4/common/ops/fused_indexer_q.py MXFP4_BLOCK_SIZE
SCRATCH_POOL_SOURCE = (
    "vllm 0.27.0 and 0.28.0 wheels (PyPI): models/deepseek_v4/eager_scratch.py DeepseekV4EagerScratchPool.__init__ "
    "(_q bf16 [max_num_batched_tokens, padded heads, head_dim]; storage uint8 of max(_packed_size) over the FP4 "
    "indexer's, the global top-k's and the compressor's specs, 256 B aligned), built in nvidia/model.py "
    "DeepseekV4Model.__init__ when not use_ubatching, its padded heads the attention class's get_padded_num_q_heads "
    "(nvidia/flashmla.py: 64 or 128; nvidia/flashinfer_sparse.py under FLASHINFER_MLA_SPARSE_DSV4: 8, 16, 32, 64 or "
    "128); not in the 0.29.0 wheel"
)


def _packed(*sizes: int) -> int:
    """DeepseekV4EagerScratchPool._packed_size: views of ``sizes`` bytes, each starting on a 256 B boundary."""
    offset = 0
    for size in sizes:
        offset = -(-offset // SCRATCH_POOL_ALIGN) * SCRATCH_POOL_ALIGN + size
    return -(-offset // SCRATCH_POOL_ALIGN) * SCRATCH_POOL_ALIGN


def dsv4_scratch_pool(
    d: DSV4Dims, *, max_num_batched_tokens: int, local_heads: int, attention_backend: str = ""
) -> int:
    """Bytes of vLLM 0.27.0-0.28.x's DeepseekV4EagerScratchPool (``SCRATCH_POOL_SOURCE``) at ``local_heads`` query
    heads a GPU, padded as the layer's attention class pads them (nvidia/model.py _select_dsv4_attn_cls
    .get_padded_num_q_heads): FlashMLA's 64 up to 64 heads, else 128 (nvidia/flashmla.py); under
    ``attention_backend`` FLASHINFER_MLA_SPARSE_DSV4 the smallest of 8, 16, 32, 64, 128 that holds them
    (nvidia/flashinfer_sparse.py _pad_to_supported_q_heads)."""
    t = max_num_batched_tokens
    padded = v4_padded_heads(local_heads, release=SCRATCH_POOL_FROM, attention_backend=attention_backend)
    q = BF16 * t * padded * d.head_dim
    ih, ihd = d.index_n_heads, d.index_head_dim
    fp4 = _packed(t * ih * (ihd // 2), t * ih * (ihd // MXFP4_BLOCK), F32 * t * ih)
    global_topk = _packed(4 * t * d.index_topk, 4 * t)
    compressor = _packed(F32 * t * d.head_dim)
    return q + max(fp4, global_topk, compressor)


# From 0.27.0 DeepseekV4Model.__init__ allocates _mtp_hidden_buffer only where a drafter reads the target's hidden
# states (nvidia/model.py: needs_mtp_hidden_states = spec_config is not None and (spec_config.use_eagle() or
# spec_config.uses_draft_model()); config/speculative.py use_eagle: eagle, eagle3, mtp, dflash, dspark), read in the
# 0.27.0 and 0.33.0 wheels (PyPI); 0.26.0's allocates it on the last PP rank whatever the speculative config.
MTP_HIDDEN_GATED_FROM: tuple[int, int, int] = (0, 27, 0)


def dsv4_model_buffers(
    d: DSV4Dims,
    *,
    max_num_batched_tokens: int,
    hidden_size: int,
    mtp_ratios: tuple[int, ...] = (),
    local_heads: int = 0,
    release: tuple[int, int, int] | None = None,
    attention_backend: str = "",
    drafter_reads_hidden: bool = True,
) -> tuple[int, str]:
    """The buffers vLLM's DeepSeek-V4 model (and its MTP drafter, ``mtp_ratios`` its layers' compress ratios; ():
    none) allocates while it is built, and the RoPE tables of their layers (``V4_MODEL_SOURCE``, ``rope_tables``):
    in the weights the engine logs. In 0.27.0-0.28.x (``release``) also the eager scratch pool
    (``dsv4_scratch_pool``, ``local_heads`` query heads a GPU under ``attention_backend``); from 0.27.0 the
    _mtp_hidden_buffer only where ``drafter_reads_hidden`` (``MTP_HIDDEN_GATED_FROM``). (bytes, where they come
    from)."""
    assert d.csa2 is None
    t = max_num_batched_tokens
    topk = t * d.index_topk * 4 * (2 if mtp_ratios else 1)
    gated = release is not None and release >= MTP_HIDDEN_GATED_FROM and not drafter_reads_hidden
    hidden = 0 if gated else t * d.hc_mult * hidden_size * BF16
    rope, rope_how = rope_tables(d, (*d.compress_ratios, *mtp_ratios), v41=False)
    pool = 0
    if release is not None and SCRATCH_POOL_FROM <= release < SCRATCH_POOL_UNTIL and local_heads:
        pool = dsv4_scratch_pool(
            d, max_num_batched_tokens=t, local_heads=local_heads, attention_backend=attention_backend
        )
    total = topk + hidden + rope + pool
    return total, (
        f"the model's buffers {total:,} B (topk_indices_buffer {t:,} x {d.index_topk} int32"
        + (" in the model and in the MTP drafter" if mtp_ratios else "")
        + (
            ", no _mtp_hidden_buffer (from 0.27.0 only where a drafter reads the hidden states: MTP_HIDDEN_GATED_FROM)"
            if gated
            else f", _mtp_hidden_buffer {t:,} x {d.hc_mult} x {hidden_size:,} bf16"
        )
        + (f", the eager scratch pool {pool:,} B ({SCRATCH_POOL_SOURCE})" if pool else "")
        + f"; {rope_how}: {V4_MODEL_SOURCE})"
    )


FORWARD_SOURCE = (
    "vllm 0.26.0 wheel (PyPI), the profile run's eager dummy forward (gpu_model_runner.py _dummy_run, no attention "
    "metadata): vllm/models/deepseek_v4/attention.py DeepseekV4Attention.forward (o_padded [T, padded heads, head_dim]; "
    "qr_kv and its fused RMSNorm outputs; the compressor's and the indexer's kv_score, torch.mm out_dtype float32, "
    "[T, 2 x coff x dim], coff 2 at ratio 4; indexer weights_proj; q = wq_b(qr) and, in the profile run, F.pad(q) to "
    "the padded heads in _fused_qnorm_rope_kv_insert, both live), nvidia/flashmla.py get_padded_num_q_heads (64 up to "
    "64 heads, else 128), the mHC residual streams [T, hc_mult, hidden] of the layer before and this one "
    "(nvidia/model.py DeepseekV4DecoderLayer), and the MTP drafter's dummy run (nvidia/mtp.py: the target's output, "
    "the embedding, enorm, hnorm [T, hc_mult, hidden], its residual and layer input, then the same attention): the "
    "largest moment, traced by a helper reading the wheel (the indexer's and compressor's aux-stream work runs first "
    "and is freed before q's pad; the MoE phase is lower)"
)


FORWARD_020_SOURCE = (
    "vllm 0.20.0 wheel (PyPI), the profile run's dummy forward: model_executor/models/deepseek_v4.py "
    "DeepseekV4DecoderLayer.forward (the residual stream and attn_norm's row), model_executor/layers/"
    "deepseek_v4_attention.py DeepseekV4Attention.forward (qr_kv and o_padded held to its return; the O projection: "
    "fused_inv_rope_fp8_quant's o_fp8 [T, heads, head_dim] FP8 and its float32 scales a 128 values, z [T, local "
    "groups, o_lora_rank] bf16, wo_b's [T, hidden] output beside its FP8 input) and attention_impl (the normed qr / "
    "kv, q = wq_b(qr) [T, heads, head_dim] unpadded: the profile run returns before 'Pad q to FlashMLA-required head "
    "count'), model_executor/layers/deepseek_compressor.py forward (its float32 kv_score [T, 2 x coff x head_dim], "
    "freed as the profile run returns), model_executor/models/deepseek_v4_mtp.py DeepSeekV4MultiTokenPredictorLayer."
    "forward (the embedding, enorm's row, hnorm's and the summed streams); 0.21.0 / 0.22.0 not read (taken as "
    "0.23.0's, LAYOUT_023_FROM)"
)
FORWARD_PAD_SOURCE = (
    "the profile run's F.pad of q to the padded heads (models/deepseek_v4/attention.py "
    "DeepseekV4Attention._fused_qnorm_rope_kv_insert, 'Profile run: kernel doesn't fire; produce a padded tensor') "
    "read in the 0.23.0, 0.26.0, 0.27.0, 0.30.0 and 0.33.0 wheels (PyPI), with o_padded (0.33.0: _alloc_attn_out, "
    "bf16 [T, padded heads, head_dim] on FlashMLA), qr_kv, the float32 scores and the normed qr / kv held by "
    "DeepseekV4Attention.forward; the layer's and the MTP drafter's other tensors as traced in the 0.26.0 wheel"
)
# From 0.34.0 the model's layer loop hands its residual over (nvidia/model.py DeepseekV4Model.forward calls each layer
# with reuse_residual=True): DeepseekV4DecoderLayer.forward's mhc_fused_post_pre_tilelang_reuse_residual writes the
# layer's residual stream into the storage of the one it was given (model_executor/kernels/mhc/tilelang.py
# _mhc_fused_post_pre_tilelang_impl: 'residual_flat if reuse_residual', on the unfused path taken above
# _FUSED_POST_PRE_MAX_TOKENS, 32, so at any profile-run size), so a layer holds one mHC residual stream, not the
# caller's and its own. The MTP drafter's layer starts from residual None (mhc_pre_tilelang) and is unchanged. Read in
# the 0.34.0 wheel; 0.27.0-0.33.0 keep two (no reuse_residual in their nvidia/model.py).
RESIDUAL_REUSE_FROM: tuple[int, int, int] = (0, 34, 0)
# Under --attention-config backend FLASHINFER_MLA_SPARSE_DSV4 the layer is nvidia/flashinfer_sparse.py
# DeepseekV4FlashInferMLAAttention (nvidia/model.py _select_dsv4_attn_cls), which from 0.27.0 pads the query heads to
# the smallest of 8, 16, 32, 64, 128 that holds them (_pad_to_supported_q_heads; 0.26.0's pads to 64 / 128 as FlashMLA
# does) and, in 0.27.0-0.30.x, overrides only the O projection and forward_mqa (which zeroes the output and returns
# in the profile run): o_padded and the q pad take its count. From 0.31.0 its _alloc_attn_out returns a
# QuantizedActivation (the inverse RoPE and the FP8 cast fused into the kernel): not traced, FlashMLA's layout stands.
# On either class the profile run pads q only where n_local_heads < padded_heads (attention.py
# _fused_qnorm_rope_kv_insert, the 0.23.0, 0.26.0 and 0.34.0 wheels): at 64 or 128 local heads it returns q itself.
FLASHINFER_PAD_FROM: tuple[int, int, int] = (0, 27, 0)
FLASHINFER_PAD_UNTIL: tuple[int, int, int] = (0, 31, 0)
FLASHINFER_V4_BACKEND = "FLASHINFER_MLA_SPARSE_DSV4"
FLASHINFER_Q_HEADS = (8, 16, 32, 64, 128)  # nvidia/flashinfer_sparse.py _SPARSE_MLA_SUPPORTED_Q_HEADS, 0.27.0-0.34.0


def v4_padded_heads(local_heads: int, *, release: tuple[int, int, int] | None, attention_backend: str = "") -> int:
    """The query heads vLLM's CUDA V4 layer allocates q / o at (get_padded_num_q_heads): FlashMLA's 64 up to 64
    heads, else 128 (nvidia/flashmla.py); FlashInfer's smallest supported count in the releases traced for it
    (``FLASHINFER_PAD_FROM`` to ``FLASHINFER_PAD_UNTIL``)."""
    padded = 64 if local_heads <= 64 else 128
    if (
        attention_backend == FLASHINFER_V4_BACKEND
        and release is not None
        and FLASHINFER_PAD_FROM <= release < FLASHINFER_PAD_UNTIL
    ):
        padded = min((h for h in FLASHINFER_Q_HEADS if h >= local_heads), default=padded)
    return padded


FORWARD_RELEASES_SOURCE = (
    "the same moments read per release in the 0.27.0, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0 and 0.34.0 wheels "
    "(PyPI): nvidia/model.py DeepseekV4DecoderLayer.forward (mhc_pre / mhc_fused_post_pre_tilelang around attn and "
    "ffn; sp_all_gather / sp_reduce_scatter only under sequence parallelism, EP with TP > 1 and DP > 1 or the mega "
    "MoE), attention.py DeepseekV4Attention.forward (o_padded, 0.31.0 on via _alloc_attn_out, bf16 [T, padded heads, "
    "head_dim] on FlashMLA; qr_kv and its fused RMSNorm halves, 0.29.0 on via _split_qkv_and_norm with qr_scale None "
    "on CUDA; the compressor's and indexer's float32 kv_score, 0.34.0 through DeepseekV4CompressorKVScoreLinear's "
    "torch.mm out_dtype float32), _fused_qnorm_rope_kv_insert's profile-run F.pad (the default stream's function "
    "first in execute_in_parallel; 0.28.0 on the indexer returns its fp8 q and float32 weights and its logits run "
    "after, in _sparse_indexer_and_attn, with the same tensors live), nvidia/mtp.py "
    "DeepSeekV4MultiTokenPredictorLayer.forward (fused_mtp_input_rmsnorm's enorm / hnorm, h_proj + e_proj, the "
    "mtp_block from residual None); v1/worker/gpu_model_runner.py _dummy_run builds no attention metadata for the "
    "profile run in each; the eager scratch pool of 0.27.0 / 0.28.0 is resident (dsv4_model_buffers), the profile "
    "run's q pad still a transient; from 0.34.0 one residual stream (RESIDUAL_REUSE_FROM)"
)


def dsv4_forward_live(
    d: DSV4Dims,
    *,
    tokens: int,
    hidden_size: int,
    local_heads: int,
    q_lora_rank: int,
    mtp: bool,
    release: tuple[int, int, int] | None = None,
    tp: int = 1,
    attention_backend: str = "",
) -> tuple[int, str]:
    """(bytes, how): the largest live set of vLLM's eager DeepSeek-V4 dummy forward at ``tokens`` (``FORWARD_SOURCE``):
    at the pad of q in a layer of each compress ratio present, and in the MTP drafter's layer where one runs. It
    stands in the profile run for k3plan's analytic one-layer temporaries. Before 0.21.0 (``release``;
    ``FORWARD_020_SOURCE``) the profile run pads no q: a layer holds at its largest the larger of q's moment (q
    unpadded beside the compressor's float32 scores) and the O projection's (``tp``: the attention TP size, o_groups
    // tp local groups). From 0.34.0 (``RESIDUAL_REUSE_FROM``) a target layer holds one mHC residual stream, not
    two; 0.27.0-0.33.x hold 0.26.0's moments (``FORWARD_RELEASES_SOURCE``)."""
    t, h, hd = tokens, hidden_size, d.head_dim
    padded = v4_padded_heads(local_heads, release=release, attention_backend=attention_backend)
    stream = BF16 * t * d.hc_mult * h  # one mHC residual stream
    row = BF16 * t * h
    streams = 1 if release is not None and release >= RESIDUAL_REUSE_FROM else 2  # the caller's and the layer's
    if release is not None and release < LAYOUT_023_FROM:
        o_padded = BF16 * t * padded * hd
        qr_kv = BF16 * t * (q_lora_rank + hd)
        q_moment = o_padded + 2 * qr_kv + BF16 * t * local_heads * hd  # qr_kv, its normed halves, q unpadded
        z = BF16 * t * max(d.o_groups // max(tp, 1), 1) * d.o_lora_rank
        o_fp8 = t * local_heads * hd
        oproj = o_padded + qr_kv + o_fp8 + F32 * o_fp8 // 128 + z + z // 2 + F32 * (z // 2) // 128 + row
        scores = max(F32 * t * 2 * (2 if r == CSA_RATIO else 1) * hd if r else 0 for r in set(d.compress_ratios))
        layer = row + stream + max(q_moment + scores, oproj)  # the compressor's float32 kv_score beside q
        drafter = 4 * row + 2 * stream + max(q_moment, oproj) if mtp else 0
        live = max(layer, drafter)
        return live, (
            f"vLLM's dummy forward at {t:,} tokens holds {live / GiB:.2f} GiB at its largest "
            f"({'the MTP drafter' if drafter > layer else 'a target layer'}: q unpadded, {local_heads} heads, the "
            f"{'O projection' if oproj > (q_moment + scores if drafter <= layer else q_moment) else 'query'} moment, "
            f"the mHC streams of {d.hc_mult}; "
            f"{FORWARD_020_SOURCE})"
        )
    attention = (
        BF16 * t * padded * hd  # o_padded
        + 2 * BF16 * t * (q_lora_rank + hd)  # qr_kv and the normed qr, kv
        + BF16 * t * local_heads * hd  # q
        + (BF16 * t * padded * hd if local_heads < padded else 0)  # q padded (none at the padded count)
    )
    layer = 0
    for ratio in set(d.compress_ratios):
        scores = 0
        if ratio:
            coff = 2 if ratio == 4 else 1
            scores = 4 * t * 2 * coff * hd  # the compressor's kv_score, float32
            if ratio == 4:  # the indexer's compressor and weights_proj
                scores += 4 * t * 2 * 2 * d.index_head_dim + BF16 * t * d.index_n_heads
        layer = max(layer, 2 * row + streams * stream + attention + scores)
    drafter = (
        4 * row + 2 * stream + attention if mtp else 0
    )  # target output, embed, enorm, layer input; hnorm, residual
    live = max(layer, drafter)
    return live, (
        f"vLLM's dummy forward at {t:,} tokens holds {live / GiB:.2f} GiB at its largest "
        f"({'the MTP drafter' if drafter > layer else 'a target layer'}: q padded to {padded} of {local_heads} heads, "
        f"{streams} mHC residual stream{'s' if streams > 1 else ''} of {d.hc_mult} in a target layer; {FORWARD_SOURCE}; "
        f"{FORWARD_PAD_SOURCE}; {FORWARD_RELEASES_SOURCE})"
    )


INDEXER_MOMENT_SOURCE = (
    "vllm 0.23.0 and 0.26.0 wheels (PyPI): vllm/models/deepseek_v4/attention.py DeepseekV4Attention.attention_impl "
    "(execute_in_parallel runs its default function first, vllm/utils/multi_stream_utils.py: wq_b and, in the profile "
    "run, F.pad of q to the padded heads, the unpadded q freed as it is rebound; then the indexer, with o_padded, "
    "qr_kv, the normed qr / kv and the float32 scores still held), DeepseekV4Indexer.forward (wq_b_and_q_quant: the "
    "indexer's q in fp8 [T, index heads, index_head_dim] and its weights in float32 [T, index heads], "
    "models/deepseek_v4/common/ops/fused_indexer_q.py fused_indexer_q_rope_quant), then model_executor/layers/"
    "sparse_attn_indexer.py sparse_attn_indexer: in the profile run torch.empty of VLLM_SPARSE_INDEXER_MAX_LOGITS_MB "
    "while all of these are live ('Dummy allocation to simulate for peak logits tensor memory during inference')"
)
INDEXER_MOMENT_020_SOURCE = (
    "vllm 0.20.0 wheel (PyPI): model_executor/models/deepseek_v4.py DeepseekV4DecoderLayer.forward (the residual "
    "stream and attn_norm's row), model_executor/layers/deepseek_v4_attention.py forward (qr_kv, o_padded) and "
    "attention_impl (the normed qr / kv, q = wq_b(qr) unpadded: the profile run returns before the pad; the indexer "
    "runs first in maybe_execute_in_parallel), DeepseekV4Indexer.forward (its q in bf16 and in fp8, weights_proj's "
    "bf16 and the float32 weights; its compressor returns None in the profile run, model_executor/layers/"
    "deepseek_compressor.py), model_executor/layers/sparse_attn_indexer.py sparse_attn_indexer (the logits); "
    "0.21.0 / 0.22.0 not read (taken as 0.23.0's)"
)
LAYOUT_023_FROM = (0, 21, 0)  # the 0.20.x layout read in the 0.20.0 wheel; 0.23.0 and 0.26.0 read with the later one


def dsv4_indexer_live(
    d: DSV4Dims,
    *,
    tokens: int,
    hidden_size: int,
    local_heads: int,
    q_lora_rank: int,
    release: tuple[int, int, int] | None = None,
    attention_backend: str = "",
) -> tuple[int, str]:
    """(bytes, how): what a CSA layer (compress ratio 4, the layers with an indexer) of vLLM's eager DeepSeek-V4 dummy
    forward holds when the indexer allocates its profile-run logits, the logits aside. From 0.23.0 (and with no
    release named; ``INDEXER_MOMENT_SOURCE``): the layer's live set at q's pad (``dsv4_forward_live``) less the
    unpadded q, plus the indexer's fp8 q and float32 weights. 0.20.x (``INDEXER_MOMENT_020_SOURCE``): one residual
    stream and one row, o_padded, qr_kv and its normed halves, q unpadded, the indexer's q in bf16 and fp8 and its
    weights in bf16 and float32. 0 where no layer has an indexer."""
    if 4 not in d.compress_ratios or not d.index_head_dim:
        return 0, "no layer with an indexer"
    t = tokens
    padded = v4_padded_heads(local_heads, release=release, attention_backend=attention_backend)
    stream = BF16 * t * d.hc_mult * hidden_size
    row = BF16 * t * hidden_size
    o_padded = BF16 * t * padded * d.head_dim
    qr_kv = 2 * BF16 * t * (q_lora_rank + d.head_dim)  # qr_kv and its normed halves
    q_fp8 = t * d.index_n_heads * d.index_head_dim
    weights = 4 * t * d.index_n_heads
    if release is not None and release < LAYOUT_023_FROM:
        live = (
            row
            + stream
            + o_padded
            + qr_kv
            + BF16 * t * local_heads * d.head_dim  # q, not padded in 0.20's profile run
            + BF16 * q_fp8  # the indexer's bf16 q
            + q_fp8
            + BF16 * t * d.index_n_heads
            + weights
        )
        source = INDEXER_MOMENT_020_SOURCE
    else:
        scores = 4 * t * 2 * 2 * d.head_dim + 4 * t * 2 * 2 * d.index_head_dim + BF16 * t * d.index_n_heads
        streams = 1 if release is not None and release >= RESIDUAL_REUSE_FROM else 2  # dsv4_forward_live
        q_pad = o_padded if local_heads < padded else BF16 * t * local_heads * d.head_dim  # q itself, not padded
        live = 2 * row + streams * stream + o_padded + qr_kv + q_pad + scores + q_fp8 + weights
        source = INDEXER_MOMENT_SOURCE + (
            "; from 0.34.0 one mHC residual stream, the layer's written over its caller's (RESIDUAL_REUSE_FROM)"
            if streams == 1
            else ""
        )
    return live, (
        f"at the indexer's logits a CSA layer holds {live / GiB:.2f} GiB beside them (o_padded [T, {padded}, "
        f"{d.head_dim}], qr_kv and its normed halves, the mHC residual stream of {d.hc_mult}, the indexer's fp8 q and "
        f"float32 weights; {source})"
    )


DSPARK_SOURCE = (
    "vllm 0.31.0 wheel (PyPI), traced by a helper line by line for DeepSeek-V4.1-Flash with DSpark on 8 H200: DSpark "
    "runs on Model Runner V2 (vllm/config/vllm.py), whose drafter has a workspace lane of its own (v1/worker/"
    "gpu_worker.py, v1/worker/gpu/model_runner.py: the drafter's Marlin MoE workspaces at max_num_seqs x k query "
    "tokens, model_executor/layers/fused_moe/modular_kernel.py, marlin_moe.py); the dummy run's largest moment is the "
    "all-gather of the draft's logits in compute_draft_logits (distributed/device_communicators/cuda_communicator.py "
    "all_gather: the gathered [tp x rows, vocab / tp] buffer and its movedim + reshape copy, both [rows, vocab] in the "
    "model dtype, beside the local logits), with the draft's head, sample and normed hidden states (nvidia/dspark.py, "
    "spec_decode/dspark/speculator.py), the target's final hidden, its aux hidden states for the drafter and the "
    "drafter's combined input (spec_decode/dflash/speculator.py main_x); the Markov steps, the target's layers and the "
    "sampler hold less. Traced on SM90 (FlashMLA padded heads, Marlin MoE); Blackwell's kernels were not"
)
RUNNER_SOURCE = (
    "vllm 0.31.0 wheel (PyPI): Model Runner V2's buffers, built after the worker's first snapshot and before the "
    "profile run: spec_decode/speculator.py draft_logits [max_num_seqs, k, vocab] in the model dtype, "
    "spec_decode/dspark/speculator.py hidden_states [max_num_batched_tokens, hidden], the penalties' "
    "output_bin_counts [max_num_seqs, vocab] int32 and prompt_bin_mask [max_num_seqs, vocab / 8] B, the grammar "
    "bitmask [max_num_seqs x (1 + k), vocab / 32] int32; Worker.determine_available_memory subtracts all it consumed "
    "since that snapshot plus the transient peak (utils/mem_utils.py memory_profiling: total_consumed + "
    "transient_peak_headroom, from 0.27.0; 0.26.0 subtracts the weights, the torch peak and the non-torch increase)"
)


def dsv41_dspark_profile(
    d: DSV4Dims, *, tokens: int, max_num_seqs: int, k: int, vocab: int, hidden: int, tp: int
) -> tuple[int, int, str]:
    """(the drafter's workspace lane, the transient at the draft logits' all-gather, how) of vLLM's DeepSeek-V4.1 profile
    run with DSpark and ``k`` speculative tokens on SM90 (``DSPARK_SOURCE``). The drafter's Marlin workspaces are
    taken at the hidden size as their width (the experts' gate-up width at the TP split is not wider)."""
    assert d.dspark is not None
    rows = min(max_num_seqs, tokens) * k  # the draft's query tokens: k a dummy request
    lane = 2 * rows * d.dspark.num_experts_per_tok * hidden * BF16  # Marlin's two workspaces, M x top-k x K each
    gather = 2 * rows * vocab * BF16 + rows * -(-vocab // tp) * BF16  # gathered, its copy, the local logits
    held = 3 * rows * hidden * BF16 + (2 + len(d.dspark.target_layer_ids)) * tokens * hidden * BF16
    transient = gather + held
    return (
        lane,
        transient,
        (
            f"DSpark's profile (Model Runner V2): its workspace lane {lane / GiB:.2f} GiB and {transient / GiB:.2f} GiB live "
            f"at the all-gather of the draft's logits ({rows:,} draft rows x vocabulary {vocab:,}, twice, beside the local "
            f"shard, the draft's and the target's hidden states; {DSPARK_SOURCE})"
        ),
    )


def dspark_runner_buffers(*, max_num_seqs: int, tokens: int, k: int, vocab: int, hidden: int) -> tuple[int, str]:
    """(bytes, how) of the Model Runner V2 buffers DSpark's run holds beside the weights (``RUNNER_SOURCE``)."""
    draft_logits = max_num_seqs * k * vocab * BF16
    draft_hidden = tokens * hidden * BF16
    penalties = max_num_seqs * vocab * 4 + max_num_seqs * -(-vocab // 8)
    bitmask = max_num_seqs * (1 + k) * -(-vocab // 32) * 4
    total = draft_logits + draft_hidden + penalties + bitmask
    return total, (
        f"Model Runner V2's buffers {total / GiB:.2f} GiB (draft logits {draft_logits:,} B, DSpark hidden states "
        f"{draft_hidden:,} B, penalties {penalties:,} B, grammar bitmask {bitmask:,} B; {RUNNER_SOURCE})"
    )


# DeepSeek-V4 on AMD GPUs (vLLM's ROCm model, models/deepseek_v4/amd/): the same cache specs and the same two
# workspace reservations as on CUDA (the indexer's prefill K gather, the attention warm-up gather
# (4, cdiv(L, 4) + window + tokens, 512) bf16 in DeepseekV4ROCMAiterMLAAttention.forward_mqa), plus, on gfx942 and
# gfx950, the indexer's decode logits [tokens, max_model_len // 4] float32, all three views of the one WorkspaceManager
# buffer (rocm_aiter_sparse_attn_indexer's profile-run reservation); the model builds topk_indices_buffer and, for
# ROCm's two-stage compressor, a [tokens, head_dim] float32 scratch in each ratio-128 layer; _mtp_hidden_buffer only
# under eagle / draft-model speculation. Read in the 0.28.0 wheel by a session-41 helper (vllm-project/vllm#53961).
ROCM_V4_SOURCE = (
    "vllm 0.28.0 wheel (PyPI): v1/attention/ops/rocm_aiter_mla_sparse.py rocm_aiter_sparse_attn_indexer (profile-run "
    "reservation; the decode logits (tokens, max_model_len // 4) float32 on gfx942 / gfx950), models/deepseek_v4/amd/"
    "rocm.py DeepseekV4ROCMAiterMLAAttention.forward_mqa (warm-up gather), v1/worker/workspace.py WorkspaceManager "
    "(one buffer, the largest view), models/deepseek_v4/compressor.py (_prefer_two_stage_compressor on ROCm: a "
    "(tokens, head_dim) float32 scratch a ratio-128 layer), amd/model.py (topk_indices_buffer)"
)
GFX942 = frozenset({"amd-mi300x", "amd-mi325x"})  # the gfx942 GPUs k3plan bundles
GFX9_LOGITS = GFX942 | {"amd-mi355x"}  # gfx942 and gfx950 (MI355X)
F32 = 4
CSA_RATIO, HCA_RATIO = 4, 128  # the compress ratios of V4's indexed (CSA) and heavily compressed (HCA) layers


# From 0.30.0 the ROCm indexer's decode-logits rows are bounded by the batch a decode can hold: _max_decode_logits_rows
# = min(tokens, max_num_seqs x (1 + num_speculative_tokens)) ('the loose bound ... at the model's full context asks for
# tens of TiB'); the 0.29.0 wheel reserves (tokens, max_model_len). Read in the 0.29.0, 0.30.0 and 0.31.0 wheels (PyPI),
# vllm/v1/attention/ops/rocm_aiter_mla_sparse.py rocm_aiter_sparse_attn_indexer
ROCM_DECODE_ROWS_FROM = (0, 30, 0)


def rocm_decode_rows(tokens: int, *, max_num_seqs: int, spec_tokens: int, release: tuple[int, int, int] | None) -> int:
    """The rows of the ROCm indexer's decode-logits reservation (``ROCM_DECODE_ROWS_FROM``): the profile run's tokens,
    bounded from 0.30.0 by max_num_seqs x (1 + k) (no release named, or no max_num_seqs: the tokens)."""
    if release is None or release < ROCM_DECODE_ROWS_FROM or max_num_seqs <= 0:
        return tokens
    return min(tokens, max_num_seqs * (1 + spec_tokens))


def dsv4_rocm_profile_workspace(
    d: DSV4Dims,
    *,
    max_model_len: int,
    max_num_batched_tokens: int,
    hardware: str,
    release: tuple[int, int, int] | None = None,
    max_num_seqs: int = 0,
    spec_tokens: int = 0,
) -> tuple[int, int, str]:
    """(the shared workspace's bytes, the logits buffer's bytes, how) for V4 on vLLM's ROCm backends
    (``ROCM_V4_SOURCE``): the CUDA reservations' larger and, on gfx942 / gfx950, the indexer's decode logits (their
    rows bounded from 0.30.0: ``rocm_decode_rows``)."""
    cuda, logits, how = dsv4_profile_workspace(
        d, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens, release=release
    )
    indexed = any(r == CSA_RATIO for r in d.compress_ratios) and d.index_head_dim
    rows = rocm_decode_rows(max_num_batched_tokens, max_num_seqs=max_num_seqs, spec_tokens=spec_tokens, release=release)
    decode = _up(rows * (max_model_len // CSA_RATIO) * F32) if indexed and hardware in GFX9_LOGITS else 0
    workspace = max(cuda, decode)
    how = (
        f"V4 profile-run workspace on ROCm {workspace / GiB:.2f} GiB: the larger of the indexer's decode logits "
        f"{decode / GiB:.2f} GiB ({rows:,} rows x {max_model_len // CSA_RATIO:,} float32 on gfx942 / "
        f"gfx950) and {how} ({ROCM_V4_SOURCE})"
    )
    return workspace, logits, how


ROCM_V4_MODEL_SOURCE = (
    "vllm 0.26.0 wheel (PyPI), the same in the 0.25.0 and 0.28.0-0.34.0 wheels: models/deepseek_v4/amd/model.py "
    "DeepseekV4Model.__init__ (topk_indices_buffer [max_num_batched_tokens, index_topk] int32; _mtp_hidden_buffer "
    "[max_num_batched_tokens, hc_mult x hidden] in the model dtype on the last PP rank, whatever the speculative "
    "config), amd/mtp.py DeepSeekV4MultiTokenPredictor.__init__ (its own topk_indices_buffer), the RoPE tables of "
    "models/deepseek_v4/attention.py (common/rope.py build_deepseek_v4_rope, shared with the CUDA model), allocated "
    "while the model is built, inside the load's measurement"
)


def dsv4_rocm_model_buffers(
    d: DSV4Dims, *, max_num_batched_tokens: int, hidden_size: int = 0, mtp_ratios: tuple[int, ...] = ()
) -> tuple[int, str]:
    """The buffers vLLM's ROCm DeepSeek-V4 model (and its MTP drafter, ``mtp_ratios`` its layers' compress ratios;
    (): none) builds (``ROCM_V4_SOURCE``, ``ROCM_V4_MODEL_SOURCE``): topk_indices_buffer (the drafter's own beside
    it), the two-stage compressor's float32 scratch in each ratio-128 layer, _mtp_hidden_buffer (``hidden_size`` 0:
    not priced) and the RoPE tables (``rope_tables``)."""
    assert d.csa2 is None
    t = max_num_batched_tokens
    topk = t * d.index_topk * 4 * (2 if mtp_ratios else 1)
    hca = sum(1 for r in d.compress_ratios if r == HCA_RATIO)
    scratch = hca * t * d.head_dim * F32
    hidden = t * d.hc_mult * hidden_size * BF16
    rope, rope_how = rope_tables(d, (*d.compress_ratios, *mtp_ratios), v41=False) if hidden_size else (0, "")
    total = topk + scratch + hidden + rope
    return total, (
        f"the model's buffers on ROCm {total:,} B (topk_indices_buffer {t:,} x {d.index_topk} int32"
        + (" in the model and in the MTP drafter" if mtp_ratios else "")
        + f", the two-stage compressor's scratch {hca} x {t:,} x {d.head_dim} float32"
        + (f", _mtp_hidden_buffer {t:,} x {d.hc_mult} x {hidden_size:,} bf16; {rope_how}" if hidden_size else "")
        + f": {ROCM_V4_SOURCE}; {ROCM_V4_MODEL_SOURCE})"
    )


# The ROCm attention's output projection (models/deepseek_v4/amd/rocm.py DeepseekV4ROCMAiterMLAAttention._o_proj, "ROCm
# BF16 reference wo_a path") goes through v1/attention/ops/rocm_aiter_mla_sparse.py rocm_inv_rope_einsum, whose
# _get_cached_wo_a_bf16 dequantizes the layer's FP8 wo_a (weight x its 128 x 128 block scale, or the weight cast) to a
# bf16 [n_local_groups, o_lora_rank, heads x head_dim / o_groups] tensor on the first call and keeps it on the module
# (wo_a._dsv4_wo_a_bf16): the profile run's dummy forward reaches _o_proj in every layer (forward_mqa returns early,
# DeepseekV4Attention.forward projects the zeroed output), the MTP drafter's layers in its dummy run, so the copies
# are in the torch peak increase. Read in the 0.25.0, 0.26.0, 0.28.0, 0.29.0 and 0.30.0 wheels (PyPI); from 0.31.0
# (read in the 0.31.0, 0.33.0 and 0.34.0 wheels) DeepseekV4ROCMAiterMLAAttention._prepare_fp8_wo_a keeps wo_a FP8 for
# aiter's batched_gemm_a8w8_mxscale on gfx950 (VLLM_ROCM_USE_AITER_FP8BMM, on by default; AITER >= 0.1.20, else
# the bf16 fallback), so there the copy is priced on gfx942 only. _prepare_fp8_wo_a runs from prepare_attn_preshuffle,
# which returns first where rocm_aiter_ops.is_enabled() is false (VLLM_ROCM_USE_AITER, default off: the 0.31.0 wheel's
# amd/rocm.py, _aiter_ops.py, envs.py): without it gfx950 keeps the bf16 copies too (``wo_a_fp8_on``).
WO_A_BF16_SOURCE = (
    "vllm 0.26.0 wheel (PyPI): v1/attention/ops/rocm_aiter_mla_sparse.py rocm_inv_rope_einsum and "
    "_get_cached_wo_a_bf16 (wo_a dequantized to bf16 once and cached on the module), models/deepseek_v4/amd/rocm.py "
    "DeepseekV4ROCMAiterMLAAttention._o_proj, models/deepseek_v4/attention.py DeepseekV4Attention.forward (_o_proj "
    "after the profile run's early forward_mqa); the same in the 0.25.0 and 0.28.0-0.30.0 wheels; from 0.31.0 "
    "_prepare_fp8_wo_a keeps wo_a FP8 on gfx950 (VLLM_ROCM_USE_AITER_FP8BMM)"
)
WO_A_FP8_FROM = (0, 31, 0)


def wo_a_fp8_on(env: dict[str, str], *, hardware: str, release: tuple[int, int, int] | None) -> bool:
    """Whether vLLM's ROCm DeepSeek-V4 attention keeps wo_a FP8 for AITER's batched GEMM (``WO_A_BF16_SOURCE``): gfx950
    from 0.31.0 (no release named: the newest read), with VLLM_ROCM_USE_AITER on (default off) and
    VLLM_ROCM_USE_AITER_FP8BMM (default on; the 0.31.0 wheel's envs.py, amd/rocm.py prepare_attn_preshuffle)."""
    return (
        hardware in GFX950
        and (release is None or release >= WO_A_FP8_FROM)
        and env.get("VLLM_ROCM_USE_AITER", "False").lower() in TRUE
        and env.get("VLLM_ROCM_USE_AITER_FP8BMM", "True").lower() in TRUE
    )


def dsv4_rocm_wo_a_bf16(
    d: DSV4Dims,
    *,
    local_heads: int,
    layers: int,
    hardware: str,
    release: tuple[int, int, int] | None = None,
    wo_a_fp8: bool | None = None,
) -> tuple[int, str]:
    """(bytes, how): the bf16 copies of wo_a vLLM's ROCm DeepSeek-V4 attention caches in the profile run
    (``WO_A_BF16_SOURCE``), one a layer of ``layers`` (the target's and the MTP drafter's), ``local_heads`` x
    head_dim x o_lora_rank bf16 each (n_local_groups x o_lora_rank x heads x head_dim / o_groups); 0 where wo_a stays
    FP8 (``wo_a_fp8``: ``wo_a_fp8_on``; None: taken as on from 0.31.0 on gfx950, no release named the newest read)."""
    assert d.csa2 is None
    if wo_a_fp8 is None:
        wo_a_fp8 = hardware in GFX950 and (release is None or release >= WO_A_FP8_FROM)
    if wo_a_fp8:
        return 0, ""
    per_layer = local_heads * d.head_dim * d.o_lora_rank * BF16
    total = layers * per_layer
    return total, (
        f"the bf16 wo_a copies the ROCm attention caches in the profile run {total / GiB:.2f} GiB ({layers} layers x "
        f"{local_heads} local heads x {d.head_dim} x o_lora_rank {d.o_lora_rank} bf16: {WO_A_BF16_SOURCE})"
    )


# DeepSeek-V4.1 on AMD GPUs (vLLM's ROCm model, models/deepseek_v41/amd/): three views of the one WorkspaceManager
# buffer in the profile run. The sparse indexer goes to rocm_aiter_sparse_attn_indexer (SparseAttnIndexer.forward_hip,
# with AITER or on gfx950 / gfx11; FP8 keys only), which reserves the K gather (T, 128) fp8 + (T, 4) uint8,
# T = get_max_prefill_buffer_size // ratio (40 x max_model_len in 0.31.0), then, on gfx942 / gfx950, the decode logits
# (rows, max_model_len // ratio) float32 with rows = _max_decode_logits_rows = min(tokens, max_num_seqs x (1 + k)),
# then 512 MiB of logits outside the workspace; the attention warm-up (DeepseekV41ROCMAiterMLAAttention.forward_mqa)
# reserves (PREFILL_CHUNK_SIZE 4, cdiv(max_model_len, ratio) + window + tokens, 512) bf16, and on gfx950 beside it
# (tokens, local heads, 512) bf16. The indexer's max_model_len is the model's // its compress ratio (V4.1's ratio-1
# layers: the whole context). Read in the 0.31.0 wheel (PyPI).
ROCM_V41_SOURCE = (
    "vllm 0.31.0 wheel (PyPI): model_executor/layers/sparse_attn_indexer.py SparseAttnIndexer.forward_hip, "
    "v1/attention/ops/rocm_aiter_mla_sparse.py rocm_aiter_sparse_attn_indexer (profile-run K gather, decode logits "
    "(rows, max_model_len) float32 on gfx942 / gfx950) and _max_decode_logits_rows (min(tokens, max_num_seqs x "
    "(1 + num_speculative_tokens))), v1/attention/backends/mla/indexer.py get_max_prefill_buffer_size (40 x "
    "max_model_len), models/deepseek_v41/attention.py DeepseekV4Indexer (max_model_len // compress_ratio; "
    "PREFILL_CHUNK_SIZE 4), models/deepseek_v41/amd/rocm.py DeepseekV41ROCMAiterMLAAttention.forward_mqa and "
    "_prefill_workspace_shapes (warm-up gather), v1/worker/workspace.py WorkspaceManager (one buffer, the largest view)"
)
GFX950 = frozenset({"amd-mi355x"})


def dsv41_rocm_profile_workspace(
    d: DSV4Dims,
    *,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    spec_tokens: int,
    local_heads: int,
    hardware: str,
    release: tuple[int, int, int] | None = None,
) -> tuple[int, int, str]:
    """(the shared workspace's bytes, the logits buffer's bytes, how) for DeepSeek-V4.1 on vLLM's ROCm backends
    (``ROCM_V41_SOURCE``): the largest of the indexer's K gather, its decode logits (gfx942 / gfx950) and the
    attention warm-up gather."""
    assert d.csa2 is not None
    ratio = min(max(1, d.compress_ratios[i]) for i in d.csa2.index_source_layer_ids)
    factor = prefill_buffer_factor(max_model_len, release)
    t = factor * max_model_len // ratio
    gather = _up(t * d.index_head_dim) + _up(t * FP8_SCALE_BYTES)
    rows = rocm_decode_rows(max_num_batched_tokens, max_num_seqs=max_num_seqs, spec_tokens=spec_tokens, release=release)
    decode = _up(rows * (max_model_len // ratio) * F32) if hardware in GFX9_LOGITS else 0
    attention = 0
    for r in {r for r in d.compress_ratios}:
        n = 0 if r == 0 else -(-max_model_len // r)
        m = n + d.sliding_window + max_num_batched_tokens
        view = _up(PREFILL_CHUNK_SIZE * m * d.head_dim * BF16)
        if hardware in GFX950:
            view += _up(max_num_batched_tokens * local_heads * d.head_dim * BF16)
        attention = max(attention, view)
    workspace = max(gather, decode, attention)
    how = (
        f"V4.1 profile-run workspace on ROCm {workspace / GiB:.2f} GiB, the largest of the indexer's K gather "
        f"{gather / GiB:.2f} GiB ({factor} x {max_model_len:,} // {ratio} keys of {d.index_head_dim} + "
        f"{FP8_SCALE_BYTES} B), its decode logits {decode / GiB:.2f} GiB ({rows:,} rows x {max_model_len // ratio:,} "
        f"float32 on gfx942 / gfx950) and the attention warm-up gather {attention / GiB:.2f} GiB ({PREFILL_CHUNK_SIZE} "
        f"x (cdiv({max_model_len:,}, ratio) + {d.sliding_window} + {max_num_batched_tokens:,}) x {d.head_dim} bf16), "
        f"+ the indexer's {LOGITS_BYTES // 2**20} MiB logits where they exceed the layer's temporaries "
        f"({ROCM_V41_SOURCE})"
    )
    return workspace, LOGITS_BYTES, how


# DeepSeek-V4's eager dummy forward on vLLM's ROCm model (models/deepseek_v4/amd/: no support_torch_compile, so a
# tensor lives while a Python name holds it), traced in the 0.26.0 wheel (PyPI; amd/model.py, amd/mtp.py,
# attention.py and rocm_aiter_mla_sparse.py's inverse RoPE + wo_a path are the same in the 0.25.0 wheel). The 0.27.0
# and 0.28.0 wheels hold the same moments: DeepseekV4DecoderLayer._forward_unfused_post_pre and use_fused_mhc,
# amd/mtp.py DeepSeekV4MultiTokenPredictorLayer.forward, rocm_inv_rope_einsum, _get_cached_wo_a_bf16 and
# _fused_inverse_rope_gptj are unchanged; attention.py DeepseekV4Attention.forward only renames its helpers
# (attn_gemm_parallel_execute -> _run_parallel_input_projections, attention_impl -> _prepare_and_attn_fn) and keeps
# o_padded, qr_kv, the scores and the normed qr / kv bound to _o_proj; its eager scratch pool is built by the CUDA
# model only (nvidia/model.py DeepseekV4EagerScratchPool); DeepseekV4ROCMAiterMLAAttention._o_proj and
# _fused_wqa_wkv_gemm (and DeepseekV4MLP.forward) send wo_b / fused_wqa_wkv / the shared expert's gate_up under AITER
# through _bpre_attn_gemm (group_fp8_quant of the input, then a B-preshuffled FP8 GEMM): the input's FP8 copy and
# its scales ([T, groups x o_lora_rank] B + 1 / 32 of it at wo_b) beside the output, not priced here (as 0.26.0's FP8
# linear's own input quantization is not); DeepseekV4MoE.forward runs the gate inside the
# MoE runner (0.28.0) with the same float32 logits (router_logits_dtype), and VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS
# (shared expert fused into the routed GEMM, 0.27.0's _fuse_shared_experts_enabled) is off by default (envs.py). From
# 0.29.0 the layer changes: DeepseekV4DecoderLayer.__init__ takes the fused mHC path where AITER's mHC serves (use_fused_mhc
# = use_aiter_mhc or HAS_TILELANG_MHC; _forward_fused_post_pre keeps the caller's row and streams beside the layer's new
# residual streams, and may fold the RMSNorms), attention.py splits qr with a scale (_split_qkv_and_norm), and from 0.30.0
# _get_cached_wo_a_bf16, from 0.31.0 rocm_inv_rope_einsum change: not traced, so the rule stops before 0.29.0 and
# there (and with no release named: the newest read) the verdict says it rests on the unpriced forward
# (``ROCM_FORWARD_UNPRICED``). 0.27.0's worker accounting (utils/mem_utils.py memory_profiling: total_consumed +
# transient_peak_headroom, torch's peak less what is allocated after the profile) still takes the forward's largest
# live set above what stays allocated, as 0.26.0's torch peak increase did. A layer takes
# the unfused mHC path on ROCm (DeepseekV4DecoderLayer.use_fused_mhc is False where AITER's mHC serves a hidden size
# that is a multiple of 256: model_executor/layers/mhc.py), and its largest moments are:
# - the output projection (DeepseekV4ROCMAiterMLAAttention._o_proj -> rocm_inv_rope_einsum): the layer's input
#   streams [T, hc_mult, hidden] and its normed input [T, hidden], DeepseekV4Attention.forward's o_padded [T, heads,
#   head_dim] (ROCm pads no heads: get_padded_num_q_heads) and its locals (qr_kv, the compressor's float32 kv_score,
#   the indexer's float32 kv_score and weights, the normed qr and kv), the inverse-RoPE copy o_ref (the same shape,
#   _fused_inverse_rope_gptj), then the larger of the einsum's [T, groups, o_lora_rank] output with its flatten copy
#   and wo_b's [T, hidden] output, and, at a layer's first call (every layer's, in the profile run), the bf16 wo_a's
#   dequantization in _get_cached_wo_a_bf16: the float32 weight, its expanded block scale and their product,
#   [groups, o_lora_rank, heads x head_dim / groups] each;
# - the MoE (DeepseekV4MoE -> MoERunner -> FusedMoEKernel): the caller's input streams and the post-attention
#   residual streams, the normed input, the router's float32 logits [T, experts] (GateLinear out_dtype), the shared
#   expert's output and the kernel's output [T, hidden] (FusedMoEKernel.apply torch.empty_like), and what the routed
#   experts compute on (``rocm_moe_rows``);
# - in the MTP drafter's dummy run (v1/spec_decode/llm_base_proposer.py dummy_run, after the target's forward, whose
#   [T, hidden] output _dummy_run holds): the embedding, fused_mtp_input_rmsnorm's enorm [T, hidden] and hnorm
#   [T, hc_mult, hidden] outputs beside the drafter layer's own moments (amd/mtp.py).
ROCM_FORWARD_FROM: tuple[int, int, int] = (0, 25, 0)
# From 0.29.0 (read in the 0.29.0 wheel, PyPI; ``ROCM_FORWARD_029_SOURCE``) a target layer takes the fused mHC path
# where AITER's mHC serves (amd/model.py DeepseekV4DecoderLayer.__init__: use_fused_mhc = use_aiter_mhc or
# HAS_TILELANG_MHC, use_aiter_mhc = HAS_AITER_MHC, AITER found on a supported GPU (model_executor/layers/mhc.py), with a
# hidden size a multiple of 256 and hc_mult 4). Its _forward_fused_post_pre runs after the first layer on the
# previous layer's (x [T, hidden], residual [T, hc_mult, hidden], post_mix, res_mix), which DeepseekV4Model.forward's
# loop still holds while the layer rebinds its own names to mhc_fused_post_pre's new residual streams and layer input
# (_aiter_ops.py mhc_fused_post_pre returns AITER's next_residual and layer_input; the RMSNorm folds into it for a
# hidden size in _AITER_MHC_FUSED_RMSNORM_SIZES, else attn_norm / ffn_norm replace the row). So beside the caller's
# row, streams and mixes a layer holds: at the output projection its streams and normed input and the same attention
# tensors as 0.26.0's; at the fused post + pre after attention the attention-time streams, attention's output and the
# new streams and input; at the MoE its streams, the FFN input and the shared and routed outputs. The first layer
# (residual None: a standalone hc_pre on the caller's own streams) and the MTP drafter's layer (amd/mtp.py calls
# mtp_block without a residual, then hc_post) hold 0.26.0's unfused set. Under AITER's linear
# (_aiter_ops.py is_linear_fp8_enabled: VLLM_ROCM_USE_AITER and VLLM_ROCM_USE_AITER_LINEAR, default on, with wq_b on
# the block-scaled FP8 kernel and q_lora_rank a multiple of 128), amd/rocm.py DeepseekV4ROCMAiterMLAAttention.
# _split_qkv_and_norm normalizes and quantizes qr in one kernel (_fused_mla_dual_rms_norm_group_quant_impl: qr FP8
# [T, q_lora_rank] and float32 scales [T, q_lora_rank / 128], kv bf16), in place of the bf16 normed qr.
# prepare_compressor_gemm_fusion (run at load) makes the C4 layer's two float32 scores views of one torch.mm output
# of the same size; rocm_inv_rope_einsum, _fused_inverse_rope_gptj, _get_cached_wo_a_bf16, _o_proj and amd/mtp.py
# are 0.28.0's; the MoE runner launches the shared expert first (SharedExperts.maybe_forward_async) and keeps both
# outputs. Not priced: any scratch AITER's mHC kernels take (aiter/ops/mhc.py not read), and, as in 0.26.0
# (model_executor/kernels/linear/scaled_mm/BlockScaledMMLinearKernel.py apply_weights: QuantFP8 of the input while
# apply_input_quant) and 0.27.0 / 0.28.0 (amd/rocm.py _bpre_attn_gemm), wo_b's FP8 copy of its input and scales.
ROCM_FORWARD_FUSED_MHC_FROM: tuple[int, int, int] = (0, 29, 0)
# From 0.30.0 (read in the 0.30.0 wheel, PyPI; ``ROCM_FORWARD_030_SOURCE``) amd/rocm.py DeepseekV4ROCMAiterMLAAttention
# .forward computes the attention inputs inside a callee: _run_sequential_pipeline (a layer without an indexer; aux
# streams are now made on ROCm too, amd/model.py, and kept only for CSA layers) or, on a CSA layer in the profile run
# (attn_metadata not a dict: _enable_csa_multi_stream), _prepare_and_attn's default and compressor chains. So qr_kv,
# the float32 scores and the normed qr / kv are freed before _o_proj, which holds o_padded and o_ref beside the
# einsum / wo_b or the first call's wo_a dequantization; those locals live instead beside o_padded and q (ROCm pads no
# heads: _fused_qnorm_rope_kv_insert returns q itself in the profile run) while attention runs. The decoder layer
# (_forward_fused_post_pre, forward, hc_pre), DeepseekV4Model.forward, _o_proj, rocm_inv_rope_einsum and
# _fused_inverse_rope_gptj are 0.29.0's; _get_cached_wo_a_bf16 reads its scale through get_fp8_block_weight_scale (the
# same float32 product); _split_qkv_and_norm keeps the FP8 qr where both wq_b kernels agree on a scale layout;
# fused_mtp_input_rmsnorm (now a kernel object) still returns new enorm / hnorm outputs; the heterogeneous shared
# expert fusion needs VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS (default off, envs.py); mhc.py's fused post + pre
# takes AITER's op where it has one (HAS_AITER_MHC_FUSED), the fallbacks not traced.
ROCM_FORWARD_LOCALS_FREED_FROM: tuple[int, int, int] = (0, 30, 0)
# From 0.31.0 (read in the 0.31.0 wheel, PyPI; ``ROCM_FORWARD_031_SOURCE``) the output projection changes
# (amd/rocm.py DeepseekV4ROCMAiterMLAAttention._o_proj): where wo_a stays FP8 (``wo_a_fp8_on``: gfx950 under
# VLLM_ROCM_USE_AITER) AITER's inverse_rope_group_quant rotates and quantizes o into o_fp8 [T, groups, heads x head_dim
# / groups] FP8 with e8m0 scales (one byte a 128) and batched_gemm_a8w8_mxscale returns the token-major [T, groups,
# o_lora_rank] bf16 output (ROCm/aiter aiter/ops/batched_gemm_op_a8w8.py: Y = torch.empty((m, g, n)), so flatten(1)
# is a view), held with o_fp8 and its scales (the method's names) to wo_b's output; no dequantization. Elsewhere
# rocm_inv_rope_einsum runs with inverse_rope=False (the attention has rotated the rows: o_ref is o itself, no copy),
# then the cached bf16 wo_a (_get_cached_wo_a_bf16 unchanged) and the einsum with its flatten copy. The rest is 0.30.0's:
# DeepseekV4ROCMAiterMLAAttention.forward allocates o_padded as before; a HCA layer now takes the multi-stream path in
# the profile run too (platforms/rocm.py enable_multi_stream_overlap: the old gate) and holds q, the normed qr and kv
# while attention runs, a subset of the CSA layer's set, whose chain is 0.30.0's; amd/model.py's decoder layer and
# DeepseekV4Model.forward, model_executor/layers/mhc.py, amd/mtp.py's forward and common/ops/fused_mtp_input_rmsnorm.py
# are unchanged. The AITER MoE's kernel changes: VLLM_ROCM_USE_AITER_MOE_SITUV2 'auto' (default) selects AITER's
# SiTUv2 a4w4 path (_aiter_ops.py _resolve_situv2_activation, _sync_aiter_situv2_moe_env sets AITER_SITUV2_A4W4=1;
# 0.30.0's default was a16w4), whose buffers were not read: on gfx950 under AITER's MoE the forward stays unpriced.
# The 0.32.0 wheel keeps these moments: amd/rocm.py forward, _prepare_and_attn, _o_proj, _split_qkv_and_norm,
# prepare_attn_preshuffle / _prepare_fp8_wo_a and rocm_aiter_mla_sparse.py rocm_inv_rope_einsum /
# _get_cached_wo_a_bf16 are 0.31.0's (its other changes there are decode kernels); attention.py is unchanged;
# amd/model.py adds only the opt-in --moe-backend aiter_mega_moe (DeepseekV4AiterMegaMoEExperts, gfx950 with MoRI, not
# traced: rocm_moe_rows says so); mhc.py's new fused delayed seam serves the delayed path the AMD model does not take;
# the MoE runner's and FusedMoEKernel's changes are weight naming and an optional output hook, default None;
# VLLM_ROCM_USE_AITER_MOE_SITUV2 still 'auto' = a4w4. Its forward_mqa skips the warm-up gather under
# VLLM_ROCM_USE_AITER_TRITON_SPARSE_MLA (default off; dsv4_rocm_profile_workspace does not read it). The 0.33.0 wheel
# changes amd/rocm.py, amd/model.py and attention.py again: not traced.
ROCM_FORWARD_031_FROM: tuple[int, int, int] = (0, 31, 0)
ROCM_FORWARD_UNTIL: tuple[int, int, int] = (0, 33, 0)
ROCM_FORWARD_031_SOURCE = (
    "vllm 0.31.0 wheel (PyPI): models/deepseek_v4/amd/rocm.py DeepseekV4ROCMAiterMLAAttention._o_proj (the FP8 wo_a "
    "path: inverse_rope_group_quant, batched_gemm_a8w8_mxscale; else rocm_inv_rope_einsum(..., inverse_rope=False)), "
    "prepare_attn_preshuffle / _prepare_fp8_wo_a, forward and _prepare_and_attn (HCA dual-stream), "
    "v1/attention/ops/rocm_aiter_mla_sparse.py rocm_inv_rope_einsum, platforms/rocm.py enable_multi_stream_overlap; "
    "ROCm/aiter aiter/ops/batched_gemm_op_a8w8.py batched_gemm_a8w8_mxscale (token-major [M, G, N] output, x_scale "
    "[M, G, K / 128] uint8); the same moments in the 0.32.0 wheel"
)
ROCM_FORWARD_029_SOURCE = (
    "vllm 0.29.0 wheel (PyPI): models/deepseek_v4/amd/model.py DeepseekV4DecoderLayer.__init__ (use_fused_mhc, "
    "fuse_mhc_rmsnorm) and _forward_fused_post_pre, DeepseekV4Model.forward (the loop's hidden_states, residual, "
    "post_mix, res_mix), model_executor/layers/mhc.py (HAS_AITER_MHC, MHCFusedPostPreOp), _aiter_ops.py "
    "mhc_fused_post_pre, is_linear_fp8_enabled and _fused_mla_dual_rms_norm_group_quant_impl, models/deepseek_v4/"
    "amd/rocm.py DeepseekV4ROCMAiterMLAAttention._split_qkv_and_norm, _wq_b_uses_aiter_block_scaled and "
    "prepare_compressor_gemm_fusion, models/deepseek_v4/attention.py DeepseekV4Attention.forward, amd/mtp.py "
    "DeepSeekV4MultiTokenPredictorLayer.forward (mtp_block without a residual, then hc_post), "
    "fused_moe/runner/moe_runner.py; the inverse-RoPE / wo_a path (v1/attention/ops/rocm_aiter_mla_sparse.py) as "
    "0.28.0's"
)
ROCM_FORWARD_030_SOURCE = (
    "vllm 0.30.0 wheel (PyPI): models/deepseek_v4/amd/rocm.py DeepseekV4ROCMAiterMLAAttention.__init__ (aux streams "
    "for CSA layers only), forward, _enable_csa_multi_stream, _run_sequential_pipeline, _prepare_and_attn and "
    "_split_qkv_and_norm, models/deepseek_v4/attention.py DeepseekV4Attention._prepare_and_attn and "
    "_fused_qnorm_rope_kv_insert, amd/model.py (DeepseekV4DecoderLayer and DeepseekV4Model.forward as 0.29.0's; "
    "_heterogeneous_shared_expert_enabled), model_executor/layers/mhc.py MHCFusedPostPreOp.forward_hip, "
    "v1/attention/ops/rocm_aiter_mla_sparse.py _get_cached_wo_a_bf16, common/ops/fused_mtp_input_rmsnorm.py"
)
ROCM_FORWARD_SOURCE = (
    "vllm 0.26.0 wheel (PyPI), the profile run's eager dummy forward on ROCm (v1/worker/gpu_model_runner.py "
    "_dummy_run, no attention metadata): models/deepseek_v4/amd/model.py DeepseekV4DecoderLayer._forward_unfused_post_pre "
    "(use_fused_mhc off under AITER's mHC, model_executor/layers/mhc.py) and DeepseekV4MoE, models/deepseek_v4/attention.py "
    "DeepseekV4Attention.forward (o_padded, qr_kv, kv_score, the normed qr and kv live to its return) and attention_impl, "
    "amd/rocm.py DeepseekV4ROCMAiterMLAAttention (get_padded_num_q_heads: no padding; _o_proj), v1/attention/ops/"
    "rocm_aiter_mla_sparse.py rocm_inv_rope_einsum, _fused_inverse_rope_gptj and _get_cached_wo_a_bf16 (float32 weight x "
    "_expand_2d_block_scales, then bf16), model_executor/layers/fused_moe/runner/moe_runner.py MoERunner._forward_impl "
    "(the gate's float32 logits; shared experts before the routed ones) and modular_kernel.py FusedMoEKernel.apply, "
    "amd/mtp.py DeepSeekV4MultiTokenPredictor(Layer).forward and common/ops/fused_mtp_input_rmsnorm.py; the same "
    "attention, MTP and inverse-RoPE code in the 0.25.0 wheel; the same moments in the 0.27.0 and 0.28.0 wheels "
    "(amd/rocm.py _o_proj and _bpre_attn_gemm under AITER: wo_b's input quantized to FP8, not priced)"
)
ROCM_FORWARD_UNPRICED = (
    "DeepSeek-V4's eager dummy forward on ROCm is traced for vLLM 0.25.0-0.32.x only; from 0.33.0 (and with no "
    "release named: the newest read) it is not traced: the 0.33.0 wheel changes models/deepseek_v4/amd/rocm.py, "
    "amd/model.py and attention.py (before 0.25.0 not read); k3plan's analytic temporaries stand for it, so the pool "
    "may be too large by the difference"
)
ROCM_FORWARD_SITUV2_UNPRICED = (
    "DeepSeek-V4's eager dummy forward on ROCm at vLLM 0.31.x-0.32.x on gfx950 under AITER's MoE is not traced: "
    "VLLM_ROCM_USE_AITER_MOE_SITUV2 'auto' (the default) selects AITER's SiTUv2 a4w4 MoE kernels (the 0.31.0 wheel's "
    "_aiter_ops.py _resolve_situv2_activation), whose buffers were not read; k3plan's analytic temporaries stand for "
    "it, so the pool may be too large by the difference"
)


def rocm_forward_applies(release: tuple[int, int, int] | None, *, hardware: str = "", aiter_moe: bool = False) -> bool:
    """Whether ``dsv4_rocm_forward_live`` traces ``release`` (``ROCM_FORWARD_FROM`` to ``ROCM_FORWARD_UNTIL``, read in
    the 0.25.0-0.32.0 wheels; no release named: the newest read, outside it, ``ROCM_FORWARD_UNPRICED``); from 0.31.0
    not on ``hardware`` gfx950 where AITER's MoE runs (``aiter_moe``: ``aiter_fused_moe_runs``;
    ``ROCM_FORWARD_SITUV2_UNPRICED``)."""
    if release is None or not ROCM_FORWARD_FROM <= release < ROCM_FORWARD_UNTIL:
        return False
    return not (release >= ROCM_FORWARD_031_FROM and hardware in GFX950 and aiter_moe)


def rocm_forward_unpriced(release: tuple[int, int, int] | None, *, hardware: str = "", aiter_moe: bool = False) -> str:
    """Why ``dsv4_rocm_forward_live`` does not price ``release`` ('' where it does)."""
    if rocm_forward_applies(release, hardware=hardware, aiter_moe=aiter_moe):
        return ""
    if release is not None and ROCM_FORWARD_031_FROM <= release < ROCM_FORWARD_UNTIL:
        return ROCM_FORWARD_SITUV2_UNPRICED
    return ROCM_FORWARD_UNPRICED


# What the routed experts compute on in the profile run under data parallelism (vLLM 0.26.0 wheel, PyPI): with
# data_parallel_size > 1 the MXFP4 method's modular kernel takes the naive prepare/finalize, without expert parallelism
# ('Detected DP deployment with no --enable-expert-parallel. Falling back to AllGather+ReduceScatter', fused_moe/
# all2all_utils.py maybe_make_prepare_finalize) and with it under the default --all2all-backend allgather_reducescatter
# (config/parallel.py; use_ag_rs_all2all_kernels): prepare_finalize/naive_dp_ep.py MoEPrepareAndFinalizeNaiveDPEPModular
# all-gathers the unquantized activations (AiterExperts.expects_unquantized_inputs) and the top-k weights and ids over
# the DP group (distributed/device_communicators/all2all.py AgRsAll2AllManager.dispatch, cuda_communicator.py
# all_gatherv: a new [sum of the ranks' tokens, ...] tensor each), and every rank runs the profile's dummy batch at
# max_num_batched_tokens (num_tokens_across_dp), so the experts compute on DP x the batch's rows. On gfx950 with
# AITER's MoE (AiterExperts, AITER_MXFP4_BF16: --moe-backend aiter or V4's ROCm default) the kernel is ROCm/aiter's
# fused_moe as vLLM 0.26.0 pins it (v0.1.13.post1, experts/rocm_aiter_moe.py): no tuned DeepSeek-V4 shape in its CSVs,
# so at the profile's rows (token x topk > experts: get_ksplit 0) the CK 2-stage path with MXFP4 activations (SiLU:
# q_dtype_a fp4x2), which holds at once moe_sorting's moe_buf [M, hidden] bf16 and its sorted ids and weights
# (M x topk int32 + float32), the activations' MXFP4 [M, hidden / 2] and sorted e8m0 scales (topk x hidden / 32 a row,
# fused_dynamic_mxfp4_quant_moe_sort), stage 1's output a2 [M, topk, shard intermediate] bf16 and its MXFP4 copy with
# scales (fused_moe_2stages).
AITER_MOE_SOURCE = (
    "vllm 0.26.0 wheel (PyPI): model_executor/layers/fused_moe/all2all_utils.py maybe_make_prepare_finalize, "
    "prepare_finalize/naive_dp_ep.py MoEPrepareAndFinalizeNaiveDPEPModular.prepare, distributed/device_communicators/"
    "all2all.py AgRsAll2AllManager.dispatch, cuda_communicator.py all_gatherv, config/parallel.py all2all_backend "
    "(allgather_reducescatter), experts/rocm_aiter_moe.py AiterExperts (expects_unquantized_inputs; AITER pinned "
    "v0.1.13.post1); ROCm/aiter v0.1.13.post1 aiter/fused_moe.py fused_moe_, _moe_sorting_impl, get_ksplit, "
    "get_2stage_cfgs, fused_moe_2stages, aiter/ops/quant.py fused_dynamic_mxfp4_quant_moe_sort"
)
AITER_MOE_HARDWARE = frozenset({"amd-mi355x"})  # AiterExperts._supports_quant_scheme: CK MXFP4 MoE on gfx950 only
AITER_MOE_BACKENDS = frozenset({"", "auto", "aiter"})  # AITER_MXFP4_BF16 first (select_deepseek_v4_mxfp4_moe_backend)
TRUE = ("true", "1")


def aiter_linear_on(env: dict[str, str]) -> bool:
    """Whether vLLM's AITER linear is on for ``env`` (vllm 0.29.0 wheel _aiter_ops.py is_linear_fp8_enabled ->
    is_linear_enabled: VLLM_ROCM_USE_AITER, default off, and VLLM_ROCM_USE_AITER_LINEAR, default on; envs.py)."""
    return env.get("VLLM_ROCM_USE_AITER", "False").lower() in TRUE and (
        env.get("VLLM_ROCM_USE_AITER_LINEAR", "True").lower() in TRUE
    )


def aiter_moe_on(env: dict[str, str]) -> bool:
    """Whether vLLM's AITER MoE is on for ``env`` (vllm 0.26.0 wheel _aiter_ops.py is_fused_moe_enabled:
    VLLM_ROCM_USE_AITER, default off, and VLLM_ROCM_USE_AITER_MOE, default on; envs.py)."""
    return env.get("VLLM_ROCM_USE_AITER", "False").lower() in TRUE and (
        env.get("VLLM_ROCM_USE_AITER_MOE", "True").lower() in TRUE
    )


def aiter_fused_moe_runs(*, hardware: str, moe_backend: str, aiter_on: bool) -> bool:
    """Whether DeepSeek-V4's routed experts run AITER's fused_moe (``AITER_MOE_SOURCE``): gfx950, --moe-backend unset /
    auto / aiter, and AITER's MoE on (``aiter_on``: ``aiter_moe_on``)."""
    return aiter_on and hardware in AITER_MOE_HARDWARE and moe_backend in AITER_MOE_BACKENDS


def rocm_moe_rows(
    *,
    dp: int,
    expert_parallel: bool,
    all2all_backend: str,
    hardware: str,
    moe_backend: str,
    aiter_on: bool,
    experts: int,
    top_k: int,
    hidden: int,
    shard_intermediate: int,
) -> tuple[int, str]:
    """(bytes a local token, how): what DeepSeek-V4's MoE holds for the routed experts in vLLM's ROCm profile run
    beyond the layer's own tensors (``AITER_MOE_SOURCE``): the router's float32 logits and top-k, and, over the rows
    the naive DP dispatch gathers (DP of them a token; 1 without DP), the gathered bf16 activations and top-k, plus,
    where AITER's MoE runs (gfx950, ``aiter_on``: ``aiter_moe_on``), its fused_moe's buffers a row; other kernels'
    buffers are not traced."""
    naive = dp > 1 and (not expert_parallel or all2all_backend in ("", "allgather_reducescatter"))
    rows = dp if naive else 1
    gathered = BF16 * hidden + 8 * top_k if naive else 0
    aiter = aiter_fused_moe_runs(hardware=hardware, moe_backend=moe_backend, aiter_on=aiter_on)
    fused = 0
    if aiter:
        fused = (
            BF16 * hidden  # moe_buf
            + 8 * top_k  # sorted ids and weights
            + hidden // 2
            + top_k * hidden // 32  # the activations' MXFP4 and sorted scales
            + BF16 * top_k * shard_intermediate  # stage 1's output a2
            + top_k * shard_intermediate // 2
            + top_k * shard_intermediate // 32  # a2's MXFP4 and scales
        )
    local = F32 * experts + 8 * top_k
    total = local + rows * (gathered + fused)
    kernel = (
        f"AITER's fused_moe {fused:,} B a row (CK 2-stage, MXFP4 activations, a shard intermediate of "
        f"{shard_intermediate:,})"
        if aiter
        else f"the experts' kernel under --moe-backend {moe_backend or 'unset'} on {hardware}"
        + ("" if aiter_on else " without AITER's MoE (VLLM_ROCM_USE_AITER / _MOE)")
        + " not traced"
    )
    return total, (
        f"the MoE {total:,} B a token: router logits {experts} float32 and top-k {top_k}, "
        + (f"{rows} rows gathered over DP a token ({gathered:,} B: bf16 activations and top-k), " if naive else "")
        + f"{kernel} ({AITER_MOE_SOURCE})"
    )


def dsv4_rocm_forward_live(
    d: DSV4Dims,
    *,
    tokens: int,
    hidden_size: int,
    local_heads: int,
    q_lora_rank: int,
    tp: int,
    mtp: bool,
    moe_bytes: int = 0,
    release: tuple[int, int, int] | None = None,
    aiter_linear: bool = False,
    wo_a_fp8: bool = False,
) -> tuple[int, str]:
    """(bytes, how): the largest live set of vLLM's eager DeepSeek-V4 dummy forward on ROCm at ``tokens``
    (``ROCM_FORWARD_SOURCE``): a layer's output projection (with the first call's wo_a dequantization) or its MoE
    (``moe_bytes`` a token: ``rocm_moe_rows``), and in the MTP drafter's dummy run the same beside its inputs. From
    0.29.0 (``release``; ``ROCM_FORWARD_029_SOURCE``) a target layer after the first takes the fused mHC path: the
    caller's row, streams and mixes stay live beside each of its moments, and the fused post + pre after attention is
    one more; the drafter's layer keeps the unfused set; under AITER's linear (``aiter_linear``: ``aiter_linear_on``)
    the normed qr is FP8 with float32 scales. From 0.30.0 (``ROCM_FORWARD_030_SOURCE``) the attention's locals are
    freed before the output projection: a layer holds them beside o_padded and q while attention runs, or the
    projection's einsum / wo_b or wo_a dequantization beside o_padded and o_ref, the larger. From 0.31.0
    (``ROCM_FORWARD_031_SOURCE``) no o_ref copy: where wo_a stays FP8 (``wo_a_fp8``: ``wo_a_fp8_on``) the projection
    holds o_fp8 and its e8m0 scales with the BMM's token-major output and wo_b's, no dequantization; else the einsum
    runs on o itself."""
    assert d.csa2 is None
    fused = (
        release is not None
        and release >= ROCM_FORWARD_FUSED_MHC_FROM
        and hidden_size % 256 == 0
        and d.hc_mult == 4  # use_aiter_mhc; a TileLang-only fused path is not traced
    )
    t, h, hd = tokens, hidden_size, d.head_dim
    stream = BF16 * d.hc_mult * h  # a token's mHC streams
    row = BF16 * h
    mix = F32 * (d.hc_mult + d.hc_mult * d.hc_mult)  # hc_pre's post and comb mixes
    o = BF16 * local_heads * hd  # o_padded, q, o_ref: no padded heads on ROCm
    groups = max(d.o_groups // max(tp, 1), 1)
    einsum = BF16 * groups * d.o_lora_rank
    scores = 0
    for ratio in set(d.compress_ratios):
        s = 0
        if ratio:
            coff = 2 if ratio == CSA_RATIO else 1
            s = F32 * 2 * coff * hd  # the compressor's kv_score
            if ratio == CSA_RATIO:  # the indexer's compressor kv_score and weights_proj
                s += F32 * 2 * 2 * d.index_head_dim + BF16 * d.index_n_heads
        scores = max(scores, s)
    qr_fp8 = release is not None and release >= ROCM_FORWARD_FUSED_MHC_FROM and aiter_linear and q_lora_rank % 128 == 0
    # qr_kv and the normed qr (0.29.0 under AITER's linear: FP8 and float32 scales a 128) and kv, the scores
    normed_qr = q_lora_rank + F32 * (q_lora_rank // 128) if qr_fp8 else BF16 * q_lora_rank
    attn_locals = BF16 * (q_lora_rank + hd) + normed_qr + BF16 * hd + scores
    dequant = 3 * F32 * local_heads * hd * d.o_lora_rank  # float32 weight, expanded scale, product
    v031 = release is not None and release >= ROCM_FORWARD_031_FROM
    fp8_proj = v031 and wo_a_fp8
    if v031:  # no o_ref: the FP8 o and its scales, or the einsum on o itself (ROCM_FORWARD_031_SOURCE)
        o8 = local_heads * hd + local_heads * hd // 128  # o_fp8 and its e8m0 scales, one byte a 128
        projection = t * (o + o8 + einsum + row) if fp8_proj else t * o + max(t * (2 * einsum + row), dequant)
        attention = t * (stream + row + mix) + max(t * (2 * o + attn_locals), projection)
    elif release is not None and release >= ROCM_FORWARD_LOCALS_FREED_FROM:  # the locals die before _o_proj
        attention = t * (stream + row + mix + 2 * o) + max(t * attn_locals, t * (2 * einsum + row), dequant)
    else:
        attention = t * (stream + row + mix + 2 * o + attn_locals) + max(t * (2 * einsum + row), dequant)
    moe = t * (2 * stream + 3 * row + mix + moe_bytes)
    drafter = t * (3 * row + stream) if mtp else 0  # the target's output, the embedding, enorm, hnorm
    live = max(attention, moe) + drafter
    moment = "the output projection" if attention >= moe else "the MoE"
    if mtp and drafter:
        moment += ", in the MTP drafter's layer beside its inputs"
    source = ROCM_FORWARD_SOURCE
    if fused:  # a target layer after the first on the fused mHC path, the caller's row, streams and mixes beside it
        caller = t * (row + stream + mix)
        fused_attention = caller + attention
        post_pre = caller + t * (2 * stream + 2 * row + 2 * mix)  # attention's streams and output, the new ones
        fused_moe = caller + t * (stream + 3 * row + mix + moe_bytes)
        target = max(fused_attention, post_pre, fused_moe)
        live = max(target, max(attention, moe) + drafter)
        if live == target:
            moment = {
                fused_attention: "the output projection",
                post_pre: "the fused mHC post + pre after attention",
                fused_moe: "the MoE",
            }[target] + " of a target layer on the fused mHC path, beside the caller's row and streams"
        source = f"{ROCM_FORWARD_029_SOURCE}; {ROCM_FORWARD_SOURCE}"
        if release is not None and release >= ROCM_FORWARD_LOCALS_FREED_FROM:
            source = f"{ROCM_FORWARD_030_SOURCE}; {source}"
    if v031:
        source = f"{ROCM_FORWARD_031_SOURCE}; {source}"
    return live, (
        f"vLLM's dummy forward on ROCm at {t:,} tokens holds {live / GiB:.2f} GiB at its largest ({moment}: "
        + (
            f"{local_heads} heads x {hd} bf16 o_padded and FP8 o_fp8 (wo_a FP8: no dequantization)"
            if fp8_proj
            else f"{local_heads} heads x {hd} bf16 o_padded" + ("" if v031 else " and o_ref")
        )
        + f", the mHC streams of {d.hc_mult}"
        + ("" if fp8_proj else f", the first call's wo_a dequantization {dequant / GiB:.2f} GiB")
        + (", the normed qr in FP8" if qr_fp8 else "")
        + f"; the MoE {t * moe_bytes / GiB:.2f} GiB beyond the layer's tensors; {source})"
    )
