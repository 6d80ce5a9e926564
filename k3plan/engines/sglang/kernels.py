"""The kernels SGLang launches for the step description's ops, read in its model and quantization code.

k3plan's step description holds one op a weight tensor (q_proj, k_proj and v_proj apart; an expert's w1, w2 and
w3 apart) and the speed model's kernel floor (``speed.overheads.kernel_floor_terms``) charges every op one kernel.
SGLang launches otherwise, in two ways its code shows:

- it merges linears that read the same input into one GEMM, and on Kimi-K3 fuses whole chains into one kernel
  (``JOINED``: an op there launches no kernel of its own; its partner's kernel does its work);
- before a linear that computes in 8 or 4 bits it quantizes the activations in a kernel of its own
  (``QUANTIZED_COMPUTE``: one a distinct input; ops joined to a partner share the partner's).

Pure data and a function over the ops; the speed term that prices it is ``sglang-kernels`` (``k3plan.speed.terms``).
The Kimi-K3 rules are read in the stored kimi_k3.py (@0000e9b4), which names a kimi-k3 branch image: not
necessarily main's code, nor (unverified) the build a benchmark ran.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from k3plan.structs import Frozen

DEEPSEEK_V2 = "sgl-project/sglang@3e4a39ee python/sglang/srt/models/deepseek_v2.py"
KIMI_K3 = "sgl-project/sglang@0000e9b4 python/sglang/srt/models/kimi_k3.py"
KDA_BACKEND = "sgl-project/sglang@0051ebfc python/sglang/srt/layers/attention/linear/kda_backend.py"


class Joined(Frozen):
    """An op of the step description that SGLang computes inside another op's kernel."""

    suffix: str  # the op's name ends so (k3plan's op names: '<layer kind>.<tensor path>')
    into: str  # the kernel that does its work
    phase: Literal["both", "decode"]  # the stages the merge holds in (a decode-only fused kernel: decode)
    source: str
    tp_only: bool = False  # SGLang merges it only where the MoE exchanges no all-to-all (plain TP)


JOINED: tuple[Joined, ...] = (
    # DeepSeek-V3 / Kimi-K2 / the MLA layers of Kimi-K3 (DeepseekV2AttentionMLA, DeepseekV2MLP, FusedMoE)
    Joined(
        suffix="self_attn.kv_a_proj_with_mqa",
        into="fused_qkv_a_proj_with_mqa (q_a_proj's GEMM)",
        phase="both",
        source=f"{DEEPSEEK_V2} DeepseekV2AttentionMLA.__init__: fused_qkv_a_proj_with_mqa = ReplicatedLinear("
        "hidden_size, q_lora_rank + kv_lora_rank + qk_rope_head_dim)",
    ),
    Joined(
        suffix="mlp.up_proj",
        into="gate_up_proj (gate_proj's GEMM)",
        phase="both",
        source=f"{DEEPSEEK_V2} DeepseekV2MLP.__init__: gate_up_proj = MergedColumnParallelLinear",
    ),
    Joined(
        suffix="shared_experts.up_proj",
        into="gate_up_proj (gate_proj's GEMM)",
        phase="both",
        source=f"{DEEPSEEK_V2} DeepseekV2MLP (the shared experts); {KIMI_K3} KimiK3MLP.gate_up_proj = "
        "MergedColumnParallelLinear",
    ),
    Joined(
        suffix="experts.up_proj",
        into="w13 (gate_proj's grouped GEMM)",
        phase="both",
        source="SGLang's fused MoE holds an expert's gate and up projections as one w13_weight of 2 x "
        "intermediate_size_per_partition rows, loaded by shard id w1 / w3, one grouped GEMM (its MoE quantization "
        f"methods' create_weights; {KIMI_K3} KimiK3MoE: 'loads per-expert w1/w3')",
    ),
    Joined(
        suffix="experts.w3",
        into="w13 (w1's grouped GEMM)",
        phase="both",
        source=f"SGLang's fused MoE holds w1 and w3 as one w13_weight; {KIMI_K3} KimiK3MoE: "
        "gate_up_interleaved=False loads per-expert w1 / w3 into it",
    ),
    # Kimi-K3's KDA layers (KimiK3DeltaAttention)
    Joined(
        suffix="kda.self_attn.k_proj",
        into="fused_qkvg_proj (q_proj's GEMM)",
        phase="both",
        source=f"{KIMI_K3} KimiK3DeltaAttention: fused_qkvg_proj = MergedColumnParallelLinear(... [proj] * 4) "
        "(q, k, v, g)",
    ),
    Joined(suffix="kda.self_attn.v_proj", into="fused_qkvg_proj (q_proj's GEMM)", phase="both", source=KIMI_K3),
    Joined(suffix="kda.self_attn.g_proj", into="fused_qkvg_proj (q_proj's GEMM)", phase="both", source=KIMI_K3),
    Joined(
        suffix="kda.self_attn.b_proj",
        into="the merged [f_a | b] GEMV (f_a_proj's)",
        phase="both",
        source=f"{KIMI_K3} KimiK3DeltaAttention._merge_bfa_weights (kimi_k3_tiny_gemm)",
    ),
    Joined(
        suffix="kda.self_attn.q_conv1d",
        into="the fused decode kernel (kda.recurrence's)",
        phase="decode",
        source=f"{KIMI_K3} (kda_fused_decode: one kernel does 'conv1d + delta rule + gated RMSNorm', "
        f"_k3_onorm_consumed); {KDA_BACKEND} (fused_recurrent_kda_packed_decode takes A_log and dt_bias: "
        "the gate and beta computed inside)",
    ),
    Joined(suffix="kda.self_attn.k_conv1d", into="the fused decode kernel", phase="decode", source=KIMI_K3),
    Joined(suffix="kda.self_attn.v_conv1d", into="the fused decode kernel", phase="decode", source=KIMI_K3),
    Joined(suffix="kda.self_attn.A_log", into="the fused decode kernel", phase="decode", source=KDA_BACKEND),
    Joined(suffix="kda.self_attn.dt_bias", into="the fused decode kernel", phase="decode", source=KDA_BACKEND),
    Joined(suffix="kda.self_attn.o_norm", into="the fused decode kernel", phase="decode", source=KIMI_K3),
    # Kimi-K3's latent MoE front (KimiK3MoE._forward_fused: plain TP, no all-to-all)
    Joined(
        suffix="block_sparse_moe.shared_experts.gate_proj",
        into="the merged [shared gate_up | router gate | latent down] GEMM (routed_expert_down_proj's)",
        phase="both",
        source=f"{KIMI_K3} KimiK3MoE._forward_fused: one GEMM over [shared gate_up | router gate | latent down] "
        "('drops 2 GEMM launches'), with plain TP, no all-to-all",
        tp_only=True,
    ),
    Joined(
        suffix="block_sparse_moe.gate",
        into="the merged MoE front GEMM (routed_expert_down_proj's)",
        phase="both",
        source=KIMI_K3,
        tp_only=True,
    ),
    Joined(
        suffix="block_sparse_moe.routed_expert_norm",
        into="the latent all-reduce (k3_ar_fusion.all_reduce_norm)",
        phase="both",
        source=f"{KIMI_K3} KimiK3MoE._forward_fused: k3_ar_fusion.all_reduce_norm",
        tp_only=True,
    ),
)

JOINED_SOURCE = (
    "its merged linears (fused_qkv_a_proj_with_mqa, gate_up_proj, the experts' w13), Kimi-K3's fused q/k/v/g "
    "projection, [f_a | b] GEMV, decode kernel (conv1d + delta rule + gated RMSNorm) and MoE front GEMM "
    "(engines/sglang/kernels.py JOINED, each cited)"
)

# compute dtypes (OpCost.dtype, a hardware spec's FLOP/s key) whose activations a kernel quantizes first
QUANTIZED_COMPUTE = ("fp8", "fp4", "int8")
ACT_QUANT_SOURCE = (
    "sgl-project/sglang@002ed7e4 python/sglang/srt/layers/quantization/fp8_utils.py: "
    "deepgemm_w8a8_block_fp8_linear_with_fallback and cutlass_w8a8_block_fp8_linear_with_fallback call "
    "sglang_per_token_group_quant_fp8 on the input before the GEMM (aiter_w8a8_block_fp8_linear: aiter's "
    "per-1x128 quant); a B200 decode trace shows one cvt_fp16_to_fp4 a FP4 GEMM (SemiAnalysisAI/InferenceX#863: "
    "183 calls of each, 3 a layer)"
)


def _joined(name: str, stage: str, all_to_all: bool) -> bool:
    return any(
        name.endswith(j.suffix) and j.phase in ("both", stage) and not (j.tp_only and all_to_all) for j in JOINED
    )


def kernel_changes(ops: Iterable, stage: str) -> tuple[int, int]:
    """(op executions a step that launch no kernel of their own, activation-quantization kernels a step added) for
    ``ops`` (the step description's OpCost) in ``stage`` ('decode' or 'prefill'), as SGLang launches them."""
    ops = list(ops)
    all_to_all = any(op.kind == "collective" and op.collective == "all-to-all" and op.calls for op in ops)
    joined = quant = 0
    for op in ops:
        if op.kind in ("overhead", "collective"):
            continue
        if _joined(op.name, stage, all_to_all):
            joined += op.count
        elif op.kind in ("matmul", "grouped_matmul") and op.dtype in QUANTIZED_COMPUTE:
            quant += op.count
    return joined, quant
