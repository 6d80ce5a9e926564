"""Storage formats: how many bytes a tensor of a given shape takes, and which checkpoint tensors
hold it. One registry; every byte count in k3plan goes through ``FORMATS[name].nbytes``.

- bf16, f32, fp8 plain: itemsize x elements.
- mxfp4 (OCP microscaling, compressed-tensors "mxfp4-pack-quantized"): uint8 ``weight_packed``
  [out, in/2] (two E2M1 values a byte) + uint8 E8M0 ``weight_scale`` [out, in/32]: 4.25 bits a
  parameter.
- mxfp4_f32scale: MXFP4 codes (0.5 B a parameter) with each 32-block's E8M0 scale widened to fp32 (4 B),
  as the torch_tpu vLLM plugin holds MXFP4 experts after loading (engines/torchtpu_vllm/stack.yaml): 5 bits.
- mxfp4_e8m0_f32kept: MXFP4 codes and E8M0 scales as a kernel reads them (4.25 bits) plus an fp32 copy of each scale
  the load leaves resident and no kernel reads (``Format.unread``): SGLang's Marlin MXFP4 MoE method keeps the fp32
  ``w13/w2_weight_scale_inv`` Parameters it allocated beside the E8M0 ones Marlin reads (engines/sglang/stack.yaml
  option moe_runner_backend): 5.25 bits held, 4.25 read.
- mxfp4_ue8m0_packed: MXFP4 codes with the 32-block scales as DeepGEMM lays them out on an SM100 GPU
  (``transform_sf_into_required_layout`` at recipe (1, 32): ``get_mn_major_tma_aligned_packed_ue8m0_tensor``, four UE8M0
  bytes an int32, MN-major, the rows aligned to 4 and each row's scales to whole int32 words): 4.25 bits where the rows
  are a multiple of 4 and the inputs of 128, as SGLang's Fp8MoEMethod repacks DeepSeek-V4's fp32 FP4 expert scales for
  the DeepGEMM runner (engines/sglang/fp4_scales.py).
- mxfp4_ue8m0_packed_x2: the same with the packed scales held twice and read once (``Format.unread``): SGLang's MegaMoE
  weight build keeps the packed scales for the DeepEP-layout path and a UTCCP-transposed copy for the MegaMoE kernel
  (engines/sglang/fp4_scales.py): 4.5 bits held, 4.25 read.
- fp4_f32scale_b512: FP4 E2M1 codes (0.5 B a parameter) with one fp32 scale per 512 inputs of a row, as the torch_tpu
  vLLM plugin requantizes DeepSeek-V4's FP4 experts at load (MOE_REQUANTIZE_BLOCK_SIZE, default 512;
  engines/torchtpu_vllm/stack.yaml): 4.0625 bits; a row's last block counted whole.
- fp8_pt: e4m3 with one f32 scale a matrix (an expert's own along the leading axis), as vLLM's online FP8 holds a
  bf16 checkpoint's Linear and FusedMoE weights after quantizing them at load (``--quantization fp8`` on a checkpoint
  with no quantization_config: Fp8OnlineLinearMethod / Fp8OnlineMoEMethod, engines/vllm/online_quant.py): 1 B a
  parameter + 4 B a matrix. A resident format only: no checkpoint stores it.
- fp8_block (DeepSeek-V3 style e4m3): 1 B a parameter + one f32 ``weight_scale_inv`` per [128, 128]
  block of each matrix.
- ds_fp8 / ds_fp4 (DeepSeek-V4's own checkpoint, names ``<base>.weight`` + ``<base>.scale``): e4m3 with one
  E8M0 (1 B) scale per [128, 128] block; and FP4 E2M1 packed two a byte (safetensors ``I8``) with one E8M0
  scale per 32 inputs of a row (4.25 bits a parameter, as mxfp4). i64: V4's hash-routing table; i32 the
  form an engine holds it in (SGLang's HashTopK, a resident format only).
- ds_fp8_b32 / ds_fp8_row32 (DeepSeek-V4.1's checkpoint, ``quantization_config.weight_block_size`` [32, 32]): e4m3
  with one E8M0 scale per [32, 32] block; and the Engram n-gram tables, e4m3 rows with one E8M0 scale per 32
  values of a row (8.25 bits a parameter: 264 B a 256-wide row).
- int4_g32 (compressed-tensors "pack-quantized" W4A16: symmetric int4, ``strategy: group``, ``group_size: 32``;
  Kimi-K2.5/K2.6's routed experts): int32 ``weight_packed`` [out, in/8] (eight 4-bit values a word), bf16
  ``weight_scale`` [out, in/32] and an int32 ``weight_shape`` [2] a matrix: 4.5 bits a parameter + 8 B a matrix.
- int4_g32_f32scale: those int4 codes as signed int4 (0.5 B a parameter) with each group-32 scale widened to fp32
  (4 B a 32), the packed words and the ``weight_shape`` tensors dropped, as tpu-inference holds the int4 group-32
  experts it does not requantize (process_moe_weights casts the scales to float32: engines/tpu_inference/stack.yaml
  option disable_weight_requantization): 5 bits a parameter. A resident format only: no checkpoint stores it.
- nvfp4 (NVIDIA ModelOpt's NVFP4 export, hf_quant_config ``quant_algo: NVFP4``, ``group_size: 16``; names
  ``<base>.weight`` + ``<base>.weight_scale`` + ``<base>.weight_scale_2`` + ``<base>.input_scale``): uint8
  ``weight`` [out, in/2] (two E2M1 values a byte), F8_E4M3 ``weight_scale`` [out, in/16] and two f32 scalars a
  matrix (the global weight scale and the activations' input scale), as vLLM's ModelOptNvFp4LinearMethod and
  SGLang's ModelOptFp4LinearMethod / ModelOptNvFp4FusedMoEMethod create them: 4.5 bits a parameter + 8 B a matrix.
- quark_mxfp4 (AMD Quark's OCP MXFP4 export, ``quant_method: quark`` with fp4 ``per_group`` 32 ``e8m0`` weights; names
  ``<base>.weight`` + ``<base>.weight_scale``): the bytes of mxfp4 -- uint8 ``weight`` [out, in/2] (two E2M1 values a
  byte) and a uint8 E8M0 ``weight_scale`` [out, in/32] -- under Quark's names, as SGLang's QuarkW4A4MXFP4 /
  QuarkW4A4MXFp4MoE create them: 4.25 bits a parameter.
The last two dims of a shape are [out, in]; any leading dims (an expert axis) multiply.
"""

from __future__ import annotations

import math
from typing import Callable

from k3plan.errors import K3PlanError
from k3plan.structs import Frozen


def _lead(shape: tuple[int, ...]) -> int:
    return math.prod(shape[:-2]) if len(shape) > 2 else 1


def _out_in(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) < 2:
        return (1, shape[0] if shape else 1)
    return shape[-2], shape[-1]


class Format(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    __coerce__ = False

    name: str
    bits_per_param: float  # nominal, for display; nbytes is exact
    nbytes: Callable[[tuple[int, ...]], int]
    # checkpoint tensors: list of (suffix, safetensors dtype, shape fn)
    parts: tuple[tuple[str, str, Callable[[tuple[int, ...]], tuple[int, ...]]], ...]
    quantized: bool = False
    # bytes of nbytes the engine holds and no kernel reads (a load's leftover): weights a device count them, the
    # step's reads do not (``read_nbytes``); None: every byte is read
    unread: Callable[[tuple[int, ...]], int] | None = None

    def read_nbytes(self, shape: tuple[int, ...]) -> int:
        """The bytes a kernel streams of a tensor of ``shape``: nbytes less what the engine holds unread."""
        return self.nbytes(shape) - (self.unread(shape) if self.unread is not None else 0)


def _fp8_pt_bytes(shape: tuple[int, ...]) -> int:
    return math.prod(shape) + 4 * _lead(shape)


def _plain(itemsize: int, dtype: str, name: str) -> Format:
    return Format(
        name=name,
        bits_per_param=8 * itemsize,
        nbytes=lambda s: itemsize * math.prod(s),
        parts=(("", dtype, lambda s: tuple(s)),),
    )


def _mxfp4_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    if inp % 32:
        raise K3PlanError(f"mxfp4 needs the input dim divisible by 32, got shape {list(shape)}")
    return _lead(shape) * (out * inp // 2 + out * inp // 32)


def _int4_f32scale_bytes(group: int) -> Callable[[tuple[int, ...]], int]:
    """int4 codes (two a byte) with one fp32 scale per ``group`` inputs of a row (no packed words, no shape)."""

    def nbytes(shape: tuple[int, ...]) -> int:
        out, inp = _out_in(shape)
        if inp % group:
            raise K3PlanError(f"int4 group {group} needs the input dim divisible by {group}, got {list(shape)}")
        return _lead(shape) * (out * inp // 2 + 4 * out * (inp // group))

    return nbytes


def _mxfp4_f32scale_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    if inp % 32:
        raise K3PlanError(f"mxfp4 needs the input dim divisible by 32, got shape {list(shape)}")
    return _lead(shape) * (out * inp // 2 + 4 * (out * inp // 32))


def _f32_scale_copy_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    return _lead(shape) * 4 * (out * inp // 32)


def _mxfp4_e8m0_f32kept_bytes(shape: tuple[int, ...]) -> int:
    return _mxfp4_bytes(shape) + _f32_scale_copy_bytes(shape)


def _ue8m0_packed_scale_bytes(shape: tuple[int, ...]) -> int:
    """DeepGEMM's packed UE8M0 scales of an MXFP4 tensor: int32 words of four scales, the rows aligned to 4
    (get_tma_aligned_size(mn, 4): 16 B) and each row's inp / 32 scales to whole words."""
    out, inp = _out_in(shape)
    if inp % 32:
        raise K3PlanError(f"mxfp4 needs the input dim divisible by 32, got shape {list(shape)}")
    rows = 4 * math.ceil(out / 4)
    words = math.ceil(inp // 32 / 4)
    return _lead(shape) * rows * words * 4


def _mxfp4_ue8m0_packed_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    return _lead(shape) * out * inp // 2 + _ue8m0_packed_scale_bytes(shape)


def _mxfp4_ue8m0_packed_x2_bytes(shape: tuple[int, ...]) -> int:
    return _mxfp4_ue8m0_packed_bytes(shape) + _ue8m0_packed_scale_bytes(shape)


def _fp4_f32scale_b512_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    if inp % 2:
        raise K3PlanError(f"fp4 needs an even input dim, got shape {list(shape)}")
    return _lead(shape) * (out * inp // 2 + 4 * out * math.ceil(inp / 512))


def _int4_group_bytes(group: int) -> Callable[[tuple[int, ...]], int]:
    """compressed-tensors pack-quantized int4 with one bf16 scale per ``group`` inputs of a row and the
    int32[2] ``weight_shape`` each matrix carries."""

    def nbytes(shape: tuple[int, ...]) -> int:
        out, inp = _out_in(shape)
        if inp % group or inp % 8:
            raise K3PlanError(f"int4 group {group} needs the input dim divisible by {group} and 8, got {list(shape)}")
        return _lead(shape) * (out * inp // 2 + 2 * out * (inp // group) + 8)

    return nbytes


def _nvfp4_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    if inp % 16:
        raise K3PlanError(f"nvfp4 needs the input dim divisible by 16, got shape {list(shape)}")
    return _lead(shape) * (out * inp // 2 + out * inp // 16 + 8)


def _fp8_block_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    return math.prod(shape) + _lead(shape) * 4 * math.ceil(out / 128) * math.ceil(inp / 128)


def _ds_fp8_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    return math.prod(shape) + _lead(shape) * math.ceil(out / 128) * math.ceil(inp / 128)


def _ds_fp8_b32_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    return math.prod(shape) + _lead(shape) * math.ceil(out / 32) * math.ceil(inp / 32)


def _ds_fp8_row32_bytes(shape: tuple[int, ...]) -> int:
    out, inp = _out_in(shape)
    if inp % 32:
        raise K3PlanError(f"ds_fp8_row32 needs the row width divisible by 32, got shape {list(shape)}")
    return math.prod(shape) + _lead(shape) * out * (inp // 32)


FORMATS: dict[str, Format] = {
    "bf16": _plain(2, "BF16", "bf16"),
    "f32": _plain(4, "F32", "f32"),
    "fp8": _plain(1, "F8_E4M3", "fp8"),
    "fp8_pt": Format(
        name="fp8_pt",
        bits_per_param=8,
        nbytes=_fp8_pt_bytes,
        parts=(("", "F8_E4M3", lambda s: tuple(s)), ("_scale", "F32", lambda s: tuple(s[:-2]))),
        quantized=True,
    ),
    "mxfp4": Format(
        name="mxfp4",
        bits_per_param=4.25,
        nbytes=_mxfp4_bytes,
        parts=(
            ("_packed", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            ("_scale", "U8", lambda s: (*s[:-1], s[-1] // 32)),
        ),
        quantized=True,
    ),
    "mxfp4_f32scale": Format(
        name="mxfp4_f32scale",
        bits_per_param=5.0,
        nbytes=_mxfp4_f32scale_bytes,
        parts=(
            ("_packed", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            ("_scale", "F32", lambda s: (*s[:-1], s[-1] // 32)),
        ),
        quantized=True,
    ),
    "mxfp4_e8m0_f32kept": Format(
        name="mxfp4_e8m0_f32kept",
        bits_per_param=5.25,
        nbytes=_mxfp4_e8m0_f32kept_bytes,
        parts=(
            ("_packed", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            ("_scale", "U8", lambda s: (*s[:-1], s[-1] // 32)),
            ("_scale_f32", "F32", lambda s: (*s[:-1], s[-1] // 32)),
        ),
        quantized=True,
        unread=_f32_scale_copy_bytes,
    ),
    # DeepSeek-V4's FP4 experts as SGLang holds them for DeepGEMM on an SM100 GPU (engines/sglang/fp4_scales.py)
    "mxfp4_ue8m0_packed": Format(
        name="mxfp4_ue8m0_packed",
        bits_per_param=4.25,
        nbytes=_mxfp4_ue8m0_packed_bytes,
        parts=(
            ("_packed", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            ("_scale", "I32", lambda s: (*s[:-2], 4 * math.ceil(s[-2] / 4), math.ceil(s[-1] // 32 / 4))),
        ),
        quantized=True,
    ),
    "mxfp4_ue8m0_packed_x2": Format(
        name="mxfp4_ue8m0_packed_x2",
        bits_per_param=4.5,
        nbytes=_mxfp4_ue8m0_packed_x2_bytes,
        parts=(
            ("_packed", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            ("_scale", "I32", lambda s: (*s[:-2], 4 * math.ceil(s[-2] / 4), math.ceil(s[-1] // 32 / 4))),
            ("_scale_utccp", "I32", lambda s: (*s[:-2], 4 * math.ceil(s[-2] / 4), math.ceil(s[-1] // 32 / 4))),
        ),
        quantized=True,
        unread=_ue8m0_packed_scale_bytes,
    ),
    "fp8_block": Format(
        name="fp8_block",
        bits_per_param=8,
        nbytes=_fp8_block_bytes,
        parts=(
            ("", "F8_E4M3", lambda s: tuple(s)),
            ("_scale_inv", "F32", lambda s: (*s[:-2], math.ceil(s[-2] / 128), math.ceil(s[-1] / 128))),
        ),
        quantized=True,
    ),
    # DeepSeek-V4 (k3plan.models.families.deepseek_v4): the tensor's name is the checkpoint's base name
    "ds_fp8": Format(
        name="ds_fp8",
        bits_per_param=8,
        nbytes=_ds_fp8_bytes,
        parts=(
            (".weight", "F8_E4M3", lambda s: tuple(s)),
            (".scale", "F8_E8M0", lambda s: (*s[:-2], math.ceil(s[-2] / 128), math.ceil(s[-1] / 128))),
        ),
        quantized=True,
    ),
    "fp4_f32scale_b512": Format(
        name="fp4_f32scale_b512",
        bits_per_param=4.0625,
        nbytes=_fp4_f32scale_b512_bytes,
        parts=(
            ("_packed", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            ("_scale", "F32", lambda s: (*s[:-1], -(-s[-1] // 512))),
        ),
        quantized=True,
    ),
    "ds_fp4": Format(
        name="ds_fp4",
        bits_per_param=4.25,
        nbytes=_mxfp4_bytes,
        parts=(
            (".weight", "I8", lambda s: (*s[:-1], s[-1] // 2)),
            (".scale", "F8_E8M0", lambda s: (*s[:-1], s[-1] // 32)),
        ),
        quantized=True,
    ),
    # DeepSeek-V4.1 (k3plan.models.families.deepseek_v41): [32, 32] blocks, and the Engram tables' row scales
    "ds_fp8_b32": Format(
        name="ds_fp8_b32",
        bits_per_param=8,
        nbytes=_ds_fp8_b32_bytes,
        parts=(
            (".weight", "F8_E4M3", lambda s: tuple(s)),
            (".scale", "F8_E8M0", lambda s: (*s[:-2], math.ceil(s[-2] / 32), math.ceil(s[-1] / 32))),
        ),
        quantized=True,
    ),
    "ds_fp8_row32": Format(
        name="ds_fp8_row32",
        bits_per_param=8.25,
        nbytes=_ds_fp8_row32_bytes,
        parts=(
            (".weight", "F8_E4M3", lambda s: tuple(s)),
            (".scale", "F8_E8M0", lambda s: (*s[:-1], s[-1] // 32)),
        ),
        quantized=True,
    ),
    "i64": _plain(8, "I64", "i64"),
    # an engine's resident form of an i64 table: SGLang's HashTopK.tid2eid (engines/sglang/stack.yaml runtime_formats)
    "i32": _plain(4, "I32", "i32"),
    # NVIDIA ModelOpt NVFP4 (k3plan.models.config.ModelOptQuant): the tensor's name is the checkpoint's base name
    "nvfp4": Format(
        name="nvfp4",
        bits_per_param=4.5,
        nbytes=_nvfp4_bytes,
        parts=(
            (".weight", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            (".weight_scale", "F8_E4M3", lambda s: (*s[:-1], s[-1] // 16)),
            (".weight_scale_2", "F32", lambda s: ()),
            (".input_scale", "F32", lambda s: ()),
        ),
        quantized=True,
    ),
    # AMD Quark OCP MXFP4 (k3plan.models.config.QuarkQuant): the tensor's name is the checkpoint's base name
    "quark_mxfp4": Format(
        name="quark_mxfp4",
        bits_per_param=4.25,
        nbytes=_mxfp4_bytes,
        parts=(
            (".weight", "U8", lambda s: (*s[:-1], s[-1] // 2)),
            (".weight_scale", "U8", lambda s: (*s[:-1], s[-1] // 32)),
        ),
        quantized=True,
    ),
    # compressed-tensors W4A16 (k3plan.models.config.CompressedTensorsQuant, format "pack-quantized")
    "int4_g32": Format(
        name="int4_g32",
        bits_per_param=4.5,
        nbytes=_int4_group_bytes(32),
        parts=(
            ("_packed", "I32", lambda s: (*s[:-1], s[-1] // 8)),
            ("_scale", "BF16", lambda s: (*s[:-1], s[-1] // 32)),
            ("_shape", "I32", lambda s: (*s[:-2], 2)),
        ),
        quantized=True,
    ),
    # tpu-inference's resident form of int4_g32 without requantization: int4 codes, the group-32 scales as fp32
    "int4_g32_f32scale": Format(
        name="int4_g32_f32scale",
        bits_per_param=5.0,
        nbytes=_int4_f32scale_bytes(32),
        parts=(("", "U8", lambda s: (*s[:-1], s[-1] // 2)), ("_scale", "F32", lambda s: (*s[:-1], s[-1] // 32))),
        quantized=True,
    ),
}
# pack-quantized int4 group sizes with a storage format above: group_size -> format name
INT4_GROUP_FORMATS = {32: "int4_g32"}


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise K3PlanError(f"unknown storage format {name!r}; known: {', '.join(FORMATS)}") from None
