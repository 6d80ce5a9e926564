"""vLLM's check that a 128 x 128 block-quantized fp8 weight splits into whole blocks over tensor parallelism: a
row-parallel layer (its input dimension split over TP) whose share is not a multiple of the block is refused while
the model is built, before any weight loads.

``Fp8LinearMethod.create_weights`` (vllm/model_executor/layers/quantization/fp8.py) calls ``validate_fp8_block_shape``
(vllm/model_executor/layers/quantization/utils/fp8_utils.py), which raises "Weight input_size_per_partition = N is
not divisible by weight quantization block_k = 128" when ``tp_size > 1``, the layer's input is split over TP and the
share is not a multiple of block_k; read in the vLLM 0.31.0 wheel (PyPI). vllm-project/vllm#40955 meets it with
DeepSeek-V4-Pro at TP 16 on two H20 nodes (the shared expert's down projection: 3,072 / 16 = 192). The column-parallel
half of the same check is not applied here: 0.31.0's ``ColumnParallelLinear._maybe_allow_fp8_block_shape_mismatch``
waives it for merged layers (gate and up), which k3plan's inventory does not tell apart from single ones. The fused
MoE's own check (``validate_fp8_block_shape_moe``) is refined since (``resolve_fp8_moe_weight_block_shape``) and not
applied either.

DeepSeek-V4's shared expert is the exception on NVIDIA GPUs from vLLM 0.24.0 (vllm-project/vllm#46001, merged
2026-06-18): ``DeepseekV4MLP.__init__`` (vllm/models/deepseek_v4/nvidia/model.py, read in the 0.24.0, 0.26.0 and
0.31.0 wheels; absent from 0.23.0's) rounds each rank's share up to whole blocks (cdiv), the trailing ranks
zero-filled, so TP 16 builds (256 rows a rank, not 192: 0.08 GiB more a GPU for V4-Pro, not priced). The AMD and XPU
model files (vllm/models/deepseek_v4/amd/model.py, read in the 0.28.0 wheel) build it without, and are refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3plan.models.inventory import Tensor, TensorInventory

BLOCK = 128  # the [128, 128] weight_block_size of DeepSeek-V3 / V4's fp8 checkpoints (their quantization_config)
FORMATS = frozenset({"fp8_block", "ds_fp8"})  # k3plan's 128 x 128 block fp8 formats (models/formats.py)
RAISED_AT = (
    "vllm-project/vllm 0.31.0 (PyPI wheel) vllm/model_executor/layers/quantization/utils/fp8_utils.py "
    "validate_fp8_block_shape (from Fp8LinearMethod.create_weights, while the model is built)"
)


V4_PADDED_FROM = (0, 24, 0)  # the first release whose NVIDIA DeepSeek-V4 model pads its shared expert (#46001)


def padded_roles(*, dsv4: bool, vendor: str, release: tuple[int, int, int] | None) -> frozenset[str]:
    """The tensor roles vLLM pads to whole blocks instead of refusing: DeepSeek-V4's shared expert on NVIDIA from
    0.24.0 (no --engine-version: the code read, 0.31.0's, which pads)."""
    if dsv4 and vendor == "nvidia" and (release is None or release >= V4_PADDED_FROM):
        return frozenset({"shared_expert"})
    return frozenset()


def row_parallel_refusal(
    inventory: TensorInventory,
    per_device_shape: Callable[[Tensor], tuple[int, ...]],
    *,
    padded: frozenset[str] = frozenset(),
) -> tuple[str, str] | None:
    """vLLM's ValueError and where it is raised, for the first block-quantized 2-D weight whose input dimension is
    split evenly into shares that are not whole blocks (``per_device_shape``: the sharding plan's,
    ShardingPlan.per_device_shape); None when every split is whole. ``padded``: roles the model code rounds up to
    whole blocks (``padded_roles``)."""
    for t in inventory.text:
        if t.fmt not in FORMATS or t.role == "expert" or t.role in padded or len(t.shape) != 2:
            continue
        share = per_device_shape(t)[1]
        shards = t.shape[1] // share
        if shards > 1 and share * shards == t.shape[1] and share % BLOCK:
            return (
                f"ValueError: Weight input_size_per_partition = {share} is not divisible by weight quantization "
                f"block_k = {BLOCK}. ({t.name}: {t.shape[1]:,} inputs over {shards} ranks)",
                RAISED_AT,
            )
    return None
