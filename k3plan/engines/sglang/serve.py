"""How SGLang's launch_server reads its command line, as far as k3plan prices it: its default prefill chunk by
GPU memory, DP attention's split of --tp-size, and the launch-line flags k3plan writes that the reader takes."""

from __future__ import annotations

from k3plan.errors import K3PlanError


def default_chunk(device_gib: float) -> tuple[int, str]:
    """SGLang's default chunked_prefill_size for a GPU of ``device_gib`` (the sglang stack's
    options.mem_fraction_static.auto.gpu_classes: memory_hook.py handle_gpu_memory_settings @031ed82d)."""
    from k3plan.engines.stack import load_stack

    auto = load_stack("sglang").options["mem_fraction_static"].auto
    assert auto is not None
    row = auto.gpu_class(gpu_mib=device_gib * 1024)
    return row.chunked_prefill_size, (
        f"SGLang's default chunked_prefill_size {row.chunked_prefill_size} for a {device_gib:.0f} GiB GPU "
        f"(sgl-project/sglang@031ed82d python/sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings)"
    )


def launch_flags(get, options: dict[str, str], ignored: list[str]) -> bool:
    """Issue 48: SGLang's flags k3plan's launch lines write that the reading does not take, read as ServerArgs
    defines them (python/sglang/srt/server_args.py); -> whether DP attention is on (--enable-dp-attention: the
    dp-attention stack). --mamba-scheduler-strategy and --disable-radix-cache are the sglang stack's options of
    those names; --max-mamba-cache-size (the state slots the launch sizes as priced) and --nnodes / --node-rank /
    --dist-init-addr (which host runs which rank) are listed as ignored: they change nothing k3plan prices."""
    strategy = get("--mamba-scheduler-strategy", None)
    if strategy is not None:
        options["mamba_scheduler_strategy"] = strategy
    if get("--disable-radix-cache", "false").lower() not in ("false", "0"):
        options["disable_radix_cache"] = "true"
    for name in ("--max-mamba-cache-size", "--nnodes", "--node-rank", "--dist-init-addr"):
        if get(name, None) is not None:
            ignored.append(name)
    return get("--enable-dp-attention", "false").lower() not in ("false", "0")


def dp_attention_tp(tp_size: int, dp: int) -> int:
    if tp_size % dp:
        raise K3PlanError(
            f"--serve: --enable-dp-attention with --tp-size {tp_size} and --dp-size {dp}: SGLang splits the server's "
            "GPUs into dp_size attention groups; expected a --tp-size that --dp-size divides"
        )
    return tp_size // dp


# SGLang's Engram placement flag (docs.sglang.io/docs/advanced_features/engram, as read for this engine's
# Engram placement, engines/sglang/dsv4.py; commit not pinned): --engram-config '{"placement": "gpu" | "cpu", ...}'
ENGRAM_CONFIG_PLACEMENT = {"gpu": "hbm", "cpu": "host"}


def engram_config(raw: str) -> str:
    """--engram-config's placement as --engram's word ("hbm" / "host")."""
    import json

    try:
        cfg = json.loads(raw)
    except ValueError:
        raise K3PlanError(f"--serve: --engram-config {raw[:60]!r}: expected a JSON object") from None
    if not isinstance(cfg, dict):
        raise K3PlanError(f"--serve: --engram-config {raw[:60]!r}: expected a JSON object")
    placement = cfg.get("placement", "gpu")
    if placement not in ENGRAM_CONFIG_PLACEMENT:
        raise K3PlanError(f"--serve: --engram-config placement {placement!r}: expected gpu or cpu")
    return ENGRAM_CONFIG_PLACEMENT[placement]


# SGLang refuses a --context-length above the model's derived context length unless the env var allows it
# (sgl-project/sglang@001adf56 python/sglang/srt/configs/model_config.py ModelConfig._derive_context_length,
# envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN)
LONG_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def long_context_refusal(context: int, model_max: int) -> str:
    return (
        f"--serve: --context-length {context:,} is above the model's {model_max:,} (max_position_embeddings): SGLang "
        f"refuses it at start (ModelConfig._derive_context_length) unless {LONG_CONTEXT_ENV}=1; expected at most "
        f"{model_max:,}"
    )
