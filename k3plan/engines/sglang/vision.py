"""DeepSeek-V4.1's vision tower as SGLang builds it (models/deepseek_v4.py DeepseekV4ForCausalLM.__init__): 0.5.21
builds it whatever --language-model-only says and refuses any MoE all-to-all with it; from 0.5.22 --language-model-only
drops it and MegaMoE on CUDA is allowed with it (sglang 0.5.21, 0.5.22 and 0.5.23 wheels). A serve command's reading
refuses what SGLang refuses (engines/sglang/serve.py v41_vision); a question without a command (fit on the stack) is
priced as the language model alone, as k3plan's launch line writes --language-model-only (engines/sglang/launch.py),
and says so where SGLang would refuse the same deployment without the flag (``plain_vision_refusal``)."""

from __future__ import annotations

from k3plan.engines.release import Release
from k3plan.engines.sglang.flags import SGLANG_A2A_DEFAULT
from k3plan.units import GiB

V41_VISION_LM_ONLY_FROM: Release = (0, 5, 22)
V41_VISION_AT = "DeepseekV4ForCausalLM.__init__ (self.vision = ViT(args))"
V41_ARCHITECTURE = "deepseek_v41"  # ModelSpec.architecture of the checkpoints whose tower this is


def v41_vision_refused(*, a2a: str, pp: int, amd: bool, old: bool) -> tuple[str, str] | None:
    """(SGLang's ValueError, the wheel it was read in) where DeepSeek-V4.1's vision tower, built, is refused at
    --pp-size ``pp`` and --moe-a2a-backend ``a2a`` on an AMD GPU or not, ``old``: a release before
    ``V41_VISION_LM_ONLY_FROM`` (0.5.21); None where SGLang starts with it."""
    allowed = a2a == "none" or (not old and a2a == "megamoe" and not amd)
    if pp == 1 and allowed:
        return None
    if old:
        return "V4.1 vision currently supports TP/EP/DP without CP, PP or MoE A2A", "sglang 0.5.21 wheel (PyPI)"
    return "V4.1 vision supports TP/EP/DP without CP or PP; MoE A2A requires CUDA MegaMoE", "sglang 0.5.22 wheel (PyPI)"


def plain_vision_refusal(
    *, architecture: str, tower_bytes: int, options: dict[str, str], pp: int, vendor: str
) -> str | None:
    """The warning of a question without a serve command on SGLang's stacks (Engine.vision_refusal): DeepSeek-V4.1 is
    priced as its language model alone, as k3plan's launch line runs it with --language-model-only; where SGLang, told
    nothing, builds the tower and refuses it at the stack's all-to-all (``options``' moe_a2a_backend, the stack's
    deepep by default) or at ``pp`` stages, it says so, the ValueError and that the fit is priced as
    --language-model-only (the tower's ``tower_bytes`` not counted). Read at the newest release (a GPU question that
    names none is read so); None for every other model or where SGLang starts with the tower."""
    if architecture != V41_ARCHITECTURE or not tower_bytes:
        return None
    a2a = options.get("moe_a2a_backend", SGLANG_A2A_DEFAULT)
    refused = v41_vision_refused(a2a=a2a, pp=pp, amd=vendor == "amd", old=False)
    if refused is None:
        return None
    text, at = refused
    asked = f"--moe-a2a-backend {a2a}" + (f" and --pp-size {pp}" if pp > 1 else "")
    return (
        f"DeepSeek-V4.1's vision tower: SGLang builds it unless --language-model-only, and with it refuses {asked} at "
        f"start ('ValueError: {text}', {at}, sglang/srt/models/deepseek_v4.py {V41_VISION_AT}); this fit is priced as "
        f"--language-model-only, the tower's {tower_bytes / GiB:.2f} GiB not counted (k3plan's launch line writes the "
        "flag); serving images needs --moe-a2a-backend "
        + ("none" if vendor == "amd" else "megamoe or none")
        + (" at one pipeline stage" if pp > 1 else "")
        + " (check it with fit --serve)"
    )
