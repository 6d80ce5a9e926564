"""The kernels SGLang launches for the step description's ops, read in its model and quantization code.

k3plan's step description holds one op a weight tensor (q_proj, k_proj and v_proj apart; an expert's w1, w2 and
w3 apart) and the speed model's kernel floor (``speed.overheads.kernel_floor_terms``) charges every op one kernel.
SGLang launches otherwise, in three ways its code shows:

- it merges linears that read the same input into one GEMM, and on Kimi-K3 fuses whole chains into one kernel
  (``JOINED``: an op there launches no kernel of its own; its partner's kernel does its work);
- before a linear that computes in 8 or 4 bits it quantizes the activations in a kernel of its own
  (``QUANTIZED_COMPUTE``: one a distinct input; ops joined to a partner share the partner's);
- beside some ops it launches kernels that no op of the description stands for (``GLUE``: the RoPE and the cache
  write beside the absorbed MLA attention, the MoE's routing, alignment and reduction, the embedding's mask), and
  where it fuses the all-reduce with the residual add and the next RMSNorm, the all-reduce launches no kernel of
  its own. Read launch by launch for DeepSeek-V3 at decode (``GLUE_MODEL``) in the released wheels of the
  versions the scored runs used (``SGLANG_057``, ``SGLANG_0512``).

Pure data and functions over the ops; the speed term that prices them is ``sglang-kernels`` (``k3plan.speed.terms``).
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


# The released wheels the glue kernels were read in (pypi.org/project/sglang; the file:line below are in the wheel's
# python/sglang/srt/): 0.5.7 is the image InferenceX's H200 sweep ran (lmsysorg/sglang:v0.5.7-cu129-amd64), on
# SGLang's defaults for Hopper; 0.5.12 the image its B200 curve ran (lmsysorg/sglang:v0.5.12-cu130, built from
# sgl-project/sglang@127b9e32), with --attention-backend trtllm_mla --moe-runner-backend flashinfer_trtllm.
SGLANG_057 = "sglang 0.5.7 (PyPI wheel, 2026-01-01)"
SGLANG_0512 = "sglang 0.5.12 (PyPI wheel; sgl-project/sglang@127b9e32)"

# the model the glue kernels were read for (k3plan's architecture; DeepseekV3ForCausalLM) with 256 routed experts and
# one shared, the conditions SGLang's shared-expert fusion holds on (0.5.7 models/deepseek_v2.py:3348-3388
# determine_num_fused_shared_experts: n_routed_experts != 256 or n_shared_experts != 1 turns it off); Kimi-K2
# (384 experts) takes another path, not read
GLUE_MODEL = ("deepseek_v3", 256, 1)  # (architecture, routed experts, shared experts)
# GPUs SGLang runs its SM100 kernels on (trtllm-gen MLA and MoE); the rest of NVIDIA's run the Hopper path
BLACKWELL = ("nvidia-b200", "nvidia-b300", "nvidia-gb200-nvl72", "nvidia-gb300-nvl72")
# the routed experts' last op in the step description: the glue inside the routed MoE call is counted at it
ROUTED_CALL = "moe.mlp.experts.down_proj"
AR_FUSION_MAX_TOKENS = 2048  # communicator.py apply_flashinfer_allreduce_fusion: FUSE_ALLREDUCE_MAX_BATCH_SIZE


class Glue(Frozen):
    """Kernels SGLang launches at decode beside an op of the step description, with no op of their own (``kernels``
    > 0), or an op it runs inside another kernel together with its input's quantization (``kernels`` < 0)."""

    suffix: str  # one set a execution of the op whose name ends so
    kernels: int
    what: str
    path: Literal["both", "hopper", "blackwell"]  # SGLang's Hopper defaults (0.5.7), its SM100 path (0.5.12), both
    source: str
    rows_over: int = 0  # only where the step's padded rows exceed this (a kernel chosen by batch size)


_AR = (
    "the all-reduce runs inside the next RMSNorm's kernel: flashinfer allreduce_fusion kARResidualRMSNorm (all-reduce "
    "+ residual add + RMSNorm), post_attention_layernorm in every layer and input_layernorm in the next "
    "(communicator.py prepare_mlp / prepare_attn, should_fuse_mlp_allreduce_with_next_layer), auto-enabled for "
    f"DeepSeek-V3 on one node with no DP attention ({SGLANG_057} server_args.py:1470-1493; {SGLANG_0512} "
    f"communicator.py:158-169 apply_flashinfer_allreduce_fusion), to {AR_FUSION_MAX_TOKENS:,} tokens"
)
GLUE: tuple[Glue, ...] = (
    Glue(
        suffix="mla.absorbed_attention",
        kernels=3,
        what="kv_b_proj as two batched GEMMs (q_nope x w_kc, attention x w_vc; the description's kv_b_proj is one), "
        "the RoPE kernel, the KV-cache write",
        path="both",
        source=f"{SGLANG_057} models/deepseek_v2.py:2005 torch.bmm(q_nope, w_kc), :2016 rotary_emb "
        "(apply_rope_pos_ids_cos_sin_cache), layers/attention/flashinfer_mla_backend.py:614-620 set_mla_kv_buffer, "
        f":2215-2226 torch.bmm(attn, w_vc); {SGLANG_0512} models/deepseek_common/forward_mla.py:359 / :658 the two "
        "bmm, trtllm_mla_backend.py:883 mla_rope_quantize_fp8 (RoPE and the fp8 cast of q and k, one kernel), :901 "
        "set_mla_kv_buffer (w_kc / w_vc dequantized to bf16 at load in both: post_load_weights)",
    ),
    Glue(suffix="attention.all_reduce", kernels=-1, what="fused into the RMSNorm", path="both", source=_AR),
    Glue(suffix="moe.all_reduce", kernels=-1, what="fused into the next layer's RMSNorm", path="both", source=_AR),
    Glue(
        suffix="dense_mlp.all_reduce", kernels=-1, what="fused into the next layer's RMSNorm", path="both", source=_AR
    ),
    Glue(
        suffix="dense.mlp.down_proj",
        kernels=1,
        what="silu_and_mul between gate_up and down",
        path="both",
        source=f"{SGLANG_057} layers/activation.py:72 SiluAndMul (DeepseekV2MLP.forward); {SGLANG_0512} "
        "models/deepseek_v2.py:325",
    ),
    Glue(
        suffix="global.lm_head",
        kernels=6,
        what="once a step: the forward's zero-filled scratch buffer, the vocabulary shard's mask, the embedding "
        "gather, masked_fill_, the gathered logits' reshape copy and fp32 cast",
        path="both",
        source=f"{SGLANG_057} models/deepseek_v2.py:3152 BumpAllocator zeros, layers/vocab_parallel_embedding.py:466 / "
        f":479 / :483, distributed/parallel_state.py:857-861, layers/logits_processor.py:948; {SGLANG_0512} the same",
    ),
    Glue(
        suffix="moe.mlp.gate",
        kernels=1,
        what="above 16 rows the router GEMM is cuBLAS's and its logits are cast to fp32 in a kernel of their own",
        path="both",
        rows_over=16,
        source=f"{SGLANG_057} models/deepseek_v2.py:590-605 MoEGate.forward (dsv3_router_gemm to 16 rows), "
        f"layers/moe/topk.py:742; {SGLANG_0512} deepseek_v2.py:413 / :428, moe_runner/flashinfer_trtllm.py:690",
    ),
    # SGLang's Hopper defaults: the Triton fused MoE with the shared expert fused in as expert 257
    Glue(
        suffix="moe.mlp.shared_experts.gate_proj",
        kernels=-2,
        what="the shared expert runs inside the routed experts' fused MoE (expert 257, top-k 9): its gate_up GEMM "
        "and its input's quantization",
        path="hopper",
        source=f"{SGLANG_057} server_args.py:568 disable_shared_experts_fusion=False, models/deepseek_v2.py:3348-3388 "
        "determine_num_fused_shared_experts, :625-690 FusedMoE(num_experts=256 + 1, top_k=8 + 1)",
    ),
    Glue(
        suffix="moe.mlp.shared_experts.down_proj",
        kernels=-2,
        what="the shared expert's down GEMM and its input's quantization, inside the routed experts' w2",
        path="hopper",
        source=f"{SGLANG_057} models/deepseek_v2.py:625-690",
    ),
    Glue(
        suffix=ROUTED_CALL,
        kernels=4,
        what="the Triton fused MoE's moe_align_block_size (two kernels), silu_and_mul between w13 and w2, the top-k "
        "sum-reduce",
        path="hopper",
        source=f"{SGLANG_057} layers/quantization/fp8.py:1105-1126 (auto: the Triton runner), layers/moe/"
        "fused_moe_triton/fused_moe.py:518 moe_align_block_size, :560 silu_and_mul, :654 / :660 moe_sum_reduce",
    ),
    # the SM100 path InferenceX's B200 runs select: flashinfer's trtllm fp8 block-scale MoE, the shared expert apart
    Glue(
        suffix="moe.mlp.shared_experts.down_proj",
        kernels=2,
        what="silu_and_mul in the shared expert (not fused: flashinfer_trtllm disables shared-expert fusion), and "
        "routed + shared after the routed call",
        path="blackwell",
        source=f"{SGLANG_0512} server_args.py:3128-3141 (disable_shared_experts_fusion = True with "
        "flashinfer_trtllm), models/deepseek_v2.py:325, :792 routed += shared",
    ),
    Glue(
        suffix=ROUTED_CALL,
        kernels=5,
        what="the input scales' transpose copy, flashinfer's routing main and cluster kernels, its finalize "
        "(un-permute and weighted sum), the output's copy into the symmetric buffer",
        path="blackwell",
        source=f"{SGLANG_0512} layers/moe/moe_runner/flashinfer_trtllm.py:628 a_sf.t().contiguous(), :688 "
        "trtllm_fp8_block_scale_moe (flashinfer 0.6.11 trtllm_fused_moe_routing_deepseek.cu launchMainKernel / "
        "launchClusterKernel, trtllm_fused_moe_runner.cu Runner::run finalize), :720 symm_output.copy_",
    ),
)

GLUE_SOURCE = (
    "the kernels it launches beside the step description's ops and the all-reduces it fuses into RMSNorm, read "
    "launch by launch in its released code for the DeepSeek-V3 architecture at decode (engines/sglang/kernels.py "
    "GLUE, each cited)"
)


LAST_AR_SOURCE = (
    f"{SGLANG_057} models/deepseek_v2.py:3263 (the last layer's MoE all-reduces on its own, then the final "
    "fused_add_rmsnorm: communicator.py should_fuse_mlp_allreduce_with_next_layer is False for the last layer)"
)


def glue_kernels(
    ops: Iterable,
    stage: str,
    *,
    model: tuple[str, int, int],
    vendor: str,
    hardware: str,
    rows: int,
    dp_attention: bool,
    one_node: bool = True,
) -> int:
    """Kernels a step SGLang launches beyond the step description's ops, net of those it fuses away (``GLUE``): at
    decode, for the model they were read for (``model``: architecture, routed and shared experts, as
    ``GLUE_MODEL``) on an NVIDIA GPU, with the MoE split over TP (no all-to-all); 0 elsewhere (another model or
    expert count, a prefill chunk, DeepEP's path, an AMD GPU's aiter path: not read). The all-reduces fuse into the
    next RMSNorm with the TP group on ``one_node``, no DP attention and at most ``AR_FUSION_MAX_TOKENS`` rows
    (``_AR``); the last layer's does not (``LAST_AR_SOURCE``): one kernel back."""
    ops = list(ops)
    if stage != "decode" or model != GLUE_MODEL or vendor != "nvidia":
        return 0
    if exchanges_all_to_all(ops):
        return 0
    path = gpu_path(hardware)
    fuse_ar = one_node and not dp_attention and rows <= AR_FUSION_MAX_TOKENS
    n = fused = 0
    for op in ops:
        for g in GLUE:
            if not op.name.endswith(g.suffix) or g.path not in ("both", path) or rows <= g.rows_over:
                continue
            if op.kind == "collective":
                if not (fuse_ar and op.calls):
                    continue
                fused += op.count
            n += g.kernels * op.count
    return n + (1 if fused else 0)


def exchanges_all_to_all(ops: Iterable) -> bool:
    """The step's MoE exchanges tokens by all-to-all (DeepEP's path): SGLang's plain-TP fusions and the glue read
    for the all-reduce MoE do not hold."""
    return any(op.kind == "collective" and op.collective == "all-to-all" and op.calls for op in ops)


def gpu_path(hardware: str) -> Literal["hopper", "blackwell"]:
    """The kernel path SGLang's code takes on ``hardware`` (a bundled NVIDIA spec name): SM100's or Hopper's."""
    return "blackwell" if hardware in BLACKWELL else "hopper"


def routed_call_kernels(hardware: str) -> int:
    """Kernels the term counts for one routed-MoE call of DeepSeek-V3 on ``hardware``: its two grouped GEMMs (w13,
    w2), their inputs' two quantizations and the glue inside the call (``GLUE`` at ``ROUTED_CALL``) -- what a
    measurement of the whole call (evidence/gpu_moe.yaml) stands for."""
    path = gpu_path(hardware)
    return 2 + 2 + sum(g.kernels for g in GLUE if g.suffix == ROUTED_CALL and g.path in ("both", path))


def _joined_suffixes(stage: str, all_to_all: bool) -> tuple[str, ...]:
    """The suffixes of the ops SGLang folds into a neighbour's kernel in ``stage`` (``JOINED``), once a step: an op
    joins where its name ends with one (str.endswith over the tuple)."""
    return tuple(j.suffix for j in JOINED if j.phase in ("both", stage) and not (j.tp_only and all_to_all))


def kernel_changes(ops: Iterable, stage: str) -> tuple[int, int]:
    """(op executions a step that launch no kernel of their own, activation-quantization kernels a step added) for
    ``ops`` (the step description's OpCost) in ``stage`` ('decode' or 'prefill'), as SGLang launches them."""
    ops = list(ops)
    suffixes = _joined_suffixes(stage, exchanges_all_to_all(ops))
    joined = quant = 0
    for op in ops:
        if op.kind in ("overhead", "collective"):
            continue
        if op.name.endswith(suffixes):
            joined += op.count
        elif op.kind in ("matmul", "grouped_matmul") and op.dtype in QUANTIZED_COMPUTE:
            quant += op.count
    return joined, quant
