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

Data and expert parallelism (issue 47's sequel), read in the same wheels and the 0.26.0, 0.28.0, 0.33.0 and 0.34.0
ones. --all2all-backend defaults to allgather_reducescatter in every one (vllm/config/parallel.py ParallelConfig).

- M under DP: with --data-parallel-size > 1 every DP rank's tokens are all-gathered before the experts run
  (AgRsAll2AllManager.dispatch, all_gatherv over the DP group at the sizes DPMetadata holds): from the layer's naive
  dispatch (0.14.x-0.15.x, fused_moe/layer.py FusedMoE.forward_impl do_naive_dispatch_combine, the FP8 method not a
  FusedMoEModularMethod) or from the modular kernel's own prepare (0.16.0 on, all2all_utils.py
  maybe_make_prepare_finalize: MoEPrepareAndFinalizeNaiveEP / make_moe_prepare_and_finalize_naive_dp_ep, 'Detected
  DP deployment with no --enable-expert-parallel. Falling back to AllGather+ReduceScatter dispatch/combine', and
  FusedMoEParallelConfig.use_naive_all2all_kernels with EP), so ``_allocate_buffers`` sees M_full = the gathered
  rows. The profile run's dummy batch is max_num_batched_tokens on every DP rank and runs eager, so the ranks'
  counts are not padded past it (v1/worker/gpu_model_runner.py _dummy_run / dp_utils.py coordinate_batch_across_dp to
  0.28.0; Model Runner V2, the default from 0.29.0: v1/worker/gpu/model_runner.py profile_run -> _dummy_run ->
  dp_utils.py dispatch_cg_and_sync_dp, need_eager, sync_cudagraph_and_dp_padding keeps num_tokens_across_dp): M_full
  = DP x max_num_batched_tokens. The DP chunking (VLLM_MOE_DP_CHUNK_SIZE 256 to 0.18.x, FusedMoE / DefaultMoERunner
  use_dp_chunking) is for pplx / DeepEP low-latency / mori / FlashInfer all2allv and NVLink kernels only (and NVFP4's
  FlashInfer CUTLASS to 0.15.x), never the default; 0.20.0 dropped it.
- The chunk to 0.17.x: VLLM_FUSED_MOE_CHUNK_SIZE (16,384) caps M for the two workspaces; where M_full needs more
  than one chunk the output is its own M_full x K part (``_allocate_buffers``: workspace13, workspace2 and fused_out
  from one get_simultaneous). 0.15.0-0.17.x also force, in the profile run under DP + EP (``is_dp_ep``, the kernel
  built with its moe_parallel_config: oracle/fp8.py make_fp8_moe_kernel from 0.15.0, not in 0.14.x's), the
  worst case of a full chunk: workspace13, workspace2 and output at 16,384 rows, separately; the manager keeps the
  larger request. From 0.18.0 no chunk: M = M_full.
- N: without EP the experts' TP is flattened over TP x DP (config.py FusedMoEParallelConfig.make
  flatten_tp_across_dp_and_pcp): N = 2 x intermediate / (TP x DP); with EP (use_ep, TP x DP > 1) the MoE TP is 1 and
  N = 2 x intermediate.
- The kernel under EP: 0.14.x ``TritonExperts`` (select_fp8_moe_backend gets the MoE TP, 1 under EP, so DeepGEMM
  would be on where installed: a pip install has none), 0.15.0-0.16.x ``FlashInferExperts`` on SM90 as for TP, from
  0.17.0 ``FlashInferExperts`` on SM90 (``_get_priority_backends``: FlashInfer CUTLASS to the front where
  moe_parallel_config.ep_size > 1; FlashInferExperts._supports_parallel_config True, block FP8 on 9.0 in
  _supports_quant_scheme); on ROCm ``TritonExperts``. DP without EP keeps TP's kernel.

DeepSeek-R1 on 8 H200 at DP 8, 8,192 tokens a rank (M_full 65,536): without EP TritonExperts from 0.17.0 (N 512),
2 x 65,536 x 8 x 7,168 x 2 B = 14.0 GiB from 0.18.0, at 0.17.x 2 x 16,384 x 8 x 7,168 x 2 B + the 65,536 x 7,168
output = 4.38 GiB; with EP FlashInferExperts, 65,536 x 7,168 x 2 B = 0.88 GiB from 0.18.0.

Not priced (0, said): other expert formats, a command that picks the kernel (--moe-backend; VLLM_USE_DEEP_GEMM /
VLLM_MOE_USE_DEEP_GEMM asking for DeepGEMM, ``_deep_gemm_asked``; VLLM_USE_FLASHINFER_MOE_FP8 set before 0.24.0, where the oracle stopped reading it), an
all2all backend other than the default under DP (its buffers and chunking are another module's), EP with TP > 1 and
DP > 1 (sequence-parallel MoE, ParallelConfig.use_sequence_parallel_moe: not read), AITER, releases before 0.14.0
and GPUs other than SM90 (H100 / H200 / H20) and ROCm (INT4 W4A16 experts: SM90 and the SM100 family, from
0.23.0).

The 0.26.0, 0.28.0, 0.33.0 and 0.34.0 wheels keep the same selection (``_get_priority_backends``), TritonExperts' and
FlashInferExperts' shapes and the workspace manager (``_allocate_buffers``), and Model Runner V2's profile_run (the
default from 0.29.0, vllm/v1/worker/gpu/model_runner.py) runs the sampler warm-up after its dummy forward too, so the
rule holds to 0.34.x (a session-47 helper read them; no logged start of an FP8-block model after
0.20.0 checks it). Under 0.34.0's extensible KV cache the workspace is resident to the measurement after warmup, not
part of the transient peak it keeps free (engines/vllm/memory.py engine_sizing moves it there).

MXFP4 experts on Hopper through ``MarlinExperts`` (session 50), the same workspace manager:

- DeepSeek-V4 / V4.1 (k3plan's ``ds_fp4`` experts): the model's quant config (0.20.0 / 0.20.2
  model_executor/models/deepseek_v4.py DeepseekV4FP8Config.get_quant_method; from 0.23.0 models/deepseek_v4/
  quant_config.py, V4.1 models/deepseek_v41/quant_config.py from 0.30.0) gives every routed FusedMoE an
  ``Mxfp4MoEMethod``, which picks its kernel with fused_moe/oracle/mxfp4.py ``select_mxfp4_moe_backend`` (0.20.x) /
  ``select_deepseek_v4_mxfp4_moe_backend`` (0.23.0 on): with --moe-backend auto on CUDA the first supported of
  ``_get_priority_backends`` = FLASHINFER_TRTLLM_MXFP4_MXFP8 (experts/trtllm_mxfp4_moe.py: the SM100 family only),
  DEEPGEMM_MXFP4 (experts/deep_gemm_moe.py DeepGemmFP4Experts: the SM100 family only), MARLIN, BATCHED_MARLIN, so
  ``MarlinExperts`` on SM90 (fused_marlin_moe.py MarlinExpertsBase._supports_current_device: CUDA at 7.5 or later;
  experts/marlin_moe.py from 0.23.0), built into a ``FusedMoEKernel`` (make_mxfp4_moe_kernel) whose
  ``_allocate_buffers`` takes its scratch from ``current_workspace_manager().get_simultaneous``. Read in the 0.20.0,
  0.20.2, 0.23.0, 0.26.0, 0.28.0, 0.30.0 and 0.31.0 wheels (PyPI). From 0.32.0 (the 0.32.0, 0.33.0 and 0.34.0
  wheels) ``_get_priority_backends`` adds HUMMING and ends in ``prioritize_humming`` (quantization/utils/humming/
  priority.py: Humming ahead of Marlin on compute capability 9.0, humming-kernels a Requires-Dist of the wheel), so V4
  on Hopper runs ``HummingExperts`` (experts/fused_humming_moe.py, its workspaces the manager's too, sized by the
  humming package's buffer metadata): not priced (0, said).
- Kimi-K3 (compressed-tensors mxfp4-pack-quantized W4A16, k3plan's ``mxfp4``): quantization/compressed_tensors/
  compressed_tensors_moe/compressed_tensors_moe_w4a4_mxfp4.py ``CompressedTensorsW4A4Mxfp4MoEMethod.__init__`` takes
  ``MarlinExperts`` where CutlassExpertsMxfp4 is not supported (ops.mxfp4_experts_quant_supported, the compiled
  capability check, not read: taken as off on Hopper) and the platform is not XPU, read in the 0.27.0, 0.28.0, 0.30.0
  and 0.31.0 wheels (PyPI; the 0.27.0 wheel the first with vllm/models/kimi_k3, none in the 0.25.0 and 0.26.0 ones, so
  the K3 bring-up images pinned before 0.27.0 are priced by it, as mla_workspace.k3_profile_mla prices them); from
  0.32.0 not read here (0, said). The method reads no --moe-backend (0.27.0 and 0.28.0: compressed_tensors_moe.py
  get_moe_method returns it for any MXFP4 weights before the branch that reads kernel_config.moe_backend), so an
  explicit --moe-backend still runs MarlinExperts; only ``deep_gemm_mega_moe`` changes K3's MoE (models/kimi_k3/nvidia/
  model.py use_mega_moe: not read here, 0). K3's routed experts work in the latent: the FusedMoE's hidden_size is
  model.py ``moe_hidden_size`` = routed_expert_hidden_size (3,584, not the 7,168 hidden), so K below is the latent
  width, and N is 2 x padded_moe_intermediate_size (the intermediate, raised to 256 a TP shard without EP).

``MarlinExperts.workspace_shapes`` (every wheel above): workspace1 (M x top_k, max(N, K)), workspace2
(M x top_k x max(2N, K)), the output (M, K), N the w13 shard's intermediate (marlin_moe_intermediate_size, half the
w13 rows); ``_allocate_buffers`` puts workspace13 and the output in the common buffer: with N the w13 rows as below,
Triton's shapes exactly (workspace13 (M, top_k, max(N / 2, K)), workspace2 (M, top_k, max(N, K))). M, N under DP and
EP, the all2all backend and --moe-backend are read as for FP8 above (FusedMoEParallelConfig.make,
maybe_make_prepare_finalize, unchanged in these wheels); no chunk from 0.18.0.

INT4 W4A16 experts (Kimi-K2-Thinking / K2.5 / K2.6: compressed-tensors pack-quantized, symmetric int4, group 32,
k3plan's ``int4_g32``) from 0.23.0, the same workspace manager (to 0.22.x the method calls fused_marlin_moe itself,
whose per-call caches engines/vllm/marlin_moe.py prices in the forward):

- The method: quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py
  ``CompressedTensorsMoEMethod.get_moe_method`` (``_is_wNa16_group_channel``, pack-quantized, 4 bits) gives
  ``CompressedTensorsWNA16MarlinMoEMethod`` (compressed_tensors_moe_wna16_marlin.py, 0.23.0-0.26.x, where
  marlin_utils.py check_moe_marlin_supports_layer holds: hidden % 128, the shard's intermediate % max(64, group))
  or, from 0.27.0, ``CompressedTensorsWNA16MoEMethod`` (compressed_tensors_moe_wna16.py, one method for every
  backend). Both pick the kernel with fused_moe/oracle/int_wna16.py ``select_wna16_moe_backend``: with --moe-backend
  auto on CUDA the first supported of ``_get_priority_backends``, FLASHINFER_TRTLLM (experts/trtllm_mxint4_moe.py
  ``TrtLlmMxint4ExpertsMonolithic``: the SM100 family and quantization/utils/flashinfer_mxint4_moe.py
  is_flashinfer_mxint4_moe_available, i.e. VLLM_USE_FLASHINFER_MOE_INT4=1, off by default, and to 0.24.x only the
  SWIGLUOAI activation, not Kimi's SiLU), then MARLIN (experts/marlin_moe.py ``MarlinExperts``:
  _supports_current_device CUDA at 7.5 or later). ``make_wna16_moe_kernel`` builds a ``FusedMoEKernel`` whose
  ``_allocate_buffers`` takes the scratch from ``current_workspace_manager().get_simultaneous``. Read in the 0.23.0,
  0.26.0 and 0.30.0 wheels, the priority list in the 0.24.0, 0.25.0, 0.27.0, 0.28.0, 0.29.0 and 0.31.0 ones
  (PyPI). So ``MarlinExperts`` on SM90 (H100 / H200 / H20) 0.23.0-0.31.x and on the SM100 family (B200 / B300) from
  0.23.0 (engines/vllm/serve.py refuses VLLM_USE_FLASHINFER_MOE_INT4=1 there), with the shapes above; under EP the
  same class (Standard activation format with the default all2all backend), N the whole expert's.
- From 0.32.0 (the 0.32.0, 0.33.0 and 0.34.0 wheels) ``_get_priority_backends`` ends in ``prioritize_humming``
  (quantization/utils/humming/priority.py: Humming moved ahead of Marlin on compute capability 9.0 only;
  humming-kernels a Requires-Dist of the wheel, so has_humming()), so on SM90 HUMMING's first supported class runs
  (experts/fused_humming_moe.py ``HummingExpertsBase.is_supported_config``: the gemm type of
  get_humming_moe_gemm_type, VLLM_HUMMING_MOE_GEMM_TYPE unset: ``HummingIndexedExperts`` without EP,
  ``HummingGroupedExperts`` with it; the int4 group-32 weight key passes _is_supported_wna16_weight_key). Its
  ``workspace_shapes`` (``get_buffer_metas`` / ``_workspace_shapes``) lays the chain quanted_gate_up_input (M_in x K,
  M_in = M indexed, M x top_k grouped), gate_up_output (M x top_k x 2N), quanted_down_input (M x top_k x N),
  down_output (M x top_k x K) and output (M x K) alternately over workspace1 and workspace2, each the largest of its
  buffers, all in bf16 for W4A16 (humming-kernels 0.1.19 humming/transform.py: a_dtype the param dtype where the
  input schema has none, c_dtype the param dtype): workspace1 max(M x K, M x top_k x N, M_in x K), workspace2
  max(M x top_k x K, M x top_k x 2N), the output in the common buffer with workspace1 (_allocate_buffers unchanged).
  The SM100 family keeps MarlinExperts (compute capability 10.x not in _HUMMING_PREFERRED_CAPABILITIES). The grouped
  path's MoEPermuteScratch (moe_permute_unpermute.py get_moe_permute_scratch, a persistent resource sized by the
  expert count) is left out.

Kimi-K2.6 at TP 8 on an H200, 8,192 tokens (N = 2,048 / 8 = 256 < K = 7,168): MarlinExperts 2 x 8,192 x 8 x 7,168
x 2 B = 1.75 GiB; HummingIndexedExperts (8,192 x 7,168 + 8,192 x 8 x 7,168) x 2 B = 0.98 GiB.

The buffer is the manager's one allocation, kept after the profile run and locked after graph capture
(v1/worker/workspace.py ``_ensure_workspace_size`` grows it, never shrinks; gpu_model_runner.py ``lock_workspace``):
resident, not a transient. Kimi's MLA layers take views of the same buffer only through FlashInfer's MLA prefill
wrappers (v1/attention/backends/mla/prefill/flashinfer.py / trtllm_ragged.py: VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE,
394 MiB) or DCP's context gather (flash_attn.py): not priced here; the buffer would be the larger of those and this.

DeepSeek-V4's MXFP4 experts on the SM100 family (B200 / GB200 / B300 / GB300, session 53), read in the vllm 0.20.0
wheel (PyPI) with the FlashInfer it pins (flashinfer-python 0.6.8.post1, PyPI; its JIT sources ship in the wheel):

- The kernel: Mxfp4MoEMethod's ``select_mxfp4_moe_backend`` (fused_moe/oracle/mxfp4.py) tries
  FLASHINFER_TRTLLM_MXFP4_MXFP8 first, whose ``TrtLlmMxfp4ExpertsMonolithic`` refuses DP > 1
  (``_supports_parallel_config``: dp_size <= 1) and whose ``TrtLlmMxfp4ExpertsModular`` takes any parallel config
  and routing (experts/trtllm_mxfp4_moe.py; SM100 family and FlashInfer present). So with DP > 1 and the default
  all2all (the naive AllGather + ReduceScatter prepare/finalize) every DP rank's dummy batch is all-gathered in bf16
  (``expects_unquantized_inputs``: defer_input_quant, prepare_finalize/naive_dp_ep.py) and M_full = DP x
  max_num_batched_tokens rows reach the kernel (the DP paragraph above).
- The manager's buffer: ``workspace_shapes`` gives workspace1 and workspace2 (0,) and the output (M, K), so the
  common buffer is M_full x K bf16 (held, as above).
- The moment inside the kernel (``apply``: flashinfer ``mxfp8_quantize`` of the gathered rows, M x K bytes and a
  linear M x K / 32 scale, then ``trtllm_fp4_block_scale_routed_moe``), beyond the manager's buffer: FlashInfer's
  launcher (csrc/trtllm_fused_moe_kernel_launcher.cu FP4BlockScaleLauncher, MxE4m3 activations) picks, with no
  tuned tactic (the profile run precedes vLLM's autotune), ``selectDefaultTileN``: the smallest of the candidates
  around nextPowerOfTwo(M x top_k / local experts) clamped to the tiles 8-256; ``prepare_routing`` sizes
  max_num_padded_tokens = getMaxPermutedPaddedCount(M, top_k, global experts, tile) (include/flashinfer/trtllm/
  fused_moe/runner.h: one CTA an expert, then a CTA per tile of the rest, times the tile) and ``prepare_moe``
  allocates gemm1_output (padded x intermediate, uint8), its swizzled scale (padded to 128 rows x intermediate / 32
  to 4 columns), gemm2_output (padded x hidden, bf16) and the index arrays; all live to the launcher's return. Its
  batched-GEMM workspaces (workspace_fc1 / fc2, sized by the chosen cubin's config) were not read. With them live:
  the gathered rows, top-k ids and weights (4 B each), the packed top-k (int32) and, in DeepSeek-V4's decoder layer
  (models/deepseek_v4.py DeepseekV4DecoderLayer.forward, DeepseekV4Model.forward), the caller's and the layer's mHC
  residual streams (T x hc_mult x hidden bf16 each), ffn_norm's row, the float32 router logits (T x experts) and the
  shared expert's output row (runner/shared_experts.py: NO_OVERLAP above VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD,
  run before the kernel), T the rank's own max_num_batched_tokens.

Priced for 0.20.x only, with DP > 1, expert parallelism at TP 1 (the whole intermediate a rank), no --moe-backend and
the default all2all; elsewhere on SM100 (0, said): TP shards (rounded up to 256 for TRT-LLM), the monolithic kernel
at DP 1, other releases' oracles and FlashInfer pins.

DeepSeek-V4's sparse attention reserves its own views of the same manager (engines/vllm/dsv4_workspace.py: the
indexer's K gather, FlashMLA's dummy-run request), so the one buffer is the larger of those and this, never their
sum (engines/vllm/memory.py takes the max there).
"""

from __future__ import annotations

import math

from k3plan.engines.release import Release, release_text
from k3plan.engines.vllm.attention_config import SM90, SM100_FAMILY
from k3plan.engines.vllm.mega_moe import MEGA_MOE_BACKEND
from k3plan.units import GiB

MODULAR_TP_FROM: Release = (0, 14, 0)  # Fp8MoEMethod's modular kernel for TP (make_fp8_moe_kernel)
FI_CUTLASS_SM90_FROM: Release = (0, 15, 0)  # the oracle's ordered list, FlashInfer CUTLASS before Triton
TRITON_FIRST_SM90_FROM: Release = (0, 17, 0)  # _get_priority_backends: Triton to the front on Hopper, block FP8, TP
UNCHUNKED_FROM: Release = (0, 18, 0)  # FusedMoEModularKernel without _chunk_info
FORCED_DP_EP_FROM: Release = (0, 15, 0)  # make_fp8_moe_kernel hands the kernel its moe_parallel_config (is_dp_ep)
# select_fp8_moe_backend no longer reads VLLM_USE_FLASHINFER_MOE_FP8: a deprecated_env in the 0.23.0 wheel, named by
# no file of the 0.24.0 and 0.25.0 wheels (PyPI; engines/vllm/backend_env.py)
ENV_FI_GONE_FROM: Release = (0, 24, 0)
ALL2ALL_ENV_GONE_FROM: Release = (0, 16, 0)  # engines/vllm/serve.py STALE_GONE_FROM
DEFAULT_ALL2ALL = "allgather_reducescatter"  # ParallelConfig.all2all_backend's default, 0.14.0-0.34.0
CHUNK = 16 * 1024  # VLLM_FUSED_MOE_CHUNK_SIZE's default, 0.13.0-0.17.x (vllm/envs.py)
ALIGN = 256  # WorkspaceManager.get_simultaneous rounds each part up to 256 B
ACT_BYTES = 2  # the activations' dtype, bfloat16
# MXFP4 experts through MarlinExperts on SM90 (module docstring): [from, to) for each checkpoint format
MARLIN_MXFP4: dict[str, tuple[Release, Release]] = {
    "ds_fp4": ((0, 20, 0), (0, 32, 0)),  # DeepSeek-V4 / V4.1's Mxfp4MoEMethod; Humming first from 0.32.0
    # Kimi-K3's CompressedTensorsW4A4Mxfp4MoEMethod, read 0.27.0-0.31.0; the K3 bring-up images pinned before 0.27.0
    # (no wheel before it has the model, their code not public) are priced by it, as mla_workspace.k3_profile_mla is
    "mxfp4": (MODULAR_TP_FROM, (0, 32, 0)),
}
# Kimi-K3's KimiMoE: getattr(config, "min_moe_intermediate_per_partition", 256) a TP shard without EP (0.27.0 / 0.28.0
# models/kimi_k3/nvidia/model.py; the bundled config.json sets none)
K3_MIN_SHARD = 256
HUMMING_SM90_FROM: Release = (0, 32, 0)  # prioritize_humming: Humming ahead of Marlin on compute capability 9.0
# INT4 W4A16 experts (Kimi-K2.x's compressed-tensors pack-quantized group 32): a modular kernel on the manager's buffer
# from 0.23.0 (make_wna16_moe_kernel), fused_marlin_moe's per-call caches before (engines/vllm/marlin_moe.py)
INT4_W4A16 = "int4_g32"
INT4_MODULAR_FROM: Release = (0, 23, 0)
INT4_SOURCE = (
    "vllm 0.23.0 / 0.26.0 / 0.30.0 wheels (PyPI), the oracle's priority list also in 0.24.0 / 0.25.0 / 0.27.0-0.29.0 "
    "/ 0.31.0: quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py get_moe_method -> "
    "CompressedTensorsWNA16MarlinMoEMethod (compressed_tensors_moe_wna16_marlin.py, to 0.26.x) / "
    "CompressedTensorsWNA16MoEMethod (compressed_tensors_moe_wna16.py, from 0.27.0), fused_moe/oracle/int_wna16.py "
    "select_wna16_moe_backend / _get_priority_backends (FLASHINFER_TRTLLM only on the SM100 family under "
    "VLLM_USE_FLASHINFER_MOE_INT4, then MARLIN) / make_wna16_moe_kernel, experts/marlin_moe.py "
    "MarlinExperts.workspace_shapes, modular_kernel.py FusedMoEKernelModularImpl._allocate_buffers, "
    "vllm/v1/worker/workspace.py WorkspaceManager (kept after the dummy forward); the SM100 family also in the "
    "0.32.0-0.34.0 wheels (quantization/utils/humming/priority.py prioritize_humming: compute capability 9.0 only)"
)
HUMMING_SOURCE = (
    "vllm 0.32.0 / 0.33.0 / 0.34.0 wheels (PyPI): fused_moe/oracle/int_wna16.py _get_priority_backends -> "
    "quantization/utils/humming/priority.py prioritize_humming (Humming ahead of Marlin on compute capability 9.0), "
    "experts/fused_humming_moe.py get_humming_moe_gemm_type (indexed without EP, grouped_contiguous with it) and "
    "HummingExpertsBase.get_buffer_metas / _workspace_shapes; humming-kernels 0.1.19 (PyPI, the wheels' pin) "
    "humming/transform.py (a_dtype and c_dtype the param dtype for W4A16); modular_kernel.py "
    "FusedMoEKernelModularImpl._allocate_buffers, vllm/v1/worker/workspace.py WorkspaceManager"
)
MXFP4_SOURCE = (
    "vllm 0.20.0 / 0.20.2 / 0.23.0 / 0.26.0 / 0.27.0 / 0.28.0 / 0.30.0 / 0.31.0 wheels (PyPI): DeepSeek-V4 "
    "quant_config get_quant_method -> quantization/mxfp4.py Mxfp4MoEMethod, fused_moe/oracle/mxfp4.py "
    "select_mxfp4_moe_backend / select_deepseek_v4_mxfp4_moe_backend / _get_priority_backends (TRTLLM MXFP8 and "
    "DeepGEMM FP4 on the SM100 family only, then MARLIN); Kimi-K3: compressed_tensors_moe_w4a4_mxfp4.py "
    "CompressedTensorsW4A4Mxfp4MoEMethod (MarlinExperts off SM100, 0.27.0-0.31.0, no --moe-backend read), "
    "models/kimi_k3/nvidia/model.py moe_hidden_size / padded_moe_intermediate_size; MarlinExperts.workspace_shapes "
    "(fused_marlin_moe.py, experts/marlin_moe.py from 0.23.0), modular_kernel.py FusedMoEModularKernel."
    "_allocate_buffers, vllm/v1/worker/workspace.py WorkspaceManager (kept after the dummy forward)"
)
SOURCE = (
    "vllm 0.14.0-0.18.0 / 0.20.0 / 0.26.0 / 0.28.0 / 0.33.0 / 0.34.0 wheels (PyPI): vllm/model_executor/layers/fused_moe/oracle/fp8.py "
    "select_fp8_moe_backend / _get_priority_backends, fused_moe.py TritonExperts.workspace_shapes, "
    "flashinfer_cutlass_moe.py FlashInferExperts.workspace_shapes, modular_kernel.py "
    "FusedMoEModularKernel._allocate_buffers, vllm/v1/worker/workspace.py WorkspaceManager (kept after the dummy "
    "forward, under _dummy_sampler_run); under DP: fused_moe/config.py FusedMoEParallelConfig.make "
    "(flatten_tp_across_dp_and_pcp), all2all_utils.py maybe_make_prepare_finalize, "
    "distributed/device_communicators/all2all.py AgRsAll2AllManager.dispatch"
)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# VLLM_USE_DEEP_GEMM and VLLM_MOE_USE_DEEP_GEMM (envs.py: bool(int(os.getenv(name, "1"))), both on by default from
# 0.11.0; the 0.10.x wheels' VLLM_USE_DEEP_GEMM defaults to "0"). 0.14.x (oracle/fp8.py select_fp8_moe_backend, the
# 0.14.0 wheel): DeepGEMM where VLLM_USE_DEEP_GEMM and moe_use_deep_gemm hold, the latter off at TP >= 8 unless
# VLLM_MOE_USE_DEEP_GEMM is set, and where the deep_gemm package is installed (has_deep_gemm; not a Requires-Dist:
# the rule prices a pip install's Triton) -- so VLLM_USE_DEEP_GEMM, either value, and VLLM_MOE_USE_DEEP_GEMM=0 leave
# the pick as it is, and VLLM_MOE_USE_DEEP_GEMM set true asks for DeepGEMM (not read). From 0.15.0 (the 0.15.0, 0.17.0,
# 0.20.0, 0.26.0 and 0.34.0 wheels): where either is set, DeepGEMM is forced if both are true (not read), else removed
# from the candidates, which on SM90 and ROCm changes nothing: FlashInfer CUTLASS stands before DEEPGEMM in
# _get_priority_backends' list and Hopper's block-FP8 reorder puts Triton or FlashInfer CUTLASS first (0.17.0 on),
# and DeepGEMM serves no ROCm GPU
DEEP_GEMM_ENVS = ("VLLM_USE_DEEP_GEMM", "VLLM_MOE_USE_DEEP_GEMM")


def _deep_gemm_asked(env: dict[str, str], release: Release) -> bool:
    """Whether the command's DeepGEMM switches ask vLLM ``release`` for the DeepGEMM MoE (``DEEP_GEMM_ENVS``), which
    the rule does not price; a value vLLM would not parse as an integer counts as asked (not read)."""
    values = {name: env[name] for name in DEEP_GEMM_ENVS if name in env}
    if not values:
        return False
    try:
        on = {name: int(v.strip()) != 0 for name, v in values.items()}
    except ValueError:
        return True
    if release < FI_CUTLASS_SM90_FROM:  # 0.14.x: only VLLM_MOE_USE_DEEP_GEMM set true turns it on at TP >= 8
        return on.get("VLLM_MOE_USE_DEEP_GEMM", False)
    return all(on.get(name, True) for name in DEEP_GEMM_ENVS)


def _set(env: dict[str, str], name: str) -> bool:
    """Whether the command sets an environment variable vLLM's envs.is_set would see."""
    return name in env


def _shapes(kernel: str, m: int, n: int, k: int, top_k: int) -> tuple[int, int, int]:
    """(workspace13, workspace2, output) elements at M rows (``workspace_shapes`` of each kernel; ``MarlinExperts``'
    (M x top_k, max(N / 2, K)) and M x top_k x max(N, K) at the w13 rows N are Triton's)."""
    if kernel == "FlashInferExperts":
        return m * k, 0, m * k
    return m * top_k * max(n // 2, k), m * top_k * max(n, k), m * k


def _humming_shapes(grouped: bool, m: int, n: int, k: int, top_k: int) -> tuple[int, int, int]:
    """(workspace1, workspace2, output) elements of ``HummingExpertsBase._workspace_shapes`` for bf16 W4A16 at M rows,
    N the w13 rows (gate_up_output's width; quanted_down_input's N / 2): the chain quanted_gate_up_input,
    gate_up_output, quanted_down_input, down_output, output laid alternately from the output back, each workspace the
    largest of its buffers."""
    m_in = m * top_k if grouped else m  # quanted_gate_up_input: M x top_k rows for the grouped gemm
    ws1 = max(m * k, m * top_k * (n // 2), m_in * k)  # output, quanted_down_input, quanted_gate_up_input
    ws2 = max(m * top_k * k, m * top_k * n)  # down_output, gate_up_output
    return ws1, ws2, m * k


# DeepSeek-V4's MXFP4 experts through FlashInfer's TRT-LLM kernel on the SM100 family (module docstring)
TRTLLM_MXFP4_READ: tuple[Release, Release] = ((0, 20, 0), (0, 21, 0))  # [first read, first not read)
TRTLLM_TILES = (8, 16, 32, 64, 128, 256)  # FP4BlockScaleLauncher::getSupportedTileNums, non-bf16 activations
TRTLLM_MIN_BYTES = 128 * 1024  # maybeGetMinTokenCount: padded rows so a buffer exceeds 128 KiB
TRTLLM_MXFP4_SOURCE = (
    "vllm 0.20.0 wheel (PyPI): model_executor/layers/quantization/mxfp4.py Mxfp4MoEMethod, fused_moe/oracle/mxfp4.py "
    "select_mxfp4_moe_backend / _get_priority_backends (FLASHINFER_TRTLLM_MXFP4_MXFP8 first), experts/"
    "trtllm_mxfp4_moe.py TrtLlmMxfp4ExpertsMonolithic._supports_parallel_config (dp_size <= 1) / "
    "TrtLlmMxfp4ExpertsModular (workspace_shapes, apply: mxfp8_quantize, trtllm_moe_pack_topk_ids_weights, "
    "trtllm_fp4_block_scale_routed_moe), prepare_finalize/naive_dp_ep.py (defer_input_quant: bf16 all-gathered), "
    "models/deepseek_v4.py DeepseekV4DecoderLayer.forward / DeepseekV4MoE, runner/shared_experts.py; flashinfer-python "
    "0.6.8.post1 wheel (PyPI, vLLM 0.20.0's pin): data/csrc/trtllm_fused_moe_kernel_launcher.cu selectDefaultTileN / "
    "FP4BlockScaleLauncher.prepare_routing / prepare_moe, data/include/flashinfer/trtllm/fused_moe/runner.h "
    "getMaxPermutedPaddedCount / maybeGetMinTokenCount, nv_internal/tensorrt_llm/kernels/quantization.h "
    "computeSwizzledLayoutSFSize"
)


def _next_pow2(value: float) -> int:
    """nextPowerOfTwo (trtllm_fused_moe_kernel_launcher.cu): the smallest power of two at or above ceil(value)."""
    n = max(1, math.ceil(value))
    return 1 << (n - 1).bit_length()


def trtllm_tile(m: int, top_k: int, local_experts: int) -> int:
    """selectDefaultTileN for MxE4m3 activations: the smallest of the candidates (the clamped centre, the next two
    and the one before) around nextPowerOfTwo(M x top_k / local experts)."""
    centre = min(max(_next_pow2(m * top_k / local_experts), TRTLLM_TILES[0]), TRTLLM_TILES[-1])
    i = TRTLLM_TILES.index(centre)
    return TRTLLM_TILES[max(i - 1, 0)]


def trtllm_padded_rows(m: int, top_k: int, experts: int, tile: int) -> int:
    """getMaxPermutedPaddedCount: a CTA for each expert a token reaches first, a CTA a tile of the rest, x the tile."""
    remaining = m * top_k
    filled = min(experts, remaining)
    ctas = filled + (remaining - filled) // tile
    return ctas * tile


def _trtllm_unread(
    *, release: Release, expert_parallel: bool, tp: int, dp: int, moe_backend: str, all2all_backend: str
) -> str:
    """Why DeepSeek-V4's MXFP4 MoE on SM100 is not priced for this command ('' where it is: module docstring)."""
    lo, hi = TRTLLM_MXFP4_READ
    if not lo <= release < hi:
        return f"vLLM {release_text(release)}: DeepSeek-V4's MXFP4 MoE on SM100 read for 0.20.x only"
    if moe_backend not in ("", "auto"):
        return f"--moe-backend {moe_backend}: not read"
    if dp < 2 or not expert_parallel or tp != 1:
        return "DeepSeek-V4's MXFP4 MoE on SM100 read with DP > 1 and expert parallelism at TP 1 only"
    if all2all_backend not in ("", DEFAULT_ALL2ALL):
        return f"--all2all-backend {all2all_backend}: not read"
    return ""


def trtllm_mxfp4_moe_moment(
    *,
    release: Release | None,
    vendor: str,
    hardware: str,
    expert_formats: tuple[str, ...],
    expert_parallel: bool,
    tp: int,
    dp: int,
    top_k: int,
    hidden: int,
    intermediate: int,
    experts: int,
    hc_mult: int,
    tokens: int,
    moe_backend: str = "",
    all2all_backend: str = "",
) -> tuple[int, str] | None:
    """(bytes, how): what DeepSeek-V4's decoder layer holds at the moment FlashInfer's TRT-LLM MXFP4 kernel runs in
    vLLM's profile run, beyond the WorkspaceManager's buffer (module docstring); None where the path is not this
    one or not read. ``tokens`` is a DP rank's max_num_batched_tokens, ``experts`` the global routed experts."""
    if release is None or vendor != "nvidia" or hardware not in SM100_FAMILY or expert_formats != ("ds_fp4",):
        return None
    if min(top_k, hidden, intermediate, experts, hc_mult, tokens) < 1 or _trtllm_unread(
        release=release,
        expert_parallel=expert_parallel,
        tp=tp,
        dp=dp,
        moe_backend=moe_backend,
        all2all_backend=all2all_backend,
    ):
        return None
    t, m, k, i = tokens, tokens * dp, hidden, intermediate
    local = experts // (tp * dp)
    tile = trtllm_tile(m, top_k, local)
    padded = trtllm_padded_rows(m, top_k, experts, tile)
    rows1 = max(padded, -(-TRTLLM_MIN_BYTES * 8 // (i * 8)))  # maybeGetMinTokenCount at 8 bits (MxE4m3)
    rows2 = max(padded, -(-TRTLLM_MIN_BYTES * 8 // (k * 16)))  # and at the bf16 output
    gemm1 = rows1 * i + (-(-rows1 // 128) * 128) * (-(-(i // 32) // 4) * 4)  # uint8 rows and the swizzled scale
    gemm2 = rows2 * k * ACT_BYTES
    index = 4 * (m * top_k + padded)  # expanded_idx_to_permuted_idx, permuted_idx_to_token_idx
    kernel = gemm1 + gemm2 + index
    gathered = m * k * ACT_BYTES + m * top_k * (4 + 4 + 4)  # the rows, top-k ids and weights, the packed top-k
    quantized = m * k + m * (k // 32)  # mxfp8_quantize: the E4M3 rows and their linear scale
    layer = 2 * t * hc_mult * k * ACT_BYTES + 2 * t * k * ACT_BYTES + t * experts * 4
    total = layer + gathered + quantized + kernel
    how = (
        f"at the MoE, {total / GiB:.2f} GiB live beyond the WorkspaceManager's buffer: FlashInfer's TRT-LLM MXFP4 "
        f"kernel over M {m:,} = DP {dp} x {t:,} all-gathered rows, tile {tile} of {local} local experts, "
        f"{padded:,} padded rows: gemm1_output {rows1:,} x {i:,} uint8 and its scale, gemm2_output {rows2:,} x {k:,} "
        f"bf16, the index arrays ({kernel / GiB:.2f} GiB; its batched-GEMM workspaces not read); the gathered bf16 "
        f"rows and top-k ({gathered / GiB:.2f} GiB), their MXFP8 copy ({quantized / GiB:.2f} GiB); the layer's two "
        f"mHC streams of {hc_mult}, ffn_norm's and the shared expert's rows and the router's float32 logits at "
        f"{t:,} tokens ({layer / GiB:.2f} GiB) ({TRTLLM_MXFP4_SOURCE})"
    )
    return total, how


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
    dp: int = 1,
    all2all_backend: str = "",
    moe_backend: str = "",
) -> tuple[int, str]:
    """(bytes, how): the MoE workspace allocated by the profile run's dummy forward and still held when the sampler
    warm-up peaks (module docstring); 0 and why where none is held or the path was not read. ``tokens`` is
    max_num_batched_tokens (a DP rank's), ``dp`` --data-parallel-size, ``all2all_backend`` the command's
    --all2all-backend ('' for the default), ``moe_backend`` its --moe-backend ('' or 'auto' for the oracle's pick)."""
    # a release after the newest read (0.34.0) is priced by its rules, as every vLLM rule is (Engine.latest_release_read)
    if release is None or release < MODULAR_TP_FROM:
        return 0, "no MoE workspace priced under the sampler (the modular kernels' workspace is 0.14.0's on)"
    mxfp4 = expert_formats[0] if len(expert_formats) == 1 and expert_formats[0] in MARLIN_MXFP4 else ""
    int4 = expert_formats == (INT4_W4A16,)
    if (expert_formats != ("fp8_block",) and not mxfp4 and not int4) or min(tp, dp, top_k, hidden, intermediate) < 1:
        return 0, "no MoE workspace priced under the sampler (read for FP8-block, Hopper MXFP4 and INT4 W4A16 experts)"
    if int4:
        if release < INT4_MODULAR_FROM:
            return 0, (
                f"no MoE workspace priced under the sampler (vLLM {release_text(release)}: the INT4 W4A16 method "
                "calls fused_marlin_moe, its caches freed a call: engines/vllm/marlin_moe.py)"
            )
        if vendor != "nvidia" or hardware not in SM90 | SM100_FAMILY:
            return 0, f"no MoE workspace priced under the sampler (INT4 W4A16 experts on {hardware}: not read)"
        if release >= HUMMING_SM90_FROM and hardware in SM90 and _set(env, "VLLM_HUMMING_MOE_GEMM_TYPE"):
            return 0, "no MoE workspace priced under the sampler (VLLM_HUMMING_MOE_GEMM_TYPE set: not read)"
    if mxfp4 == "ds_fp4" and vendor == "nvidia" and hardware in SM100_FAMILY:
        why = _trtllm_unread(
            release=release,
            expert_parallel=expert_parallel,
            tp=tp,
            dp=dp,
            moe_backend=moe_backend,
            all2all_backend=all2all_backend,
        )
        if why:
            return 0, f"no MoE workspace priced under the sampler ({why})"
        m_full = tokens * dp
        ws = _aligned(m_full * hidden * ACT_BYTES)
        return ws, (
            f"{ws / GiB:.2f} GiB of MoE workspace held under the sampler in vLLM {release_text(release)} "
            f"(TrtLlmMxfp4ExpertsModular: workspace1 / workspace2 (0,), the output {m_full:,} = DP {dp} x {tokens:,} "
            f"all-gathered rows x {hidden:,} in the common buffer, x {ACT_BYTES} B; {TRTLLM_MXFP4_SOURCE})"
        )
    if mxfp4:
        if vendor != "nvidia" or hardware not in SM90:
            return 0, f"no MoE workspace priced under the sampler (MXFP4 experts on {hardware}: not read)"
        first, end = MARLIN_MXFP4[mxfp4]
        if not first <= release < end:
            why = (
                "HummingExperts ahead of Marlin on SM90 (prioritize_humming), its buffers not sized"
                if mxfp4 == "ds_fp4" and release >= HUMMING_SM90_FROM
                else "the MXFP4 MoE method of this release not read"
            )
            return 0, f"no MoE workspace priced under the sampler (vLLM {release_text(release)}: {why})"
    ep = expert_parallel and tp * dp > 1  # FusedMoEParallelConfig.make: use_ep needs more than one rank
    if mxfp4 == "mxfp4" and moe_backend == MEGA_MOE_BACKEND:
        return (
            0,
            f"no MoE workspace priced under the sampler (--moe-backend {moe_backend}: Kimi-K3's MegaMoE, not read)",
        )
    # Kimi-K3's MXFP4 method picks MarlinExperts without reading --moe-backend (module docstring); other kernels' do
    if moe_backend not in ("", "auto") and mxfp4 != "mxfp4":
        return 0, f"no MoE workspace priced under the sampler (--moe-backend {moe_backend}: not read)"
    fp8 = not mxfp4 and not int4
    if fp8 and _deep_gemm_asked(env, release):
        return 0, "no MoE workspace priced under the sampler (the DeepGEMM switches ask for DeepGEMM: not read)"
    if fp8 and vendor == "nvidia" and release < ENV_FI_GONE_FROM and _set(env, "VLLM_USE_FLASHINFER_MOE_FP8"):
        return 0, "no MoE workspace priced under the sampler (VLLM_USE_FLASHINFER_MOE_FP8 set: not read)"
    # VLLM_ALL2ALL_BACKEND: read to 0.15.x (config/parallel.py), named by no file of the 0.16.0 wheel on
    a2a = all2all_backend or (env.get("VLLM_ALL2ALL_BACKEND", "") if release < ALL2ALL_ENV_GONE_FROM else "")
    if dp > 1 and a2a not in ("", DEFAULT_ALL2ALL):
        return 0, f"no MoE workspace priced under the sampler (--all2all-backend {a2a}: not read)"
    if ep and tp > 1 and dp > 1:
        return 0, "no MoE workspace priced under the sampler (EP with TP and DP: sequence-parallel MoE, not read)"
    if mxfp4:
        kernel = "MarlinExperts"  # the oracle's first supported backend on SM90 (module docstring)
    elif int4:
        if hardware in SM90 and release >= HUMMING_SM90_FROM:
            # get_humming_moe_gemm_type: grouped_contiguous where the MoE runs expert parallel, else indexed
            kernel = "HummingGroupedExperts" if ep else "HummingIndexedExperts"
        else:
            kernel = "MarlinExperts"  # MARLIN, FLASHINFER_TRTLLM being off (module docstring)
    elif vendor == "amd":
        if env.get("VLLM_ROCM_USE_AITER", "").strip().lower() in ("1", "true"):
            return 0, "no MoE workspace priced under the sampler (ROCm AITER's MoE not read)"
        kernel = "TritonExperts"
    elif vendor == "nvidia" and hardware in SM90:
        if release < FI_CUTLASS_SM90_FROM:
            kernel = "TritonExperts"
        elif release < TRITON_FIRST_SM90_FROM:
            kernel = "FlashInferExperts"
        else:
            kernel = "FlashInferExperts" if ep else "TritonExperts"
    else:
        return 0, f"no MoE workspace priced under the sampler (the FP8 MoE kernel on {hardware} not read)"
    if mxfp4 == "mxfp4" and not expert_parallel and tp > 1 and intermediate // tp < K3_MIN_SHARD:
        intermediate = K3_MIN_SHARD * tp  # Kimi-K3's padded_moe_intermediate_size (module docstring)
    m_full = tokens * dp  # every DP rank's dummy batch, all-gathered (AgRsAll2AllManager.dispatch)
    n = 2 * intermediate if ep else 2 * intermediate // (tp * dp)
    k = hidden
    if int4:
        if kernel == "MarlinExperts" and (k % 128 or (n // 2) % 64):
            # check_moe_marlin_supports_layer (to 0.26.x: the Triton WNA16 method otherwise) / tile padding after
            return (
                0,
                f"no MoE workspace priced under the sampler (a {n // 2:,}-wide INT4 shard off Marlin's tiles: not read)",
            )
        return _int4_workspace(kernel, release, m_full, n, k, top_k, tp=tp, dp=dp, ep=ep, tokens=tokens)
    chunked = release < UNCHUNKED_FROM
    m = min(m_full, CHUNK) if chunked else m_full
    ws13, ws2, _ = _shapes(kernel, m, n, k, top_k)
    out = m_full * k
    if m == m_full:  # one chunk: the output in the common buffer with workspace13
        ws = _aligned(max(ws13, out) * ACT_BYTES) + _aligned(ws2 * ACT_BYTES)
        layout = "workspace13 and the output in one buffer"
    else:
        ws = _aligned(ws13 * ACT_BYTES) + _aligned(ws2 * ACT_BYTES) + _aligned(out * ACT_BYTES)
        layout = f"{-(-m_full // m)} chunks: the {m_full:,} x {k:,} output apart"
    forced = ""
    if chunked and release >= FORCED_DP_EP_FROM and ep and dp > 1:
        f13, f2, fout = _shapes(kernel, CHUNK, n, k, top_k)
        worst = _aligned(f13 * ACT_BYTES) + _aligned(f2 * ACT_BYTES) + _aligned(fout * ACT_BYTES)
        if worst > ws:
            ws, forced = (
                worst,
                f"; the profile run's forced worst case under DP + EP, a {CHUNK:,}-row chunk's three parts",
            )
    parallel = f"TP {tp}" + (f" x DP {dp}" if dp > 1 else "")
    how_n = f"2 x {intermediate:,} (EP over {parallel})" if ep else f"2 x {intermediate:,} / {parallel}"
    rows = f"{m_full:,} = DP {dp} x {tokens:,} all-gathered" if dp > 1 else f"{m_full:,}"
    how = (
        f"{ws / GiB:.2f} GiB of MoE workspace held under the sampler in vLLM {release_text(release)} ({kernel}: "
        f"M {rows}, workspace13 / workspace2 / output at {m:,} / {m:,} / {m_full:,} rows ({layout}){forced}, "
        f"x {ACT_BYTES} B; N {n:,} = {how_n}, K {k:,}; {MXFP4_SOURCE if mxfp4 else SOURCE})"
    )
    return ws, how


def _int4_workspace(
    kernel: str, release: Release, m: int, n: int, k: int, top_k: int, *, tp: int, dp: int, ep: bool, tokens: int
) -> tuple[int, str]:
    """(bytes, how) of the INT4 W4A16 experts' workspace (module docstring): the kernel's workspace_shapes at M rows,
    workspace13 and the output in the common buffer (_allocate_buffers), each part rounded up to 256 B."""
    if kernel == "MarlinExperts":
        ws13, ws2, out = _shapes(kernel, m, n, k, top_k)
        parts = (
            f"workspace13 {m:,} x {top_k} x max({n // 2:,}, {k:,}) and the output {m:,} x {k:,} in one buffer, "
            f"workspace2 {m:,} x {top_k} x max({n:,}, {k:,})"
        )
        source = INT4_SOURCE
    else:
        grouped = kernel == "HummingGroupedExperts"
        ws13, ws2, out = _humming_shapes(grouped, m, n, k, top_k)
        m_in = f"{m:,} x {top_k}" if grouped else f"{m:,}"
        parts = (
            f"workspace1 max(output {m:,} x {k:,}, quanted_down_input {m:,} x {top_k} x {n // 2:,}, "
            f"quanted_gate_up_input {m_in} x {k:,}), workspace2 max(down_output {m:,} x {top_k} x {k:,}, "
            f"gate_up_output {m:,} x {top_k} x {n:,})"
        )
        source = HUMMING_SOURCE
    ws = _aligned(max(ws13, out) * ACT_BYTES) + _aligned(ws2 * ACT_BYTES)
    parallel = f"TP {tp}" + (f" x DP {dp}" if dp > 1 else "")
    how_n = f"2 x {n // 2:,} (EP over {parallel})" if ep else f"2 x the {parallel} shard's {n // 2:,}"
    rows = f"{m:,} = DP {dp} x {tokens:,} all-gathered" if dp > 1 else f"{m:,}"
    how = (
        f"{ws / GiB:.2f} GiB of MoE workspace held under the sampler in vLLM {release_text(release)} ({kernel} for "
        f"the INT4 W4A16 experts: M {rows}, {parts}, x {ACT_BYTES} B; N {n:,} = {how_n}, K {k:,}; the "
        f"WorkspaceManager's one buffer, kept: {source})"
    )
    return ws, how
