"""SGLang's ``python -m sglang.launch_server``: its flags (ServerArgs), DP attention, and the state pool sized as
k3plan priced it (--max-mamba-cache-size)."""

from __future__ import annotations

from k3plan.engines.flags import SGLANG_A2A, SGLANG_KV
from k3plan.engines.launch_config import LaunchConfig, env_args, join_args, kv_spelling, option_args, option_flags
from k3plan.engines.sglang.releases import DSV4_KV_ARCHITECTURES, sglang_kv_flag
from k3plan.errors import K3PlanError


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
    kv = kv_spelling(cfg, SGLANG_KV, "SGLang (ServerArgs.kv_cache_dtype choices)")
    if cfg.architecture in DSV4_KV_ARCHITECTURES:
        # DeepseekV4ForCausalLM asserts fp8_e4m3 or bfloat16 as given ('bf16 is not supported'): its spelling, the
        # figure fit priced (both size the pool alike) and the one fit --serve reads back (engines/sglang/releases.py)
        kv = sglang_kv_flag(cfg.kv_dtype, cfg.architecture) or kv
    if not cfg.dp_attention and cfg.ep > cfg.tp:
        raise K3PlanError(
            f"SGLang without DP attention: experts split over one replica's {cfg.tp} TP ranks; "
            f"ep={cfg.ep} needs DP attention"
        )
    tp_size = cfg.tp * cfg.dp if cfg.dp_attention else cfg.tp
    args = env_args(cfg) + [
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
        if SGLANG_A2A[0] not in option_flags(cfg):  # priced as an all-to-all dispatch; SGLang's own default is none
            args += list(SGLANG_A2A)
        if cfg.dp > 1 and "--enable-dp-lm-head" not in option_flags(cfg):
            # priced with the LM head over the attention-TP group (the dp-attention stack's vocab rule): SGLang holds
            # it so only with this flag, over the whole TP group without it (ParallelLMHead use_attn_tp_group:
            # engines/sglang/serve.py dp_lm_head), so --serve of this line reads back the head the plan priced
            args.append("--enable-dp-lm-head")
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
    args += option_args(cfg)
    if (cfg.model or "").startswith("deepseek-v4.1"):
        # the plan prices DeepSeek-V4.1's language model alone; SGLang builds its ViT unless told (from 0.5.22 it
        # honours the flag: engines/sglang/serve.py v41_vision), and with the tower refuses an all-to-all but MegaMoE
        args.append("--language-model-only")
    if cfg.trust_remote_code:
        args.append("--trust-remote-code")
    return join_args(args, engine="sglang", extra=option_flags(cfg))


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
