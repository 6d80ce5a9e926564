"""How SGLang holds DeepSeek-V4's FP4 routed experts' scales after loading on an NVIDIA GPU, by release, GPU, all-to-all
backend and MoE runner: where it differs from what the stack's option choices hold (engines/sglang/stack.yaml options
moe_a2a_backend / moe_runner_backend, which read an SM90 GPU and the newest release).

What loads (sglang 0.5.12-0.5.23 wheels (PyPI), sglang/srt/layers/quantization/fp8.py): Fp8Config.get_quant_method
gives DeepSeek-V4's FP4 experts (is_fp4_experts) Fp8MoEMethod unless the runner is marlin or flashinfer_mxfp4, and
Fp8MoEMethod.create_weights allocates ``w13_weight_scale_inv`` / ``w2_weight_scale_inv`` as torch.float32 [E, N, K / 32]
(float8_e8m0fnu only under aiter, or on XPU from 0.5.21): the loader widens the checkpoint's E8M0 into them.
``Fp8MoEMethod.process_weights_after_loading_block_quant`` then, for an FP4 expert (not marlin, not aiter):

- ``--moe-a2a-backend megamoe``: ``layers/moe/mega_moe.py build_mega_moe_experts_weights`` (on any GPU) packs both
  scales with DeepGEMM's ``transform_sf_into_required_layout(sf, recipe=(1, 32), disable_ue8m0_cast=False)``, rebinds
  ``w13_weight.data`` to the gate/up-interleaved weight (``_interleave_mega_moe_l1_weights``, the original freed),
  ``w13_weight_scale_inv.data`` / ``w2_weight_scale_inv.data`` to the packed scales (the non-MegaMoE path's) and keeps
  ``_transpose_mega_moe_sf_for_utccp`` copies of both in ``mega_l1_weights`` / ``mega_l2_weights`` (the MegaMoE
  kernel's): the fp32 scales are dropped, the packed ones held twice. That is the ``SGLANG_OPT_FIX_MEGA_MOE_MEMORY``
  branch, which server_args.py ``_handle_a2a_moe`` turns on under megamoe in 0.5.12-0.5.17 and the only one from
  0.5.18 (k3plan refuses it off: engines/sglang/serve.py mega_moe).
- ``DEEPGEMM_SCALE_UE8M0 and will_use_deepgemm``: the same packing in place of each fp32 scale, held once.
  ``layers/deep_gemm_wrapper/configurer.py``: ``DEEPGEMM_SCALE_UE8M0 = ENABLE_JIT_DEEPGEMM and is_sm100_supported()``
  (compute capability major 10: B200, B300, GB200, GB300; from 0.5.20 SM120 / SM121 too), ENABLE_JIT_DEEPGEMM on SM90 and
  newer with deep_gemm importable and ``SGLANG_ENABLE_JIT_DEEPGEMM`` (environ.py EnvBool(True)) on;
  ``Fp8MoEMethod.is_deepgemm_moe_runner_backend_enabled`` (``will_use_deepgemm``): runner deep_gemm, or runner auto with
  ENABLE_JIT_DEEPGEMM and the deepep / mooncake / nixl all-to-all.
- else the fp32 scales stay (an SM90 GPU under deepep; the Triton runner auto resolves to without an all-to-all).

The packing (DeepGEMM csrc/apis/layout.hpp ``transform_sf_into_required_layout``: '(FP32, x, gran_k) on SM100/SM120:
transform to (INT, 1, gran_k), TMA-aligned and MN-major' -> ``get_mn_major_tma_aligned_packed_ue8m0_tensor``; on SM90
an FP32 scale at gran_k 32 reaches DG_HOST_UNREACHABLE) puts four UE8M0 bytes in an int32, the rows aligned to 4 and a
row's scales to whole words: 1 B a 32-block at DeepSeek-V4's shapes (models/formats.py mxfp4_ue8m0_packed). SGLang
measures the weights after loading with the cache emptied (model_runner.py load_model: get_available_gpu_memory, which
calls torch.cuda.empty_cache), so what it holds then is the packed form; the fp32 scales are resident during the load.

Without an all-to-all SGLang's DeepSeek-V4 override picks flashinfer_mxfp4 for runner auto on an SM90 / SM100 / SM120
GPU from 0.5.19 (arg_groups/model_overrides/deepseek_v4.py ``_deepseek_v4_overrides``: moe_a2a_backend none, not
SGLANG_DSV4_FP4_DEQUANT, is_fp4_experts), whose methods hold E8M0 (the stack's choice none); 0.5.12-0.5.18 pick no
runner for it there (0.5.15-0.5.18 arg_groups/overrides.py ``_deepseek_v4_overrides`` sets one only for an NVFP4
checkpoint, 0.5.12-0.5.14 server_args.py none but marlin on SM120), so auto runs Triton on Fp8MoEMethod
(``create_moe_runner``: not DeepGEMM without an all-to-all) and the fp32 scales stay.

Checked in each of the 0.5.12-0.5.23 wheels; DeepGEMM's layout.hpp read at deepseek-ai/DeepGEMM@0274ad7b (the
sgl-deep-gemm 0.1.4 wheel SGLang 0.5.15 pins binds the same ``transform_sf_into_required_layout`` signature in
deep_gemm/__init__.py; its _C.so is compiled, not read). MegaMoE on an SM90 GPU with FP4 experts packs through the same
call, which DeepGEMM does not transform there: not priced as a start (left to the stack's fp32 form).
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text
from k3plan.engines.sglang.kernels import BLACKWELL

# the first release whose DeepSeek-V4 override picks flashinfer_mxfp4 without an all-to-all (model_overrides)
FI_MXFP4_AUTO_FROM: Release = (0, 5, 19)
# the releases read
READ_FROM: Release = (0, 5, 12)
READ_UNTIL: Release = (0, 5, 23)
JIT_DEEPGEMM_ENV = "SGLANG_ENABLE_JIT_DEEPGEMM"
PACKED = "mxfp4_ue8m0_packed"
PACKED_TWICE = "mxfp4_ue8m0_packed_x2"
F32 = "mxfp4_f32scale"
FP4_SCALES_SOURCE = (
    "sglang 0.5.12-0.5.23 wheels (PyPI), sglang/srt/layers/quantization/fp8.py Fp8MoEMethod.create_weights (fp32 "
    "w13/w2_weight_scale_inv) and process_weights_after_loading_block_quant (is_fp4_expert: megamoe -> "
    "layers/moe/mega_moe.py build_mega_moe_experts_weights; DEEPGEMM_SCALE_UE8M0 and will_use_deepgemm -> "
    "deep_gemm.transform_sf_into_required_layout), layers/deep_gemm_wrapper/configurer.py DEEPGEMM_SCALE_UE8M0 "
    "(ENABLE_JIT_DEEPGEMM and SM100); deepseek-ai/DeepGEMM@0274ad7b csrc/apis/layout.hpp "
    "transform_sf_into_required_layout (SM100: get_mn_major_tma_aligned_packed_ue8m0_tensor)"
)

_ON = ("true", "1", "yes", "y")


def dsv4_fp4_expert_format(
    *, release: Release | None, device: str, a2a: str, runner: str | None, env: dict[str, str]
) -> tuple[str, str] | None:
    """(format, why): the runtime format SGLang ``release`` (None: the newest read) holds DeepSeek-V4's FP4 routed
    experts (ds_fp4) in on ``device`` under the command's all-to-all ``a2a`` and MoE runner ``runner`` (None: auto)
    where it differs from the stack's option choices (module docstring); None where they hold it (an SM90 GPU under
    deepep or megamoe, the marlin / flashinfer_mxfp4 runners, none from 0.5.19, an AMD GPU, a release not read)."""
    rel = release if release is not None else READ_UNTIL
    if not device.startswith("nvidia-") or not READ_FROM <= rel <= READ_UNTIL:
        return None
    named = release_text(rel)
    if runner in ("marlin", "flashinfer_mxfp4"):
        return None
    sm100 = device in BLACKWELL
    if a2a == "megamoe" and sm100:
        return PACKED_TWICE, (
            f"SGLang {named} under --moe-a2a-backend megamoe on {device} packs DeepSeek-V4's FP4 expert scales to UE8M0 "
            "int32 (1 B a 32-block) and holds them twice, for the DeepEP-layout and the MegaMoE (UTCCP) paths; the fp32 "
            f"scales Fp8MoEMethod loaded are dropped ({FP4_SCALES_SOURCE})"
        )
    jit = env.get(JIT_DEEPGEMM_ENV, "true").lower() in _ON
    if a2a == "deepep" and sm100 and jit and runner in (None, "auto", "deep_gemm"):
        return PACKED, (
            f"SGLang {named} under --moe-a2a-backend deepep on {device} runs the DeepGEMM MoE runner and repacks "
            "DeepSeek-V4's fp32 FP4 expert scales to UE8M0 int32 (1 B a 32-block) at load, the fp32 ones dropped "
            f"({FP4_SCALES_SOURCE})"
        )
    if a2a == "none" and runner in (None, "auto") and rel < FI_MXFP4_AUTO_FROM:
        return F32, (
            f"SGLang {named} picks no FP4 MoE runner for DeepSeek-V4 without an all-to-all (flashinfer_mxfp4 from "
            f"{release_text(FI_MXFP4_AUTO_FROM)}: arg_groups/model_overrides/deepseek_v4.py): auto runs Triton on "
            f"Fp8MoEMethod, which holds the FP4 expert scales in fp32 ({FP4_SCALES_SOURCE})"
        )
    return None
