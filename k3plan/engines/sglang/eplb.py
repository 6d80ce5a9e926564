"""SGLang's redundant experts (``--ep-num-redundant-experts`` R): each MoE layer holds E + R physical experts over
its MoE expert-parallel group, (E + R) / ep_size a rank (ep_size 1 without --ep-size: every rank holds the E + R
experts' TP shards), where the model's MoE adds R. The budget's weights hold them through ``Stack.expert_pad``, as
vLLM's (engines/vllm/eplb.py) do.

Read in the sglang 0.5.22 wheel (PyPI): srt/eplb/expert_location.py ExpertLocationMetadata._init_common
(``num_physical_experts = num_logical_experts + ep_num_redundant_experts``, ``assert num_physical_experts % ep_size
== 0``, ``num_local_physical_experts = num_physical_experts // ep_size``) and srt/models/deepseek_v2.py DeepseekV2MoE
(``num_experts = ... + ep_num_redundant_experts``: DeepSeek-V3 / R1 and Kimi-K2, DeepseekV3ForCausalLM; Kimi-K2.5 /
K2.6, whose language model it is; DeepSeek-V4 / V4.1, whose srt/models/deepseek_v4.py builds deepseek_v2.
DeepseekV2MoE). srt/models/kimi_k3.py and kimi_linear.py add none: refused there (what SGLang then holds was not read).
"""

from __future__ import annotations

from k3plan.engines.serve_values import physical_expert_share
from k3plan.errors import K3PlanError

EPLB_SOURCE = (
    "sglang 0.5.22 wheel (PyPI) srt/eplb/expert_location.py ExpertLocationMetadata._init_common (num_physical_experts "
    "= num_logical_experts + ep_num_redundant_experts, a multiple of ep_size) and srt/models/deepseek_v2.py "
    "DeepseekV2MoE (num_experts + ep_num_redundant_experts)"
)
# the model architectures (models/spec.py ModelSpec.architecture) whose SGLang MoE adds the redundant experts
REDUNDANT_EXPERTS_MODELS = frozenset({"deepseek_v3", "kimi_k2", "kimi_k25", "deepseek_v4", "deepseek_v41"})


def redundant_expert_pad(
    *,
    architecture: str,
    vendor: str,
    experts: int,
    redundant: int,
    tp: int,
    dp: int,
    ep: int | None,
    moe_backend: str | None = None,
) -> tuple[int, int, str] | None:
    """(num, den, why): a rank holds num / den of the experts' share without redundancy when SGLang adds ``redundant``
    physical experts to each MoE layer's ``experts`` over its MoE EP group (``ep``, the command's --ep-size; None:
    1). None where ``redundant`` is 0; a model whose SGLang MoE adds none, and SGLang's assertion (an uneven split),
    raise K3PlanError."""
    del vendor, tp, dp, moe_backend  # SGLang's rule reads the EP size alone
    if redundant <= 0:
        return None
    if architecture not in REDUNDANT_EXPERTS_MODELS:
        raise K3PlanError(
            f"--serve: --ep-num-redundant-experts {redundant}: SGLang's {architecture} model does not add them to its "
            "experts (the 0.5.22 wheel's that do: DeepSeek-V3 / R1 / V4 / V4.1, Kimi-K2 / K2.5 / K2.6), so what it "
            "holds was not read; remove it to price SGLang without"
        )
    size = ep or 1
    physical = experts + redundant
    share = physical_expert_share(experts, redundant, size)
    if share is None:
        raise K3PlanError(
            f"--serve: SGLang asserts num_physical_experts % ep_size == 0 ({experts} + {redundant} over ep_size {size}: "
            f"sglang 0.5.22 wheel, srt/eplb/expert_location.py); expected --ep-num-redundant-experts making {physical} "
            f"a multiple of {size}"
        )
    return (*share, f"{redundant} redundant experts: {share[0]} experts a rank over ep_size {size} ({EPLB_SOURCE})")
