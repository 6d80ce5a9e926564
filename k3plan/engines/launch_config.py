"""The configuration a launch line is written for (``LaunchConfig``) and what every command family's line is
built with: the engine's spelling of the KV dtype, the stack options' flags and environment, and the join that
refuses a flag written without a cited source (``FLAG_SOURCES``). The lines themselves are each engine's, in its
folder (k3plan.engines.vllm.launch, .sglang.launch, .jax_native.launch, .tpu_inference.launch); k3plan.engines.launch
picks one."""

from __future__ import annotations

import shlex
from typing import Literal

from k3plan.engines.engine import Launcher
from k3plan.engines.flags import FLAG_SOURCES
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen

# the fields pydantic's Field(ge=1) checked (a ValueError here, as its ValidationError was one)
_AT_LEAST_ONE = (
    "tp",
    "ep",
    "dp",
    "pp",
    "hosts",
    "slices",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "max_output_tokens",
    "state_slots_per_request",
    "expert_width",
)


class LaunchConfig(Frozen):
    """The chosen configuration, as the planner decided it."""

    hardware: str
    platform: Literal["gpu", "tpu"]
    stack: str
    engine: Launcher  # the command family (Engine.launcher_for the machine)
    # what the engine loads: a bundled model's Hugging Face id (k3plan.models.hub), else the folder of its config.json
    model_path: str
    tp: int
    ep: int = 1  # 1: experts not split over an EP axis
    dp: int = 1
    pp: int = 1
    hosts: int = 1
    slices: int = 1  # TPU slices (GPU scale-up domains) the devices span: Topology.slices
    max_model_len: int
    # vLLM token budget a step = SGLang chunked-prefill size, as the flag reads (SGLang DP attention: every DP
    # group's chunk, Stack.engine_chunk)
    max_num_batched_tokens: int
    max_num_seqs: int  # the batch the plan sized memory for
    # the tokens a request generates (plan's --osl; 1 when the workload names none, as plan's SLA targets take
    # it): the prompt is what the context leaves (MaxText sizes its prefill cache for it, jax_params)
    max_output_tokens: int = 1
    kv_dtype: Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]
    memory_fraction: float
    dp_attention: bool = False
    # tpu-inference's DP attention (Engine.tpu_dp_attention): one vllm serve over every device, the split written
    # as --additional-config's sharding_strategy (tpu_sharding_strategy), no --data-parallel-size
    tpu_dp_attention: bool = False
    # KDA state slots the engine's state pool holds a running request (Stack.state.slots_per_request); None:
    # the model has no recurrent state or the engine takes no pool size (SGLang: --max-mamba-cache-size)
    state_slots_per_request: int | None = None
    # the routed experts' FFN width (ModelSpec.moe.expert_intermediate): MaxText splits it over its tensor axis
    expert_width: int | None = None
    trust_remote_code: bool = True
    # the stack's options chosen away from their defaults that the command does not already write
    # (--all2all-backend deepep_low_latency): (flag, value, (repository, file, symbol) that defines it); value ""
    # for a flag that takes none (--disable-radix-cache)
    engine_options: tuple[tuple[str, str, tuple[str, str, str]], ...] = ()
    # what the engine's code refuses or cannot run for this model as priced (setup.engine_refusals): written
    # at the top of the file, so nobody runs it without reading them
    refusals: tuple[str, ...] = ()
    # the bundled model priced (k3plan's name): MaxText's model_name is looked up by it (None: model_path is)
    model: str | None = None
    # the model's architecture (ModelSpec.architecture): an engine that spells the KV dtype by it reads it (SGLang's
    # DeepseekV4ForCausalLM takes bfloat16, not bf16: engines/sglang/releases.py sglang_kv_flag); None: not known
    architecture: str | None = None

    @property
    def model_key(self) -> str:
        """The name MAXTEXT_MODEL_NAMES is keyed by: the bundled model, else what the command loads."""
        return self.model or self.model_path

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in _AT_LEAST_ONE:
            value = getattr(self, name)
            if value is not None and not value >= 1:
                raise ValueError(f"{name}={value}: expected an integer >= 1")
        if not 0.0 < self.memory_fraction <= 1.0:
            raise ValueError(f"memory_fraction={self.memory_fraction}: expected > 0 and <= 1")
        if self.ep not in (1, self.tp, self.tp * self.dp):
            raise ValueError(
                f"ep={self.ep}: experts go over the TP ranks or every TP x DP rank; "
                f"expected 1, {self.tp} or {self.tp * self.dp}"
            )
        if (self.tp * self.dp * self.pp) % self.slices:
            raise ValueError(
                f"slices={self.slices}: the {self.tp * self.dp * self.pp} devices (tp x dp x pp) do not split "
                "evenly over them; expected a divisor"
            )


def kv_spelling(cfg: LaunchConfig, table: dict[str, str | None], engine: str) -> str:
    kv = table[cfg.kv_dtype]
    if kv is None:
        ok = ", ".join(k for k, v in table.items() if v)
        raise K3PlanError(f"KV dtype {cfg.kv_dtype!r}: not a {engine} KV cache dtype; expected one of {ok}")
    return kv


def option_args(cfg: LaunchConfig) -> list[str]:
    """The options' command-line flags (an option whose "flag" is an environment variable, as
    tpu-inference's MODEL_IMPL_TYPE, goes before the command: ``_env``)."""
    return [x for flag, value, _ in cfg.engine_options if flag.startswith("--") for x in (flag, value) if x != ""]


def env_args(cfg: LaunchConfig) -> list[str]:
    return [f"{flag}={value}" for flag, value, _ in cfg.engine_options if not flag.startswith("--")]


def option_flags(cfg: LaunchConfig) -> dict[str, tuple[str, str, str]]:
    """The stack options' flags, each with the engine code its stack YAML cites for it."""
    return {flag: src for flag, _, src in cfg.engine_options}


def join_args(args: list, *, engine: str, extra: dict[str, tuple[str, str, str]] | None = None) -> str:
    for a in args:
        if isinstance(a, str) and a.startswith("--") and a not in FLAG_SOURCES[engine] and a not in (extra or {}):
            raise AssertionError(f"flag {a} has no cited source for this engine")  # a bug, not input
    # a variable is expanded by the shell, in double quotes (a value with a space stays one word)
    return " ".join(f'"{a}"' if isinstance(a, str) and a.startswith("$") else shlex.quote(str(a)) for a in args)
