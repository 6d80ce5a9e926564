"""vLLM's kernel-choice environment variables of the 0.11-0.23 releases that public commands still set
(vllm-project/vllm#26042's DeepSeek-R1-0528 line on 8 x B200, ``VLLM_ATTENTION_BACKEND=FLASHINFER_MLA
VLLM_FLASHINFER_MOE_BACKEND=latency VLLM_USE_FLASHINFER_MOE_FP8=1``; vllm-project/recipes DeepSeek/DeepSeek-V3.md's
Blackwell block, ``VLLM_ATTENTION_BACKEND=CUTLASS_MLA VLLM_USE_FLASHINFER_MOE_FP8=1``), read as each release reads them.

``VLLM_ATTENTION_BACKEND`` (the attention kernel). Read in the 0.11.0 and 0.11.2 wheels (PyPI) by vllm/platforms/
cuda.py CudaPlatform.check_and_update_config and get_attn_backend_cls (vllm/attention/selector.py; the same in the
0.12.0 wheel), in the 0.13.0,
0.14.0 and 0.14.1 wheels as AttentionConfig.backend (vllm/config/attention.py ``_set_from_env_if_set('backend',
'VLLM_ATTENTION_BACKEND')``, with the warning 'Using VLLM_ATTENTION_BACKEND environment variable is deprecated and will
be removed in v0.14.0 or v1.0.0 ... Please use --attention-config.backend'; --attention-backend, EngineArgs, sets the
same field); no file of the 0.15.0, 0.16.0, 0.17.x, 0.18.0, 0.20.0, 0.21.0, 0.23.0-0.26.0, 0.28.0, 0.33.0 or 0.34.0
wheels names it, so from 0.15.0 it does nothing. What it selects for a dense-MLA model (DeepSeek-V3 / R1, Kimi-K2):

- the decode kernel and the block vLLM forces for it (check_and_update_config, 0.11.0-0.14.x): unset, CUTLASS_MLA on
  the SM100 family (block 128) and FlashMLA elsewhere (block 64); FLASHMLA 64, CUTLASS_MLA 128, FLASHINFER_MLA 64
  (32 kept where --block-size gives it); TRITON_MLA and FLASH_ATTN_MLA keep the configured block (16 by default).
  The block is the pool's granularity, not its bytes: the KV a token, the weights and the profile run are the same,
  and the pool's blocks x the block's tokens change by under one block; k3plan prices the block each release runs
  (engines/vllm/mla_block.py dense_mla_block, FLASHINFER_MLA's 64 and FLASHMLA's 64 under the variable);
- a decode workspace each kernel module allocates once, at import: FlashInfer MLA's ``g_fi_workspace``
  (FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE 128 MiB, v1/attention/backends/mla/flashinfer_mla.py) and CUTLASS MLA's
  ``g_sm100_workspace`` (SM100Workspace(128 MiB), cutlass_mla.py), the same 128 MiB, in the load where the selection
  imports the module (engines/vllm/mla_block.py mla_decode_workspace: the selected backend's alone); the MLA
  prefill's workspaces (v1/attention/backends/mla/common.py MLACommonMetadataBuilder) are the same for every decode
  kernel.

So on the SM100 family FLASHINFER_MLA and CUTLASS_MLA (the default there) change only the block's tokens and which
128 MiB module is loaded, which mla_block.py reads from the command's variables, nor FLASHMLA (the default) on SM90:
listed. Any other value (a kernel other than the GPU's default or FlashInfer MLA there, or a
non-MLA backend), another model, an unnamed GPU or a release before 0.11.0: what it does was not read, refused.

``VLLM_FLASHINFER_MOE_BACKEND`` (FlashInfer's MoE kernel: throughput = CUTLASS, latency = TRT-LLM, masked_gemm =
CuteDSL from 0.12.0; vllm/envs.py env_with_choices, default throughput in 0.11.0, latency from 0.11.1). Read in the
0.11.0-0.23.0 wheels (0.11.0, 0.11.1, 0.11.2, 0.12.0, 0.13.0-0.18.0, 0.20.0-0.23.0 read) (a deprecated_env in 0.23.0: 'Use --moe-backend flashinfer_trtllm, flashinfer_cutlass, or
flashinfer_cutedsl'); no file of the 0.24.0, 0.25.0, 0.26.0, 0.28.0, 0.33.0 or 0.34.0 wheels names it (nor
VLLM_USE_FLASHINFER_MOE_FP8). For FP8-block experts (DeepSeek-V3 / R1, Kimi-K2) it is read only under
VLLM_USE_FLASHINFER_MOE_FP8=1: quantization/fp8.py Fp8MoEMethod.__init__ (0.11.0, on any GPU), get_fp8_moe_backend
(0.11.1-0.12.0 on compute capability exactly 10.0 or 9.0, so not on B300 / GB300's 10.3; 0.13.0 the SM100 family), fused_moe/oracle/fp8.py select_fp8_moe_backend (0.14.0-0.23.0: 'elif envs.is_set(
"VLLM_FLASHINFER_MOE_BACKEND")' under the FP8 switch). There:

- latency on the SM100 family: FlashInfer's TRT-LLM block-scale MoE. The weights keep their bytes: w13 and its scales
  re-ordered to w31 (flashinfer_utils.py swap_w13_to_w31, a flip of the two halves; 0.14.0 on prepare_fp8_moe_layer_
  for_fi pads the intermediate and shuffles only per-tensor weights, ``if not block_quant`` / ``if is_trtllm and not
  block_quant``), and k3plan prices no MoE workspace under the FlashInfer switch (engines/vllm/moe_workspace.py) nor on
  SM100 at all: listed;
- throughput with block scales: vLLM 0.11.1-0.14.x refuses it at start where FlashInfer's path is taken on SM100
  ('FlashInfer FP8 MoE throughput backend does not support block quantization'), refused here with that error; 0.11.0
  (its default) runs FlashInfer CUTLASS, whose Fp8MoEMethod.apply asserts 'self.block_quant is None' in the profile
  run, refused with that; at other releases (and
  masked_gemm, which 0.15.0 on refuses for FP8, and any value on another GPU) what it does was not read, refused.

Without the FP8 switch (unset or 0) the FP8 path does not read it (the branches above are all under the switch): listed.
Its other readers are the NVFP4 / unquantized MoE oracles and the DeepEP / NIXL low-latency masked_gemm path, so for
other expert formats it is refused as not read.
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text
from k3plan.engines.serve_values import Reading, env_on
from k3plan.engines.vllm.attention_config import SM90, SM100_FAMILY
from k3plan.errors import K3PlanError

ATTENTION_ENV = "VLLM_ATTENTION_BACKEND"
MOE_ENV = "VLLM_FLASHINFER_MOE_BACKEND"
FP8_ENV = "VLLM_USE_FLASHINFER_MOE_FP8"
ENV = frozenset({ATTENTION_ENV, MOE_ENV})
READ_FROM: Release = (0, 11, 0)  # the oldest wheel read for both
ATTENTION_GONE_FROM: Release = (0, 15, 0)  # no file of the 0.15.0 wheel names VLLM_ATTENTION_BACKEND
MOE_GONE_FROM: Release = (0, 24, 0)  # no file of the 0.24.0 wheel names VLLM_FLASHINFER_MOE_BACKEND
MASKED_FROM: Release = (0, 12, 0)  # env_with_choices adds masked_gemm in the 0.12.0 wheel
# 0.11.1-0.12.x gate FlashInfer's FP8 MoE on is_device_capability(100) / (90), exactly; 0.13.0 on the SM100 family
FAMILY_GATE_FROM: Release = (0, 13, 0)
SM100_EXACT = frozenset({"nvidia-b200", "nvidia-gb200-nvl72"})  # sm_100 (B300 / GB300 are sm_103)
# get_fp8_moe_backend / the 0.14.x oracle raise for throughput + block scales on SM100 (0.11.1, 0.11.2, 0.12.0, 0.13.0,
# 0.14.x wheels); the default is latency from the 0.11.1 wheel (envs.py), throughput in 0.11.0's
THROUGHPUT_REFUSED = ((0, 11, 1), (0, 15, 0))
LATENCY_DEFAULT_FROM: Release = (0, 11, 1)
ATTENTION_SOURCE = (
    "vllm 0.11.0 / 0.11.2 wheels (PyPI) vllm/platforms/cuda.py CudaPlatform.check_and_update_config (the MLA block "
    "each backend forces); 0.13.0 / 0.14.x vllm/config/attention.py AttentionConfig._set_from_env_if_set; none of "
    "the 0.15.0-0.34.0 wheels names it"
)
MOE_SOURCE = (
    "vllm 0.11.0-0.23.0 wheels (PyPI): quantization/fp8.py Fp8MoEMethod / get_fp8_moe_backend, "
    "fused_moe/oracle/fp8.py select_fp8_moe_backend (read only under VLLM_USE_FLASHINFER_MOE_FP8=1), "
    "quantization/utils/flashinfer_utils.py swap_w13_to_w31 / prepare_fp8_moe_layer_for_fi; none of the "
    "0.24.0-0.34.0 wheels names it"
)
# the bundled text models whose layers all hold one MLA spec (engines/vllm/serve.py UNIFORM_KV_MODELS; Kimi-K2.6's
# vision tower, whose attention kernel the variable may also pick, left out) and those whose routed experts are
# FP8-block, as bundled (k3plan/models/bundled: deepseek-v3 for DeepSeek-V3 / R1 / R1-0528, kimi-k2)
DENSE_MLA_MODELS = frozenset({"deepseek-v3", "kimi-k2", "kimi-k2-thinking"})
FP8_BLOCK_MODELS = frozenset({"deepseek-v3", "kimi-k2"})
# the MLA decode kernels k3plan prices on each GPU family (module docstring): the GPU's default and, on the SM100
# family, FlashInfer MLA (the same 128 MiB decode workspace as CUTLASS MLA's; its block: engines/vllm/mla_block.py)
ATTENTION_LISTED = {"sm100": frozenset({"CUTLASS_MLA", "FLASHINFER_MLA"}), "sm90": frozenset({"FLASHMLA"})}
MOE_CHOICES = ("throughput", "latency")  # 0.11.0 / 0.11.2 envs.py; masked_gemm from 0.13.0


def _model(r: Reading) -> str:
    return r.resolve(r.model) if r.resolve is not None and r.model else ""


def _family(device: str) -> str:
    return "sm100" if device in SM100_FAMILY else "sm90" if device in SM90 else ""


def read_backend_env(r: Reading) -> None:
    """``VLLM_ATTENTION_BACKEND`` and ``VLLM_FLASHINFER_MOE_BACKEND`` as the command's release reads them (module
    docstring): listed where they change nothing k3plan prices or the release names them nowhere, refused with what
    was not read (or the engine's own refusal) elsewhere."""
    release = r.release or (0, 33, 0)  # the newest release read, where the command names none (read_stale_env's)
    at = f"vLLM {release_text(release)}"
    model = _model(r)
    fam = _family(r.device_name)
    value = r.env.get(ATTENTION_ENV)
    if value is not None:
        if r.platform != "tpu" and release >= ATTENTION_GONE_FROM:
            r.ignored.append(f"{ATTENTION_ENV}={value}")  # no file of the release names it (ATTENTION_SOURCE)
        elif (
            r.platform != "tpu"
            and release >= READ_FROM
            and model in DENSE_MLA_MODELS
            and value in ATTENTION_LISTED.get(fam, ())
        ):
            r.ignored.append(f"{ATTENTION_ENV}={value}")
        else:
            raise K3PlanError(
                f"--serve: {ATTENTION_ENV}={value}: what it selects at {at} for {model or r.model} on "
                f"{r.device_name or 'this device'} was not read by k3plan (read: {', '.join(sorted(ATTENTION_LISTED['sm100']))} "
                f"on the SM100 family and FLASHMLA on SM90, 0.11.0-0.14.x, for DeepSeek-V3 / R1 and Kimi-K2; from "
                f"0.15.0 no vLLM file names it: {ATTENTION_SOURCE}); remove it"
            )
    value = r.env.get(MOE_ENV)
    fp8_on = env_on(r.env.get(FP8_ENV, "0"))
    if value is None:
        # 0.11.0's default, throughput, under the FP8 switch: FlashInfer CUTLASS, whose apply asserts on block scales
        if (
            fp8_on
            and r.platform != "tpu"
            and model in FP8_BLOCK_MODELS
            and fam
            and READ_FROM <= release < LATENCY_DEFAULT_FROM
        ):
            _refuse_assert(r, at, "unset (its default, throughput)")
        return
    if r.platform != "tpu" and release >= MOE_GONE_FROM:
        r.ignored.append(f"{MOE_ENV}={value}")  # no file of the release names it (MOE_SOURCE)
        return
    choices = MOE_CHOICES + (("masked_gemm",) if release >= MASKED_FROM else ())
    why = ""
    if r.platform == "tpu" or release < READ_FROM or model not in FP8_BLOCK_MODELS or not fam:
        why = f"what it selects at {at} for {model or r.model} on {r.device_name or 'this device'} was not read"
    elif value not in choices:
        raise K3PlanError(
            f"--serve: {MOE_ENV}={value}: not one of {at}'s choices ({', '.join(choices)}; vllm/envs.py "
            "env_with_choices raises ValueError for any other)"
        )
    elif not fp8_on:
        r.ignored.append(f"{MOE_ENV}={value}")  # the FP8 MoE path reads it only under VLLM_USE_FLASHINFER_MOE_FP8=1
        return
    elif LATENCY_DEFAULT_FROM <= release < FAMILY_GATE_FROM and fam == "sm100" and r.device_name not in SM100_EXACT:
        r.ignored.append(f"{MOE_ENV}={value}")  # get_fp8_moe_backend's exact capability 10.0 gate: FlashInfer not taken
        return
    elif fam == "sm100" and value == "latency":
        r.ignored.append(f"{MOE_ENV}={value}")  # TRT-LLM block-scale MoE: w13 re-ordered, same bytes; no workspace
        return
    elif value == "throughput" and release < LATENCY_DEFAULT_FROM:
        _refuse_assert(r, at, "throughput")
    elif fam == "sm100" and value == "throughput" and THROUGHPUT_REFUSED[0] <= release < THROUGHPUT_REFUSED[1]:
        raise K3PlanError(
            f"--serve: {MOE_ENV}=throughput with {FP8_ENV}=1 on {r.device_name}: {at} refuses it at start for "
            "block-quantized experts ('ValueError: FlashInfer FP8 MoE throughput backend does not support block "
            "quantization ... Please use VLLM_FLASHINFER_MOE_BACKEND=latency': quantization/fp8.py "
            "get_fp8_moe_backend, fused_moe/oracle/fp8.py in 0.14.x)"
        )
    else:
        why = f"FlashInfer's {value} FP8 MoE at {at} on {r.device_name} was not read"
    raise K3PlanError(f"--serve: {MOE_ENV}={value}: {why} by k3plan ({MOE_SOURCE}); remove it")


def _refuse_assert(r: Reading, at: str, how: str) -> None:
    """0.11.0's FlashInfer CUTLASS FP8 MoE on block-quantized experts: Fp8MoEMethod.apply asserts it away."""
    if r.dp > 1 and r.expert_parallel:
        # DP x EP builds the all2all modular kernel instead (init_prepare_finalize), whose path was not read
        raise K3PlanError(
            f"--serve: {MOE_ENV} {how} with {FP8_ENV}=1 at {at}, DP {r.dp} with EP: FlashInfer CUTLASS's FP8 MoE "
            f"through the all2all modular kernel was not read by k3plan ({MOE_SOURCE}); remove the variables"
        )
    raise K3PlanError(
        f"--serve: {MOE_ENV} {how} with {FP8_ENV}=1 at {at}: FlashInfer's CUTLASS FP8 MoE, which {at} runs for "
        "block-quantized experts only to fail in the profile run ('assert self.block_quant is None': vllm 0.11.0 wheel "
        "(PyPI) quantization/fp8.py Fp8MoEMethod.apply; 'fails with `assert self.block_quant is None`': vllm-project/"
        "recipes@9acc1f23 DeepSeek/DeepSeekR1-B200.md); set VLLM_FLASHINFER_MOE_BACKEND=latency (TRT-LLM)"
    )
