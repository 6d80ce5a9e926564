"""vLLM's ``--attention-config`` as ``vllm serve`` takes it (issue 47 item 2: a recipe's flag read, never refused for
being unknown), in its JSON and its dotted form (``engines/vllm/serve.py fold_dotted``:
``--attention_config.use_fp4_indexer_cache True``, the vLLM recipes' DeepSeek-V4 Blackwell line,
vllm-project/recipes#493).

Read in yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2 (2026-07-01), which carries upstream vLLM's history:

- vllm/config/attention.py AttentionConfig: its fields. None changes what k3plan prices for its models:
  the backends, kernel switches and splits choose kernels; ``indexer_kv_dtype`` is read by MiniMax-M3's indexer only
  in the code read (vllm/models/minimax_m3/common/indexer.py) -- newer vLLM stores DeepSeek's sparse indexer keys in
  it (NVIDIA Dynamo's DeepSeek-V4.1-Flash recipes), so a value other than fp8 is a caveat (engines/vllm/serve.py);
  ``use_fp4_indexer_cache`` keeps DeepSeek-V4's indexer cache at its fp8 size ('For FP4 indexer cache, we still allocate the same amount of memory as FP8, but only use the first half
  of the memory': vllm/models/deepseek_v4/attention.py DeepseekV4Indexer.__init__), but the indexer's metadata
  builder asserts a Blackwell datacenter GPU (vllm/v1/attention/backends/mla/indexer.py, the builder's __init__:
  'use_fp4_indexer_cache requires Blackwell datacenter GPUs (sm_10x, e.g. B200/GB200); sm_120 (consumer Blackwell)
  and earlier architectures are not supported.'), so elsewhere a model with that indexer does not start.
"""

from __future__ import annotations

from typing import Any

from k3plan.errors import K3PlanError

SOURCE = "yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2 (upstream vLLM's history)"
ATTENTION_FIELDS = frozenset(
    {
        "backend",
        "flash_attn_version",
        "use_prefill_decode_attention",
        "flash_attn_max_num_splits_for_cuda_graph",
        "tq_max_kv_splits_for_cuda_graph",
        "use_cudnn_prefill",
        "use_trtllm_ragged_deepseek_prefill",
        "use_trtllm_attention",
        "disable_flashinfer_prefill",
        "disable_flashinfer_q_quantization",
        "mla_prefill_backend",
        "use_prefill_query_quantization",
        "use_fp4_indexer_cache",
        "indexer_kv_dtype",
        "use_non_causal",
        "flex_attn_block_m",
        "flex_attn_block_n",
        "flex_attn_q_block_size",
        "flex_attn_kv_block_size",
        # read in the vLLM 0.31.0-0.34.0 wheels (PyPI), vllm/config/attention.py AttentionConfig: per-group backend
        # overrides and MiniMax M3's decode kernel (0.31.0), the TokenSpeed MLA split floor at its default 1 only (a
        # larger one may grow that kernel's workspace: ``REFUSED``), the deprecated no-op indexer row sharding and
        # TRTLLM_RAGGED's cached-prefill kernel (0.33.0), MiniMax M3's context-parallel indexer scoring ('This shards
        # indexer *work* and not the KV cache', 0.33.0 / 0.34.0 indexer_decode_cp), sparse-MLA prefill sharded by
        # token over TP (0.34.0) and the MQA path forced for prefill (0.31.0): which kernel runs, not what is held
        "backend_per_kind",
        "minimax_m3_msa_decode_backend",
        "indexer_tp_shard_min_rows",
        "trtllm_ragged_backend",
        "minimax_m3_indexer_cp",
        "indexer_decode_cp",
        "sparse_mla_shard_q",
        "sparse_mla_shard_q_min_tokens",
        "sparse_mla_force_mqa",
    }
)
# AttentionConfig fields that change what a GPU holds in a way k3plan does not price (vllm 0.31.0-0.34.0 wheels
# (PyPI), vllm/config/attention.py): refused by name with what they do, at a value other than vLLM's default
REFUSED: dict[str, tuple[object, str]] = {
    "hisparse_config": (None, "HiSparse's host-resident KV with a hot buffer on the GPU (Model Runner V2 only)"),
    "sparse_mla_prefill_workspace_factor": (
        None,
        "the sparse-MLA prefill workspace and the indexer's prefill K buffer in multiples of max_model_len (k3plan "
        "prices vLLM's own factor: engines/vllm/dsv4_workspace.py prefill_buffer_factor)",
    ),
    "tokenspeed_mla_min_split_kv": (1, "a TokenSpeed MLA split floor, which may grow that kernel's workspace"),
    "indexer_logits_dtype": ("auto", "the sparse indexer's dense logits dtype (their buffer)"),
    "indexer_sparse_logits": (None, "the DeepSeek-V4.1 indexer's sparse or dense logits path (its buffers)"),
}
# the GPUs of capability family 10 (sm_100 / sm_103: current_platform.is_device_capability_family(100)) among
# k3plan's hardware specs: B200 and GB200 are sm_100, B300 and GB300 sm_103
SM100_FAMILY = frozenset({"nvidia-b200", "nvidia-gb200-nvl72", "nvidia-b300", "nvidia-gb300-nvl72"})
# the GPUs of compute capability 9.0 (Hopper: current_platform.is_device_capability(90)) among k3plan's hardware specs
SM90 = frozenset({"nvidia-h100-sxm", "nvidia-h200", "nvidia-h20"})
FP4_INDEXER_MESSAGE = (
    "AssertionError: use_fp4_indexer_cache requires Blackwell datacenter GPUs (sm_10x, e.g. B200/GB200); sm_120 "
    "(consumer Blackwell) and earlier architectures are not supported."
)
FP4_INDEXER_AT = (
    f"vllm/v1/attention/backends/mla/indexer.py, the sparse indexer's metadata builder __init__ (read in {SOURCE})"
)


def read_attention(raw: str | None) -> dict[str, Any] | None:
    """``--attention-config`` JSON -> its fields (None: not given); an unknown field is refused by name."""
    if raw is None:
        return None
    from k3plan.engines.serve_values import json_object

    got = json_object("--attention-config", raw)
    for key, (default, what) in REFUSED.items():
        if key in got and got[key] != default:
            raise K3PlanError(
                f"--serve: --attention-config {key} {got[key]!r}: {what} is not priced by k3plan (vllm/config/"
                f"attention.py AttentionConfig, the vLLM 0.31.0-0.34.0 wheels); leave it out to price vLLM's default"
            )
    unknown = sorted(set(got) - ATTENTION_FIELDS - set(REFUSED))
    if unknown:
        raise K3PlanError(
            f"--serve: --attention-config key {unknown[0]!r} is not a field of vLLM's AttentionConfig "
            f"(vllm/config/attention.py, {SOURCE}; the 0.31.0-0.34.0 wheels); expected one of "
            f"{', '.join(sorted(ATTENTION_FIELDS | set(REFUSED)))}"
        )
    return got


def fp4_indexer(attention: dict[str, Any]) -> bool:
    """Whether the settings ask for the FP4 indexer cache (vLLM's bool field, also as the dotted flag's text)."""
    return attention.get("use_fp4_indexer_cache") in (True, "true", "True", 1)


def start_error(attention: dict[str, Any] | None, *, has_indexer: bool, hardware: str) -> tuple[str, str] | None:
    """(the engine's error, where it is raised) when the command's attention settings stop it starting on
    ``hardware`` for a model with a sparse indexer (``has_indexer``), else None."""
    if not attention or not has_indexer or hardware in SM100_FAMILY:
        return None
    if fp4_indexer(attention):
        return FP4_INDEXER_MESSAGE, FP4_INDEXER_AT
    return None
