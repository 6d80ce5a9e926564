"""Two bytes of vLLM's Kimi-K3 start that its model code sizes and k3plan's generic terms do not: the Attention
Residuals block bank its forward holds through the layer loop (a term of the profile run's peak, a batched token's),
and the padding AITER's scale shuffle adds to the routed experts' down-projection scales on gfx950 (in the weights).

The block bank. ``KimiLinearModel.forward`` (vllm/models/kimi_k3/amd/linear.py, the language model ROCm's Kimi-K3
builds; nvidia/model.py the same on CUDA) allocates, where the config has ``attn_res_block_size``,
``block_residual = hidden_states.new_empty(tokens, cdiv(end_layer, attn_res_block_size), hidden)`` -- the model's
dtype, bf16 -- before the first layer and keeps it to the output's attn-res (every layer reads it, a block-write
layer writes its row), beside the prefix sum and the layer's own tensors. The profile run's dummy forward runs it at
max_num_batched_tokens rows (on CUDA one TP rank's slice under sequence parallelism: ``sp_shard`` before the bank,
``use_sequence_parallel``: PP 1, expert parallelism, TP > 1 and DeepGEMM Mega MoE or DP > 1). Kimi-K3 (93 layers,
blocks of 12, hidden 7,168): 8 x 7,168 x 2 = 114,688 B a token, 0.44 GiB at 4,096 tokens. ``end_layer`` is the
last pipeline stage's (every layer: its bank is the largest). Read in the 0.27.0, 0.28.0, 0.29.0, 0.30.0, 0.31.0,
0.33.0 and 0.34.0 wheels (PyPI); k3plan reads vLLM's K3 bring-up images (before 0.27.0, no K3 code public) by them.

The scale padding. On gfx950 under AITER's fused MoE, Kimi-K3's SiTU MXFP4 experts are preshuffled once after
loading (0.27.0: quantization/mxfp4.py Mxfp4MoEMethod._setup_kernel_k3_situ, ``_use_k3_situ_aiter``: AITER's MoE on,
gfx950, SiTU; 0.28.0-0.34.0: fused_moe/oracle/mxfp4.py convert_weight_to_mxfp4_moe_kernel_format, AITER_MXFP4_BF16
with SiTU), the w2 scales by ``aiter.utility.fp4_utils.e8m0_shuffle(w2_scale.view(-1, K / 32))``, which pads the rows
to a multiple of 256 and the columns to a multiple of 8 into a new tensor (ROCm/aiter aiter/ops/shuffle.py
shuffle_scale, not guinterleaved; the same padding in fp4_utils.py's own e8m0_shuffle from 2c17c35c, 2025-10, to
the K3 SiTUv2 merge 31350226, 2026-07-28) that ``replace_parameter`` keeps in place of the checkpoint's. w2's K is the
intermediate a rank holds: TP-split (no expert parallelism) Kimi-K3's 3,072 / 8 = 384 gives 12 scale columns, held
as 16 (+4 B a row: 896 experts x 3,584 rows x 4 B = 12.8 MB a MoE layer, 1.10 GiB over 92 layers); whole experts
under expert parallelism, 96 columns, none. w13's scales (K = the latent 3,584: 112 columns) and the fp4 weights
(shuffle_weight, no pad_k_to) are not padded.
"""

from __future__ import annotations

from k3plan.engines.vllm.dsv4_workspace import aiter_fused_moe_runs

BANK_ARCHITECTURES = frozenset({"kimi_k3"})
ACT_BYTES = 2  # bf16, the model dtype hidden_states carry
BANK_SOURCE = (
    "vllm 0.27.0-0.34.0 wheels (PyPI): vllm/models/kimi_k3/amd/linear.py KimiLinearModel.forward (block_residual = "
    "hidden_states.new_empty(tokens, cdiv(end_layer, attn_res_block_size), hidden), live through the layer loop), "
    "nvidia/model.py KimiLinearModel.forward (num_attn_res_blocks; after sp_shard under use_sequence_parallel), "
    "models/common/ops/sequence_parallel.py sp_shard"
)
SCALE_GROUP = 32  # MXFP4: one e8m0 scale a 32 weights along K
ROW_ALIGN, COL_ALIGN = 256, 8  # shuffle_scale's (m + 255) // 256 * 256, (n + 7) // 8 * 8
SCALE_PAD_SOURCE = (
    "vllm 0.27.0 wheel (PyPI) model_executor/layers/quantization/mxfp4.py _use_k3_situ_aiter / "
    "Mxfp4MoEMethod._setup_kernel_k3_situ and 0.28.0-0.34.0 wheels fused_moe/oracle/mxfp4.py "
    "convert_weight_to_mxfp4_moe_kernel_format (AITER_MXFP4_BF16, SiTU): w2_scale = e8m0_shuffle(w2_scale.view(-1, "
    "K / 32)); ROCm/aiter@31350226 aiter/utility/fp4_utils.py e8m0_shuffle -> aiter/ops/shuffle.py shuffle_scale "
    "(rows to a multiple of 256, columns to a multiple of 8, a new tensor)"
)


def attn_res_bank(
    *,
    architecture: str,
    block_size: int | None,
    num_layers: int,
    hidden: int,
    tokens: int,
    tp: int = 1,
    sequence_parallel: bool = False,
) -> tuple[int, str] | None:
    """(bytes, how) of the Attention Residuals block bank vLLM's Kimi-K3 forward holds over ``tokens`` batched tokens
    (``BANK_SOURCE``); None for another model or one without attn-res blocks. ``sequence_parallel``: CUDA's
    use_sequence_parallel, the rows one TP rank's slice (``tp``)."""
    if architecture not in BANK_ARCHITECTURES or not block_size or tokens <= 0 or hidden <= 0:
        return None
    blocks = -(-num_layers // block_size)
    rows = -(-tokens // tp) if sequence_parallel and tp > 1 else tokens
    nbytes = rows * blocks * hidden * ACT_BYTES
    sp = f" (one TP rank's {rows:,} under sequence parallelism)" if rows != tokens else ""
    return nbytes, (
        f"the Attention Residuals block bank, {rows:,} rows{sp} x {blocks} blocks (cdiv({num_layers}, {block_size})) x "
        f"hidden {hidden:,} x {ACT_BYTES} B = {nbytes:,} B, live through the dummy forward's layers ({BANK_SOURCE})"
    )


def k3_sequence_parallel(*, vendor: str, pp: int, expert_parallel: bool, tp: int, dp: int, moe_backend: str) -> bool:
    """CUDA Kimi-K3's use_sequence_parallel (nvidia/model.py, 0.28.0 wheel): PP 1, expert parallelism, TP > 1, and
    DeepGEMM Mega MoE or DP > 1; ROCm's model (amd/linear.py) shards nothing."""
    return (
        vendor == "nvidia"
        and pp == 1
        and expert_parallel
        and tp > 1
        and (moe_backend == "deep_gemm_mega_moe" or dp > 1)
    )


def k3_w2_scale_pad(
    *,
    architecture: str,
    hardware: str,
    moe_backend: str,
    aiter_on: bool,
    n_moe: int,
    local_experts: int,
    expert_out: int,
    shard_intermediate: int,
) -> tuple[int, str] | None:
    """(bytes a device, how) AITER's w2 scale shuffle adds to Kimi-K3's routed experts on gfx950 under AITER's MoE
    (``SCALE_PAD_SOURCE``); None elsewhere or where nothing is padded. ``local_experts`` and ``shard_intermediate``: a
    rank's experts and the intermediate each holds (w2's K); ``expert_out``: w2's rows an expert (the latent width
    Kimi-K3's routed experts return). Kimi-K3's experts are SiTU (config.json hidden_act "situ"), the activation
    this path takes."""
    if architecture != "kimi_k3" or n_moe <= 0 or local_experts <= 0:
        return None
    if not aiter_fused_moe_runs(hardware=hardware, moe_backend=moe_backend, aiter_on=aiter_on):
        return None
    rows = local_experts * expert_out
    cols = -(-shard_intermediate // SCALE_GROUP)
    padded = -(-rows // ROW_ALIGN) * ROW_ALIGN * (-(-cols // COL_ALIGN) * COL_ALIGN)
    extra = (padded - rows * cols) * n_moe
    if extra <= 0:
        return None
    return extra, (
        f"{extra:,} B: AITER's w2 scale shuffle pads Kimi-K3's routed experts' down-projection scales, [{rows:,}, "
        f"{cols}] a MoE layer ({local_experts} experts x {expert_out:,} rows, K {shard_intermediate:,} / "
        f"{SCALE_GROUP}) held as [{-(-rows // ROW_ALIGN) * ROW_ALIGN:,}, {-(-cols // COL_ALIGN) * COL_ALIGN}] e8m0 "
        f"bytes, over {n_moe} MoE layers ({SCALE_PAD_SOURCE})"
    )
