"""DeepSeek-V4.1's profile-run workspace on vLLM's ROCm backends (engines/vllm/dsv4_workspace.py
dsv41_rocm_profile_workspace), as the vllm 0.31.0 wheel (PyPI) reserves it: the sparse indexer's K gather
(v1/attention/ops/rocm_aiter_mla_sparse.py rocm_aiter_sparse_attn_indexer: (T, 128) fp8 + (T, 4), T = 40 x max_model_len
// ratio, v1/attention/backends/mla/indexer.py get_max_prefill_buffer_size), its decode logits on gfx942 / gfx950
((min(tokens, max_num_seqs x (1 + k)), max_model_len // ratio) float32, _max_decode_logits_rows) and the attention
warm-up gather (models/deepseek_v41/amd/rocm.py DeepseekV41ROCMAiterMLAAttention.forward_mqa: (4, cdiv(L, ratio) +
window + tokens, 512) bf16), one WorkspaceManager buffer, the largest view."""

from __future__ import annotations

from k3plan.engines.vllm.dsv4_workspace import dsv41_rocm_profile_workspace
from k3plan.models.loader import load_model

M = 1_048_576
GiB = 2**30


def _ws(**kw):
    d = load_model("deepseek-v4.1-flash").spec.dsv4
    args = dict(max_model_len=M, max_num_batched_tokens=4096, max_num_seqs=128, spec_tokens=5, local_heads=32)
    args.update(kw)
    return dsv41_rocm_profile_workspace(d, hardware=args.pop("hardware", "amd-mi300x"), release=(0, 31, 0), **args)


def test_the_k_gather_of_the_ratio_1_indexer_is_the_largest_view_at_128_sequences():
    ws, logits, how = _ws()
    # 40 x 1,048,576 keys of 128 + 4 B: the ratio-1 index source (V4.1's layers 20-39)
    assert ws == 40 * M * 128 + 40 * M * 4
    assert logits == 512 * 2**20
    assert "768 rows" in how  # 128 x (1 + 5) < 4,096 tokens


def test_the_decode_logits_take_over_when_the_rows_are_many():
    ws, _, how = _ws(max_num_seqs=1024, max_num_batched_tokens=16384)
    assert ws == 6144 * M * 4  # min(16,384, 1,024 x 6) rows x 1,048,576 float32: 24 GiB
    assert ws / GiB == 24


def test_gfx950_adds_the_head_rows_beside_the_warm_up_gather():
    ws942, _, _ = _ws(max_num_seqs=1, max_num_batched_tokens=524288)
    ws950, _, _ = _ws(max_num_seqs=1, max_num_batched_tokens=524288, hardware="amd-mi355x")
    warm = 4 * (M + 128 + 524288) * 512 * 2
    assert ws942 == warm and ws950 == warm + 524288 * 32 * 512 * 2


def test_v4_s_decode_logits_rows_are_bounded_from_0_30():
    """vllm 0.30.0 and 0.31.0 wheels (PyPI), v1/attention/ops/rocm_aiter_mla_sparse.py _max_decode_logits_rows:
    min(tokens, max_num_seqs x (1 + k)) rows of decode logits; the 0.29.0 wheel reserves the profile run's tokens
    (engines/vllm/dsv4_workspace.py ROCM_DECODE_ROWS_FROM)."""
    from k3plan.engines.vllm.dsv4_workspace import dsv4_rocm_profile_workspace

    d = load_model("deepseek-v4-pro").spec.dsv4

    def ws(release):
        return dsv4_rocm_profile_workspace(
            d,
            max_model_len=M,
            max_num_batched_tokens=16384,
            hardware="amd-mi300x",
            release=release,
            max_num_seqs=128,
            spec_tokens=1,
        )[0]

    assert ws((0, 29, 0)) == 16384 * (M // 4) * 4  # 16 GiB of logits (vllm-project/vllm#53961's build)
    assert ws((0, 30, 0)) < ws((0, 29, 0))  # 256 rows: the K gather or the warm-up gather is the larger view now
    assert ws(None) == ws((0, 29, 0))  # no release named: the 0.28.0 code the V4 rule cites
