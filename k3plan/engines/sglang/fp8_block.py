"""SGLang's check that a 128 x 128 block-quantized fp8 linear splits into whole blocks over tensor parallelism, where
it refuses DeepSeek-V4's shared expert while the model is built, before any weight loads.

``Fp8LinearMethod.create_weights`` (srt/layers/quantization/fp8.py) calls ``validate_block_quant_shapes``, which,
for a layer split over the whole TP group (``output_size // output_size_per_partition == tp_size``) or a merged one
(``len(output_partition_sizes) > 1``), raises "Weight output_partition_size = N is not divisible by weight
quantization block_n = 128" for a partition that is not a multiple of the checkpoint's block (and the row-parallel
half, "input_size_per_partition ... block_k", for a layer whose input is split over the whole group); read in the
sglang 0.5.12, 0.5.17 and 0.5.23 wheels (PyPI), the same check in 0.5.13-0.5.22.

DeepSeek-V4's shared expert is such a layer: DeepseekV4DecoderLayer builds ``deepseek_v2.DeepseekV2MoE``
(srt/models/deepseek_v4.py), whose shared expert is a ``DeepseekV2MLP`` (a MergedColumnParallelLinear gate_up of
[I, I] and a RowParallelLinear down, I = moe_intermediate_size x n_shared_experts) split over the whole TP group
(--tp-size, DP attention or not: the linears' default group) unless ``_shared_expert_use_tp1`` holds -- a
--moe-a2a-backend other than none among those the release lists, the FlashInfer CUTLASS FP4 all-gather (an
modelopt_fp4 checkpoint only: srt/layers/moe/utils.py should_use_flashinfer_cutlass_moe_fp4_allgather) or
SGLANG_SHARED_EXPERT_TP1 (srt/models/deepseek_v2.py DeepseekV2MoE.__init__, sglang 0.5.12-0.5.23 wheels) -- and it
is not fused into the routed experts: 0.5.12-0.5.14's ``DeepseekV4ForCausalLM.determine_num_fused_shared_experts``
turns the fusion off always, 0.5.15-0.5.22's only with --enforce-shared-experts-fusion (a flag k3plan refuses);
0.5.23 decides it before the model is built (model_loader/loader.py calls layers/moe/utils.py
resolve_shared_experts_config, which asks ``DeepseekV4ForCausalLM.shared_experts_fusion_disable_reason``: off without
enforce_shared_experts_fusion, and under expert parallelism without DeepEP / MegaMoE per-rank slots), and builds the
shared expert with parallel_group 'tp' (``validate_block_quant_shapes`` reads layer.tp_group.world_size, the whole
group), so the check is applied for 0.5.12-0.5.23. DeepSeek-V4-Pro (I = 3,072) at --tp-size 16 has gate and up partitions of 192 rows: refused, as
sgl-project/sglang#23602 logs ("Weight output_partition_size = 192 is not divisible by weight quantization block_n
= 128"); V4-Flash (I = 2,048) passes at 16 and is refused at 32. Only the default --moe-a2a-backend none is read as
the TP-split shared expert (the other backends SGLang splits it for, customized and ascend_tp, are not priced)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3plan.engines.release import Release

if TYPE_CHECKING:
    from k3plan.models.inventory import TensorInventory

BLOCK = 128  # DeepSeek-V4's quantization_config.weight_block_size [128, 128] (formats.ds_fp8)
FORMATS = frozenset({"ds_fp8", "fp8_block"})  # k3plan's 128 x 128 block fp8 formats (models/formats.py)
CHECKED: tuple[Release, Release] = ((0, 5, 12), (0, 5, 23))  # the releases whose V4 shared expert was read unfused
RAISED_AT = (
    "sgl-project/sglang 0.5.12 (PyPI wheel) srt/layers/quantization/fp8.py Fp8LinearMethod.validate_block_quant_shapes "
    "(from create_weights, building DeepseekV2MoE's shared expert gate_up_proj: srt/models/deepseek_v2.py, while the "
    "model is built)"
)


def shared_expert_refusal(
    inventory: TensorInventory,
    *,
    hidden_size: int,
    tp_size: int,
    a2a_backend: str,
    release: Release | None,
) -> tuple[str, str] | None:
    """SGLang's ValueError and where it is raised for DeepSeek-V4's shared expert split over ``tp_size`` (the whole
    TP group, --tp-size) into partitions that are not whole blocks; None where SGLang does not split it (a release
    outside ``CHECKED``, no --engine-version, an --moe-a2a-backend other than none), where it divides into whole
    blocks, or where the checkpoint has no block-fp8 shared expert (V3 / R1 / Kimi fuse or replicate theirs; V4.1's
    blocks are 32 wide)."""
    if release is None or not CHECKED[0] <= release <= CHECKED[1] or a2a_backend != "none" or tp_size < 2:
        return None
    widths = {
        t.shape[0]
        for t in inventory.text
        if t.role == "shared_expert" and t.fmt in FORMATS and len(t.shape) == 2 and t.shape[1] == hidden_size
    }
    for width in sorted(widths):
        if width % tp_size == 0 and (width // tp_size) % BLOCK:
            return (
                f"ValueError: Weight output_partition_size = {width // tp_size} is not divisible by weight quantization "
                f"block_n = {BLOCK}. (the shared expert's gate_up_proj: {width:,} rows each over --tp-size {tp_size})",
                RAISED_AT,
            )
    return None
