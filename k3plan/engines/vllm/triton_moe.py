"""The caches vLLM's Triton fused MoE allocates, a call, in the profile run's dummy forward for FP8-block experts
(DeepSeek-V3 / R1, Kimi-K2) on Hopper, in the releases before 0.14.0 (the modular kernels' workspace from then:
engines/vllm/moe_workspace.py).

The method and its call, read in the 0.8.4, 0.9.2 and 0.10.1 wheels (PyPI): vllm/model_executor/layers/quantization/
fp8.py ``Fp8MoEMethod.apply`` calls ``fused_experts`` (0.8.4 directly; 0.9.2 / 0.10.1 through ``self.fused_experts``,
a partial of it) with ``allow_deep_gemm`` only where VLLM_USE_DEEP_GEMM is set (envs.py, default '0') and
``allow_cutlass_block_scaled_grouped_gemm`` only on compute capability 10.0 (0.9.2 / 0.10.1); Marlin only below 8.9.
So on SM90 (H100 / H200 / H20 / H800) model_executor/layers/fused_moe/fused_moe.py ``fused_experts_impl`` runs, and
allocates a call, in the activations' dtype (bf16):

- ``cache13``: M x top_k x max(N, K) (intermediate_cache1, w13's output, and intermediate_cache3, w2's, views of it);
- ``intermediate_cache2``: (M x top_k, N / 2), the activation's output;

and, the activations quantized per token group of 128 (the checkpoints' weight_block_size [128, 128]) by
``moe_kernel_prepare_input`` (0.8.4) / ``moe_kernel_quantize_input`` (0.9.2, 0.10.1) -> quantization/utils/
fp8_utils.py ``per_token_group_quant_fp8`` (an fp8 copy, torch.empty_like, and float32 scales, one per group):

- the chunk's hidden states, M x K in fp8 with M x K / 128 scales (``qcurr_hidden_states``, still bound while
  the next is made);
- ``intermediate_cache2``'s copy for w2's GEMM, M x top_k x N / 2 in fp8 with M x top_k x N / 256 scales.

M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE) (envs.py, default 32,768 in all three), N the w13 shard's rows (w1.size(1):
2 x moe_intermediate_size / TP; with --enable-expert-parallel the MoE TP is 1, fused_moe/layer.py FusedMoE.__init__
use_ep, so the whole 2 x moe_intermediate_size), K the hidden size. Under EP without DP every rank runs its local
experts over all the tokens (expert_map): M is the batch's. All of it is freed when the call returns (torch.empty a
call), so it raises the forward's peak at a MoE layer, not the sampler warm-up's, and stands for k3plan's analytic
``expert inputs, gate/up and outputs`` (step/temporaries.py), as engines/vllm/marlin_moe.py does for INT4 experts.

The profile run: v1/worker/gpu_model_runner.py ``profile_run`` -> ``_dummy_run(self.max_num_tokens)`` (eager, no
attention metadata), then ``_dummy_sampler_run`` (0.8.4, 0.9.2, 0.10.1 wheels); the V1 engine is the default for
these commands (engine/arg_utils.py EngineArgs._is_v1_supported_oracle with VLLM_USE_V1 unset).

Not priced (None): other expert formats, GPUs other than SM90, --data-parallel-size > 1 (the naive multicast of every
DP rank's tokens, fused_moe/layer.py FusedMoE.forward_impl, not priced here), VLLM_USE_DEEP_GEMM set
(deep_gemm_moe_fp8 where N > 512 and _valid_deep_gemm: its own buffers, not read), releases before 0.8.4 (not read)
and from 0.14.0 (the modular TritonExperts' workspace, engines/vllm/moe_workspace.py).

0.11.0-0.13.x (the 0.11.0, 0.11.1, 0.11.2, 0.12.0 and 0.13.0 wheels, PyPI): ``Fp8MoEMethod.apply`` still calls
``fused_experts`` under TP on SM90 (FlashInfer only with VLLM_USE_FLASHINFER_MOE_FP8, CUTLASS block-scaled grouped
GEMM on compute capability 10.0 only, Marlin below 8.9, AITER on ROCm), and ``fused_experts_impl`` allocates the same
caches and fp8 copies (VLLM_FUSED_MOE_CHUNK_SIZE 32,768 to 0.11.x, 16,384 from the 0.12.0 wheel's envs.py). What
moves is DeepGEMM: VLLM_USE_DEEP_GEMM defaults to '1' from 0.11.0 (envs.py), so where the deep_gemm package is
installed (has_deep_gemm: not a Requires-Dist of the wheel, so a pip install has none; an image may) the experts can
run deep_gemm_moe_fp8, whose buffers are not read. The rule prices the Triton path where DeepGEMM cannot run whatever
is installed:

- 0.11.0 (quantization/fp8.py Fp8MoEMethod.__init__ allow_deep_gemm; fused_moe/fused_moe.py fused_experts:
  is_deep_gemm_e8m0_used() or _valid_deep_gemm): on Hopper E8M0 needs VLLM_USE_DEEP_GEMM_E8M0_HOPPER (default '0'),
  and deep_gemm_moe.py _valid_deep_gemm refuses w2's N (the shard's intermediate) <= 512: Triton there, or with
  VLLM_USE_DEEP_GEMM=0;
- 0.11.1 / 0.11.2 (quantization/fp8.py get_fp8_moe_backend): the DEEPGEMM backend wherever VLLM_USE_DEEP_GEMM and
  VLLM_MOE_USE_DEEP_GEMM (both default '1') hold and deep_gemm is installed, and utils/deep_gemm.py
  is_deep_gemm_e8m0_used is then on by default (VLLM_USE_DEEP_GEMM_E8M0 '1', any capability): Triton only with
  either switch 0;
- 0.12.0 / 0.13.x: get_fp8_moe_backend turns DeepGEMM off where the MoE's TP (moe_parallel_config.tp_size: 1 under
  expert parallelism) is 8 or more and VLLM_MOE_USE_DEEP_GEMM is not set: Triton there, or with either switch 0. Left out: moe_align_block_size's sorted ids (M x top_k + experts x (block - 1)
int32, a few MiB) and the output, written in place into the hidden states (inplace=True in Fp8MoEMethod.apply).
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text
from k3plan.engines.vllm.attention_config import SM90
from k3plan.units import GiB

READ: tuple[Release, Release] = ((0, 8, 4), (0, 14, 0))  # [from, to): the 0.8.4, 0.9.2, 0.10.1 and 0.11.0-0.13.0 wheels
CHUNK_DEFAULT = 32768  # vllm/envs.py VLLM_FUSED_MOE_CHUNK_SIZE's default (0.8.4-0.11.2)
CHUNK_16K_FROM: Release = (0, 12, 0)  # str(16 * 1024) in the 0.12.0 and 0.13.0 wheels' envs.py
DEEP_GEMM_ON_FROM: Release = (0, 11, 0)  # VLLM_USE_DEEP_GEMM's default '1' (the 0.10.x wheels: '0')
DEEP_GEMM_BACKEND_FROM: Release = (0, 11, 1)  # get_fp8_moe_backend and the default-on E8M0
DEEP_GEMM_TP8_OFF_FROM: Release = (0, 12, 0)  # DeepGEMM off by default at MoE TP >= 8
DEEP_GEMM_MIN_N = 512  # deep_gemm_moe.py _valid_deep_gemm: 'DeepGemm disabled for N <= 512' (0.11.0)
GROUP = 128  # per_token_group_quant_fp8's group: the checkpoints' weight_block_size[1]
ACT_BYTES = 2  # the activations' dtype, bfloat16
FP8_BYTES = 1
SCALE_BYTES = 4  # per_token_group_quant_fp8's scales, float32
FP8_BLOCK = ("fp8_block",)
SOURCE = (
    "vllm 0.8.4 / 0.9.2 / 0.10.1 / 0.11.0-0.13.0 wheels (PyPI): quantization/fp8.py Fp8MoEMethod.apply -> "
    "fused_moe/fused_moe.py "
    "fused_experts -> fused_experts_impl (cache13 M x top_k x max(N, K), intermediate_cache2 (M x top_k, N / 2), "
    "M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE 32,768), torch.empty a call), moe_kernel_prepare_input / "
    "moe_kernel_quantize_input -> quantization/utils/fp8_utils.py per_token_group_quant_fp8 (fp8 copy, float32 "
    "scales); fused_moe/layer.py FusedMoE.__init__ (use_ep: MoE TP 1)"
)


def triton_forward_caches(
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
    dp: int = 1,
    moe_backend: str = "",
    env: dict[str, str] | None = None,
) -> tuple[int, str] | None:
    """(bytes, how): what a MoE layer's fused_experts_impl call holds at once in vLLM's profile-run forward (module
    docstring): its caches and the fp8 copies of its two GEMMs' inputs; None where this path is not the one vLLM
    runs or was not read. ``tokens`` is max_num_batched_tokens, ``intermediate`` the expert's moe_intermediate_size."""
    if release is None or not READ[0] <= release < READ[1]:
        return None
    if vendor != "nvidia" or hardware not in SM90 or expert_formats != FP8_BLOCK:
        return None
    if dp != 1 or min(tp, top_k, hidden, intermediate, tokens) < 1 or moe_backend not in ("", "auto"):
        return None
    env = env or {}
    ep = expert_parallel and tp > 1  # FusedMoE.__init__: use_ep needs more than one rank
    n = 2 * intermediate if ep else 2 * intermediate // tp  # w1.size(1)
    if _deep_gemm_may_run(env, release, moe_tp=1 if ep else tp, n=n):
        return None
    if release >= DEEP_GEMM_ON_FROM and env.get("VLLM_USE_FLASHINFER_MOE_FP8", "0").strip() not in ("", "0"):
        return None  # FlashInfer's FP8 MoE: not read
    try:
        chunk = int(env.get("VLLM_FUSED_MOE_CHUNK_SIZE", str(16384 if release >= CHUNK_16K_FROM else CHUNK_DEFAULT)))
    except ValueError:
        return None
    if chunk < 1 or hidden % GROUP:
        return None
    if (n // 2) % GROUP:
        return None
    m = min(tokens, chunk)
    k = hidden
    c13 = m * top_k * max(n, k) * ACT_BYTES
    c2 = m * top_k * (n // 2) * ACT_BYTES
    q1 = m * k * FP8_BYTES + m * (k // GROUP) * SCALE_BYTES
    q2 = m * top_k * (n // 2) * FP8_BYTES + m * top_k * (n // 2 // GROUP) * SCALE_BYTES
    total = c13 + c2 + q1 + q2
    how_n = f"2 x {intermediate:,} (EP over TP {tp}: MoE TP 1)" if ep else f"2 x {intermediate:,} / TP {tp}"
    how = (
        f"{total / GiB:.2f} GiB a MoE layer holds in vLLM {release_text(release)}'s profile-run forward through "
        f"fused_experts_impl: M {m:,} = min({tokens:,}, chunk {chunk:,}), cache13 {m:,} x {top_k} x max({n:,}, "
        f"{k:,}) + intermediate_cache2 {m:,} x {top_k} x {n // 2:,}, x {ACT_BYTES} B, + the fp8 hidden states "
        f"{m:,} x {k:,} and intermediate_cache2 with their float32 group-{GROUP} scales (N {n:,} = {how_n}); freed "
        f"when the call returns, before the sampler warm-up ({SOURCE})"
    )
    return total, how


def _deep_gemm_may_run(env: dict[str, str], release: Release, *, moe_tp: int, n: int) -> bool:
    """Whether vLLM ``release`` may run the experts through DeepGEMM where the deep_gemm package is installed (module
    docstring): the switches' values (bool(int(...)), a value int() refuses counted as may) and, at 0.11.0, w2's N
    (``n`` / 2) above 512, from 0.12.0 a MoE TP under 8 or VLLM_MOE_USE_DEEP_GEMM set."""
    default = "1" if release >= DEEP_GEMM_ON_FROM else "0"
    try:
        use = int(env.get("VLLM_USE_DEEP_GEMM", default).strip()) != 0
        moe = int(env.get("VLLM_MOE_USE_DEEP_GEMM", "1").strip()) != 0
    except ValueError:
        return True
    if not use:
        return False
    if release < DEEP_GEMM_ON_FROM:  # 0.8.4-0.10.x: VLLM_USE_DEEP_GEMM set true lets fused_experts take it
        return True
    if release < DEEP_GEMM_BACKEND_FROM:  # 0.11.0: no VLLM_MOE_USE_DEEP_GEMM; N <= 512 refused (E8M0 off on Hopper)
        return n // 2 > DEEP_GEMM_MIN_N
    if not moe:
        return False
    if release < DEEP_GEMM_TP8_OFF_FROM:
        return True
    return "VLLM_MOE_USE_DEEP_GEMM" in env or moe_tp < 8
