"""DeepSeek-V4's eager scratch pool on vLLM's CUDA model (engines/vllm/dsv4_workspace.py dsv4_scratch_pool,
dsv4_model_buffers).

Read in the vllm 0.27.0 and 0.28.0 wheels (PyPI): models/deepseek_v4/eager_scratch.py DeepseekV4EagerScratchPool.__init__
allocates _q bf16 [max_num_tokens, padded_q_heads, q_head_dim] and one uint8 storage of max(_packed_size) over three
spec sets (each view starting on a 256 B boundary): the FP4 indexer's values [T, index_q_heads, index_q_head_dim // 2]
and scales [T, index_q_heads, index_q_head_dim // MXFP4_BLOCK_SIZE (32)] uint8 and weights [T, index_q_heads] float32;
the global top-k [T, index_topk] and lengths [T] int32; the compressor's [T, q_head_dim] float32. nvidia/model.py
DeepseekV4Model.__init__ builds it (not under use_ubatching) with padded_q_heads from FlashMLA's
get_padded_num_q_heads (64 up to 64 heads). The 0.29.0 wheel has no eager_scratch.py."""

from __future__ import annotations

from k3plan.engines.vllm.dsv4_workspace import dsv4_model_buffers, dsv4_scratch_pool
from k3plan.models.loader import load_model


def _flash():
    return load_model("deepseek-v4-flash").spec.dsv4


def test_pool_at_8192_tokens_on_flash_tp8():
    d = _flash()
    assert (d.head_dim, d.index_n_heads, d.index_head_dim, d.index_topk) == (512, 64, 128, 512)
    q = 8192 * 64 * 512 * 2  # 8 heads a GPU padded to FlashMLA's 64
    fp4 = 8192 * 64 * 64 + 8192 * 64 * 4 + 8192 * 64 * 4  # values, scales, float32 weights: each 256 B aligned
    assert dsv4_scratch_pool(d, max_num_batched_tokens=8192, local_heads=8) == q + fp4


def test_pool_only_in_027_and_028():
    d = _flash()
    kw = dict(max_num_batched_tokens=8192, hidden_size=4096, local_heads=8)
    base, _ = dsv4_model_buffers(d, **kw, release=(0, 26, 0))
    pool = dsv4_scratch_pool(d, max_num_batched_tokens=8192, local_heads=8)
    for release, extra in (((0, 27, 0), pool), ((0, 28, 1), pool), ((0, 29, 0), 0), (None, 0)):
        total, how = dsv4_model_buffers(d, **kw, release=release)
        assert total == base + extra
        assert ("eager scratch pool" in how) == bool(extra)


def test_034_layer_holds_one_residual_stream():
    # vllm 0.34.0 wheel: nvidia/model.py DeepseekV4Model.forward passes reuse_residual=True, and
    # model_executor/kernels/mhc/tilelang.py _mhc_fused_post_pre_tilelang_impl writes residual_cur into the given
    # residual's storage on the unfused path (num_tokens > _FUSED_POST_PRE_MAX_TOKENS, 32); 0.33.0 has no reuse
    from k3plan.engines.vllm.dsv4_workspace import dsv4_forward_live, dsv4_indexer_live

    d = _flash()
    kw = dict(tokens=8192, hidden_size=4096, local_heads=8, q_lora_rank=1024)
    stream = 2 * 8192 * d.hc_mult * 4096
    old, _ = dsv4_forward_live(d, **kw, mtp=False, release=(0, 33, 0))
    new, how = dsv4_forward_live(d, **kw, mtp=False, release=(0, 34, 0))
    assert old - new == stream and "1 mHC residual stream" in how
    assert dsv4_forward_live(d, **kw, mtp=False, release=None)[0] == old  # no release: the cited 0.26.0 code
    old, _ = dsv4_indexer_live(d, **kw, release=(0, 33, 0))
    new, _ = dsv4_indexer_live(d, **kw, release=(0, 34, 0))
    assert old - new == stream


def test_pool_heads_under_flashinfer():
    # nvidia/flashinfer_sparse.py (0.27.0 / 0.28.0) _pad_to_supported_q_heads: 32 local heads (V4-Pro at TP 4) stay 32,
    # where FlashMLA pads them to 64
    d = load_model("deepseek-v4-pro").spec.dsv4
    flashmla = dsv4_scratch_pool(d, max_num_batched_tokens=8192, local_heads=32)
    flashinfer = dsv4_scratch_pool(
        d, max_num_batched_tokens=8192, local_heads=32, attention_backend="FLASHINFER_MLA_SPARSE_DSV4"
    )
    assert flashmla - flashinfer == 8192 * 32 * 512 * 2


def test_q_pad_only_below_the_padded_count_and_flashinfer_heads():
    # attention.py _fused_qnorm_rope_kv_insert (0.23.0, 0.26.0, 0.34.0 wheels): F.pad only where n_local_heads <
    # padded_heads; nvidia/flashinfer_sparse.py (0.27.0-0.30.x) pads 32 heads to 32
    from k3plan.engines.vllm.dsv4_workspace import dsv4_forward_live, v4_padded_heads

    assert v4_padded_heads(32, release=(0, 28, 0)) == 64
    assert v4_padded_heads(32, release=(0, 28, 0), attention_backend="FLASHINFER_MLA_SPARSE_DSV4") == 32
    assert v4_padded_heads(32, release=(0, 26, 0), attention_backend="FLASHINFER_MLA_SPARSE_DSV4") == 64
    assert v4_padded_heads(32, release=(0, 31, 0), attention_backend="FLASHINFER_MLA_SPARSE_DSV4") == 64
    d = load_model("deepseek-v4-pro").spec.dsv4
    kw = dict(tokens=8192, hidden_size=7168, local_heads=32, q_lora_rank=1536, mtp=False, release=(0, 28, 0))
    flashmla, _ = dsv4_forward_live(d, **kw)
    flashinfer, _ = dsv4_forward_live(d, **kw, attention_backend="FLASHINFER_MLA_SPARSE_DSV4")
    # o_padded 64 -> 32 heads, and no padded copy of q (64 heads)
    assert flashmla - flashinfer == 2 * 8192 * 512 * (32 + 64)


def test_mtp_hidden_buffer_only_with_a_drafter_from_027():
    # nvidia/model.py DeepseekV4Model.__init__: 0.26.0 allocates _mtp_hidden_buffer whatever the speculative config;
    # 0.27.0 / 0.33.0 only where spec_config.use_eagle() or uses_draft_model()
    d = _flash()
    kw = dict(max_num_batched_tokens=8192, hidden_size=4096)
    row = 8192 * d.hc_mult * 4096 * 2
    with_drafter, _ = dsv4_model_buffers(d, **kw, release=(0, 33, 0))
    alone, how = dsv4_model_buffers(d, **kw, release=(0, 33, 0), drafter_reads_hidden=False)
    assert with_drafter - alone == row and "no _mtp_hidden_buffer" in how
    assert dsv4_model_buffers(d, **kw, release=(0, 26, 0), drafter_reads_hidden=False)[0] == with_drafter
    assert dsv4_model_buffers(d, **kw, release=None, drafter_reads_hidden=False)[0] == with_drafter
