"""vLLM's expert-parallel all2all buffers on NVIDIA GPUs: what ``--all2all-backend`` allocates a GPU, and when.

Where they are made: the all2all manager (vllm/distributed/device_communicators/all2all.py) creates its library's
buffer at ``get_handle``, which the MoE layers' prepare/finalize call while the model loads (vllm 0.18.0 wheel (PyPI)
v1/worker/gpu_model_runner.py GPUModelRunner.load_model -> distributed/parallel_state.py
prepare_communication_buffer_for_model; vllm 0.33.0 wheel model_executor/layers/quantization/fp8.py
Fp8MoEMethod._init_moe_kernel -> model_executor/layers/fused_moe/all2all_utils.py maybe_make_prepare_finalize ->
All2AllManager.get_handle, from process_weights_after_loading). That is after the worker's first memory snapshot (taken
after init_worker_distributed_environment) and the buffers are not torch's (DeepEP cudaMallocs its NVLink buffer and
workspace and takes its RDMA buffer from NVSHMEM's symmetric heap): torch's max_memory_allocated, which the load's
weights figure reads (utils/mem_utils.py DeviceMemoryProfiler, platforms/cuda.py get_current_memory_usage), does not
see them, so they are in the non-torch increase Worker.determine_available_memory subtracts from the pool (and, from
0.34.0, in the memory the extensible KV cache measures as used). They are made only where the MoE runs all2all
kernels: expert parallelism with DP > 1 (model_executor/layers/fused_moe/config.py FusedMoEParallelConfig
use_all2all_kernels); one buffer a GPU (the manager's handle_cache, keyed by the kwargs every layer shares).

Per backend (vllm 0.11.0, 0.13.0, 0.18.0, 0.19.0, 0.20.0, 0.26.0, 0.28.0, 0.33.0, 0.34.0 wheels (PyPI), all2all.py;
the sizes are the same in each):

- ``deepep_high_throughput`` (DeepEPHTAll2AllManager._make_all2all_kwargs): num_nvl_bytes = VLLM_DEEPEP_BUFFER_SIZE_MB
  MiB (envs.py, default 1024); num_rdma_bytes the same where the EP group spans nodes (``self.internode``:
  base_device_communicator.py, not all ranks in_the_same_node_as rank 0) unless
  VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE (from 0.13.0), else 0.
- ``deepep_low_latency`` (DeepEPLLAll2AllManager._make_all2all_kwargs): num_nvl_bytes as above; num_rdma_bytes =
  DeepEP's get_low_latency_rdma_size_hint(max tokens a DP rank, hidden, EP ranks, global experts), the tokens being
  VLLM_MOE_DP_CHUNK_SIZE (default 256) to 0.19.x (fused_moe/layer.py FusedMoEConfig(max_num_tokens=...) in the
  0.18.0 and 0.19.0 wheels) and max_num_batched_tokens from 0.20.0 (whose default under this backend is 256:
  engine/arg_utils.py use_batched_dp_moe, engines/vllm/serve.py BATCHED_DP_DEFAULT_FROM), the hidden the MoE
  layer's, rounded up to DeepEP's kernels' sizes from 0.11.2 (``LL_HIDDEN_SIZES``).
- DeepEP's own, at the commit vLLM's installer pins (vllm-project/vllm@01ed47b4 tools/ep_kernels/
  install_python_libraries.sh DEEPEP_COMMIT_HASH 73b6ea4, NVSHMEM 3.3.24): deepseek-ai/DeepEP@73b6ea4a csrc/deep_ep.cpp
  Buffer::Buffer cudaMallocs num_nvl_bytes + NUM_MAX_NVL_PEERS x (4 + 8 + 8) B where num_nvl_bytes > 0 and a 32 MiB
  workspace (csrc/kernels/configs.cuh NUM_WORKSPACE_BYTES), and Buffer::sync takes num_rdma_bytes from NVSHMEM
  (internode::alloc); csrc/config.hpp LowLatencyLayout / get_low_latency_rdma_size_hint size the low-latency RDMA
  buffer (the same formula at 567632dd, the last commit before EPv2 moved it under csrc/legacy/). What NVSHMEM maps
  beyond the bytes asked (NVIDIA/nvshmem src/host/mem/mem_heap.cpp: the dynamic VMM heap maps physical memory in
  NVSHMEM_CUMEM_GRANULARITY chunks, 512 MiB as deep_ep/buffer.py sets it, over its own heapextra; its proxy and IBGDA
  queues) is NVSHMEM's, not read: said, not priced (the low-latency buffer of R1 at 256 tokens, 3.55 GiB, rounds to
  4 GiB of chunks before heapextra).
- ``allgather_reducescatter`` / ``naive`` / ``pplx`` after its removal (0.17.0: ParallelConfig warns 'The 'pplx'
  all2all backend has been removed' and falls back to allgather_reducescatter, 0.17.1 and 0.18.0 wheels
  config/parallel.py): collectives over the DP / EP group, no buffer of their own priced here.
- ``pplx`` (to 0.16.x), ``nixl_ep``, ``flashinfer_all2allv`` / ``flashinfer_nvlink_two_sided`` /
  ``flashinfer_nvlink_one_sided``, ``deepep_v2``, ``moonep``, ``mori_*``: their buffers are sized by their libraries
  (pplx_kernels, nixl_ep Buffer.get_rdma_size_hint, FlashInfer's MNNVL workspace, DeepEP v2, MoonEP, MoRI), none read:
  refused by name on NVIDIA GPUs. ROCm's all2all (mori, allgather_reducescatter) is not priced here.
"""

from __future__ import annotations

from collections.abc import Mapping

from k3plan.engines.release import Release
from k3plan.engines.serve_values import MAX_FLAG_INT
from k3plan.errors import K3PlanError
from k3plan.units import MiB

DEEPEP_COMMIT = "73b6ea4a439ba03a695563f9fd242c8e4b02b37c"  # vLLM's pin (the module docstring)
DEEPEP_SOURCE = (
    f"deepseek-ai/DeepEP@{DEEPEP_COMMIT[:8]} (vLLM's pin: tools/ep_kernels/install_python_libraries.sh) "
    "csrc/deep_ep.cpp Buffer::Buffer (cudaMalloc of num_nvl_bytes + barrier signals and pointers, a "
    "NUM_WORKSPACE_BYTES 32 MiB workspace; Buffer::sync: num_rdma_bytes by internode::alloc from NVSHMEM)"
)
LL_HINT_SOURCE = (
    f"deepseek-ai/DeepEP@{DEEPEP_COMMIT[:8]} csrc/config.hpp LowLatencyLayout / get_low_latency_rdma_size_hint"
)
VLLM_SOURCE = (
    "vllm 0.11.0-0.34.0 wheels (PyPI), vllm/distributed/device_communicators/all2all.py {cls}._make_all2all_kwargs, "
    "made at get_handle while the model loads, outside torch's allocator: in the non-torch increase"
)
DEEPEP_BUFFER_MB_DEFAULT = 1024  # vllm/envs.py VLLM_DEEPEP_BUFFER_SIZE_MB
MOE_DP_CHUNK_DEFAULT = 256  # vllm/envs.py VLLM_MOE_DP_CHUNK_SIZE (0.11.0-0.19.0 wheels)
NUM_MAX_NVL_PEERS = 8  # DeepEP csrc/kernels/configs.cuh
NUM_WORKSPACE_BYTES = 32 * MiB  # DeepEP csrc/kernels/configs.cuh
NUM_BUFFER_ALIGNMENT_BYTES = 128  # DeepEP csrc/kernels/configs.cuh
# from 0.20.0 the low-latency buffer holds max_num_batched_tokens a rank (the 0.19.0 wheel's FusedMoEConfig takes
# VLLM_MOE_DP_CHUNK_SIZE, the 0.20.0 wheel's the scheduler's max_num_batched_tokens)
LL_TOKENS_FROM: Release = (0, 20, 0)
FORCE_INTRA_FROM: Release = (0, 13, 0)  # VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE: in 0.13.0's all2all.py
# the hidden sizes DeepEP's low-latency kernels are built for (DeepEPLLPrepareAndFinalize.SUPPORTED_HIDDEN_SIZES): from
# 0.11.2 vLLM rounds the MoE layer's hidden up to the next (maybe_roundup_layer_hidden_size, in the 0.11.2, 0.13.0,
# 0.18.0, 0.20.0 and 0.33.0 wheels; ValueError above the largest), and the buffer is sized for it; the 0.11.0 wheel
# asserts the hidden is one of its shorter list at the first dispatch (the profile run)
LL_HIDDEN_SIZES = (2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192)
LL_HIDDEN_SIZES_0110 = (2048, 2560, 4096, 5120, 6144, 7168)
LL_ROUNDUP_FROM: Release = (0, 11, 2)
PPLX_GONE_FROM: Release = (0, 17, 0)  # PPLXAll2AllManager in the 0.16.0 wheel's all2all.py, not 0.17.0's
# the backends whose buffers no k3plan code sizes: their library's (the module docstring)
UNREAD = {
    "pplx": "pplx_kernels' AllToAll buffers",
    "nixl_ep": "nixl_ep's Buffer (Buffer.get_rdma_size_hint, update_memory_buffers)",
    "flashinfer_all2allv": "FlashInfer's MNNVL all2all workspace (MnnvlMoe)",
    "flashinfer_nvlink_two_sided": "FlashInfer's MNNVL all2all workspace (MnnvlMoe)",
    "flashinfer_nvlink_one_sided": "FlashInfer's NVLinkOneSidedAlltoAll workspace",
    "deepep_v2": "DeepEP v2's ElasticBuffer",
    "moonep": "MoonEP's buffer pool",
    "mori_low_latency": "MoRI's EpDispatchCombineOp buffers",
    "mori_high_throughput": "MoRI's EpDispatchCombineOp buffers",
    "mori": "MoRI's EpDispatchCombineOp buffers",
}


# the variables that size them (vllm/envs.py), read on a vLLM command (engines/vllm/serve.py KNOWN_ENV / OWN_ENV)
A2A_ENV = frozenset({"VLLM_DEEPEP_BUFFER_SIZE_MB", "VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE"})
DEEPEP_BACKENDS = ("deepep_high_throughput", "deepep_low_latency")


def read_a2a_env(env: Mapping[str, str], *, backend: str | None, expert_parallel: bool, dp: int, vendor: str) -> bool:
    """Whether ``A2A_ENV``'s variables the command sets size a buffer k3plan prices (DeepEP's on NVIDIA with EP and
    DP > 1: read, checked as vLLM's int() reads them); False where they size nothing (listed by the caller). On ROCm,
    whose DeepEP buffers are not priced here, they are refused."""
    given = sorted(A2A_ENV & set(env))
    if not given:
        return False
    if backend not in DEEPEP_BACKENDS or not expert_parallel or dp <= 1:
        return False  # no DeepEP buffer is made: the variables size nothing
    if vendor != "nvidia":
        raise K3PlanError(
            f"--serve: {given[0]}: the DeepEP buffers' size on {vendor or 'this GPU'} is not priced by k3plan "
            "(engines/vllm/all2all_buffers.py prices NVIDIA's); remove it to price the engine without"
        )
    for name in given:
        _env_int(env, name, 0)
    return True


# vLLM turns CUDA graphs off for deepep_high_throughput at DP > 1 ("DeepEP: Disabling CUDA Graphs since DeepEP
# high-throughput kernels are optimized for prefill and are incompatible with CUDA Graphs"): cudagraph_mode NONE, so
# nothing is captured and the worker's graph estimate is 0. Read in the vllm 0.13.0-0.34.0 wheels (PyPI),
# vllm/config/compilation.py CompilationConfig.set_splitting_ops_for_v1 (with mode VLLM_COMPILE, the default, and DP
# counted for a MoE model: VllmConfig.__post_init__ effective_dp_size), any platform; in the 0.11.2 wheel
# vllm/platforms/cuda.py CudaPlatform.check_and_update_config on CUDA only (0.11.0's reads VLLM_ALL2ALL_BACKEND)
HT_NO_GRAPHS_FROM: Release = (0, 13, 0)
HT_NO_GRAPHS_CUDA_FROM: Release = (0, 11, 2)
HT_NO_GRAPHS_SOURCE = (
    "vllm 0.13.0-0.34.0 wheels (PyPI) vllm/config/compilation.py CompilationConfig.set_splitting_ops_for_v1 "
    "('DeepEP: Disabling CUDA Graphs since DeepEP high-throughput kernels are optimized for prefill'); 0.11.2: "
    "vllm/platforms/cuda.py on CUDA"
)


def ht_disables_graphs(*, backend: str | None, dp: int, release: Release | None, vendor: str) -> bool:
    """Whether vLLM sets cudagraph_mode NONE for the command (``HT_NO_GRAPHS_SOURCE``): deepep_high_throughput at
    DP > 1, from 0.13.0 on any GPU, from 0.11.2 on NVIDIA's."""
    if backend != "deepep_high_throughput" or dp <= 1:
        return False
    if release is None or release >= HT_NO_GRAPHS_FROM:
        return True
    return vendor == "nvidia" and release >= HT_NO_GRAPHS_CUDA_FROM


def low_latency_rdma_bytes(*, tokens: int, hidden: int, ranks: int, experts: int) -> int:
    """DeepEP's get_low_latency_rdma_size_hint (``LL_HINT_SOURCE``): two send, two receive and two signalling
    buffers for ``tokens`` a rank of ``hidden`` channels over ``experts`` global experts, rounded past 128 B."""
    del ranks  # the layout takes it and does not use it
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)  # int4 control + bf16 row, or fp8 row + fp32 scales
    combine_msg = scales * 4 + hidden * 2  # per-128-channel bf16x2 min/max + bf16 row
    send = max(tokens * dispatch_msg, experts * tokens * combine_msg)
    recv = max(experts * tokens * dispatch_msg, experts * tokens * combine_msg)
    signalling = -(-experts * 4 // 128) * 128
    total = 2 * send + 2 * recv + 2 * signalling
    return (total + NUM_BUFFER_ALIGNMENT_BYTES) // NUM_BUFFER_ALIGNMENT_BYTES * NUM_BUFFER_ALIGNMENT_BYTES


def _ll_hidden(hidden: int, release: Release | None) -> int:
    """The hidden size DeepEP's low-latency buffer is sized for (``LL_HIDDEN_SIZES``); vLLM's refusals raise."""
    if release is not None and release < LL_ROUNDUP_FROM:
        if hidden not in LL_HIDDEN_SIZES_0110:
            raise K3PlanError(
                f"--serve: vLLM {'.'.join(map(str, release))} refuses deepep_low_latency for hidden size {hidden}: "
                f"AssertionError 'Hidden Size {hidden} not in supported list of hidden sizes' at the profile run's "
                "first dispatch (vllm 0.11.0 wheel, model_executor/layers/fused_moe/deepep_ll_prepare_finalize.py)"
            )
        return hidden
    for size in LL_HIDDEN_SIZES:
        if size >= hidden:
            return size
    raise K3PlanError(
        f"--serve: vLLM refuses deepep_low_latency for hidden size {hidden}: ValueError 'Hidden Size {hidden} is "
        f"greater than the maximum supported hidden size {LL_HIDDEN_SIZES[-1]}' (vllm 0.33.0 wheel, "
        "model_executor/layers/fused_moe/prepare_finalize/deepep_ll.py maybe_roundup_layer_hidden_size)"
    )


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    """A variable vLLM reads with int(): a size or a count, so a negative one (a negative DeepEP buffer) or one past
    MAX_FLAG_INT (10^26 MiB) is bad input, one line, never priced."""
    raw = env.get(name)
    if raw is None:
        return default
    try:
        n = int(raw)
    except ValueError:
        raise K3PlanError(f"--serve: {name}={raw!r}: vLLM reads it as an int") from None
    if not 0 <= n <= MAX_FLAG_INT:
        raise K3PlanError(f"--serve: {name}={raw!r}: expected a whole number from 0 to {MAX_FLAG_INT:,}")
    return n


def all2all_non_torch(
    *,
    backend: str | None,
    release: Release | None,
    vendor: str,
    expert_parallel: bool,
    dp: int,
    ep: int,
    devices_per_host: int,
    hidden: int,
    experts: int,
    max_num_batched_tokens: int,
    env: Mapping[str, str],
) -> tuple[int, str] | None:
    """(bytes a GPU, how): the all2all backend's buffers vLLM makes at load on an NVIDIA GPU, in the non-torch
    increase (the module docstring); None where the MoE runs no all2all kernels (no EP, DP 1), the backend makes no
    buffer of its own, or the GPU is not NVIDIA's. A backend whose buffers its library sizes raises K3PlanError."""
    name = backend or "allgather_reducescatter"
    if vendor != "nvidia" or not expert_parallel or dp <= 1 or ep <= 1:
        return None
    if name in ("allgather_reducescatter", "naive", "passthrough"):
        return None
    if name == "pplx" and release is not None and release >= PPLX_GONE_FROM:
        return None  # ParallelConfig's fallback to allgather_reducescatter
    if name in UNREAD:
        raise K3PlanError(
            f"--serve: --all2all-backend {name}: vLLM's all2all manager makes {UNREAD[name]} at load, sized by that "
            f"library, whose code k3plan has not read (vllm/distributed/device_communicators/all2all.py); not priced: "
            "pass --all2all-backend deepep_high_throughput / deepep_low_latency / allgather_reducescatter to price it"
        )
    if name not in ("deepep_high_throughput", "deepep_low_latency"):
        return None  # an unknown name: the reading of the flag says so elsewhere
    internode = ep > devices_per_host
    mb = _env_int(env, "VLLM_DEEPEP_BUFFER_SIZE_MB", DEEPEP_BUFFER_MB_DEFAULT)
    nvl = mb * MiB
    if name == "deepep_high_throughput":
        force_intra = (release is None or release >= FORCE_INTRA_FROM) and _env_int(
            env, "VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE", 0
        )
        rdma = nvl if internode and not force_intra else 0
        cls = "DeepEPHTAll2AllManager"
        rdma_how = (
            f"num_rdma_bytes {rdma:,} (VLLM_DEEPEP_BUFFER_SIZE_MB {mb}: EP {ep} spans nodes of {devices_per_host})"
            if rdma
            else f"num_rdma_bytes 0 (EP {ep} within a node of {devices_per_host}"
            + (", VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE" if internode else "")
            + ")"
        )
    else:
        hidden = _ll_hidden(hidden, release)
        old = release is not None and release < LL_TOKENS_FROM
        tokens = _env_int(env, "VLLM_MOE_DP_CHUNK_SIZE", MOE_DP_CHUNK_DEFAULT) if old else max_num_batched_tokens
        rdma = low_latency_rdma_bytes(tokens=tokens, hidden=hidden, ranks=ep, experts=experts)
        cls = "DeepEPLLAll2AllManager"
        rdma_how = (
            f"num_rdma_bytes {rdma:,} ({LL_HINT_SOURCE} at {tokens:,} tokens a rank ("
            + ("VLLM_MOE_DP_CHUNK_SIZE before 0.20.0" if old else "max_num_batched_tokens from 0.20.0")
            + f"), hidden {hidden}, {experts} experts, EP {ep})"
        )
    own = NUM_MAX_NVL_PEERS * (4 + 8 + 8) if nvl else 0
    total = nvl + own + NUM_WORKSPACE_BYTES + rdma
    how = (
        f"{total:,} B: the {name} all2all buffers a GPU, num_nvl_bytes {nvl:,} (VLLM_DEEPEP_BUFFER_SIZE_MB {mb}) + "
        f"{own} B of barrier signals and pointers + the 32 MiB workspace + {rdma_how} ({VLLM_SOURCE.format(cls=cls)}; "
        f"{DEEPEP_SOURCE}; what NVSHMEM maps beyond the bytes asked, its heap granularity and queues, not read, not "
        "priced)"
    )
    return total, how
