"""Launch commands for a chosen configuration: ``vllm serve`` (GPU and TPU), SGLang's
``python -m sglang.launch_server`` and the JAX stack's parameters.

Every flag written is in ``FLAG_SOURCES`` with the engine file and class that defines it, read
from the engines' own argument definitions (tests fail if a flag is emitted without a citation):
- vLLM: vllm-project/vllm, vllm/engine/arg_utils.py, ``EngineArgs.add_cli_args`` (argument groups
  ParallelConfig / CacheConfig / SchedulerConfig / ModelConfig); KV dtypes from
  vllm/config/cache.py ``CacheDType``. tpu-inference runs under the same ``vllm serve`` CLI.
- SGLang: sgl-project/sglang, python/sglang/srt/server_args.py, ``ServerArgs`` (the flag is the
  field name with dashes: ``tp_size`` -> ``--tp-size``); KV dtypes from the ``kv_cache_dtype``
  field's choices.
- JAX: AI-Hypercomputer/maxtext, src/MaxText/configs/base.yml (ici_*/dcn_* parallelism,
  max_target_length, max_prefill_predict_length, per_device_batch_size); the KV dtype is
  k3plan's own jax-native stack parameter (MaxText has no fp8 KV key).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from k3plan.deploy.engines import (  # noqa: F401  # FLAG_SOURCES ... are this module's names too
    ENGINE_FOR_STACK,
    FLAG_SOURCES,
    MAXTEXT,
    SGLANG,
    SGLANG_A2A,
    SGLANG_KV,
    VLLM,
    VLLM_KV,
    engine_for_stack,
)
from k3plan.errors import K3PlanError


class LaunchConfig(BaseModel):
    """The chosen configuration, as the planner decided it."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    hardware: str
    platform: Literal["gpu", "tpu"]
    stack: str
    engine: Literal["vllm", "sglang", "jax"]
    model_path: str
    tp: int = Field(ge=1)
    ep: int = Field(1, ge=1)  # 1: experts not split over an EP axis
    dp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    hosts: int = Field(1, ge=1)
    max_model_len: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)  # vLLM token budget a step = SGLang chunked-prefill size
    max_num_seqs: int = Field(ge=1)  # the batch the plan sized memory for
    kv_dtype: Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]
    memory_fraction: float = Field(gt=0.0, le=1.0)
    dp_attention: bool = False
    # KDA state slots the engine's state pool holds a running request (Stack.state.slots_per_request); None:
    # the model has no recurrent state or the engine takes no pool size (SGLang: --max-mamba-cache-size)
    state_slots_per_request: int | None = Field(None, ge=1)
    trust_remote_code: bool = True
    # the stack's options chosen away from their defaults that the command does not already write
    # (--all2all-backend deepep_low_latency): (flag, value, (repository, file, symbol) that defines it); value ""
    # for a flag that takes none (--disable-radix-cache)
    engine_options: tuple[tuple[str, str, tuple[str, str, str]], ...] = ()

    @model_validator(mode="after")
    def _ep_fits(self) -> LaunchConfig:
        if self.ep not in (1, self.tp, self.tp * self.dp):
            raise ValueError(
                f"ep={self.ep}: experts go over the TP ranks or every TP x DP rank; "
                f"expected 1, {self.tp} or {self.tp * self.dp}"
            )
        return self


def vllm_command(cfg: LaunchConfig) -> str:
    """``vllm serve MODEL ...``; the same CLI drives vLLM on GPUs and tpu-inference on TPUs.

    vLLM has no EP size: ``--enable-expert-parallel`` puts experts over TP x DP ranks; DP attention
    is DP > 1 with expert parallelism on. ``--gpu-memory-utilization`` is the fraction of each
    device's memory the engine may take (CacheConfig); on TPU it is read the same way.
    """
    kv = _kv(cfg, VLLM_KV, "vLLM (vllm/config/cache.py CacheDType)")
    if cfg.ep > 1 and cfg.ep != cfg.tp * cfg.dp:
        raise K3PlanError(
            f"vLLM: --enable-expert-parallel puts experts over all TP x DP = {cfg.tp * cfg.dp} "
            f"ranks; ep={cfg.ep} cannot be expressed"
        )
    args = _env(cfg) + [
        "vllm",
        "serve",
        cfg.model_path,
        "--tensor-parallel-size",
        cfg.tp,
        "--pipeline-parallel-size",
        cfg.pp,
        "--data-parallel-size",
        cfg.dp,
    ]
    if cfg.ep > 1 or cfg.dp_attention:
        args.append("--enable-expert-parallel")
    args += [
        "--max-model-len",
        cfg.max_model_len,
        "--max-num-batched-tokens",
        cfg.max_num_batched_tokens,
        "--max-num-seqs",
        cfg.max_num_seqs,
        "--enable-chunked-prefill",
        "--kv-cache-dtype",
        kv,
        "--gpu-memory-utilization",
        f"{cfg.memory_fraction:.2f}",
    ]
    if cfg.hosts > 1 and cfg.tp * cfg.pp > 1:
        args += ["--distributed-executor-backend", "ray"]  # one engine over several hosts
    args += _options(cfg)
    if cfg.trust_remote_code:
        args.append("--trust-remote-code")
    return _join(args, engine="vllm", extra=_option_flags(cfg))


def sglang_command(cfg: LaunchConfig) -> str:
    """``python -m sglang.launch_server ...``; on several hosts each runs it with its own rank.

    SGLang's ``--tp-size`` counts every GPU of one server; with DP attention ``--dp-size`` splits
    attention into that many groups (attention TP = tp_size / dp_size) while experts and dense MLPs
    span all of them; without it ``--dp-size`` runs that many independent TP replicas.
    """
    if cfg.platform != "gpu":
        raise K3PlanError(
            f"SGLang launch for {cfg.hardware}: SGLang serves on GPUs; use --stack vllm-tpu or jax-native on a TPU"
        )
    kv = _kv(cfg, SGLANG_KV, "SGLang (ServerArgs.kv_cache_dtype choices)")
    if not cfg.dp_attention and cfg.ep > cfg.tp:
        raise K3PlanError(
            f"SGLang without DP attention: experts split over one replica's {cfg.tp} TP ranks; "
            f"ep={cfg.ep} needs DP attention"
        )
    tp_size = cfg.tp * cfg.dp if cfg.dp_attention else cfg.tp
    args = _env(cfg) + [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        cfg.model_path,
        "--tp-size",
        tp_size,
        "--dp-size",
        cfg.dp,
        "--ep-size",
        cfg.ep,
        "--pp-size",
        cfg.pp,
    ]
    if cfg.dp_attention:
        args.append("--enable-dp-attention")
        if SGLANG_A2A[0] not in _option_flags(cfg):  # priced as an all-to-all dispatch; SGLang's own default is none
            args += list(SGLANG_A2A)
    args += [
        "--context-length",
        cfg.max_model_len,
        "--chunked-prefill-size",
        cfg.max_num_batched_tokens,
        "--max-running-requests",
        cfg.max_num_seqs,
        "--kv-cache-dtype",
        kv,
        "--mem-fraction-static",
        # the figure priced, as written: SGLang's derived one has 3 digits (memory_hook.py rounds it), 0.875
        # stays 0.875 and a pinned 0.88 stays 0.88
        f"{cfg.memory_fraction:g}",
    ]
    if cfg.state_slots_per_request is not None:
        args += ["--max-mamba-cache-size", sglang_mamba_cache_size(cfg)]
    if cfg.hosts > 1:
        args += ["--nnodes", cfg.hosts, "--node-rank", "$NODE_RANK", "--dist-init-addr", "$HEAD_ADDR:5000"]
    args += _options(cfg)
    if cfg.trust_remote_code:
        args.append("--trust-remote-code")
    return _join(args, engine="sglang", extra=_option_flags(cfg))


def sglang_mamba_cache_size(cfg: LaunchConfig) -> int:
    """``--max-mamba-cache-size``: the KDA state slots the priced configuration holds, so that SGLang sizes
    its state (mamba) pool as k3plan priced it rather than by its default split (handle_max_mamba_cache:
    without the flag and with the radix cache on, mamba_full_memory_ratio 0.9 / 1.9 of the memory after
    the weights). A scheduler serves ceil(max_num_seqs / dp) of the sequences and holds
    ``state_slots_per_request`` slots each (init_memory caps its running requests at the size //
    calculate_mamba_ratio()); under DP attention SGLang divides the flag by dp_size, so it is given for all
    DP ranks (sgl-project/sglang@001ccef0 model_runner_kv_cache_mixin.py handle_max_mamba_cache)."""
    slots = cfg.state_slots_per_request or 1
    per_scheduler = -(-cfg.max_num_seqs // cfg.dp) * slots
    return per_scheduler * (cfg.dp if cfg.dp_attention else 1)


class JaxParams(BaseModel):
    """MaxText's parameter names (FLAG_SOURCES["jax"] cites each), in the launch file's order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ici_tensor_parallelism: int
    ici_expert_parallelism: int
    ici_data_parallelism: int
    ici_pipeline_parallelism: int
    dcn_data_parallelism: int
    max_target_length: int
    max_prefill_predict_length: int
    per_device_batch_size: int | float  # MaxText takes a fraction: a global batch under one sequence a device
    kv_cache_dtype: str

    def items(self) -> list[tuple[str, int | str]]:
        return [(k, getattr(self, k)) for k in type(self).model_fields]


def jax_params(cfg: LaunchConfig) -> JaxParams:
    """MaxText-style parameters for the JAX stack: parallel sizes over ICI within a slice, DP over
    DCN across slices (``hosts`` here counts slices when the stack runs multi-slice)."""
    if cfg.kv_dtype not in ("bf16", "fp8", "fp32"):
        raise K3PlanError(f"JAX stack: KV dtype {cfg.kv_dtype!r} is a vLLM layout; expected bf16, fp8 or fp32")
    return JaxParams(
        ici_tensor_parallelism=cfg.tp,
        ici_expert_parallelism=cfg.ep,
        ici_data_parallelism=cfg.dp,
        ici_pipeline_parallelism=cfg.pp,
        dcn_data_parallelism=1,
        max_target_length=cfg.max_model_len,
        max_prefill_predict_length=cfg.max_num_batched_tokens,
        per_device_batch_size=_per_device_batch(cfg.max_num_seqs, cfg.tp * cfg.dp * cfg.pp),
        kv_cache_dtype=cfg.kv_dtype,
    )


def _per_device_batch(seqs: int, devices: int) -> int | float:
    """MaxText's per_device_batch_size for ``seqs`` sequences in all: its global batch is
    per_device_batch_size x the devices (AI-Hypercomputer/maxtext, src/MaxText/configs/base.yml; a
    fraction under one, as its 1m_compile.sh's 0.0078125), so 8 sequences on 64 devices is 0.125 -- an
    int floor of at least 1 ran 64, eight times the KV the plan priced. An int when it divides."""
    return seqs // devices if seqs % devices == 0 else seqs / devices


def launch_text(cfg: LaunchConfig) -> str:
    """The launch file's text: a header naming the plan, then the command (or parameters) for the
    stack's engine, each flag's source listed below it."""
    header = [
        f"# k3plan launch: {cfg.hardware}, stack {cfg.stack}, TP{cfg.tp} EP{cfg.ep} DP{cfg.dp} PP{cfg.pp}",
        "# derived from the plan; check it against your engine version before running",
        "",
    ]
    # a command is a bash script (--emit launch run.sh; bash run.sh): it stops at the first failure and at an
    # unset variable, and a multi-host one names the variables each host sets before it runs
    script = ["#!/usr/bin/env bash", "set -euo pipefail"] if cfg.engine != "jax" else []
    lines = script + header
    if cfg.engine == "sglang" and cfg.hosts > 1:
        lines += [
            f"# run on each of the {cfg.hosts} hosts, NODE_RANK 0 .. {cfg.hosts - 1}; HEAD_ADDR the address of rank 0",
            f': "${{NODE_RANK:?set NODE_RANK to the rank of this host, 0 .. {cfg.hosts - 1}}}"',
            ': "${HEAD_ADDR:?set HEAD_ADDR to the address of the host with NODE_RANK 0}"',
        ]
    if cfg.engine == "jax":
        params = jax_params(cfg)
        lines += [f"{k}: {v}" for k, v in params.items()]
        sources = {FLAG_SOURCES["jax"][k] for k, _ in params.items()}
    else:
        cmd = vllm_command(cfg) if cfg.engine == "vllm" else sglang_command(cfg)
        lines.append(cmd)
        cited = {**FLAG_SOURCES[cfg.engine], **_option_flags(cfg)}
        sources = {cited[t] for t in shlex.split(cmd) if t.startswith("--")}
        sources |= {cited[t.split("=", 1)[0]] for t in shlex.split(cmd) if t.split("=", 1)[0] in cited}
    lines += ["", "# flags defined in:"] + [f"#   {r}: {f} ({c})" for r, f, c in sorted(sources)]
    return "\n".join(lines) + "\n"


def write_launch(path: str | Path, cfg: LaunchConfig) -> Path:
    """Write ``launch_text(cfg)`` the one way k3plan writes files (k3plan.io_safe: atomic, a folder or a
    missing folder is a one-line error, a new file gets the permissions open() would give it)."""
    from k3plan.io_safe import write_text

    return write_text(Path(path), launch_text(cfg), label="--emit launch")


def _kv(cfg: LaunchConfig, table: dict[str, str | None], engine: str) -> str:
    kv = table[cfg.kv_dtype]
    if kv is None:
        ok = ", ".join(k for k, v in table.items() if v)
        raise K3PlanError(f"KV dtype {cfg.kv_dtype!r}: not a {engine} KV cache dtype; expected one of {ok}")
    return kv


def _options(cfg: LaunchConfig) -> list[str]:
    """The options' command-line flags (an option whose "flag" is an environment variable, as
    vllm-tpu's MODEL_IMPL_TYPE, goes before the command: ``_env``)."""
    return [x for flag, value, _ in cfg.engine_options if flag.startswith("--") for x in (flag, value) if x != ""]


def _env(cfg: LaunchConfig) -> list[str]:
    return [f"{flag}={value}" for flag, value, _ in cfg.engine_options if not flag.startswith("--")]


def _option_flags(cfg: LaunchConfig) -> dict[str, tuple[str, str, str]]:
    """The stack options' flags, each with the engine code its stack YAML cites for it."""
    return {flag: src for flag, _, src in cfg.engine_options}


def _join(args: list, *, engine: str, extra: dict[str, tuple[str, str, str]] | None = None) -> str:
    for a in args:
        if isinstance(a, str) and a.startswith("--") and a not in FLAG_SOURCES[engine] and a not in (extra or {}):
            raise AssertionError(f"flag {a} has no cited source for this engine")  # a bug, not input
    # a variable is expanded by the shell, in double quotes (a value with a space stays one word)
    return " ".join(f'"{a}"' if isinstance(a, str) and a.startswith("$") else shlex.quote(str(a)) for a in args)
