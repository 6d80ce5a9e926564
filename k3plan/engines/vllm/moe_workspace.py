"""The MoE workspace vLLM's profile run leaves allocated (issue 47): from 0.14.0 a tensor-parallel FP8-block MoE layer
runs through a modular kernel (``FusedMoEModularKernel``) whose scratch tensors come from the worker's workspace
manager (vllm/v1/worker/workspace.py ``WorkspaceManager.get_simultaneous``: one uint8 buffer, grown to the largest
request and kept, each part rounded up to 256 B), not from a per-call ``torch.empty``. The dummy forward at
max_num_batched_tokens grows it to that batch's size and it stays allocated through ``_dummy_sampler_run``, so the
torch peak the worker subtracts (Worker.determine_available_memory, ``torch_peak_increase``) is the sampler warm-up's
live tensors on top of it. Before 0.14.0 (read in the 0.11.0, 0.11.2 and 0.13.0 wheels) ``Fp8MoEMethod.apply`` calls
``fused_experts``, whose Triton path (``fused_experts_impl``) allocates its caches a call and frees them, so nothing
of the forward stays under the sampler (DeepGEMM's grouped GEMM is refused where the shard's N is 512 or less,
``_valid_deep_gemm``; not priced where it is larger).

The kernel vLLM picks for FP8-block experts, tensor parallel without --enable-expert-parallel, read in the 0.14.0,
0.14.1, 0.15.0, 0.15.1, 0.16.0, 0.17.0, 0.17.1, 0.18.0 and 0.20.0 wheels (PyPI),
vllm/model_executor/layers/fused_moe/oracle/fp8.py ``select_fp8_moe_backend``:

- 0.14.x: FlashInfer only with VLLM_USE_FLASHINFER_MOE_FP8=1 (off by default), DeepGEMM off at TP 8 or more unless
  VLLM_MOE_USE_DEEP_GEMM is set (and absent from a ``pip install vllm``: no Requires-Dist), so ``TritonExperts``
  (AITER on ROCm only with VLLM_ROCM_USE_AITER=1);
- 0.15.0-0.16.x: the first supported of AITER, FlashInfer TRT-LLM, FlashInfer CUTLASS, DeepGEMM, ..., Triton:
  on SM90 ``FlashInferExperts`` (flashinfer_cutlass_moe.py: FP8 block scales on compute capability 9.0, FlashInfer
  a requirement of the wheel), on ROCm ``TritonExperts``;
- 0.17.0 on: on Hopper for block FP8 Triton is moved to the front for TP (``_get_priority_backends``: 'prefer
  Triton for TP and FI CUTLASS for EP'); ROCm still ``TritonExperts``; sm_10x takes FlashInfer TRT-LLM
  (``TrtLlmFp8ExpertsMonolithic``, whose workspaces FlashInfer manages: none from the manager).

What each holds (``workspace_shapes`` and ``FusedMoEModularKernel._allocate_buffers``, same wheels), M the tokens of a
chunk (min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE 16,384) to 0.17.x, all of them from 0.18.0, where the chunking is gone),
N the w13 shard's rows (2 x moe_intermediate_size / TP), K the hidden size, in the activations' dtype
(``workspace_dtype`` = act_dtype):

- ``TritonExperts``: workspace13 (M, top_k, max(N / 2, K)) and workspace2 (M, top_k, max(N, K)); the output reuses
  workspace13 (0.14.x where it is at least M x K; from 0.15.0 a common buffer of the larger of the two);
- ``FlashInferExperts``: workspace13 (M, K), workspace2 (0,), the output in the common buffer: M x K.

DeepSeek-R1 at TP 8 and 8,192 tokens: Triton 2 x 8,192 x 8 x 7,168 x 2 B = 1.75 GiB, FlashInfer 8,192 x 7,168 x 2 B
= 0.11 GiB; Red Hat's starts of one command over the releases step by the difference
(tests/engines/cases/vllm-kamra-r1-0528-h200-tp8-8k-v0130, -v0141, -v0160: 5.77, 7.45, 5.80 GiB held beyond the
weights; on MI300X, Triton from 0.14: -mi300x-tp8-8k-v0130 8.24, -v0141 9.99 GiB).

Not priced (0, said): other expert formats, expert parallelism, AITER, releases before 0.14.0 and GPUs other than SM90
(H100 / H200 / H20) and ROCm. The 0.26.0, 0.28.0, 0.33.0 and 0.34.0 wheels keep the same selection
(``_get_priority_backends``), TritonExperts' shapes and the workspace manager (``_allocate_buffers``), and Model Runner
V2's profile_run (the default from 0.29.0, vllm/v1/worker/gpu/model_runner.py) runs the sampler warm-up after its dummy
forward too, so the rule holds to 0.34.x (a session-47 helper read them; no logged start of an FP8-block model after
0.20.0 checks it). Under 0.34.0's extensible KV cache the workspace is resident to the measurement after warmup, not
part of the transient peak it keeps free (engines/vllm/memory.py engine_sizing moves it there).
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text
from k3plan.units import GiB

MODULAR_TP_FROM: Release = (0, 14, 0)  # Fp8MoEMethod's modular kernel for TP (make_fp8_moe_kernel)
FI_CUTLASS_SM90_FROM: Release = (0, 15, 0)  # the oracle's ordered list, FlashInfer CUTLASS before Triton
TRITON_FIRST_SM90_FROM: Release = (0, 17, 0)  # _get_priority_backends: Triton to the front on Hopper, block FP8, TP
UNCHUNKED_FROM: Release = (0, 18, 0)  # FusedMoEModularKernel without _chunk_info
CHUNK = 16 * 1024  # VLLM_FUSED_MOE_CHUNK_SIZE's default, 0.13.0-0.17.x (vllm/envs.py)
ALIGN = 256  # WorkspaceManager.get_simultaneous rounds each part up to 256 B
ACT_BYTES = 2  # the activations' dtype, bfloat16
SM90 = frozenset({"nvidia-h100-sxm", "nvidia-h200", "nvidia-h20"})
SOURCE = (
    "vllm 0.14.0-0.18.0 / 0.20.0 / 0.26.0 / 0.28.0 / 0.33.0 / 0.34.0 wheels (PyPI): vllm/model_executor/layers/fused_moe/oracle/fp8.py "
    "select_fp8_moe_backend / _get_priority_backends, fused_moe.py TritonExperts.workspace_shapes, "
    "flashinfer_cutlass_moe.py FlashInferExperts.workspace_shapes, modular_kernel.py "
    "FusedMoEModularKernel._allocate_buffers, vllm/v1/worker/workspace.py WorkspaceManager (kept after the dummy "
    "forward, under _dummy_sampler_run)"
)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def profile_moe_workspace(
    *,
    release: Release | None,
    vendor: str,
    hardware: str,
    expert_formats: tuple[str, ...],
    expert_parallel: bool,
    tp: int,
    top_k: int,
    hidden: int,
    intermediate: int,
    tokens: int,
    env: dict[str, str],
) -> tuple[int, str]:
    """(bytes, how): the MoE workspace allocated by the profile run's dummy forward and still held when the sampler
    warm-up peaks (module docstring); 0 and why where none is held or the path was not read."""
    # a release after the newest read (0.34.0) is priced by its rules, as every vLLM rule is (Engine.latest_release_read)
    if release is None or release < MODULAR_TP_FROM:
        return 0, "no MoE workspace priced under the sampler (the modular kernels' workspace is 0.14.0's on)"
    if expert_formats != ("fp8_block",) or expert_parallel or tp < 1 or top_k < 1 or hidden < 1 or intermediate < 1:
        return 0, "no MoE workspace priced under the sampler (read for FP8-block experts, TP without EP)"
    if vendor == "amd":
        if env.get("VLLM_ROCM_USE_AITER", "").strip().lower() in ("1", "true"):
            return 0, "no MoE workspace priced under the sampler (ROCm AITER's MoE not read)"
        kernel = "TritonExperts"
    elif vendor == "nvidia" and hardware in SM90:
        fi = FI_CUTLASS_SM90_FROM <= release < TRITON_FIRST_SM90_FROM
        kernel = "FlashInferExperts" if fi else "TritonExperts"
    else:
        return 0, f"no MoE workspace priced under the sampler (the FP8 MoE kernel on {hardware} not read)"
    m = tokens if release >= UNCHUNKED_FROM else min(tokens, CHUNK)
    n = 2 * intermediate // tp
    k = hidden
    if kernel == "FlashInferExperts":
        ws = _aligned(m * k * ACT_BYTES)
        shapes = f"the common buffer of workspace13 and the output, {m:,} x {k:,}"
    else:
        ws13, ws2 = m * top_k * max(n // 2, k), m * top_k * max(n, k)
        common = max(ws13, m * k)
        ws = _aligned(common * ACT_BYTES) + _aligned(ws2 * ACT_BYTES)
        shapes = (
            f"workspace13 {m:,} x {top_k} x {max(n // 2, k):,} (holding the {m:,} x {k:,} output) + workspace2 "
            f"{m:,} x {top_k} x {max(n, k):,}"
        )
    how = (
        f"{ws / GiB:.2f} GiB of MoE workspace held under the sampler in vLLM {release_text(release)} ({kernel}: "
        f"{shapes}, x {ACT_BYTES} B; N {n:,} = 2 x {intermediate:,} / TP {tp}; {SOURCE})"
    )
    return ws, how
