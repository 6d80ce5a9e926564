"""The tensor vLLM's profile run allocates in each MLA layer for the prefill's up-projected context.

With no attention metadata (the profile run's dummy forward) an MLA layer allocates, and drops at once,
``torch.empty((chunked_prefill_workspace_size, num_heads, qk_nope_head_dim + v_head_dim), dtype=k_c_normed.dtype)``
"to simulate [the] worse case output size for self.kv_b_proj(kv_c_normed) in _compute_prefill_context"
(vllm 0.11.0 / 0.11.2 / 0.14.1 wheels (PyPI), v1/attention/backends/mla/common.py MLACommonImpl.forward; 0.16.0,
0.18.0, 0.20.0-0.34.0 wheels, model_executor/layers/attention/mla_attention.py MLAAttention.forward_impl):
num_heads a device's, the activations' dtype. Its rows, MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size:
min(max(8 x max_model_len, 4 x max_num_seqs x block_size), 64 x 1024), then

- to 0.27.x: at least max_num_seqs x block_size ("at least 1 page per request"; the 0.11.0-0.27.0 wheels);
- from 0.28.0: rounded up to a whole block, at least one (align_mla_chunked_context_workspace_size; the 0.28.0-0.34.0
  wheels; with decode context parallelism the alignment is lcm(block_size, dcp x interleave): not priced here).

block_size is the cache's (CacheConfig.block_size): for a hybrid model the attention block vLLM aligns to the state
page, thousands of tokens (Kimi-Linear at an FP8 cache: 3,776 in the 0.20.0 wheel), so the floor of 0.27.x reaches
max_num_seqs x block_size rows (1,024 x 3,776 x 32 heads x 256 x 2 B = 59.00 GiB, the allocation a public Kimi-Linear
log shows failing in CUDA-graph profiling: tests/engines/cases/vllm-mirothinker-kimi-linear-h200-tp1-fp8-1m-graphs-oom).
It is the profile's peak at that layer with the layer's other live tensors: the budget's ``MLA up-projected K/V over
the context`` term (step/temporaries.py, the context's K/V up-projected) stands for it, and vLLM's own size replaces it.

With CUDA graphs on, the worker then profiles their memory inside the same measurement (v1/worker/gpu_worker.py
Worker.determine_available_memory calls GPUModelRunner.profile_cudagraph_memory on CUDA whenever cudagraph_mode is not
NONE; vllm 0.20.0-0.27.0 wheels): _init_minimal_kv_cache_for_profiling first allocates a KV cache of
max_cudagraph_capture_size blocks (and the attention builders), then empty_cache, then each mode's two largest
captures are warmed up and captured. A PIECEWISE warm-up is a dummy run without attention metadata (_dummy_run builds
it only for FULL or force_attention), so each MLA layer allocates the tensor again. The profile run's copy was freed
into torch's cache, one block of its own segment; the minimal KV cache's tensors, each no larger than it, are carved
from it (the caching allocator takes a cached free block that holds the request and splits it), so empty_cache cannot
return that segment and the second request needs as much again from the device: weights + 2 x the tensor at once.
The public Kimi-Linear log at 1M with graphs shows that state: 'Tried to allocate 59.00 GiB', 58.89 GiB allocated,
47.81 reserved but unallocated (59.00 less the 11.19 carved from it), 32.35 of 139.80 GiB free.
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text
from k3plan.units import GiB

# the releases whose MLA profile allocation was read (the 0.11.0 wheel the earliest), and the one that aligns it
PROFILE_READ_FROM: Release = (0, 11, 0)
ALIGNED_FROM: Release = (0, 28, 0)
CAP_TOKENS = 64 * 1024
SOURCE_OLD = (
    "vllm 0.11.0-0.27.0 wheels (PyPI): MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size "
    "(max(min(max(8 x max_model_len, 4 x max_num_seqs x block_size), 64 x 1024), max_num_seqs x block_size)) and the "
    "profile run's torch.empty in MLACommonImpl.forward / MLAAttention.forward_impl"
)
SOURCE_NEW = (
    "vllm 0.28.0-0.34.0 wheels (PyPI): MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size "
    "(min(max(8 x max_model_len, 4 x max_num_seqs x block_size), 64 x 1024), align_mla_chunked_context_workspace_size: "
    "rounded up to a whole block) and the profile run's torch.empty in MLAAttention.forward_impl"
)


def workspace_rows(*, release: Release, max_model_len: int, max_num_seqs: int, block_size: int) -> int:
    """chunked_prefill_workspace_size as ``release`` sizes it (no decode context parallelism)."""
    rows = min(max(8 * max_model_len, 4 * max_num_seqs * block_size), CAP_TOKENS)
    if release < ALIGNED_FROM:
        return max(rows, max_num_seqs * block_size)
    return -(-max(rows, block_size) // block_size) * block_size


def profile_mla_allocation(
    *,
    release: Release,
    max_model_len: int,
    max_num_seqs: int,
    block_size: int,
    local_heads: int,
    qk_nope_head_dim: int,
    v_head_dim: int,
    act_bytes: int,
    dcp: int = 1,
) -> tuple[int, str] | None:
    """(bytes, source) of the tensor an MLA layer allocates in the profile run a device; None where not read (before
    0.11.0, or decode context parallelism from 0.28.0)."""
    if release < PROFILE_READ_FROM or (dcp > 1 and release >= ALIGNED_FROM) or min(local_heads, block_size) < 1:
        return None
    rows = workspace_rows(
        release=release, max_model_len=max_model_len, max_num_seqs=max_num_seqs, block_size=block_size
    )
    width = qk_nope_head_dim + v_head_dim
    got = rows * local_heads * width * act_bytes
    how = (
        f"vLLM {release_text(release)}'s profile run allocates {rows:,} rows x {local_heads} heads x {width} x "
        f"{act_bytes} B = {got:,} B in each MLA layer (max_model_len {max_model_len:,}, max_num_seqs {max_num_seqs:,}, "
        f"block_size {block_size:,}): {SOURCE_OLD if release < ALIGNED_FROM else SOURCE_NEW}"
    )
    return got, how


# Kimi-K3's vLLM model (vllm/models/kimi_k3, first in the 0.28.0 wheel; the package picks nvidia/ or amd/ by platform,
# kimi_k3/__init__.py): on CUDA its own MLA layer (nvidia/mla.py) runs no MLAAttention, and its _attention returns at
# once without attention metadata, as in the profile run's dummy forward ('if attn_metadata_by_layer is None:
# attn_out.zero_(); return'): no tensor over the context is allocated; on ROCm the layer (amd/linear.py
# KimiMLAAttention) is the generic MultiHeadLatentAttentionWrapper over MLAAttention, whose profile allocation is the
# one above. Read in the 0.28.0 wheel (PyPI); k3plan prices the K3 bring-up images (before 0.28.0, code not public) by it.
K3_MLA_ARCH = "kimi_k3"
K3_NVIDIA_SOURCE = (
    "vllm 0.28.0 wheel (PyPI) vllm/models/kimi_k3/nvidia/mla.py KimiK3 MLA layer _attention ('if "
    "attn_metadata_by_layer is None: attn_out.zero_(); return': the profile run's dummy forward carries no attention "
    "metadata, so no up-projected context is allocated), picked on CUDA by vllm/models/kimi_k3/__init__.py"
)


def k3_profile_mla(*, vendor: str) -> tuple[int, str] | None:
    """(0, source) where vLLM's Kimi-K3 MLA layer allocates nothing over the context in the profile run (CUDA: its own
    layer); None where its layer is MLAAttention (ROCm: profile_mla_allocation sizes it)."""
    if vendor == "amd":
        return None
    return 0, f"vLLM's Kimi-K3 MLA layer on {vendor or 'CUDA'} allocates nothing in the profile run: {K3_NVIDIA_SOURCE}"


# the releases whose worker profiles the CUDA graphs inside determine_available_memory on CUDA and sizes the MLA tensor
# with the max_num_seqs x block_size floor (the 0.20.0, 0.20.1, 0.21.0, 0.23.0 and 0.27.0 wheels read), [from, to)
GRAPH_PROFILE_READ: tuple[Release, Release] = ((0, 20, 0), ALIGNED_FROM)
GRAPH_PROFILE_AT = (
    "vllm/v1/worker/gpu_model_runner.py GPUModelRunner.profile_cudagraph_memory (a PIECEWISE warm-up's "
    "_dummy_run without attention metadata), the MLA layer's profile allocation in "
    "model_executor/layers/attention/mla_attention.py MLAAttention.forward_impl"
)


def graph_profile_need(
    *, release: Release, allocation: int, kv_tensor_bytes: int, piecewise_graphs: int
) -> tuple[int, str, str] | None:
    """(bytes beside the weights, what, where raised) CUDA-graph profiling holds at once when a PIECEWISE warm-up
    allocates the MLA tensor (``allocation``) again while the profile run's copy's segment stays reserved, split by
    the minimal KV cache's tensors of ``kv_tensor_bytes`` each (module docstring); None where it does not apply: no
    PIECEWISE graphs, a release not read, or a KV tensor larger than the freed block (its segment then goes back)."""
    if not GRAPH_PROFILE_READ[0] <= release < GRAPH_PROFILE_READ[1] or piecewise_graphs < 1:
        return None
    if allocation <= 0 or kv_tensor_bytes > allocation:
        return None
    what = (
        f"the MLA layer's profile tensor ({allocation / GiB:.2f} GiB) asked again in a PIECEWISE warm-up while "
        f"the profile run's segment of it stays reserved, split by the minimal KV cache ({kv_tensor_bytes:,} B a "
        f"tensor), 2 x {allocation:,} B"
    )
    return 2 * allocation, what, GRAPH_PROFILE_AT
