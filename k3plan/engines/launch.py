"""Launch commands for a chosen configuration: ``vllm serve`` (GPU and TPU), SGLang's
``python -m sglang.launch_server`` and, for the JAX stack, MaxText's JetStream server.

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
from typing import Literal

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
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen, fields

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
    engine: Literal["vllm", "sglang", "jax"]
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


def vllm_command(cfg: LaunchConfig) -> str:
    """``vllm serve MODEL ...``; the same CLI drives vLLM on GPUs and tpu-inference on TPUs.

    vLLM has no EP size: ``--enable-expert-parallel`` puts experts over TP x DP ranks; DP attention
    is DP > 1 with expert parallelism on. ``--gpu-memory-utilization`` is the fraction of each
    device's memory the engine may take (CacheConfig); on TPU it is read the same way.
    """
    kv = (
        _kv(cfg, TPU_INFERENCE_KV, "tpu-inference (tpu_inference/utils.py to_jax_dtype)")
        if cfg.platform == "tpu"
        else _kv(cfg, VLLM_KV, "vLLM (vllm/config/cache.py CacheDType)")
    )
    if cfg.tpu_dp_attention:
        return _tpu_dp_attention_command(cfg, kv)
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
    extra = _option_flags(cfg)
    ci = ci_serve_flags(cfg.stack)
    if ci:
        # the plugin's K3 CI passes these: the vision tower is not loaded (k3plan prices the text model), and with
        # EP each rank streams only its experts' bytes from the checkpoint (host RAM at load, not HBM)
        args.append("--language-model-only")
        if cfg.ep > 1:
            args.append("--enable-ep-weight-filter")
        extra = {**extra, **ci}
    return _join(args, engine="vllm", extra=extra)


def tpu_sharding_strategy(cfg: LaunchConfig) -> dict[str, bool | int]:
    """tpu-inference's additional_config sharding_strategy for k3plan's (tp, dp, ep) under DP attention
    (vllm-project/tpu-inference@811f8e20 tpu_inference/layers/common/sharding.py
    ShardingConfigManager.from_vllm_config; the mesh (data, attn_dp, attn_dp_expert, expert, model, dcp, pcp),
    tpu_runner.py _create_single_slice_mesh). tp 1 with the experts over every device: tensor_parallelism 1
    and expert_parallelism = the devices (attn_dp 1, attn_dp_expert = every device, model 1); tp > 1 with the
    experts over TP: attn_dp_size = dp of --tensor-parallel-size = the devices (attn_dp = dp, model = tp, the
    expert axis 1). Anything else (pp > 1, another ep) has no such launch: a one-line error."""
    devices = cfg.tp * cfg.dp
    if cfg.pp != 1:
        raise K3PlanError(f"tpu-inference DP attention: pp={cfg.pp}: k3plan writes no pipeline for it; expected pp 1")
    if cfg.tp == 1 and cfg.ep == devices:
        return {"enable_dp_attention": True, "tensor_parallelism": 1, "expert_parallelism": devices}
    if cfg.tp > 1 and cfg.dp > 1 and cfg.ep == cfg.tp:
        return {"enable_dp_attention": True, "attn_dp_size": cfg.dp}
    raise K3PlanError(
        f"tpu-inference DP attention: tp={cfg.tp} ep={cfg.ep} dp={cfg.dp}: expected tp 1 with ep {devices} "
        "(the experts over every device) or tp > 1, dp > 1 with ep = tp"
    )


def _tpu_dp_attention_command(cfg: LaunchConfig, kv: str) -> str:
    """``vllm serve`` for tpu-inference's DP attention: --tensor-parallel-size counts every device (the
    worker takes sharding_config.total_devices of them) and the split goes in --additional-config
    (tpu_sharding_strategy); --max-num-seqs and --max-num-batched-tokens are a DP rank's (tpu_runner.py: the
    total number of requests is dp_size x max_num_seqs; DPScheduler: per-rank limits), so the plan's sequences
    are divided over the DP groups."""
    import json

    devices = cfg.tp * cfg.dp
    strategy = json.dumps({"sharding": {"sharding_strategy": tpu_sharding_strategy(cfg)}})
    args = _env(cfg) + [
        "vllm",
        "serve",
        cfg.model_path,
        "--tensor-parallel-size",
        devices,
        "--additional-config",
        strategy,
        "--max-model-len",
        cfg.max_model_len,
        "--max-num-batched-tokens",
        cfg.max_num_batched_tokens,
        "--max-num-seqs",
        -(-cfg.max_num_seqs // cfg.dp),
        "--enable-chunked-prefill",
        "--kv-cache-dtype",
        kv,
        "--gpu-memory-utilization",
        f"{cfg.memory_fraction:.2f}",
    ]
    if cfg.hosts > 1:
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
            f"SGLang launch for {cfg.hardware}: SGLang serves on GPUs; use --stack torchtpu-vllm or jax-native on a TPU"
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


def takes_state_slots(engine: str) -> bool:
    """Whether the launch line of ``engine`` (a launcher: "vllm", "sglang", "jax") sizes a KDA state pool by the
    slots a request holds (LaunchConfig.state_slots_per_request): SGLang's --max-mamba-cache-size alone."""
    return engine == "sglang"


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


class JaxParams(Frozen):
    """MaxText's config keys the launch overrides (FLAG_SOURCES["jax"] cites each), in the command's order.

    The mesh: MaxText multiplies the ici_* axes into the devices of one slice and the dcn_* axes into the slices
    (src/maxtext/utils/maxtext_utils.py create_device_mesh -> max_utils.fill_unspecified_mesh_axes, which
    asserts "Number of devices per slice N does not match the product of the ICI parallelism M" and the same of
    the slices over DCN). base.yml leaves ici_fsdp_parallelism and dcn_data_parallelism at -1 (filled with what
    the others leave): both are written, so the file holds the whole mesh; its other axes are 1 in base.yml."""

    ici_data_parallelism: int
    ici_fsdp_parallelism: int
    ici_tensor_parallelism: int
    ici_expert_parallelism: int
    dcn_data_parallelism: int
    dcn_tensor_parallelism: int
    dcn_expert_parallelism: int
    max_target_length: int
    max_prefill_predict_length: int
    use_chunked_prefill: bool
    prefill_chunk_size: int
    per_device_batch_size: int | float  # MaxText takes a fraction: a global batch under one sequence a device
    dtype: str  # MaxText's activation dtype, which its KV cache is held in

    def items(self) -> list[tuple[str, int | str]]:
        return [(k, getattr(self, k)) for k in fields(self)]


def jax_params(cfg: LaunchConfig) -> JaxParams:
    """The MaxText mesh and serving keys that run the priced split, or a one-line K3PlanError for a split
    MaxText cannot run as priced (AI-Hypercomputer/maxtext@e591f30c):

    - attention heads, dense MLP and vocabulary split over MaxText's ``tensor`` axis (base.yml logical_axis_rules:
      heads, mlp, vocab -> tensor): tp is the tensor axis, over all the devices, ICI within a slice and DCN across
      slices (dcn_tensor_parallelism, as the plan priced TP over the slices' link).
    - experts: MaxText shards the expert dimension only over its ``expert`` axis ('exp' -> expert; layers/moe.py
      RoutedMoE: wi/wo kernels ("exp", "embed_moe", "mlp_moe"), get_expert_parallelism_size reads the expert axis)
      and each expert's FFN width over ``tensor`` (mlp_moe -> tensor). An expert axis beside tp would multiply
      the devices (the old file's TP16 x EP64 x DP4 = 4,096 on 64); with expert 1 each device holds 1/tp of every
      expert, the bytes the plan priced for ep = tp experts whole (the width must divide: refused if not).
      MaxText's own Kimi K2 decode is this mesh (tests/end_to_end/tpu/kimi/Run_Kimi.md: ici_tensor_parallelism=128).
    - dp > 1: refused. MaxText keeps every sequence's KV cache on each device (base.yml: cache_batch and, for MLA,
      layers/attention_mla.py's (cache_batch, cache_sequence, cache_heads_none, cache_kv) map to no mesh axis),
      where jax-native splits it over dp (kv_cache.split_across_dp); and its expert axis would also shard the
      attention weights (embed -> ... expert), which jax-native holds whole on each DP group.
    - pp > 1: refused. MaxText's pipeline (layers/pipeline.py) runs the training schedule of microbatches and
      holds no KV cache.
    - prompts: max_prefill_predict_length is the longest prompt, not a chunk: JetStream pads a prompt to it and
      keeps only its last max_prefill_predict_length tokens (AI-Hypercomputer/JetStream@acd4f5ad
      jetstream/core/orchestrator.py _process_prefill_content -> engine/token_utils.py pad_tokens), and MaxText's
      KV cache holds it as a prefill part of that length plus an autoregressive part of max_target_length minus
      it, refusing an empty one (inference/kvcache.py KVCache _initialize_prefill_caches /
      _initialize_ar_cache_vars). So it is the context less the generated tokens; the priced chunk is MaxText's
      prefill_chunk_size with use_chunked_prefill (types.py; JetStream's prefill thread splits a prompt of at least
      a chunk into chunks padded to the chunk, engine/chunked_prefill.py, each a MaxEngine.prefill with
      existing_prefix). A chunk is written whole into the prefill cache (kvcache.py kv_cache_chunked_prefill
      asserts previous + chunk <= max_prefill_length), so a prompt of a chunk or more is rounded down to whole
      chunks: the longest prompt MaxText then prefills without failing that assert.
    """
    kv = _kv(cfg, MAXTEXT_KV, "MaxText (its KV cache is in the activation dtype, or int8/int4)")
    if cfg.pp > 1:
        raise K3PlanError(
            f"MaxText launch: pp {cfg.pp} cannot be expressed (MaxText's pipeline, layers/pipeline.py, is a "
            "training schedule and holds no KV cache); expected pp 1"
        )
    if cfg.dp > 1:
        raise K3PlanError(
            f"MaxText launch: dp {cfg.dp} cannot be expressed (MaxText holds every sequence's KV cache on each "
            "device, base.yml cache_batch -> no mesh axis, where the plan splits it over dp); expected dp 1"
        )
    if cfg.expert_width is not None and cfg.expert_width % cfg.tp:
        raise K3PlanError(
            f"MaxText launch: tp {cfg.tp} does not divide the experts' FFN width {cfg.expert_width} (MaxText splits "
            "it over the tensor axis, mlp_moe -> tensor); expected a tp that divides it"
        )
    prompt = cfg.max_model_len - cfg.max_output_tokens
    if prompt < 1:
        raise K3PlanError(
            f"MaxText launch: context {cfg.max_model_len} leaves no prompt after {cfg.max_output_tokens} generated "
            "tokens (MaxText's KV cache is the prompt's part plus the generated part); expected a longer context"
        )
    chunk = cfg.max_num_batched_tokens
    longest = prompt if prompt < chunk else prompt // chunk * chunk
    per_slice = cfg.tp // cfg.slices  # dp = pp = 1: tp is every device (LaunchConfig: slices divide them)
    return JaxParams(
        ici_data_parallelism=1,
        ici_fsdp_parallelism=1,
        ici_tensor_parallelism=per_slice,
        ici_expert_parallelism=1,
        dcn_data_parallelism=1,
        dcn_tensor_parallelism=cfg.slices,
        dcn_expert_parallelism=1,
        max_target_length=cfg.max_model_len,
        max_prefill_predict_length=longest,
        use_chunked_prefill=True,
        prefill_chunk_size=chunk,
        per_device_batch_size=_per_device_batch(cfg.max_num_seqs, cfg.tp * cfg.dp * cfg.pp),
        dtype=kv,
    )


def maxtext_command(cfg: LaunchConfig) -> str:
    """``python3 -m maxtext.inference.maxengine.maxengine_server CONFIG key=value ...``, run from a MaxText
    checkout (its maxengine_server_entrypoint.sh runs the same module on base.yml). A model MaxText ships is
    named (model_name, on base.yml); another needs a MaxText config file that defines it, $MAXTEXT_CONFIG."""
    params = jax_params(cfg)
    name = MAXTEXT_MODEL_NAMES.get(cfg.model_key)
    args: list = ["python3", "-m", "maxtext.inference.maxengine.maxengine_server"]
    if name is None:
        args.append("$MAXTEXT_CONFIG")
    else:
        args += ["${MAXTEXT_CONFIG:-src/maxtext/configs/base.yml}", f"model_name={name}"]
    args += [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items()]
    for a in args[3:]:
        key = a.split("=", 1)[0]
        if not a.startswith("$") and key not in FLAG_SOURCES["jax"]:
            raise AssertionError(f"key {key} has no cited source for MaxText")  # a bug, not input
    return " ".join(f'"{a}"' if a.startswith("$") else shlex.quote(a) for a in args)


def maxtext_preamble(cfg: LaunchConfig) -> list[str]:
    """The comment lines that say what MaxText will build from the command, and the check that stops a model
    MaxText does not ship before it runs without its config file."""
    p = jax_params(cfg)
    whole = (
        ", rounded down to whole chunks"
        if p.max_prefill_predict_length != cfg.max_model_len - cfg.max_output_tokens
        else ""
    )
    how = (
        f"prefilled in chunks of {p.prefill_chunk_size:,} (the priced chunk)"
        if p.max_prefill_predict_length >= p.prefill_chunk_size
        else f"each prefilled whole (under the priced chunk of {p.prefill_chunk_size:,}, JetStream does not chunk it)"
    )
    lines = [
        f"# MaxText mesh: tensor {p.ici_tensor_parallelism} (ICI, the devices of a slice) x {p.dcn_tensor_parallelism}"
        f" (DCN, the slices) = TP{cfg.tp}; every other ici_*/dcn_* axis 1",
        f"# experts: MaxText's expert axis 1 ('exp' -> expert), each expert's FFN width over tensor (mlp_moe -> "
        f"tensor): 1/{cfg.tp} of every expert a device, the bytes priced for EP{cfg.ep}",
        f"# prompts up to {p.max_prefill_predict_length:,} tokens (the context {cfg.max_model_len:,} less "
        f"{cfg.max_output_tokens:,} generated{whole}), {how}; JetStream keeps only the last "
        f"{p.max_prefill_predict_length:,} tokens of a longer one",
    ]
    if cfg.hosts > 1:
        lines.append(
            f"# {cfg.hosts} hosts: run it on each (JAX multi-controller) or once under Pathways"
            " (MaxText's src/maxtext/inference/jetstream_pathways)"
        )
    if cfg.model_key not in MAXTEXT_MODEL_NAMES:
        lines.append(
            f': "${{MAXTEXT_CONFIG:?set MAXTEXT_CONFIG to a MaxText config file (base_config: base.yml) that defines '
            f'{cfg.model_key}: MaxText ships no model_name for it}}"'
        )
    return lines


def _per_device_batch(seqs: int, devices: int) -> int | float:
    """MaxText's per_device_batch_size for ``seqs`` sequences in all: its global batch is
    per_device_batch_size x the devices (AI-Hypercomputer/maxtext, src/MaxText/configs/base.yml; a
    fraction under one, as its 1m_compile.sh's 0.0078125), so 8 sequences on 64 devices is 0.125 -- an
    int floor of at least 1 ran 64, eight times the KV the plan priced. An int when it divides."""
    return seqs // devices if seqs % devices == 0 else seqs / devices


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
        cited = {**FLAG_SOURCES[cfg.engine], **_option_flags(cfg)}
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


def _kv(cfg: LaunchConfig, table: dict[str, str | None], engine: str) -> str:
    kv = table[cfg.kv_dtype]
    if kv is None:
        ok = ", ".join(k for k, v in table.items() if v)
        raise K3PlanError(f"KV dtype {cfg.kv_dtype!r}: not a {engine} KV cache dtype; expected one of {ok}")
    return kv


def _options(cfg: LaunchConfig) -> list[str]:
    """The options' command-line flags (an option whose "flag" is an environment variable, as
    tpu-inference's MODEL_IMPL_TYPE, goes before the command: ``_env``)."""
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
