"""How ``vllm serve`` reads its command line, as far as k3plan prices it: flag spellings (underscores, --no-X
switches), human-readable ints, the defaults it picks for what a command leaves out, and the launch-line flags
k3plan writes that the reader takes (--all2all-backend)."""

from __future__ import annotations

from k3plan.engines.serve_values import flag_int
from k3plan.errors import K3PlanError

# vLLM's own defaults for what a command leaves out (vllm-project/vllm@99d7eb5d vllm/engine/arg_utils.py
# EngineArgs._set_default_args, `vllm serve` = UsageContext.OPENAI_API_SERVER): a device of >= 70 GiB that is
# not an A100 gets max_num_batched_tokens 8192 and max_num_seqs 1024, any other 2048 and 256; max_num_seqs is
# min(that, max_num_batched_tokens). The torch_tpu plugin is an out-of-tree platform (PlatformEnum.OOT, so
# upstream's is_tpu() chip table does not apply) whose get_device_total_memory raises NotImplementedError
# (kowalski-4831/vllm-torchtpu@0095cdcb src/vllm_torchtpu/platforms/tpu_platform.py): device_memory 0, the
# small defaults
VLLM_DEFAULTS_SOURCE = (
    "vllm-project/vllm@99d7eb5d vllm/engine/arg_utils.py EngineArgs._set_default_args (OPENAI_API_SERVER: >= 70 GiB "
    "and not an A100: 8192 / 1024, else 2048 / 256)"
)
VLLM_LARGE_GPU_GIB = 70
# vLLM's switches (argparse BooleanOptionalAction: --X and --no-X, no value) that k3plan reads
VLLM_SWITCHES = {"--enable-expert-parallel", "--language-model-only"}


def human_readable_int(flag: str, value: str) -> int:
    """vLLM's reading of --max-model-len / --max-num-batched-tokens (vllm-project/vllm@99d7eb5d
    vllm/engine/arg_utils.py human_readable_int): 'k' / 'm' / 'g' are 10^3 / 10^6 / 10^9 (128k = 128,000, decimals
    allowed), 'K' / 'M' / 'G' are 2^10 / 2^20 / 2^30 (128K = 131,072, whole numbers only), else a plain int."""
    import re

    text = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG])", text)
    if m:
        number, suffix = m.groups()
        if suffix in "kmg":
            n = int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9}[suffix])
        elif "." in number:
            raise K3PlanError(
                f"--serve: {flag} {value!r}: decimals are not allowed with binary suffixes like {suffix} (vLLM's "
                f"human_readable_int); did you mean {number}{suffix.lower()}?"
            )
        else:
            n = int(number) * {"K": 2**10, "M": 2**20, "G": 2**30}[suffix]
        return flag_int(flag, str(n))
    return flag_int(flag, text)


def dashes(tok: str) -> str:
    """vLLM takes --max_model_len as --max-model-len: underscores in a flag's name, up to its first '.', read as
    dashes (vllm-project/vllm@00da11e3 vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args)."""
    if not tok.startswith("--"):
        return tok
    key, eq, value = tok.partition("=")
    head, dot, tail = key[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail + eq + value


def launch_flags(get, options: dict[str, str]) -> None:
    """Issue 48: vLLM's --all2all-backend (vllm/engine/arg_utils.py EngineArgs -> ParallelConfig.all2all_backend),
    the flag k3plan's launch lines write that the reading does not take: the vllm stack's all2all_backend option,
    which sets the MoE collectives priced."""
    a2a = get("--all2all-backend", None)
    if a2a is not None:
        options["all2all_backend"] = a2a


# vLLM refuses a --max-model-len above the length it derives from the config (max_position_embeddings and its
# kin, scaled by rope) before anything loads, unless the env var allows it (vllm-project/vllm@0052a5b8
# vllm/config/model.py _get_and_verify_max_len: "User-specified max_model_len (...) is greater than the derived
# max_model_len ...", raise ValueError unless envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN)
LONG_CONTEXT_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def long_context_refusal(context: int, model_max: int) -> str:
    return (
        f"--serve: --max-model-len {context:,} is above the model's {model_max:,} (max_position_embeddings): vLLM "
        f"refuses it at start (ValueError: User-specified max_model_len ({context}) is greater than the derived "
        f"max_model_len; vllm/config/model.py _get_and_verify_max_len) unless {LONG_CONTEXT_ENV}=1; expected at "
        f"most {model_max:,}"
    )
