"""DeepGEMM Mega MoE's symmetric buffer under vLLM's ``--moe-backend deep_gemm_mega_moe``: memory the worker counts as
its non-torch increase, sized by DeepGEMM's own layout code.

Where vLLM holds it (read in the vllm 0.20.0, 0.21.0, 0.22.0, 0.23.0, 0.25.0 and 0.26.0 wheels, PyPI; 0.24.0 between
them not read; 0.20.0 and 0.21.0 keep the class in vllm/model_executor/models/deepseek_v4.py, 0.22.0 in
vllm/models/deepseek_v4/nvidia/model.py, each with ``max_num_tokens`` the scheduler's ``max_num_batched_tokens`` and the
same vendored ``mega/__init__.py`` sizing call, and each allocating with ``symm_mem.empty`` whatever the group's size):
``DeepseekV4MegaMoEExperts.get_symm_buffer`` (vllm/models/deepseek_v4/nvidia/model.py) allocates, on the first forward
(the profile run, after the worker's first memory snapshot), one buffer shared by every MoE layer (the class-level
``_symm_buffer_cache``) through the vendored ``deep_gemm.get_symm_buffer_for_mega_moe`` (vllm/third_party/deep_gemm/
mega/__init__.py ``SymmBuffer``): ``symm_mem.empty(num_bytes)`` on the EP group (torch's symmetric-memory allocator
maps it with the driver's cuMem calls, outside the caching allocator, so it is in neither the weights nor the torch
peak but in ``MemorySnapshot.non_torch_memory``; 0.25.0 and 0.26.0 fall back to ``torch.empty`` for an EP group of
one, which this term leaves out). ``num_max_tokens_per_rank`` is ``max_num_batched_tokens`` rounded up to 384.

``num_bytes`` is ``get_symm_buffer_size_for_mega_moe`` in DeepGEMM at the commit vLLM builds against,
github.com/deepseek-ai/DeepGEMM/blob/891d57b4db1071624b5c8fa0d1e51cb317fa709f/csrc/apis/mega.hpp, with the layout
helpers of deep_gemm/include/deep_gemm/layout/mega_moe.cuh at that commit (the header the 0.20.0, 0.21.0, 0.22.0,
0.23.0, 0.25.0 and 0.26.0 wheels ship under vllm/third_party/deep_gemm/include is that commit's, byte for byte (0.20.0-
0.22.0 compared with 0.26.0's in session 52: cmp); the 0.29.0 and 0.33.0 wheels
ship later layouts with a ring buffer, not read here, so the term is priced for 0.20.0-0.26.x only):

- the workspace: 32 B of barrier signals, the experts' send / receive counts (experts x 16 B), the local experts'
  receive sums (8 B each), the pool blocks' L1 arrival counts (4 B, padded to an even count) and L2 masks (8 B), the
  dispatch's source indices (local experts x ranks x ranks x tokens x 4 B) and the combine's source metadata (12 B a
  pool token), aligned to 16 B;
- the input: tokens x (hidden fp8 + hidden / 32 scale bytes + top-k x 12 B of indices and weights);
- the L1 pool: pool tokens x hidden fp8, their scales (hidden / 32 B a padded scale token) and a 4 B weight each;
- the L2 pool: pool tokens x intermediate fp8 and their scales (intermediate / 32 B a padded scale token);
- the combine: top-k x tokens x hidden bf16.

The pool holds ranks x tokens x min(top-k, local experts) + local experts x 191 tokens, rounded up to 384; the padded
scale tokens are the most over the candidate block sizes (8 ... 192) of (pool / block) x the block rounded up to 128.
"""

from __future__ import annotations

from k3plan.engines.release import Release

MEGA_MOE_BACKEND = "deep_gemm_mega_moe"
# the vLLM releases whose vendored DeepGEMM has this layout (read: 0.20.0, 0.21.0, 0.22.0, 0.23.0, 0.25.0, 0.26.0;
# 0.29.0 differs)
MEGA_MOE_FROM: Release = (0, 20, 0)
MEGA_MOE_UNTIL: Release = (0, 27, 0)
MEGA_MOE_SOURCE = (
    "DeepGEMM Mega MoE's symmetric buffer, allocated in the profile run on the EP group (vllm 0.25.0 wheel, PyPI, "
    "vllm/models/deepseek_v4/nvidia/model.py DeepseekV4MegaMoEExperts.get_symm_buffer -> vllm/third_party/deep_gemm/"
    "mega/__init__.py SymmBuffer: symm_mem.empty, outside torch's caching allocator) and sized by "
    "github.com/deepseek-ai/DeepGEMM/blob/891d57b4db1071624b5c8fa0d1e51cb317fa709f/csrc/apis/mega.hpp "
    "get_symm_buffer_size_for_mega_moe"
)

TOKEN_ALIGNMENT = 384  # layout::kLCMCandidateBlockM (get_token_alignment_for_mega_moe)
CANDIDATE_BLOCK_M = (8, 16, 32, 64, 96, 128, 192)  # layout::kCandidateBlockM
SF_GRAN = 32  # one scale byte a 32 elements (layout::Data(hidden / 32))


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def mega_moe_symm_bytes(
    *, ranks: int, experts: int, top_k: int, hidden: int, intermediate: int, max_num_batched_tokens: int
) -> int:
    """The bytes ``get_symm_buffer_size_for_mega_moe`` returns at DeepGEMM 891d57b4 (module docstring) for an EP
    group of ``ranks`` and ``max_num_batched_tokens`` tokens a rank."""
    tokens = _align(max_num_batched_tokens, TOKEN_ALIGNMENT)
    local = experts // ranks
    pool = _align(ranks * tokens * min(top_k, local) + local * (max(CANDIDATE_BLOCK_M) - 1), TOKEN_ALIGNMENT)
    pool_blocks = pool // min(CANDIDATE_BLOCK_M)
    workspace = _align(
        32  # Workspace::kNumBarrierSignalBytes
        + experts * 8 * 2  # expert send / recv counts
        + local * 8  # expert recv count sums
        + _align(pool_blocks, 2) * 4  # L1 arrival counts
        + pool_blocks * 8  # L2 arrival masks
        + local * ranks * (ranks * tokens) * 4  # dispatch's source token-topk indices
        + pool * 12,  # TokenSrcMetadata a pool token
        16,
    )
    sf_pool = max((pool // m) * _align(m, 128) for m in CANDIDATE_BLOCK_M)
    inputs = tokens * (hidden + hidden // SF_GRAN + top_k * 8 + top_k * 4)
    l1 = pool * hidden + sf_pool * (hidden // SF_GRAN) + pool * 4
    l2 = pool * intermediate + sf_pool * (intermediate // SF_GRAN)
    combine = top_k * tokens * hidden * 2
    return workspace + inputs + l1 + l2 + combine


def mega_moe_non_torch(
    *,
    moe_backend: str | None,
    release: Release | None,
    vendor: str,
    ep: int,
    experts: int,
    top_k: int,
    hidden: int,
    intermediate: int,
    max_num_batched_tokens: int,
) -> tuple[int, str] | None:
    """The symmetric buffer a GPU and its source where the command runs DeepSeek-V4's Mega MoE on an EP group of
    more than one GPU at a release whose layout was read (``MEGA_MOE_FROM`` to ``MEGA_MOE_UNTIL``); else None."""
    if moe_backend != MEGA_MOE_BACKEND or vendor != "nvidia" or release is None or ep <= 1:
        return None
    if not MEGA_MOE_FROM <= release < MEGA_MOE_UNTIL or experts <= 0 or experts % ep:
        return None
    got = mega_moe_symm_bytes(
        ranks=ep,
        experts=experts,
        top_k=top_k,
        hidden=hidden,
        intermediate=intermediate,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    how = (
        f"{got:,} B of {MEGA_MOE_SOURCE} (EP {ep}, {experts} experts, top-{top_k}, hidden {hidden}, intermediate "
        f"{intermediate}, {_align(max_num_batched_tokens, TOKEN_ALIGNMENT):,} tokens a rank: max_num_batched_tokens "
        f"rounded up to {TOKEN_ALIGNMENT})"
    )
    return got, how
