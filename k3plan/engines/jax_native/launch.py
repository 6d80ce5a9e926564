"""The JAX stack's launch: MaxText's JetStream server (AI-Hypercomputer/maxtext@e591f30c), its mesh and serving
keys for the priced split, or why MaxText cannot run it as priced."""

from __future__ import annotations

import shlex

from k3plan.engines.flags import FLAG_SOURCES, MAXTEXT_KV, MAXTEXT_MODEL_NAMES
from k3plan.engines.launch_config import LaunchConfig, kv_spelling
from k3plan.errors import K3PlanError
from k3plan.structs import Frozen, fields


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
    kv = kv_spelling(cfg, MAXTEXT_KV, "MaxText (its KV cache is in the activation dtype, or int8/int4)")
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
        per_device_batch_size=per_device_batch(cfg.max_num_seqs, cfg.tp * cfg.dp * cfg.pp),
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


def per_device_batch(seqs: int, devices: int) -> int | float:
    """MaxText's per_device_batch_size for ``seqs`` sequences in all: its global batch is
    per_device_batch_size x the devices (AI-Hypercomputer/maxtext, src/MaxText/configs/base.yml; a
    fraction under one, as its 1m_compile.sh's 0.0078125), so 8 sequences on 64 devices is 0.125 -- an
    int floor of at least 1 ran 64, eight times the KV the plan priced. An int when it divides."""
    return seqs // devices if seqs % devices == 0 else seqs / devices
