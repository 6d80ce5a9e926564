"""The 256 bytes a row vLLM's ROCm build adds to a block-quantized fp8 linear weight after loading, held in the weights.

``_maybe_pad_fp8_weight`` (vllm/model_executor/layers/quantization/utils/fp8_utils.py) runs at the end of
``process_fp8_weight_block_strategy`` and ``process_fp8_weight_tensor_strategy``: where ``envs.VLLM_ROCM_FP8_PADDING``
(default "1", vllm/envs.py) and ``current_platform.is_rocm()``, a weight with unit stride whose row stride times its
element size is a multiple of 512 B becomes ``F.pad(weight, (0, 256 // element_size))[..., :-num_pad]``: the slice is a
view, so the new storage keeps [N, K + 256] bytes for an [N, K] fp8 weight (1 B an element), the old storage freed,
then ``torch.cuda.empty_cache()``. The linears reach it from ``Fp8LinearMethod.process_weights_after_loading``
(vllm/model_executor/layers/quantization/fp8.py) for a block-quantized checkpoint: directly in 0.11.0-0.18.0, through
``Fp8BlockScaledMMLinearKernel.process_weights_after_loading`` (vllm/model_executor/kernels/linear/scaled_mm/
BlockScaledMMLinearKernel.py; the ROCm kernels ``AiterFp8BlockScaledMMKernel`` and ``TritonFp8BlockScaledMMKernel`` keep
it) in 0.20.0-0.25.0, and ``replace_parameter`` (vllm/model_executor/utils.py) registers the padded view as the
parameter. The routed experts (the fused MoE's own methods) are not padded; a row-parallel layer whose TP share of
the input is not a multiple of 512 (DeepSeek-V3's dense and shared-expert down projections at TP 8: 2,304 and 256) is
not either. Read in the PyPI wheels 0.11.0, 0.11.2, 0.13.0, 0.14.1, 0.16.0, 0.18.0, 0.20.0, 0.21.0, 0.23.0, 0.24.0 and
0.25.0; 0.26.0's wheel has no ``_maybe_pad_fp8_weight`` (the variable stays in envs.py, read by no linear), nor 0.28.0's
or 0.34.0's. Releases before 0.11.0 were not read: no term there.

DeepSeek-V4 on ROCm (vllm/models/deepseek_v4/attention.py and amd/model.py, 0.25.0 wheel) builds ``fused_wqa_wkv``,
``wq_b``, ``wo_a``, ``wo_b``, the indexer's ``wq_b`` and the shared expert with the checkpoint's quant_config, so they
go through the same kernel and are padded at 0.25.0, the one release with both the ROCm V4 model and the padding.

Only the 128 x 128 block formats are priced (``fp8_block``, DeepSeek-V4's ``ds_fp8``): k3plan's plain ``fp8`` does not
tell a per-tensor checkpoint (padded, process_fp8_weight_tensor_strategy) from a per-channel one
(process_fp8_weight_channel_strategy, not padded). The per-device shapes are the sharding plan's (a fused layer's
rows are the sum of its parts', and its input width theirs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from k3plan.engines.release import Release

if TYPE_CHECKING:
    from k3plan.models.inventory import Tensor

PAD_BYTES = 256  # _maybe_pad_fp8_weight: num_pad = 256 // element_size elements, 256 B a row
STRIDE_MULTIPLE = 512  # its condition: weight.stride(-2) * weight.element_size() % 512 == 0
FORMATS = frozenset({"fp8_block", "ds_fp8"})  # 1 B an element (models/formats.py)
READ_FROM: Release = (0, 11, 0)  # the oldest wheel read
GONE_FROM: Release = (0, 26, 0)  # the first wheel without _maybe_pad_fp8_weight
SOURCE = (
    "vllm-project/vllm PyPI wheels 0.11.0-0.25.0 vllm/model_executor/layers/quantization/utils/fp8_utils.py "
    "_maybe_pad_fp8_weight (VLLM_ROCM_FP8_PADDING, default 1), from process_fp8_weight_block_strategy; absent from 0.26.0"
)


def pads(*, vendor: str, release: Release | None, env: dict[str, str] | None = None) -> bool:
    """Whether the release pads fp8 linears on this GPU: an AMD GPU, a release read from 0.11.0 up to 0.26.0
    (None: the newest code read, which does not), VLLM_ROCM_FP8_PADDING not set to 0."""
    if vendor != "amd" or release is None or not READ_FROM <= release < GONE_FROM:
        return False
    flag = (env or {}).get("VLLM_ROCM_FP8_PADDING", "1")
    try:
        return bool(int(flag))
    except ValueError:
        return True  # vLLM's bool(int(...)) raises at start; the padding is what the default does


def padded_rows(tensors: Iterable[Tensor], per_device_shape: Callable[[Tensor], tuple[int, ...]]) -> tuple[int, int]:
    """(rows, tensors) a device holds of block-fp8 2-D linear weights whose row (the device's input width, 1 B an
    element) is a multiple of 512 B: each gains 256 B a row. Routed experts are left out (the fused MoE does not pad)."""
    rows = count = 0
    for t in tensors:
        if t.fmt not in FORMATS or t.role == "expert" or len(t.shape) != 2:
            continue
        n, k = per_device_shape(t)
        if k % STRIDE_MULTIPLE == 0:
            rows += n
            count += 1
    return rows, count


def rocm_fp8_padding(
    tensors: Iterable[Tensor],
    per_device_shape: Callable[[Tensor], tuple[int, ...]],
    *,
    vendor: str,
    release: Release | None,
    env: dict[str, str] | None = None,
) -> tuple[int, str] | None:
    """The bytes the padding adds a device to the weights vLLM measures at load, and how; None where it does not
    apply or pads nothing."""
    if not pads(vendor=vendor, release=release, env=env):
        return None
    rows, count = padded_rows(tensors, per_device_shape)
    if not rows:
        return None
    extra = rows * PAD_BYTES
    return extra, (
        f"{extra:,} B: ROCm's fp8 linear padding, {count} block-fp8 weights of {rows:,} rows a device whose row is a "
        f"multiple of {STRIDE_MULTIPLE} B, {PAD_BYTES} B a row ({SOURCE})"
    )
