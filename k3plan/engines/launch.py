"""Launch commands for a chosen configuration: ``vllm serve`` (GPU and TPU), SGLang's
``python -m sglang.launch_server`` and, for the JAX stack, MaxText's JetStream server. Each line is built in its
engine's folder (``engines/vllm/launch.py``, ``sglang/launch.py``, ``jax_native/launch.py``; tpu-inference's DP
attention in ``tpu_inference/launch.py``) over one ``LaunchConfig`` (``engines/launch_config.py``); this module
picks the line by the config's launcher and writes the file with every flag's source.

Every flag written is in ``FLAG_SOURCES`` with the engine file and class that defines it, read
from the engines' own argument definitions (tests fail if a flag is emitted without a citation):
- vLLM: vllm-project/vllm, vllm/engine/arg_utils.py, ``EngineArgs.add_cli_args`` (argument groups
  ParallelConfig / CacheConfig / SchedulerConfig / ModelConfig); KV dtypes from
  vllm/config/cache.py ``CacheDType``. tpu-inference runs under the same ``vllm serve`` CLI.
- SGLang: sgl-project/sglang, python/sglang/srt/server_args.py, ``ServerArgs`` (the flag is the
  field name with dashes: ``tp_size`` -> ``--tp-size``); KV dtypes from the ``kv_cache_dtype``
  field's choices.
- JAX: MaxText's JetStream server (AI-Hypercomputer/maxtext@e591f30c,
  src/maxtext/inference/maxengine/maxengine_server.py: ``pyconfig.initialize(sys.argv)``, a config file then
  key=value overrides), keys from src/maxtext/configs/base.yml (ici_*/dcn_* parallelism, max_target_length,
  max_prefill_predict_length, use_chunked_prefill, prefill_chunk_size, per_device_batch_size, dtype) and the model name from configs/types.py ModelName.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from k3plan.engines.flags import (  # noqa: F401  # FLAG_SOURCES ... are this module's names too
    FLAG_SOURCES,
    MAXTEXT,
    MAXTEXT_KV,
    MAXTEXT_MODEL_NAMES,
    MAXTEXT_SERVER,
    SGLANG,
    SGLANG_A2A,
    SGLANG_KV,
    TPU_INFERENCE_KV,
    VLLM,
    VLLM_KV,
    ci_serve_flags,
    engine_for_stack,
)
from k3plan.engines.jax_native.launch import JaxParams, jax_params, maxtext_command, maxtext_preamble  # noqa: F401
from k3plan.engines.launch_config import LaunchConfig, option_flags  # noqa: F401
from k3plan.engines.sglang.launch import sglang_command, sglang_mamba_cache_size  # noqa: F401
from k3plan.engines.tpu_inference.launch import tpu_sharding_strategy  # noqa: F401
from k3plan.engines.vllm.launch import vllm_command  # noqa: F401


def takes_state_slots(engine: str) -> bool:
    """Whether the launch line of ``engine`` (a launcher: "vllm", "sglang", "jax") sizes a KDA state pool by the
    slots a request holds (LaunchConfig.state_slots_per_request): SGLang's --max-mamba-cache-size alone."""
    return engine == "sglang"


def launch_command(cfg: LaunchConfig) -> str:
    """The engine's command line alone (no header, no sources), or the one-line K3PlanError of a configuration
    its engine cannot run as priced: what plan's launch check of every row asks (k3plan.plan.launchable)."""
    if cfg.engine == "jax":
        return maxtext_command(cfg)
    return vllm_command(cfg) if cfg.engine == "vllm" else sglang_command(cfg)


def launch_text(cfg: LaunchConfig) -> str:
    """The launch file's text: a header naming the plan, then the command (or parameters) for the
    stack's engine, each flag's source listed below it."""
    header = [
        f"# k3plan launch: {cfg.hardware}, stack {cfg.stack}, TP{cfg.tp} EP{cfg.ep} DP{cfg.dp} PP{cfg.pp}",
        "# derived from the plan; check it against your engine version before running",
        *(f"# WARNING: {r}" for r in cfg.refusals),
        "",
    ]
    # a command is a bash script (--emit launch run.sh; bash run.sh): it stops at the first failure and at an
    # unset variable, and a multi-host one names the variables each host sets before it runs
    lines = ["#!/usr/bin/env bash", "set -euo pipefail", *header]
    if cfg.engine == "sglang" and cfg.hosts > 1:
        lines += [
            f"# run on each of the {cfg.hosts} hosts, NODE_RANK 0 .. {cfg.hosts - 1}; HEAD_ADDR the address of rank 0",
            f': "${{NODE_RANK:?set NODE_RANK to the rank of this host, 0 .. {cfg.hosts - 1}}}"',
            ': "${HEAD_ADDR:?set HEAD_ADDR to the address of the host with NODE_RANK 0}"',
        ]
    if cfg.engine == "jax":
        cmd = maxtext_command(cfg)
        lines += [*maxtext_preamble(cfg), cmd]
        keys = {t.split("=", 1)[0] for t in shlex.split(cmd)[3:] if "=" in t}
        sources = {MAXTEXT_SERVER} | {FLAG_SOURCES["jax"][k] for k in keys if k in FLAG_SOURCES["jax"]}
    else:
        cmd = vllm_command(cfg) if cfg.engine == "vllm" else sglang_command(cfg)
        lines.append(cmd)
        cited = {**FLAG_SOURCES[cfg.engine], **option_flags(cfg)}
        cited.update(ci_serve_flags(cfg.stack))
        sources = {cited[t] for t in shlex.split(cmd) if t.startswith("--")}
        sources |= {cited[t.split("=", 1)[0]] for t in shlex.split(cmd) if t.split("=", 1)[0] in cited}
    lines += ["", "# flags defined in:"] + [f"#   {r}: {f} ({c})" for r, f, c in sorted(sources)]
    return "\n".join(lines) + "\n"


def write_launch(path: str | Path, cfg: LaunchConfig) -> Path:
    """Write ``launch_text(cfg)`` the one way k3plan writes files (k3plan.io_safe: atomic, a folder or a
    missing folder is a one-line error, a new file gets the permissions open() would give it)."""
    from k3plan.io_safe import write_text

    return write_text(Path(path), launch_text(cfg), label="--emit launch")
