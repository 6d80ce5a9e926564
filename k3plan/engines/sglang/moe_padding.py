"""SGLang's padding of a TP-split MXFP4 expert shard under AITER: on an AMD GPU with SGLANG_USE_AITER on, SGLang's
Mxfp4MoEMethod rounds the intermediate a rank holds up to a multiple of 256 -- 128 where SGLANG_AITER_K3_OPT is on
too -- before it creates the experts' weights and scales (the hidden size to a multiple of 256, which Kimi-K3's
routed-expert latent of 3,584 already is). Kimi-K3's MoE is the bundled model that reaches it: kimi_k3.py swaps its
compressed-tensors MXFP4 config for Mxfp4Config so the experts load through that method. At TP 8 a shard of
3,072 / 8 = 384 is held as 512 (+33% of the routed experts) without SGLANG_AITER_K3_OPT, 384 with it (SGLang's own
comment: "On K3 (TP8) the 256 default costs +33% mem (3072/8=384 -> 512)"). Under expert parallelism a rank holds
whole experts (3,072, a multiple of 256): no padding. Read by the budget's weights (``expert_shard_pad`` ->
``Stack.expert_pad``), as vLLM's shard padding is (engines/vllm/moe_padding.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from k3plan.engines.release import Release
from k3plan.engines.sglang.ep_moe_copy import AITER_ENV

K3_OPT_ENV = "SGLANG_AITER_K3_OPT"
# the first release with Kimi-K3 (srt/models/kimi_k3.py: none in the 0.5.16 wheel); the rule reads the same to 0.5.23
K3_FROM: Release = (0, 5, 17)
AITER_ALIGN = 256
K3_OPT_ALIGN = 128
PAD_SOURCE = (
    "sglang 0.5.17-0.5.23 wheels (PyPI), sglang/srt/layers/quantization/mxfp4.py (_use_aiter = "
    "get_bool_env_var('SGLANG_USE_AITER') and _is_hip; _aiter_k3_opt = _use_aiter and "
    "get_bool_env_var('SGLANG_AITER_K3_OPT'); Mxfp4MoEMethod.create_weights, the _use_aiter branch: _inter_align = "
    "128 if _aiter_k3_opt else 256, intermediate_size_per_partition_after_pad = round_up(intermediate_size_per_"
    "partition, _inter_align), hidden_size = round_up(hidden_size, 256), w13 / w2 and their scales at the padded "
    "sizes) and srt/models/kimi_k3.py (the MoE's compressed-tensors MXFP4 config replaced by Mxfp4Config)"
)
# the models whose routed experts SGLang loads through Mxfp4MoEMethod (kimi_k3.py's swap); others not read here
MXFP4_METHOD_MODELS = frozenset({"kimi_k3"})


def _on(env: Mapping[str, str], name: str) -> bool:
    """SGLang's get_bool_env_var (srt/utils): 'true' / '1', any case; anything else false."""
    return env.get(name, "false").lower() in ("true", "1")


def expert_shard_pad(
    *,
    architecture: str,
    hardware: str,
    vendor: str,
    intermediate: int,
    shards: int,
    release: Release | None = None,
    moe_backend: str | None = None,
    tp: int | None = None,
    expert_parallel: bool = False,
    env: Mapping[str, str] | None = None,
    ep: int | None = None,
) -> tuple[int, int, str] | None:
    """(num, den, why): a rank holds num / den of the experts' even share where SGLang TP-splits a Kimi-K3 MoE on an
    AMD GPU with SGLANG_USE_AITER on in the command's ``env`` and pads a shard to 256 (128 with SGLANG_AITER_K3_OPT);
    None elsewhere (another model, vendor or release, AITER off, or a shard already aligned). ``shards``: the ranks
    of the MoE's group (SGLang's --tp-size, TP x DP as fit reads a DP-attention command); ``ep``: the command's
    --ep-size (None: 1), which leaves each expert split over shards / ep ranks (moe_tp_size = tp_size / ep_size);
    ``expert_parallel`` is vLLM's switch, not SGLang's (its EP is ``ep``). ``release`` None: the code PAD_SOURCE cites."""
    del hardware, moe_backend, tp, expert_parallel  # the rule reads the vendor, the environment and the split alone
    env = env or {}
    if architecture not in MXFP4_METHOD_MODELS or vendor != "amd" or not _on(env, AITER_ENV):
        return None
    if release is not None and release < K3_FROM:
        return None
    align = K3_OPT_ALIGN if _on(env, K3_OPT_ENV) else AITER_ALIGN
    moe_tp = max(shards // (ep or 1), 1)
    shard = intermediate // moe_tp
    padded = -(-shard // align) * align
    if padded == shard:
        return None
    return (
        padded * moe_tp,
        intermediate,
        f"the MXFP4 experts' intermediate a rank holds rounded from {shard} up to {padded} (a multiple of {align} "
        f"under AITER{', SGLANG_AITER_K3_OPT on' if align == K3_OPT_ALIGN else ' without SGLANG_AITER_K3_OPT'}: "
        f"{PAD_SOURCE})",
    )
