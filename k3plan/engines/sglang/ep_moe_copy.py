"""SGLang 0.4.8.post1-0.4.9.post4's second resident copy of the routed experts under --enable-ep-moe with aiter on an
AMD GPU: each rank holds its FP8 block-quantized experts twice, the loaded tensors and aiter's shuffled ones.

EPMoE.__init__ (srt/layers/moe/ep_moe/layer.py) keeps a tuple of the layer's freshly created parameters,
``self.w13_weight_fp8 = (self.w13_weight, self.w13_weight_scale_inv ...)`` and ``self.w2_weight_fp8`` alike, which
nothing replaces at load. Fp8EPMoEMethod.process_weights_after_loading then, for a block-quantized FP8 checkpoint
(DeepSeek-V3 / R1's), on a HIP GPU whose FP8 is e4m3fnuz (gfx942: MI300X / MI325X) re-dtypes the loaded tensors in
place (fp8_utils.py normalize_e4m3fn_to_e4m3fnuz: ``weight.view(torch.int8)``, the -128 bytes zeroed, the view
returned: the same storage) and, with SGLANG_USE_AITER on (``_use_aiter = get_bool_env_var("SGLANG_USE_AITER") and
_is_hip``; SGLang's default off), replaces ``layer.w13_weight`` / ``layer.w2_weight`` with
``shuffle_weight(layer.w13_weight.data, (16, 16))`` -- a new contiguous tensor (aiter/ops/shuffle.py
shuffle_weight: view, permute, ``.contiguous()``). The tuple still holds the loaded tensors, so both stay resident:
two copies of the rank's experts (and of their block scales, which normalize re-creates doubled), measured in the
runner's "Load weight end ... mem usage" (get_available_gpu_memory empties the cache first).

Read in the sglang wheels (PyPI), srt/layers/moe/ep_moe/layer.py (the Fp8EPMoEMethod of 0.4.9.post3 / post4 in
srt/layers/quantization/fp8.py, the same body):

  0.4.7         EPMoE keeps no such tuple; no shuffle                                   no copy
  0.4.8         the tuple; the e4m3fnuz view (same storage); no aiter shuffle           no copy
  0.4.8.post1   the tuple and the shuffle under _use_aiter                              a copy
  0.4.9, 0.4.9.post1, 0.4.9.post2, 0.4.9.post3, 0.4.9.post4   the same                  a copy
  0.4.9.post5   EPMoE(FusedMoE): the tuple built in forward_deepgemm only, after load   no copy
  0.4.9.post6, 0.4.10   the same                                                        no copy

The shuffle came with sgl-project/sglang#7268 ("[AMD] add aiter fused moe in DeepEP path", opened 2025-06-17): it sits
in Fp8EPMoEMethod, which DeepEPMoE and the plain EPMoE share, and EPMoE.forward_normal then reads the shuffled
``self.w13_weight`` (the kept tuple is read by forward_deepgemm only, a CUDA path): the step reads one copy.

Neither the shuffle nor the e4m3fnuz step runs on CUDA (``_is_hip`` / ``_is_fp8_fnuz`` false): no NVIDIA command
holds the copy. Only --enable-ep-moe builds EPMoE among the flags k3plan reads (get_moe_impl_class: DeepEPMoE under
--enable-deepep-moe, FusedMoE under --enable-flashinfer-moe, both refused by k3plan's reader); an unquantized or
per-tensor FP8 checkpoint takes another branch (no shuffle). The same tuple also keeps a BF16 checkpoint's weights
beside the FP8 ones that online --quantization fp8 makes (the is_checkpoint_fp8_serialized False branch, on CUDA
too): not priced here (k3plan serves no BF16 MoE checkpoint through that path).
"""

from __future__ import annotations

from k3plan.engines.release import Release, release_text

# (release, post-release) bounds: the first with the copy, the first without it again
COPY_FROM: tuple[Release, int] = ((0, 4, 8), 1)
COPY_UNTIL: tuple[Release, int] = ((0, 4, 9), 5)
AITER_ENV = "SGLANG_USE_AITER"
EP_MOE_FLAG = "--enable-ep-moe"
COPY_SOURCE = (
    "sglang 0.4.8.post1, 0.4.9, 0.4.9.post1, 0.4.9.post2 wheels (PyPI), sglang/srt/layers/moe/ep_moe/layer.py "
    "EPMoE.__init__ (self.w13_weight_fp8 = (self.w13_weight, ...), self.w2_weight_fp8 alike) and "
    "Fp8EPMoEMethod.process_weights_after_loading (block_quant: normalize_e4m3fn_to_e4m3fnuz's in-place view on "
    "e4m3fnuz GPUs; under _use_aiter, SGLANG_USE_AITER on HIP, layer.w13_weight / w2_weight = "
    "Parameter(shuffle_weight(...)), a new tensor: ROCm/aiter aiter/ops/shuffle.py shuffle_weight .contiguous()); "
    "0.4.9.post3 / post4 the same in srt/layers/quantization/fp8.py; absent from 0.4.8 (no shuffle in EPMoE) and "
    "from 0.4.9.post5 (EPMoE(FusedMoE) builds the tuple in forward_deepgemm only)"
)


def _truthy(value: str) -> bool:
    """SGLang's get_bool_env_var (srt/utils.py): 'true' / '1', any case; anything else false."""
    return value.lower() in ("true", "1")


def ep_moe_copies(
    *, release: Release | None, post: int, amd: bool, env: dict[str, str], ep_moe: bool
) -> tuple[int, str] | None:
    """(copies, why): the routed experts an EP rank holds ``copies`` times where SGLang ``release`` (``post``: its
    post-release number, 0 for none) runs --enable-ep-moe (``ep_moe``) on an AMD GPU (``amd``) with SGLANG_USE_AITER
    on in the command's ``env``, for a block-quantized FP8 checkpoint (the caller checks the format); None elsewhere
    (None ``release``: the newest read, outside the window)."""
    if release is None or not ep_moe or not amd or not _truthy(env.get(AITER_ENV, "false")):
        return None
    if not COPY_FROM <= (release, post) < COPY_UNTIL:
        return None
    named = release_text(release) + (f".post{post}" if post else "")
    return (
        2,
        f"SGLang {named} under {EP_MOE_FLAG} with {AITER_ENV} on an AMD GPU holds each rank's FP8 routed experts "
        f"twice: the loaded tensors, kept by EPMoE's w13_weight_fp8 / w2_weight_fp8, and aiter's shuffled copies "
        f"({COPY_SOURCE})",
    )
