"""What vLLM's DeepSeek-V4 model holds beside its parameters and what its dummy forward holds at its largest
(engines/vllm/dsv4_workspace.py: dsv4_model_buffers, rope_tables, dsv4_forward_live), read in the 0.26.0 wheel (V4)
and the 0.31.0 wheel (V4.1's RoPE). The figures below are the ones a helper traced in the wheel line by line
(DeepSeek-V4-Flash, TP 2, 8,192 batched tokens, MTP), the small mHC mix tensors (~1.3 MB) aside."""

from __future__ import annotations

import pytest

from k3plan.engines.vllm.dsv4_workspace import (
    dspark_runner_buffers,
    dsv4_forward_live,
    dsv4_indexer_live,
    dsv4_model_buffers,
    dsv41_dspark_profile,
    rope_tables,
)
from k3plan.models.loader import load_model

MIB = 2**20


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash").spec


def test_one_float32_rope_table_a_distinct_theta(flash):
    """V4: compress_rope_theta on the compressed layers, rope_theta on the window-only ones, YaRN's 65,536 x 16
    positions on both: 256 MiB a table. V4-Pro's decoder has no window-only layer: one table, two with its MTP layer.
    V4.1 (0.31.0): the window-only layers plain RoPE over max_position_embeddings, also 1,048,576 positions."""
    d = flash.dsv4
    assert rope_tables(d, d.compress_ratios, v41=False)[0] == 2 * 1_048_576 * 64 * 4
    pro = load_model("deepseek-v4-pro").spec.dsv4
    assert rope_tables(pro, pro.compress_ratios, v41=False)[0] == 256 * MIB
    assert rope_tables(pro, (*pro.compress_ratios, *pro.mtp_compress_ratios), v41=False)[0] == 512 * MIB
    v41 = load_model("deepseek-v4.1-flash").spec.dsv4
    assert rope_tables(v41, v41.compress_ratios, v41=True)[0] == 512 * MIB


def test_the_model_buffers_at_8192_tokens_with_mtp(flash):
    """topk_indices_buffer 8,192 x 512 int32 in the model and in the MTP drafter (16 MiB each), _mtp_hidden_buffer
    8,192 x 4 x 4,096 bf16 (256 MiB, whatever the speculative config), the two RoPE tables (512 MiB)."""
    got, how = dsv4_model_buffers(
        flash.dsv4, max_num_batched_tokens=8192, hidden_size=flash.hidden_size, mtp_ratios=(0,)
    )
    assert got == (16 + 16 + 256 + 512) * MIB and "_mtp_hidden_buffer" in how
    alone = dsv4_model_buffers(flash.dsv4, max_num_batched_tokens=8192, hidden_size=flash.hidden_size)[0]
    assert got - alone == 16 * MIB  # the drafter's own topk buffer; its layer's theta is the decoder's window one


def test_the_dummy_forward_s_largest_moment(flash):
    """At q's pad in a CSA layer: the caller's hidden and residual, the new residual and layer input, o_padded and q
    padded to 64 heads, q at 32, qr_kv and its normed halves, the two float32 kv_scores, weights_proj: 2,049 MiB; the
    MTP drafter's layer (the target output, embedding, enorm, hnorm, its residual and input, the same attention):
    2,096 MiB, the peak."""
    kw = dict(tokens=8192, hidden_size=flash.hidden_size, local_heads=32, q_lora_rank=flash.mla.q_lora_rank)
    assert dsv4_forward_live(flash.dsv4, mtp=False, **kw)[0] == 2_148_532_224
    assert dsv4_forward_live(flash.dsv4, mtp=True, **kw)[0] == 2_197_815_296
    # above 64 local heads FlashMLA pads to 128 (get_padded_num_q_heads)
    assert dsv4_forward_live(flash.dsv4, mtp=False, **{**kw, "local_heads": 65})[0] > 2_148_532_224 + 1024 * MIB


def test_0_20_pads_no_q_in_its_profile_run(flash):
    """vLLM 0.20.x (the 0.20.0 wheel): the profile run returns before q's pad, so at 2,048 tokens on TP 8 (8 local
    heads, FlashMLA's 64 padded only for o_padded) a CSA layer holds the residual stream and attn_norm's row (40 KiB a
    token), o_padded (64 KiB), qr_kv and its normed halves (6 KiB), q unpadded (8 KiB) and the compressor's float32
    kv_score (8 KiB): 252 MiB, not the 464.25 of 0.23.0's padded layout; the O projection (o_padded, qr_kv, o_fp8 and
    its scales, z for one local group, its FP8 copy, wo_b's row) is 82.125 KiB a token, the larger beside the MTP
    drafter's embedding, enorm, target output, layer input and two streams: 356.3 MiB."""
    kw = dict(tokens=2048, hidden_size=flash.hidden_size, local_heads=8, q_lora_rank=flash.mla.q_lora_rank, tp=8)
    t, row, stream = 2048, 4096 * 2, 4 * 4096 * 2
    o_padded, qr_kv, q = 64 * 512 * 2, (1024 + 512) * 2, 8 * 512 * 2
    layer = t * (row + stream + o_padded + 2 * qr_kv + q + 4 * 2 * 2 * 512)
    assert dsv4_forward_live(flash.dsv4, mtp=False, release=(0, 20, 0), **kw)[0] == layer == 252 * MIB
    oproj = o_padded + qr_kv + 8 * 512 + 8 * 512 * 4 // 128 + 1024 * 2 + 1024 + 1024 * 4 // 128 + row
    drafter = t * (4 * row + 2 * stream + oproj)
    assert dsv4_forward_live(flash.dsv4, mtp=True, release=(0, 20, 0), **kw)[0] == drafter
    # 0.23.0 on (and with no release named): q padded to 64 heads beside the rest
    padded = dsv4_forward_live(flash.dsv4, mtp=False, release=(0, 23, 0), **kw)[0]
    assert padded == dsv4_forward_live(flash.dsv4, mtp=False, **kw)[0] > layer


def test_the_indexer_logits_share_their_moment_with_the_csa_layer(flash):
    """The indexer's 512 MiB profile-run logits are allocated while its CSA layer holds the forward's tensors: at q's
    pad (2,049 MiB at TP 2, 8,192 tokens) less the unpadded q (256 MiB), plus the indexer's fp8 q (64 heads x 128)
    and float32 weights: 1,859 MiB beside the logits. The MTP layer (window-only) has no indexer."""
    kw = dict(tokens=8192, hidden_size=flash.hidden_size, local_heads=32, q_lora_rank=flash.mla.q_lora_rank)
    pad = dsv4_forward_live(flash.dsv4, mtp=False, **kw)[0]
    live = dsv4_indexer_live(flash.dsv4, **kw)[0]
    assert live == pad - 8192 * 32 * 512 * 2 + 8192 * 64 * 128 + 4 * 8192 * 64 == 1_949_302_784
    # vLLM 0.20.x (the 0.20.0 wheel): the profile run returns before q's pad and the compressors' scores are their
    # own temporaries, so the residual stream, attn_norm's row, o_padded, qr_kv and its normed halves, q at 8 heads
    # (TP 8), the indexer's bf16 and fp8 q, weights_proj's bf16 and the float32 weights: 284.75 MiB at 2,048 tokens
    kw8 = {**kw, "tokens": 2048, "local_heads": 8}
    assert dsv4_indexer_live(flash.dsv4, release=(0, 20, 0), **kw8)[0] == 298_582_016


def test_v41_with_dspark_as_the_0_31_wheel_profiles_it():
    """DeepSeek-V4.1-Flash, 5 DSpark tokens, TP 8, vLLM's H200 defaults (8,192 tokens, 1,024 sequences): the drafter's
    Marlin workspace lane (5,120 draft rows x top-3 x 5,120, twice), the draft logits' all-gather (two [5,120,
    129,280] bf16 copies + the [5,120, 16,160] shard) with six hidden-state rows held, and Model Runner V2's buffers."""
    s = load_model("deepseek-v4.1-flash").spec
    lane, transient, how = dsv41_dspark_profile(
        s.dsv4, tokens=8192, max_num_seqs=1024, k=5, vocab=s.vocab_size, hidden=s.hidden_size, tp=8
    )
    assert (lane, transient) == (314_572_800, 3_389_849_600) and "all-gather" in how
    runner, _ = dspark_runner_buffers(max_num_seqs=1024, tokens=8192, k=5, vocab=s.vocab_size, hidden=s.hidden_size)
    # draft logits 1,323,827,200 + DSpark hidden 83,886,080 + penalties 529,530,880 + 16,547,840 + bitmask 99,287,040
    assert runner == 2_053_079_040
