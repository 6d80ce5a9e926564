"""vLLM's padding of a TP-split expert shard: without expert parallelism each rank holds every expert's
intermediate cut over the TP x DP ranks, and the model code (or its MoE backend) raises a shard's intermediate to a
floor and rounds it up to an alignment, by the model's rule (``MOE_SHARD_RULES``, each cited). One rule, read by the
budget's weights (``expert_shard_pad`` -> ``Stack.expert_pad``, applied in step/weight_budget.weight_terms) and by
the engine's sizing of a drafter's experts (engines/vllm/memory.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from k3plan.engines.vllm.dsv4_workspace import GFX942

# vLLM's Kimi-K3 NVIDIA model pads the MoE intermediate each TP shard holds up to a floor when the experts are
# TP-split (no expert parallelism): vllm-project/vllm#51124 (closed): at TP 16 and 32 3,072 / TP (192, 96) is
# raised to 256 a shard (a padded global of 4,096 / 8,192), so the experts take 120.5 GB a GPU at TP >= 16 and
# 180.8 GB at TP 8; #51131 (merged) skips the padding when expert parallelism is on (each rank holds whole
# experts). #50583 (open) would leave the padding to the MoE backend (marlin MXFP4: 128 a shard): not merged, not
# applied here.
K3_MOE_SHARD_FLOOR = 256
K3_MOE_PAD_SOURCE = (
    "vllm-project/vllm#51124 (Kimi-K3 MoE padding floor scales with TP: 3,072 / TP raised to 256 a shard, "
    "Mxfp4MoEMethod.create_weights) and #51131 (merged: no padding with --enable-expert-parallel)"
)
# Kimi-Linear: from 0.27.0 the model registry serves KimiLinearForCausalLM from vLLM's Kimi-K3 package
# (model_executor/models/registry.py: "vllm.models.kimi_k3"; vllm/models/kimi_k3/__init__.py picks nvidia/model.py, on
# ROCm amd/linear.py), whose KimiMoE applies the same floor, getattr(config, "min_moe_intermediate_per_partition",
# 256) -- Kimi-Linear's config.json names none -- to moe_intermediate_size // tp_size: Kimi-Linear's 1,024 / 8 = 128
# is held as 256 a shard at TP 8 (the experts twice their even share). nvidia/model.py skips it under
# --enable-expert-parallel; amd/linear.py tests tp_size > 1 alone (the EP case is not asked here: fit asks this rule
# only without expert parallelism). Before 0.27.0 model_executor/models/kimi_linear.py pads nothing (the 0.20.0-0.26.0
# wheels). Read in the 0.27.0, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.33.0 and 0.34.0 wheels (PyPI). Like Kimi-K3's, the
# floor is the model code's, on moe_intermediate_size // tp_size (the attention TP group: get_tensor_model_parallel_
# world_size), raising the global intermediate to 256 x tp_size; the FusedMoE then splits that over the flattened
# TP x DP ranks, so under DP > 1 a shard holds 256 x tp / (tp x dp) (``floor_tp`` in expert_shard_pad).
KIMI_LINEAR_PAD_FROM: tuple[int, int, int] = (0, 27, 0)
KIMI_LINEAR_PAD_SOURCE = (
    "vllm 0.27.0-0.34.0 wheels (PyPI): vllm/models/kimi_k3/nvidia/model.py KimiMoE.__init__ (padded_moe_intermediate_size "
    "= min_moe_intermediate_per_partition 256 x tp_size where moe_intermediate_size // tp_size is below it, without "
    "expert parallelism; amd/linear.py the same), served for KimiLinearForCausalLM by model_executor/models/registry.py"
)
# DeepSeek-V4.1's MXFP4 experts go to Mxfp4MoEMethod, whose oracle rounds the intermediate a TP shard holds up to its
# backend's alignment: 128 for the backends that run their activation, so a V4.1-Flash shard of 2,304 / 8 = 288 is
# held as 384 (+33%) and 2,304 / 4 = 576 as 640, on H200 and on SM100 alike. At the commits MXFP4_PAD_SOURCE cites
# TRTLLM took SWIGLUOAI only (V4.1's experts are clamped SiLU), leaving Marlin and FlashInfer CUTLASS; in the 0.30.0
# and 0.31.0 wheels (PyPI) select_deepseek_v4_mxfp4_moe_backend's CUDA list starts FLASHINFER_TRTLLM_MXFP4_MXFP8,
# DEEPGEMM_MXFP4, MARLIN, TrtLlmMxfp4ExpertsBase takes compute capability family 10 (sm_100 and sm_103 alike) and SiLU,
# and mxfp4_round_up_hidden_size_and_intermediate_size rounds the intermediate to 128 for all three (TRTLLM's 256 is
# the hidden size): another pick, the same bytes. No choice reads the shard's size, and the shuffled copies replace the
# loaded parameters (quantization/mxfp4.py Mxfp4MoEMethod._setup_kernel replace_parameter): one copy at 128, on B200 /
# GB200 / B300 / GB300 at TP 2, 4 and 8. DeepSeek-V4's own quantization path was not read (its shards at TP <= 8, 256
# and 384, need no rounding anyway)
MXFP4_SHARD_ALIGN = 128
# From 0.32.0 the oracle puts Humming ahead of Marlin on compute capability 9.0 (H100 / H20 / H200), whose own round-up
# is 64, but Humming's repack pads w13's N (2 x the shard) to 256 and w2's K (the shard) to 128, so the shard is held
# at the same multiple of 128, and its two workspaces are Marlin's M x top-k x max(K, 2N) (vllm 0.32.0 wheel (PyPI)
# model_executor/layers/fused_moe/oracle/mxfp4.py _get_priority_backends, quantization/utils/humming/moe.py
# _prepare_and_transform_sublayer pad_n_to_multiple=256 / pad_k_to_multiple=128, fused_moe/experts/fused_humming_moe.py
# get_buffer_metas; humming-kernels 0.1.17 schema/base.py get_padded_tensors_attrs; the same in 0.33.0 / 0.34.0)
MXFP4_PAD_SOURCE = (
    "vllm-project/vllm vllm/model_executor/layers/fused_moe/oracle/mxfp4.py @001eda31 "
    "mxfp4_round_up_hidden_size_and_intermediate_size (Marlin and FlashInfer CUTLASS: the intermediate rounded up to "
    "128); vllm/model_executor/layers/fused_moe/experts/trtllm_mxfp4_moe.py @029329a8 "
    "TrtLlmMxfp4ExpertsBase._supports_activation (SWIGLUOAI only); vllm/models/deepseek_v41/quant_config.py @579b425a "
    "DeepseekV4FP8Config.get_quant_method (the routed experts' Mxfp4MoEMethod)"
)
# the model code's architecture -> (the floor a shard is raised to, the multiple it is rounded up to, the GPU vendor
# the rule was read for ("": any), the source); ROCm's MXFP4 alignment (256) was not read against a log
MOE_SHARD_RULES: dict[str, tuple[int, int, str, str]] = {
    "kimi_k3": (K3_MOE_SHARD_FLOOR, 1, "", K3_MOE_PAD_SOURCE),
    "deepseek_v41": (0, MXFP4_SHARD_ALIGN, "nvidia", MXFP4_PAD_SOURCE),
}
# DeepSeek-V4's MXFP4 experts on gfx942 (MI300X, MI325X): vLLM's ROCm V4 selection prefers AITER_MXFP4_BF16, whose
# AiterExperts._supports_quant_scheme takes MXFP4 weights on gfx950 only, so they fall to TRITON_UNFUSED, and
# mxfp4_round_up_hidden_size_and_intermediate_size rounds a TP shard's intermediate up to 256 on ROCm (AITER with
# SiLU keeps 128: gfx950's 384 stays). Read in the 0.28.0 wheel (fused_moe/oracle/mxfp4.py, experts/
# rocm_aiter_moe.py); no log prints these weights (vllm-project/vllm#53961's available memory needs them).
ROCM_V4_MOE_SOURCE = (
    "vllm 0.28.0 wheel model_executor/layers/fused_moe/oracle/mxfp4.py (DeepSeek-V4 on ROCm: [AITER_MXFP4_BF16, "
    "TRITON_UNFUSED]; mxfp4_round_up_hidden_size_and_intermediate_size: ROCm rounds to 256 but AITER + SiLU) and "
    "experts/rocm_aiter_moe.py AiterExperts._supports_quant_scheme (MXFP4 weights on gfx950 only)"
)
MOE_SHARD_RULES_BY_HARDWARE: dict[tuple[str, str], tuple[int, int, str, str]] = {
    ("deepseek_v4", hw): (0, 256, "amd", ROCM_V4_MOE_SOURCE) for hw in GFX942
}
# From 0.31.0 the ROCm round-up keeps 128 for TRITON_UNFUSED before CDNA4 with a SiTU / SiLU activation ('matmul_ogs
# uses block_k=128 for MXFP4 on pre-CDNA4 GPUs': triton_uses_128), and V4's routed experts run SiLU (RoutedExperts'
# default activation; Mxfp4MoEMethod.maybe_roundup_sizes passes it): on gfx942 a shard is rounded to 128, so V4-Pro's
# 384 and V4-Flash's 256 at TP 8 are held as they are. Read in the 0.31.0 wheel (PyPI) model_executor/layers/
# fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size and model_executor/layers/quantization/
# mxfp4.py Mxfp4MoEMethod.maybe_roundup_sizes; absent from the 0.29.0 / 0.30.0 wheels, the same in 0.32.0-0.34.0
ROCM_V4_128_FROM = (0, 31, 0)
ROCM_V4_128_SOURCE = (
    "vllm 0.31.0 wheel (PyPI) model_executor/layers/fused_moe/oracle/mxfp4.py "
    "mxfp4_round_up_hidden_size_and_intermediate_size (ROCm: TRITON_UNFUSED before CDNA4 with SiTU / SiLU rounds to "
    "128, triton_uses_128) and quantization/mxfp4.py Mxfp4MoEMethod.maybe_roundup_sizes (activation=self.moe.activation,"
    " V4's SiLU)"
)
# DeepSeek-V4's MXFP4 experts on gfx950 (MI355X) before 0.28.0: --moe-backend aiter (and, unset, V4's ROCm priority)
# picks AITER_MXFP4_BF16, which mxfp4_round_up_hidden_size_and_intermediate_size does not name ahead of its ROCm
# branch, so a TP shard's intermediate is rounded up to 256 there as on gfx942: V4-Pro's 3,072 / 8 = 384 is held as
# 512 (+33% a device's routed experts). Read in the 0.26.0 and 0.27.0 wheels (PyPI); the 0.28.0 wheel keeps 128 for
# AITER with SiLU (ROCM_V4_MOE_SOURCE), which InferenceX's MI355X DeepSeek-V4 recipe credits to vllm-project/vllm#51473
# ("the mxfp4 oracle rounds inter_dim 384 up to 512", 160.66 GiB a rank at TP 1 / DP 8 on a nightly before it)
ROCM_V4_GFX950_UNTIL = (0, 28, 0)
ROCM_V4_GFX950_SOURCE = (
    "vllm 0.26.0 and 0.27.0 wheels (PyPI) model_executor/layers/fused_moe/oracle/mxfp4.py "
    "mxfp4_round_up_hidden_size_and_intermediate_size (ROCm: the intermediate rounded up to 256 for the backends the "
    "branches ahead of it do not name, AITER_MXFP4_BF16 among them) and select_deepseek_v4_mxfp4_moe_backend "
    "(--moe-backend aiter, or V4 on ROCm unset: AITER_MXFP4_BF16 first); models/deepseek_v4/quant_config.py "
    "get_quant_method (the routed experts' Mxfp4MoEMethod, whose maybe_roundup_sizes calls it); 128 for AITER with "
    "SiLU from 0.28.0"
)
# (architecture, hardware) -> (the first release it no longer holds, the rule before it): a rule a release dropped,
# ahead of the tables above for the releases before it (none where no release is named: the newest code)
MOE_SHARD_RULES_UNTIL: dict[tuple[str, str], tuple[tuple[int, int, int], tuple[int, int, str, str]]] = {
    ("deepseek_v4", "amd-mi355x"): (ROCM_V4_GFX950_UNTIL, (0, 256, "amd", ROCM_V4_GFX950_SOURCE)),
}
# (architecture, hardware) -> (the first release, the rule from it): a rule that changed in a release, ahead of the
# two tables above for that release and later
MOE_SHARD_RULES_FROM: dict[tuple[str, str], tuple[tuple[int, int, int], tuple[int, int, str, str]]] = {
    ("deepseek_v4", hw): (ROCM_V4_128_FROM, (0, 128, "amd", ROCM_V4_128_SOURCE)) for hw in GFX942
}


# DeepSeek-V4.1's MXFP4 experts on gfx942 under --moe-backend aiter: Mxfp4MoEMethod (the routed experts' method,
# models/deepseek_v41/quant_config.py DeepseekV4FP8Config.get_quant_method) takes select_deepseek_v4_mxfp4_moe_backend's
# explicit branch, which tries the alias's variants in order (map_mxfp4_backend 'aiter': AITER_MXFP4_BF16,
# AITER_TRITON_MXFP4_BF16, ...); AiterExperts takes MXFP4 weights on gfx950 only, so gfx942 gets
# AiterW4A16ExpertsMonolithic (AITER_TRITON_MXFP4_BF16: gfx942, SiLU, DeepSeek-V4 routing, no EP), which
# mxfp4_round_up_hidden_size_and_intermediate_size rounds to 256 on ROCm (its 128 is for AITER_MXFP4_BF16 and for
# TRITON_UNFUSED before CDNA4 only): V4.1-Flash's 2,304 / 4 = 576 is held as 768 a shard, 2,304 / 2 = 1,152 as 1,280.
# Read in the 0.31.0 wheel (PyPI); InferenceX's MI300X / MI325X arms name the kernel (SemiAnalysisAI/InferenceX@5f259819
# benchmarks/single_node/agentic/dsv41flash_fp4_mi325x_mtp.sh: 'naming aiter resolved to the Triton W4A16 kernel
# (AITER_TRITON_MXFP4_BF16)'). Without --moe-backend (or with triton_unfused) the selection's DeepSeek-V4 ROCm list
# (AITER_MXFP4_BF16, TRITON_UNFUSED: the V4.1 AMD model reuses V4's MoE, models/deepseek_v41/amd/model.py, with its
# sqrtsoftplus routing, fused_moe/config.py get_routing_method_type, and SiLU, fused_moe/layer.py FusedMoEFactory) falls
# to TRITON_UNFUSED on gfx942, which the same function rounds to 128 before CDNA4 with SiLU: 576 is held as 640.
ROCM_V41_AITER_FROM = (0, 31, 0)
# --moe-backend -> the alignment of a V4.1 shard on gfx942 (None: vLLM's own selection)
ROCM_V41_ALIGN_BY_BACKEND: dict[str | None, int] = {
    None: 128,
    "auto": 128,
    "triton_unfused": 128,
    "aiter": 256,
    "aiter_triton_mxfp4_bf16": 256,
}
ROCM_V41_AITER_SOURCE = (
    "vllm 0.31.0 wheel (PyPI) model_executor/layers/fused_moe/oracle/mxfp4.py select_deepseek_v4_mxfp4_moe_backend "
    "(an explicit --moe-backend: map_mxfp4_backend's variants in order), map_mxfp4_backend ('aiter': AITER_MXFP4_BF16, "
    "AITER_TRITON_MXFP4_BF16, ...) and mxfp4_round_up_hidden_size_and_intermediate_size (ROCm: 256 but for "
    "AITER_MXFP4_BF16 and pre-CDNA4 TRITON_UNFUSED); fused_moe/experts/rocm_aiter_moe.py AiterExperts."
    "_supports_quant_scheme (MXFP4 on gfx950 only), fused_moe/experts/aiter_mxfp4_w4a16_moe.py "
    "AiterW4A16ExpertsMonolithic (gfx942 / gfx950, SiLU, DeepseekV4 routing); quantization/mxfp4.py "
    "Mxfp4MoEMethod.maybe_roundup_sizes; models/deepseek_v41/quant_config.py DeepseekV4FP8Config.get_quant_method; "
    "unset or triton_unfused: the DeepSeek-V4 ROCm list [AITER_MXFP4_BF16, TRITON_UNFUSED] to TRITON_UNFUSED, 128 "
    "before CDNA4 with SiLU"
)


def padded_shard(*, intermediate: int, shards: int, floor: int, align: int, floor_tp: int | None = None) -> int:
    """The intermediate a shard holds: its own (``intermediate / shards``, the larger piece) raised to ``floor`` and
    rounded up to a multiple of ``align``, never below its own. ``floor_tp``: the model code applies the floor to
    ``intermediate // floor_tp`` (the attention TP size), raising the global intermediate to ``floor x floor_tp``
    before the MoE splits it over ``shards`` (Kimi's KimiMoE); None: the floor is a shard's."""
    if floor_tp is not None and floor:
        total = floor * floor_tp if floor_tp > 1 and intermediate // floor_tp < floor else intermediate
        local = -(-total // shards)
        return max(local, -(-local // align) * align)
    local = -(-intermediate // shards)
    return max(local, -(-local // align) * align, floor)


def expert_shard_pad(
    *,
    architecture: str,
    hardware: str,
    vendor: str,
    intermediate: int,
    shards: int,
    release: tuple[int, int, int] | None = None,
    moe_backend: str | None = None,
    tp: int | None = None,
    expert_parallel: bool = False,
    env: Mapping[str, str] | None = None,
    ep: int | None = None,
) -> tuple[int, int, str] | None:
    """(num, den, why): a device holds num / den of the experts' even share when vLLM TP-splits them over ``shards``
    ranks (no expert parallelism) and the model's rule pads a shard (``MOE_SHARD_RULES``, by release and hardware
    first: ``MOE_SHARD_RULES_FROM`` / ``MOE_SHARD_RULES_UNTIL`` for ``release``, the command's vLLM release; None: the code each rule cites); None
    where no rule applies or the shard needs no padding. num / den is the padded shard over the even one, as ints:
    (padded x shards, intermediate); ``moe_backend``: the command's --moe-backend (None: vLLM's selection), which picks
    the kernel, and so the alignment, of DeepSeek-V4.1's experts on gfx942 (``ROCM_V41_ALIGN_BY_BACKEND``); ``tp``: the
    attention TP size, on which Kimi's model code tests its floor (None: ``shards``, as at DP 1); ``expert_parallel``:
    whole experts a rank (--enable-expert-parallel), which only ROCm's Kimi model code still pads (``ROCM_KIMI_EP``);
    ``env`` / ``ep``: the command's environment and SGLang's --ep-size, which no vLLM rule here reads (SGLang's
    does: engines/sglang/moe_padding.py; vLLM's expert parallelism is ``expert_parallel``)."""
    del env, ep
    if expert_parallel:
        return _rocm_kimi_ep(architecture, intermediate, vendor=vendor, tp=tp or 1, release=release)
    if (
        architecture == "deepseek_v41"
        and hardware in GFX942
        and moe_backend in ROCM_V41_ALIGN_BY_BACKEND
        and (release is None or release >= ROCM_V41_AITER_FROM)
    ):
        align = ROCM_V41_ALIGN_BY_BACKEND[moe_backend]
        return _pad(intermediate, shards, (0, align, "amd", ROCM_V41_AITER_SOURCE), vendor)
    if architecture == "kimi_linear":  # its own model file before KIMI_LINEAR_PAD_FROM: no padding
        if release is not None and release < KIMI_LINEAR_PAD_FROM:
            return None
        return _pad(intermediate, shards, (K3_MOE_SHARD_FLOOR, 1, "", KIMI_LINEAR_PAD_SOURCE), vendor, tp or shards)
    since = MOE_SHARD_RULES_FROM.get((architecture, hardware))
    until = MOE_SHARD_RULES_UNTIL.get((architecture, hardware))
    rule = (
        (since[1] if since is not None and release is not None and release >= since[0] else None)
        or (until[1] if until is not None and release is not None and release < until[0] else None)
        or MOE_SHARD_RULES_BY_HARDWARE.get((architecture, hardware))
        or MOE_SHARD_RULES.get(architecture)
    )
    # Kimi-K3's floor is its model code's, on the attention TP size (KimiMoE, as Kimi-Linear's above)
    return _pad(intermediate, shards, rule, vendor, (tp or shards) if architecture == "kimi_k3" else None)


# ROCm's Kimi model code (vllm/models/kimi_k3/amd/linear.py KimiMoE.__init__, which amd/model.py's Kimi-K3 builds its
# language model from) tests tp_size > 1 alone: it raises moe_intermediate_size to 256 x tp_size under
# --enable-expert-parallel too, so a rank's whole experts are held at the padded width (nvidia/model.py skips it there).
# Read in the 0.28.0, 0.30.0, 0.31.0, 0.33.0 and 0.34.0 wheels (PyPI); the package from 0.27.0 (KIMI_LINEAR_PAD_FROM)
ROCM_KIMI_EP_SOURCE = (
    "vllm 0.28.0-0.34.0 wheels (PyPI): vllm/models/kimi_k3/amd/linear.py KimiMoE.__init__ (padded_moe_intermediate_size "
    "= 256 x tp_size where moe_intermediate_size // tp_size is below it, with or without expert parallelism)"
)


def _rocm_kimi_ep(
    architecture: str, intermediate: int, *, vendor: str, tp: int, release: tuple[int, int, int] | None
) -> tuple[int, int, str] | None:
    """expert_shard_pad under expert parallelism: ROCm's Kimi experts held whole at the padded width
    (``ROCM_KIMI_EP_SOURCE``); None elsewhere (whole experts, as stored)."""
    if architecture not in ("kimi_linear", "kimi_k3") or vendor != "amd" or tp <= 1 or intermediate <= 0:
        return None
    if release is not None and release < KIMI_LINEAR_PAD_FROM:
        return None
    total = padded_shard(intermediate=intermediate, shards=1, floor=K3_MOE_SHARD_FLOOR, align=1, floor_tp=tp)
    if total <= intermediate:
        return None
    why = (
        f"the experts whole under expert parallelism, their intermediate {intermediate:,} padded to {total:,} "
        f"(256 x TP {tp}; {ROCM_KIMI_EP_SOURCE})"
    )
    return total, intermediate, why


def _pad(
    intermediate: int,
    shards: int,
    rule: tuple[int, int, str, str] | None,
    vendor: str,
    floor_tp: int | None = None,
) -> tuple[int, int, str] | None:
    """expert_shard_pad's result for one rule (None: no rule, another vendor's, or no padding); ``floor_tp``: the
    TP size the model code tests its floor on (``padded_shard``)."""
    if rule is None or (rule[2] and rule[2] != vendor) or shards <= 1 or intermediate <= 0:
        return None
    floor, align, _, source = rule
    padded = padded_shard(intermediate=intermediate, shards=shards, floor=floor, align=align, floor_tp=floor_tp)
    if padded * shards <= intermediate:
        return None
    why = (
        f"the experts TP-split without expert parallelism: {intermediate:,} / {shards} padded to {padded} a shard "
        f"(x {padded * shards / intermediate:.3f}; {source})"
    )
    return padded * shards, intermediate, why
