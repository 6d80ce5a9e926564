"""vLLM's redundant experts (expert-parallel load balancing): ``--enable-eplb`` with ``num_redundant_experts`` R
(``--eplb-config '{"num_redundant_experts": R}'``, or the older ``--num-redundant-experts``) makes every MoE layer hold
E + R physical experts over its expert-parallel group, (E + R) / EP a rank, where the model's MoE passes R to its
FusedMoE. The budget's weights hold them through ``Stack.expert_pad`` (num / den of the experts' share), as they hold
a TP-split shard's padding (moe_padding.py): one weights figure for the budget, the engine's sizing and the step.

Read in the 0.9.2 and 0.33.0 wheels (PyPI):

- model_executor/layers/fused_moe/layer.py: ``global_num_experts = num_experts + num_redundant_experts``; with EPLB
  on and expert parallelism, a ``global_num_experts`` its EP ranks do not divide is refused ("EPLB currently only
  supports even distribution of experts across ranks"); R > 0 without EPLB is refused too;
- config/parallel.py ParallelConfig (0.33.0): EPLB needs ``enable_expert_parallel`` ("enable_expert_parallel must be
  True to use EPLB.") and a num_redundant_experts without EPLB is refused;
- the models that pass R to their experts (0.33.0): model_executor/models/deepseek_v2.py DeepseekV2MoE
  (``n_physical_experts = n_logical_experts + n_redundant_experts``: DeepSeek-V3 / R1 and Kimi-K2, whose
  architecture is DeepseekV3ForCausalLM, and Kimi-K2.5 / K2.6, whose language model is), models/deepseek_v4/nvidia/
  model.py (DeepSeek-V4 on CUDA; its ROCm model passes none) and models/deepseek_v41/{nvidia,amd}/model.py. Kimi-K3's
  and Kimi-Linear's models pass none: refused there (what vLLM then holds was not read). DeepSeek-V4's MegaMoE layers
  (``--moe-backend deep_gemm_mega_moe``) are not registered with EPLB (vllm-project/vllm#44038: "Only FusedMoE-backed
  layers are registered in moe_layers; MegaMoE layers are excluded"): no state priced, redundant experts refused.
"""

from __future__ import annotations

from k3plan.engines.serve_values import physical_expert_share
from k3plan.engines.vllm.mega_moe import MEGA_MOE_BACKEND
from k3plan.errors import K3PlanError

EPLB_SOURCE = (
    "vllm 0.33.0 wheel (PyPI) model_executor/layers/fused_moe/layer.py (global_num_experts = num_experts + "
    "num_redundant_experts, an even split over the EP ranks required), model_executor/models/deepseek_v2.py "
    "DeepseekV2MoE n_physical_experts (the same in the 0.9.2 wheel)"
)
# the model architectures (models/spec.py ModelSpec.architecture) whose vLLM MoE passes num_redundant_experts to its
# experts, by GPU vendor ("": any), read in the 0.33.0 wheel (the module docstring)
REDUNDANT_EXPERTS_BY_MODEL: dict[str, str] = {
    "deepseek_v3": "",
    "kimi_k2": "",
    "kimi_k25": "",
    "deepseek_v4": "nvidia",
    "deepseek_v41": "",
}


def _takes_eplb(architecture: str, vendor: str, moe_backend: str | None) -> bool:
    """Whether the model's vLLM MoE registers with EPLB (``REDUNDANT_EXPERTS_BY_MODEL``; MegaMoE layers never)."""
    wanted = REDUNDANT_EXPERTS_BY_MODEL.get(architecture)
    return wanted is not None and (not wanted or wanted == vendor) and moe_backend != MEGA_MOE_BACKEND


def redundant_expert_pad(
    *,
    architecture: str,
    vendor: str,
    experts: int,
    redundant: int,
    tp: int,
    dp: int,
    ep: int | None = None,
    moe_backend: str | None = None,
) -> tuple[int, int, str] | None:
    """(num, den, why): a rank holds num / den of the experts' share without redundancy when vLLM's EPLB adds
    ``redundant`` physical experts to each MoE layer's ``experts`` over its EP group, ``tp`` x ``dp`` ranks (``ep``,
    another engine's EP size, is not vLLM's: unread): (E + R) / EP
    experts a rank over the ceil(E / EP) the share holds. None where ``redundant`` is 0 (EPLB on without copies:
    the split is still checked) or the model's MoE takes no EPLB and none are asked. vLLM's own refusal (an uneven
    split) and redundant experts for a model whose vLLM code passes none raise K3PlanError."""
    del ep
    ep = tp * dp  # vLLM's EP group spans the TP x DP ranks (FusedMoEParallelConfig.make)
    supported = _takes_eplb(architecture, vendor, moe_backend)
    if redundant <= 0 and not supported:
        return None  # the model's MoE takes no EPLB: nothing added, nothing refused
    if not supported:
        raise K3PlanError(
            f"--serve: {redundant} redundant experts (EPLB num_redundant_experts): vLLM's {architecture} model on "
            f"{vendor or 'this GPU'}{' with ' + MEGA_MOE_BACKEND if moe_backend == MEGA_MOE_BACKEND else ''} does not "
            "pass them to its experts (the 0.33.0 wheel's models that do: DeepSeek-V3 / R1, Kimi-K2 / K2.5 / K2.6, "
            "DeepSeek-V4 on NVIDIA, DeepSeek-V4.1; MegaMoE layers none), so what it holds was not read; remove them "
            "to price vLLM without"
        )
    physical = experts + redundant
    share = physical_expert_share(experts, redundant, ep)
    if share is None:
        raise K3PlanError(
            f"--serve: vLLM refuses {experts} experts + {redundant} redundant over {ep} expert-parallel ranks: 'EPLB "
            "currently only supports even distribution of experts across ranks' (vllm 0.33.0 wheel, "
            f"model_executor/layers/fused_moe/layer.py); expected num_redundant_experts making {physical} a multiple "
            f"of {ep}"
        )
    if redundant <= 0:
        return None
    return (*share, f"{redundant} redundant experts: {share[0]} experts a rank over {ep} EP ranks ({EPLB_SOURCE})")


# vLLM's EPLB state a model adds at load (inside the load's measurement, so in the weights vLLM logs): read in the
# 0.33.0 wheel, distributed/eplb/eplb_state.py EplbState.add_model
EPLB_STATE_SOURCE = (
    "vllm 0.33.0 wheel (PyPI) distributed/eplb/eplb_state.py EplbState.add_model: expert_buffer (torch.empty_like of "
    "the first MoE layer's expert weights), logical_to_physical_map [layers, experts, MAX_EXPERT_REDUNDANCY + 1 = "
    "1024] int64, logical_replica_count and last_expert_load [layers, experts] int64, physical_to_logical_map "
    "[layers, experts + redundant] int64, expert_load_pass [layers, experts + redundant] int32, expert_load_window "
    "[window_size, layers, experts + redundant] int32 (EPLBConfig.window_size, 1000 by default); added within "
    "GPUModelRunner.load_model's memory measurement, once for the target and once for an MoE drafter"
)
MAX_EXPERT_REDUNDANCY = 1023  # eplb_state.py: logical_to_physical_map holds MAX_EXPERT_REDUNDANCY + 1 slots an expert
EPLB_WINDOW_DEFAULT = 1000  # config/parallel.py EPLBConfig.window_size


def eplb_state_bytes(*, layers: int, experts: int, redundant: int, window: int, layer_expert_bytes: int) -> int:
    """The device bytes of one model's EPLB state (``EPLB_STATE_SOURCE``): ``layers`` MoE layers of ``experts``
    logical experts with ``redundant`` copies, a load window of ``window`` steps, and ``layer_expert_bytes``, one MoE
    layer's expert weights as the rank holds them (the transfer buffer is their empty_like)."""
    physical = experts + redundant
    maps = layers * experts * (MAX_EXPERT_REDUNDANCY + 1) * 8 + 2 * layers * experts * 8 + layers * physical * 8
    loads = layers * physical * 4 + window * layers * physical * 4
    return layer_expert_bytes + maps + loads


def eplb_state(
    *,
    architecture: str,
    vendor: str,
    eplb: tuple[int, int] | None,
    moe_layers: int,
    experts: int,
    layer_expert_bytes: int,
    drafter_moe_layers: int = 0,
    moe_backend: str | None = None,
) -> tuple[int, str] | None:
    """(bytes, how): the EPLB state vLLM adds within the load's measurement for a command with ``eplb`` (redundant
    experts, window), the target's and an MoE drafter's (``drafter_moe_layers``; its experts split as the target's);
    None where EPLB is off or the model's MoE takes none (``REDUNDANT_EXPERTS_BY_MODEL``)."""
    if eplb is None or not _takes_eplb(architecture, vendor, moe_backend) or moe_layers <= 0:
        return None
    redundant, window = eplb
    total = 0
    for layers in (moe_layers, drafter_moe_layers):
        if layers > 0:
            total += eplb_state_bytes(
                layers=layers,
                experts=experts,
                redundant=redundant,
                window=window,
                layer_expert_bytes=layer_expert_bytes,
            )
    return total, (
        f"{total:,} B: the EPLB state ({moe_layers} MoE layers"
        + (f" and the drafter's {drafter_moe_layers}" if drafter_moe_layers else "")
        + f", window {window}; a layer's experts as the transfer buffer; {EPLB_STATE_SOURCE})"
    )
