"""SGLang's DeepEP all-to-all buffer (``--moe-a2a-backend deepep``): what it is sized by and when SGLang allocates it.

When (sglang 0.5.15 and 0.5.23 wheels (PyPI), sglang/srt/layers/moe/token_dispatcher/deepep.py; 0.4.9.post2 and
0.4.10: layers/moe/ep_moe/token_dispatcher.py, the same sizing): one buffer a process (``DeepEPBuffer``'s class
state, 0.5.17+ a per-process resource), made by ``DeepEPBuffer.get_deepep_buffer`` the first time a dispatcher's
``_get_buffer`` runs -- the first dispatch of the first forward. ModelRunner.initialize runs no forward between
load_model and the KV pool, and managers/scheduler.py ``Scheduler.init_model_worker`` runs ``init_memory_pools``
before ``init_all_cuda_graphs`` (the decode graphs' warm-up forwards, where --deepep-mode auto / low_latency first
dispatches; under normal the graphs are off and the first request does). So the buffer does not move the pool: it
comes out of the 1 - mem_fraction_static share, beside the activations and CUDA graphs, after the pool is sized
(a derived fraction holds a flat 2 GiB for it from 0.5.15: releases.py DEEPEP_RESERVE_SOURCE).

How big (``get_deepep_buffer``): the group is the TP group (every GPU of the server under DP attention, EP = TP:
server_args' _a2a_ep_size), ``param_bytes`` 2 (bf16 hidden states), the experts the MoE layer's global count
(routed + --ep-num-redundant-experts). ``--deepep-mode`` normal or auto sizes the normal kernels' buffers, the larger
of DeepEP's dispatch and combine configs' hints (--deepep-config's ``normal_dispatch`` / ``normal_combine`` where
given, else DeepEP's ``Buffer.get_dispatch_config`` / ``get_combine_config`` for the group size at Buffer.num_sms
20); low_latency or auto the low-latency RDMA buffer for SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK tokens a
rank (default 128), the larger of it and the normal RDMA hint. DeepEP's sizes, read at deepseek-ai/DeepEP commit
9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee (the DEEPEP_COMMIT of sgl-project/sglang docker/Dockerfile @004740a9;
SGLang's 0.5.15 comment names fzyzcjy/DeepEP for CUDA 12 and the hybrid-ep branch for CUDA 13, whose csrc/config.hpp
hints and deep_ep/buffer.py configs at hybrid-ep @94a9f8f6 are the same):

- csrc/config.hpp ``Config::get_nvl_buffer_size_hint``: channels = num_sms / 2, NVLink peers = min(ranks, 8), RDMA
  ranks = max(ranks / 8, 1); channels x peers x (2 x RDMA ranks + 3) ints, and channels x peers x
  num_max_nvl_chunked_recv_tokens slots of hidden bytes + 8 B SourceMeta + 128 x 8 B top-k indices + 128 x 4 B top-k
  weights + 128 x 4 B scales; aligned to 128 B.
- ``Config::get_rdma_buffer_size_hint``: 0 at <= 8 ranks; else channels x RDMA ranks x num_max_rdma_chunked_recv_tokens
  slots (twice) of the same plus 16 B, channels x RDMA ranks x 18 x 2 ints, and 1 MiB; aligned to 128 B. The Config
  constructor rounds num_max_rdma_chunked_recv_tokens up to a multiple of num_max_rdma_chunked_send_tokens.
- ``get_low_latency_rdma_size_hint`` (``LowLatencyLayout``): two send, two receive and two signalling buffers of
  max(tokens x dispatch message, experts x tokens x combine message) and experts x tokens x the larger message, a
  dispatch message 16 + max(2 x hidden, hidden + hidden / 128 x 4) B, a combine message hidden / 128 x 4 + 2 x hidden
  B; + 128 B, aligned down to 128.
- csrc/deep_ep.cpp ``Buffer::Buffer``: cudaMalloc of the NVLink bytes + 8 x (4 + 8 + 8) B of barrier signals and
  pointers where the NVLink bytes are > 0, and a 32 MiB workspace (csrc/kernels/configs.cuh NUM_WORKSPACE_BYTES);
  ``Buffer::sync``: the RDMA bytes by internode::alloc (nvshmem_align(128, bytes)) from NVSHMEM's symmetric heap,
  where NVSHMEM runs (``Buffer.__init__``: more than one RDMA rank, or the low-latency mode) -- the RDMA bytes > 0.

What NVSHMEM maps for it (``nvshmem_heap_bytes``; NVIDIA/nvshmem v3.4.5-0, the release SGLang's image installs:
sgl-project/sglang docker/Dockerfile @004740a9 ``pip install nvidia-nvshmem-cu12==3.4.5``): deep_ep/buffer.py sets
NVSHMEM_CUMEM_GRANULARITY 2^29 before NVSHMEM starts; on x86 the heap is the CUDA-VMM one
(src/include/host/env/env_defs.h DISABLE_CUDA_VMM false off PPC64LE), whose granularity is the larger of that and the
driver's (src/host/mem/mem_heap.cpp nvshmemi_symmetric_heap_vidmem_dynamic_vmm::reserve_heap), and which backs an
allocation its mapped free space cannot hold with a new physical chunk of (size + alignment) rounded up to the
granularity (allocate_symmetric_memory -> allocate_physical_memory_to_heap). NVSHMEM's own start allocates from the
heap first (src/host/init/init.cu: the proxy's G_BUF_SIZE 8 MiB and G_COALESCING_BUF_SIZE 2 MiB g buffers,
src/host/proxy/proxy.cpp, then nvshmemi_team_init's psync pools, src/host/team/team_internal.cpp), so one 512 MiB
chunk is mapped before DeepEP asks, and DeepEP's RDMA bytes take a chunk of their own where they exceed what that
first chunk has left. Not priced: NVSHMEM's IBGDA queue buffers outside the heap, and the teams' psync bytes in the
first chunk's remainder (its few KiB only decide an RDMA size within them of 502 MiB).
"""

from __future__ import annotations

from k3plan.units import MiB

DEEPEP_COMMIT = "9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee"
DEEPEP_BUFFER_SIZE_SOURCE = (
    "sglang 0.5.15 and 0.5.23 wheels (PyPI), sglang/srt/layers/moe/token_dispatcher/deepep.py "
    "DeepEPBuffer.get_deepep_buffer (made at the first dispatch: after Scheduler.init_memory_pools, in "
    "init_all_cuda_graphs' warm-up forwards or the first request); deepseek-ai/DeepEP@9af0e0d0 csrc/config.hpp "
    "Config::get_nvl_buffer_size_hint / get_rdma_buffer_size_hint / get_low_latency_rdma_size_hint, deep_ep/buffer.py "
    "Buffer.num_sms, get_dispatch_config / get_combine_config, csrc/deep_ep.cpp Buffer::Buffer"
)
DEEPEP_MODES = ("auto", "normal", "low_latency")
NUM_SMS_DEFAULT = 20  # deep_ep/buffer.py Buffer.num_sms
# csrc/deep_ep.cpp's pybind Config defaults (num_sms, nvl send, nvl recv, rdma send, rdma recv)
CONFIG_DEFAULTS = {
    "num_sms": 20,
    "num_max_nvl_chunked_send_tokens": 6,
    "num_max_nvl_chunked_recv_tokens": 256,
    "num_max_rdma_chunked_send_tokens": 6,
    "num_max_rdma_chunked_recv_tokens": 256,
}
# deep_ep/buffer.py get_dispatch_config / get_combine_config: ranks -> (nvl send, nvl recv, rdma send, rdma recv)
DISPATCH_CONFIGS = {
    2: (24, 256, 6, 128),
    4: (6, 256, 6, 128),
    8: (6, 256, 6, 128),
    16: (36, 288, 20, 128),
    24: (8, 288, 32, 128),
    32: (32, 288, 32, 128),
    64: (20, 288, 28, 128),
    128: (20, 560, 32, 128),
    144: (32, 720, 12, 128),
    160: (28, 720, 12, 128),
}
COMBINE_CONFIGS = {
    2: (10, 256, 6, 128),
    4: (9, 256, 6, 128),
    8: (4, 256, 6, 128),
    16: (4, 288, 12, 128),
    24: (1, 288, 8, 128),
    32: (1, 288, 8, 128),
    64: (1, 288, 20, 128),
    128: (1, 560, 12, 128),
    144: (2, 720, 8, 128),
    160: (2, 720, 8, 128),
}
NUM_MAX_NVL_PEERS = 8  # csrc/kernels/configs.cuh
NUM_WORKSPACE_BYTES = 32 * MiB  # csrc/kernels/configs.cuh
NUM_BUFFER_ALIGNMENT_BYTES = 128  # csrc/kernels/configs.cuh
SOURCE_META_BYTES = 8  # csrc/kernels/internode.cu SourceMeta: two ints
MAX_TOPK = 128  # Config::get_*_buffer_size_hint kNumMaxTopK
MAX_SCALES = 128  # kNumMaxScales
PARAM_BYTES = 2  # _DeepEPDispatcherImplBase.params_bytes
# NVSHMEM's heap (module docstring): the granularity DeepEP sets, and what NVSHMEM's start takes of the first chunk
NVSHMEM_SOURCE = (
    "deepseek-ai/DeepEP@9af0e0d0 deep_ep/buffer.py Buffer.__init__ (NVSHMEM_CUMEM_GRANULARITY 2 ** 29, NVSHMEM started "
    "for more than one RDMA rank or the low-latency mode), csrc/deep_ep.cpp Buffer::sync (internode::alloc(num_rdma_bytes, "
    "128)); NVIDIA/nvshmem v3.4.5-0 (sgl-project/sglang docker/Dockerfile @004740a9: nvidia-nvshmem-cu12==3.4.5) "
    "src/host/mem/mem_heap.cpp nvshmemi_symmetric_heap_vidmem_dynamic_vmm::reserve_heap / allocate_symmetric_memory / "
    "allocate_physical_memory_to_heap (a new chunk of size + alignment rounded up to the granularity), "
    "src/include/host/env/env_defs.h (CUMEM_GRANULARITY, G_BUF_SIZE, G_COALESCING_BUF_SIZE, DISABLE_CUDA_VMM), "
    "src/host/proxy/proxy.cpp and src/host/team/team_internal.cpp (the start's heap allocations)"
)
NVSHMEM_GRANULARITY = 2**29  # deep_ep/buffer.py NVSHMEM_CUMEM_GRANULARITY
NVSHMEM_START_BYTES = 8 * MiB + 128 * 64 * 32 * 8  # env_defs.h G_BUF_SIZE + G_COALESCING_BUF_SIZE (proxy.cpp)
RDMA_ALIGNMENT = 128  # internode::alloc(num_rdma_bytes, NUM_BUFFER_ALIGNMENT_BYTES)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _slot_bytes(hidden_bytes: int) -> int:
    """A received token's bytes in the normal buffers: its hidden states, SourceMeta, top-k indices and weights and
    scales at DeepEP's maxima."""
    return hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * 8 + MAX_TOPK * 4 + MAX_SCALES * 4


def nvl_hint(config: dict[str, int], *, hidden_bytes: int, ranks: int) -> int:
    """Config::get_nvl_buffer_size_hint."""
    rdma_ranks, nvl_ranks = max(ranks // NUM_MAX_NVL_PEERS, 1), min(ranks, NUM_MAX_NVL_PEERS)
    channels = config["num_sms"] // 2
    recv = config["num_max_nvl_chunked_recv_tokens"]
    got = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4 + channels * nvl_ranks * recv * _slot_bytes(hidden_bytes)
    return _align(got, 128)


def rdma_hint(config: dict[str, int], *, hidden_bytes: int, ranks: int) -> int:
    """Config::get_rdma_buffer_size_hint (0 within one NVLink domain of 8), with the constructor's rounding of the
    receive tokens to a multiple of the send tokens."""
    if ranks <= NUM_MAX_NVL_PEERS:
        return 0
    rdma_ranks, channels = ranks // NUM_MAX_NVL_PEERS, config["num_sms"] // 2
    recv = _align(config["num_max_rdma_chunked_recv_tokens"], config["num_max_rdma_chunked_send_tokens"])
    got = channels * rdma_ranks * (NUM_MAX_NVL_PEERS * 2 + 2) * 2 * 4
    got += channels * rdma_ranks * recv * (_slot_bytes(hidden_bytes) + 16) * 2
    return _align(got + 1048576, 128)


def low_latency_hint(*, tokens: int, hidden: int, experts: int) -> int:
    """get_low_latency_rdma_size_hint (LowLatencyLayout)."""
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)
    combine_msg = scales * 4 + hidden * 2
    send = max(tokens * dispatch_msg, experts * tokens * combine_msg)
    recv = max(experts * tokens * dispatch_msg, experts * tokens * combine_msg)
    signalling = _align(experts * 4, 128)
    total = 2 * send + 2 * recv + 2 * signalling
    return (total + NUM_BUFFER_ALIGNMENT_BYTES) // NUM_BUFFER_ALIGNMENT_BYTES * NUM_BUFFER_ALIGNMENT_BYTES


def nvshmem_heap_bytes(rdma: int) -> int:
    """The GPU bytes NVSHMEM's heap maps for DeepEP's ``rdma`` bytes (module docstring): the 512 MiB chunk its start
    maps, and where the RDMA bytes (+ their 128 B alignment) exceed what that chunk has left after the start's g
    buffers, a chunk of their own rounded up to 512 MiB. 0 without NVSHMEM (no RDMA bytes)."""
    if rdma <= 0:
        return 0
    own = rdma + RDMA_ALIGNMENT > NVSHMEM_GRANULARITY - NVSHMEM_START_BYTES
    return NVSHMEM_GRANULARITY + (_align(rdma + RDMA_ALIGNMENT, NVSHMEM_GRANULARITY) if own else 0)


def _default_config(table: dict[int, tuple[int, int, int, int]], ranks: int) -> dict[str, int] | None:
    row = table.get(ranks)
    if row is None:
        return None
    keys = list(CONFIG_DEFAULTS)[1:]
    return {"num_sms": NUM_SMS_DEFAULT, **dict(zip(keys, row, strict=True))}


def sglang_deepep_buffer(
    *,
    mode: str,
    ranks: int,
    hidden: int,
    experts: int,
    tokens: int,
    configs: tuple[dict[str, int], dict[str, int]] | None,
) -> tuple[int, str] | None:
    """The bytes a GPU of SGLang's DeepEP buffer (module docstring) and how they add up: ``mode`` --deepep-mode,
    ``ranks`` the TP group, ``tokens`` SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK, ``configs`` --deepep-config's
    (dispatch, combine) with DeepEP's pybind defaults filled in (None: DeepEP's own for the group size). None where
    DeepEP has no default config for the group size (Buffer.get_dispatch_config asserts) or the experts do not split."""
    if ranks <= 1 or experts <= 0 or experts % ranks:
        return None
    hidden_bytes = hidden * PARAM_BYTES
    nvl = rdma = 0
    parts = []
    if mode in ("auto", "normal"):
        pair = configs or (_default_config(DISPATCH_CONFIGS, ranks), _default_config(COMBINE_CONFIGS, ranks))
        if pair[0] is None or pair[1] is None:
            return None
        nvl = max(nvl_hint(c, hidden_bytes=hidden_bytes, ranks=ranks) for c in pair if c is not None)
        rdma = max(rdma_hint(c, hidden_bytes=hidden_bytes, ranks=ranks) for c in pair if c is not None)
        how = "--deepep-config's" if configs else f"DeepEP's default {ranks}-rank"
        parts.append(f"NVLink {nvl:,} B ({how} dispatch / combine configs)")
        if rdma:
            parts.append(f"normal RDMA {rdma:,} B")
    if mode in ("auto", "low_latency"):
        ll = low_latency_hint(tokens=tokens, hidden=hidden, experts=experts)
        parts.append(f"low-latency RDMA {ll:,} B ({tokens} tokens a rank, {experts} experts)")
        rdma = max(rdma, ll)
    meta = NUM_MAX_NVL_PEERS * (4 + 8 + 8) if nvl else 0
    heap = nvshmem_heap_bytes(rdma)
    total = nvl + meta + NUM_WORKSPACE_BYTES + heap
    return total, (
        f"{total:,} B: DeepEP's buffer under --deepep-mode {mode} over {ranks} ranks, hidden {hidden}: "
        + "; ".join(parts)
        + (
            f" (the RDMA bytes the larger, from NVSHMEM's heap: {heap:,} B mapped in 512 MiB chunks, its start's "
            f"chunk and {'one of their own' if heap > NVSHMEM_GRANULARITY else 'none more'}: {NVSHMEM_SOURCE})"
            if heap
            else ""
        )
        + f", + the 32 MiB workspace ({DEEPEP_BUFFER_SIZE_SOURCE})"
    )
