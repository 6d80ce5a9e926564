"""SGLang's MegaMoE all-to-all (``--moe-a2a-backend megamoe``): DeepGEMM's symmetric buffer, what it is sized by and
when SGLang allocates it, as the sglang 0.5.15 wheel (PyPI) and the sgl-deep-gemm 0.1.4 wheel it pins (its METADATA:
``Requires-Dist: sgl-deep-gemm==0.1.4``) do it.

When (sglang 0.5.15 wheel, sglang/srt/layers/moe/mega_moe.py): ``DeepseekV2MoE.forward`` (DeepSeek-V4's MoE layers are
DeepseekV2MoE: models/deepseek_v4.py) runs ``forward_mega_moe`` where ``should_use_mega_moe`` holds (always while CUDA
graphs are captured; else where the most tokens a rank carries is at most the cap below), and ``_run_mega_routed``
takes the buffer from ``_get_mega_moe_symm_buffer``: one buffer a process, cached by (EP group, cap, experts, top-k,
hidden, intermediate), so every MoE layer shares it, made on the FIRST forward that reaches it by
``deep_gemm.get_symm_buffer_for_mega_moe(group, num_experts, cap, top_k, hidden, intermediate, use_fp8_dispatch=True,
activation='swiglu')``. The first forward comes after the KV pool is sized: managers/scheduler.py
``Scheduler.init_model_worker`` runs ``init_memory_pools`` (ModelRunner.alloc_memory_pool -> init_memory_pool, where
the static fraction is applied) before ``init_all_cuda_graphs`` (model_runner.py ``ModelRunner.init_cuda_graphs``:
the EagerRunner's kernel warm-up, then the CUDA-graph runners' warm-up and capture forwards), and nothing runs the
model before (no profile forward in ModelRunner.initialize). So the buffer does not move the pool: it comes out of
the 1 - mem_fraction_static share beside the activations and CUDA graphs, where SGLang can run out of memory after
its pool is sized (the start check's floor, engines/sglang/memory.py sglang_kv_pool).

The cap: ``SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK`` (srt/environ.py ``EnvInt(1024)``), the tokens a rank
the buffer is sized for; a forward with more tokens a rank runs the non-MegaMoE path instead
(``should_use_mega_moe``). The EP group is the TP group (server_args.py ``_handle_a2a_moe``: 'The expert parallel size
is adjusted to be the same as the tensor parallel size'); DeepSeek-V4 fuses no shared expert into the routed ones
without --enforce-shared-experts-fusion (models/deepseek_v4.py ``determine_num_fused_shared_experts``), so the top-k
is the model's and the experts its routed ones.

``SGLANG_OPT_FIX_MEGA_MOE_MEMORY`` (server_args.py ``_handle_a2a_moe`` sets it True under megamoe where the command
leaves it unset): True, layers/moe/mega_moe.py ``build_mega_moe_experts_weights`` writes the interleaved L1 weight
back into ``w13_weight`` and shares it and ``w2_weight`` with the MegaMoE path (the weights held once); False, it
keeps DeepGEMM's ``transform_weights_for_mega_moe`` copies (a second interleaved w13 and its scales) beside the
originals -- not priced (engines/sglang/serve.py refuses it).

How big (sgl-deep-gemm 0.1.4 wheel, deep_gemm/__init__.py ``get_symm_buffer_for_mega_moe``: on a GPU of compute
capability 9 the SM90 buffer, else deep_gemm/mega/__init__.py ``get_symm_buffer_for_mega_moe`` -> ``SymmBuffer``:
``symm_mem.empty(num_bytes)`` on the EP group, torch's symmetric-memory allocator). Its token count is aligned to
384; its ring buffer holds, at >= 6,144 tokens a rank, the full pool -- ranks x tokens x min(top-k, local experts) +
local experts x 191, aligned to 384 -- else the decode budget ``get_ring_limit_for_mega_moe(4224, 6, 6, 72)[1]``; then
clamped into ``get_ring_limit_for_mega_moe(tokens, local experts, top-k, ranks)``. ``num_bytes`` is
``get_symm_buffer_size_for_mega_moe`` (SM100 path only; an SM90 GPU's buffer is not priced) of csrc/apis/mega.hpp
with csrc/jit_kernels/heuristics/mega_moe.hpp ``get_num_wave_pool_tokens`` and the layout header
deep_gemm/include/deep_gemm/layout/mega_moe.cuh (``Workspace``, ``get_num_sf_ring_tokens``), read at
github.com/deepseek-ai/DeepGEMM commit 731e7c7a97d269e4b9f482ea18d0e709a948f293 (a commit of SGLang's DeepGEMM fork
in that repository's network, with its sgl_deep_gemm/ packaging): every one of the 61 Python and .cuh files the 0.1.4
wheel ships (deep_gemm/*.py, deep_gemm/include/deep_gemm/) is that commit's byte for byte (the wheel's
deep_gemm/__init__.py and cuda_helpers.py are its sgl_deep_gemm/ copies); the wheel's _C.so is compiled, not read.
The pieces, for the default FP8 x FP4 MMA (the kernels' mma_type 'fp8xfp4': 1 B an element, with scales):

- the workspace: 32 B of barrier signals, the experts' send / receive counts (experts x 16 B), the local experts'
  receive sums (8 B each), four ring-block counters (4 B each a ring block of 8 tokens), the dispatch's source
  indices (local experts x ranks x ranks x tokens x 4 B) and the combine's source metadata (12 B a full-pool token),
  aligned to 16 B;
- the input: tokens x (hidden fp8 -- hidden / 2 packed FP4 where DG_USE_FP4_ACTS is set, which SGLang forwards from
  SGLANG_OPT_DEEPGEMM_MEGA_MOE_USE_FP4_ACTS -- + hidden / 32 scale bytes + top-k x 12 B of indices and weights);
- the L1 ring: ring tokens x the input token's bytes, the padded scale tokens x hidden / 32 B, 4 B of weight a token;
- the L2 ring: ring tokens x intermediate fp8 and the padded scale tokens x intermediate / 32 B;
- the combine: top-k x tokens x hidden bf16 (DG_USE_FP8_COMBINE, not set by SGLang 0.5.15, would make it fp8).

The padded scale tokens are the most over the candidate block sizes (8 ... 192) of (ring / block) x the block rounded
up to 128.
"""

from __future__ import annotations

from k3plan.engines.release import Release

MEGA_MOE_A2A = "megamoe"
# the release whose wheel and pinned sgl-deep-gemm were read (0.5.16 pins 0.1.4.post1, whose build was not matched)
MEGA_MOE_READ: Release = (0, 5, 15)
CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
CAP_DEFAULT = 1024  # srt/environ.py EnvInt(1024) in the 0.5.15 wheel
FP4_ACTS_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_USE_FP4_ACTS"
FIX_MEMORY_ENV = "SGLANG_OPT_FIX_MEGA_MOE_MEMORY"
MEGA_MOE_ENV = (CAP_ENV, FP4_ACTS_ENV, FIX_MEMORY_ENV)  # read by engines/sglang/serve.py mega_moe
MEGA_MOE_SOURCE = (
    "SGLang's MegaMoE symmetric buffer, allocated on the first forward after the KV pool is sized (sglang 0.5.15 "
    "wheel (PyPI), sglang/srt/layers/moe/mega_moe.py _run_mega_routed -> _get_mega_moe_symm_buffer -> "
    "deep_gemm.get_symm_buffer_for_mega_moe; managers/scheduler.py Scheduler.init_model_worker: init_memory_pools "
    "before init_all_cuda_graphs) and sized by the sgl-deep-gemm 0.1.4 wheel it pins (deep_gemm/mega/__init__.py "
    "get_symm_buffer_for_mega_moe: the ring tokens; symm_mem.empty) with "
    "github.com/deepseek-ai/DeepGEMM/blob/731e7c7a97d269e4b9f482ea18d0e709a948f293/csrc/apis/mega.hpp "
    "get_symm_buffer_size_for_mega_moe (the SM100 layout; the wheel's Python and headers are that commit's)"
)

TOKEN_ALIGNMENT = 384  # layout::kLCMCandidateBlockM (get_token_alignment_for_mega_moe)
CANDIDATE_BLOCK_M = (8, 16, 32, 64, 96, 128, 192)  # layout::kCandidateBlockM
SF_GRAN = 32  # one scale byte a 32 elements (layout::Data(hidden / 32))
PREFILL_TOKENS = 6144  # mega/__init__.py: 'if num_max_tokens_per_rank >= 6144' (the full pool)
# mega/__init__.py's decode budget: get_ring_limit_for_mega_moe(align(4096, 384), 432 // 72, 6, 72)[1]
DECODE_BUDGET = (4096, 432 // 72, 6, 72)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _wave_pool_tokens(ranks: int, top_k: int, tokens: int, experts_per_wave: int, block_m: int) -> int:
    """csrc/jit_kernels/heuristics/mega_moe.hpp get_num_wave_pool_tokens."""
    from_all = tokens * ranks
    if experts_per_wave == 1:
        return from_all
    return min(from_all * experts_per_wave, _align(from_all * top_k + experts_per_wave * (block_m - 1), block_m))


def _ring_limit(tokens: int, local: int, top_k: int, ranks: int) -> tuple[int, int]:
    """csrc/apis/mega.hpp get_ring_limit_for_mega_moe: the fewest and most ring tokens."""
    return (
        _wave_pool_tokens(ranks, top_k, tokens, 1, TOKEN_ALIGNMENT),
        _wave_pool_tokens(ranks, top_k, tokens, local, TOKEN_ALIGNMENT),
    )


def ring_tokens(*, ranks: int, experts: int, top_k: int, tokens: int) -> int:
    """The ring tokens deep_gemm/mega/__init__.py get_symm_buffer_for_mega_moe picks for ``tokens`` (aligned) a rank."""
    local = experts // ranks
    lo, hi = _ring_limit(tokens, local, top_k, ranks)
    if tokens >= PREFILL_TOKENS:
        ring = _align(ranks * tokens * min(top_k, local) + local * (max(CANDIDATE_BLOCK_M) - 1), TOKEN_ALIGNMENT)
    else:
        t, wave, k, r = DECODE_BUDGET
        ring = _ring_limit(_align(t, TOKEN_ALIGNMENT), wave, k, r)[1]
    return min(max(ring, lo), hi)


def mega_moe_symm_bytes(
    *, ranks: int, experts: int, top_k: int, hidden: int, intermediate: int, cap: int, fp4_acts: bool = False
) -> int:
    """The bytes sgl-deep-gemm 0.1.4's get_symm_buffer_for_mega_moe allocates on an SM100 GPU (module docstring) for
    an EP group of ``ranks`` and SGLang's ``cap`` tokens a rank."""
    tokens = _align(cap, TOKEN_ALIGNMENT)
    local = experts // ranks
    ring = ring_tokens(ranks=ranks, experts=experts, top_k=top_k, tokens=tokens)
    pool = _align(ranks * tokens * min(top_k, local) + local * (max(CANDIDATE_BLOCK_M) - 1), TOKEN_ALIGNMENT)
    ring_blocks = ring // min(CANDIDATE_BLOCK_M)
    workspace = _align(
        32  # Workspace::kNumBarrierSignalBytes
        + experts * 8 * 2  # expert send / recv counts
        + local * 8  # expert recv count sums
        + 4 * ring_blocks * 4  # L1 full / L1 empty / L2 full / L2 empty counts (ring)
        + local * ranks * (ranks * tokens) * 4  # dispatch's source token-topk indices
        + pool * 12,  # TokenSrcMetadata a full-pool token
        16,
    )
    sf_ring = max((ring // m) * _align(m, 128) for m in CANDIDATE_BLOCK_M)
    token_bytes = hidden // 2 if fp4_acts else hidden
    inputs = tokens * (token_bytes + hidden // SF_GRAN + top_k * 8 + top_k * 4)
    l1 = ring * token_bytes + sf_ring * (hidden // SF_GRAN) + ring * 4
    l2 = ring * intermediate + sf_ring * (intermediate // SF_GRAN)
    combine = top_k * tokens * hidden * 2
    return workspace + inputs + l1 + l2 + combine


def sglang_mega_moe(
    *, cap: int, fp4_acts: bool, ranks: int, experts: int, top_k: int, hidden: int, intermediate: int
) -> tuple[int, str] | None:
    """The MegaMoE buffer a GPU and its source where an SGLang command runs it (``cap`` > 0, read by
    engines/sglang/serve.py mega_moe) over an EP group of more than one GPU; else None."""
    if cap <= 0 or ranks <= 1 or experts <= 0 or experts % ranks:
        return None
    got = mega_moe_symm_bytes(
        ranks=ranks, experts=experts, top_k=top_k, hidden=hidden, intermediate=intermediate, cap=cap, fp4_acts=fp4_acts
    )
    tokens = _align(cap, TOKEN_ALIGNMENT)
    ring = ring_tokens(ranks=ranks, experts=experts, top_k=top_k, tokens=tokens)
    return got, (
        f"{got:,} B: {MEGA_MOE_SOURCE} (EP {ranks}, {experts} experts, top-{top_k}, hidden {hidden}, intermediate "
        f"{intermediate}, {tokens:,} tokens a rank: {CAP_ENV} {cap:,} aligned to {TOKEN_ALIGNMENT}; {ring:,} ring "
        "tokens" + (", FP4 dispatch" if fp4_acts else "") + ")"
    )
