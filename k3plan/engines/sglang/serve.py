"""How SGLang's launch_server reads its command line, as far as k3plan prices it: its default prefill chunk by
GPU memory, DP attention's split of --tp-size, and the launch-line flags k3plan writes that the reader takes."""

from __future__ import annotations

import re
from typing import Callable

from k3plan.engines.dp_attention import ENGINE as DP_ATTENTION
from k3plan.engines.release import Release, release_text
from k3plan.engines.serve_values import (
    Reading,
    ServeCommand,
    argparse_int,
    config_file_args,
    env_on,
    flag_int,
    fp4_storage,
    fraction,
    json_object,
    positive_float,
    read_dcp,
    refuse_unpriced,
)
from k3plan.engines.serve_values import unabbreviated as shared_unabbreviated
from k3plan.engines.sglang.deepep import CONFIG_DEFAULTS, DEEPEP_MODES
from k3plan.engines.sglang.dsv4_pool import PAGE
from k3plan.engines.sglang.ep_moe_copy import AITER_ENV, ep_moe_copies
from k3plan.engines.sglang.flags import SGLANG_A2A_DEFAULT
from k3plan.engines.sglang.fp4_scales import JIT_DEEPGEMM_ENV, dsv4_fp4_expert_format
from k3plan.engines.sglang.fraction_eras import RESERVE_FORM_FROM, era_chunk, era_fraction
from k3plan.engines.sglang.hicache import HICACHE_FLAG, hicache_gpu0_caveat
from k3plan.engines.sglang.kernels import BLACKWELL
from k3plan.engines.sglang.mega_moe import (
    CAP_DEFAULT,
    CAP_ENV,
    FIX_MEMORY_ENV,
    FP4_ACTS_ENV,
    MEGA_MOE_A2A,
    MEGA_MOE_ENV,
    MEGA_MOE_READ,
)
from k3plan.engines.sglang.moe_padding import K3_OPT_ENV
from k3plan.engines.sglang.prefill_graph import BACKENDS as PREFILL_BACKENDS
from k3plan.engines.sglang.prefill_graph import CONFIG_FROM as PREFILL_TC_UNTIL_LOCKS
from k3plan.engines.sglang.releases import (
    GRAPH_CAP_FROM,
    NEWEST_RELEASE,
    SHARED_CLONES_FROM,
    SHARED_CLONES_SOURCE,
    SHARED_ONE_FROM,
    SYMM_PREALLOC_ENV,
    SYMM_PREALLOC_FROM,
    SYMM_PREALLOC_GIB,
    SYMM_PREALLOC_SOURCE,
    follows,
)
from k3plan.engines.sglang.server_flags import CHOICES as SERVER_FLAG_CHOICES
from k3plan.engines.sglang.server_flags import FLAGS as SERVER_FLAGS
from k3plan.engines.sglang.server_flags import KINDS as SERVER_FLAG_KINDS
from k3plan.engines.sglang.server_flags import RANGES as SERVER_FLAG_RANGES
from k3plan.engines.sglang.server_flags import RELEASES as SERVER_FLAG_RELEASES
from k3plan.engines.sglang.spec import read_speculative
from k3plan.engines.sglang.vision import V41_VISION_AT, V41_VISION_LM_ONLY_FROM, v41_vision_refused
from k3plan.engines.stack_sections import Cite, Source
from k3plan.errors import K3PlanError
from k3plan.units import GiB

ENGINE = "sglang"
# the commands that start SGLang's server (k3plan.engines.serve recognises a command by them): the launch_server
# module, and SGLang's own CLI, `sglang serve MODEL ...`: launch_server with --model-path MODEL
# (sgl-project/sglang@0298b5b4 python/sglang/cli/serve.py serve, _normalize_positional_model_path; the LLM
# backend's prepare_server_args)
COMMANDS = (
    ServeCommand(
        ("python", "-m", "sglang.launch_server"),
        positional_model=False,
        usage="'python3 -m sglang.launch_server --model-path MODEL ...'",
    ),
    ServeCommand(("sglang", "serve"), positional_model=True, usage="'sglang serve MODEL ...'"),
)
SWITCHES: frozenset[str] = frozenset()  # the switches k3plan reads are vLLM's (read as switches here too)
# ServerArgs' list flags (nargs "+" / "*": the CUDA-graph batch sizes among them) are joined by ``tokens`` as the
# release's parser takes them (by_kind over engines/sglang/server_flags.py KINDS), none left to the shared reader
NARGS: frozenset[str] = frozenset()


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
    dp-attention stack). --mamba-radix-cache-strategy (--mamba-scheduler-strategy before 0.5.20) and
    --disable-radix-cache are the sglang stack's options of those names; --nnodes / --node-rank / --dist-init-addr (which host runs which rank) are listed as ignored: they
    change nothing k3plan prices (--max-mamba-cache-size, the state slots, is read before: ``read``)."""
    # 0.5.14's --mamba-radix-cache-strategy, and its old spelling (to 0.5.19): one option (the stack's
    # mamba_scheduler_strategy, stack.yaml); each release's parser refuses the spelling it lacks (tokens)
    new, old = get("--mamba-radix-cache-strategy", None), get("--mamba-scheduler-strategy", None)
    strategy = new if new is not None else old
    if strategy is not None:
        options["mamba_scheduler_strategy"] = strategy
    if get("--disable-radix-cache", "false").lower() not in ("false", "0"):
        options["disable_radix_cache"] = "true"
    for name in ("--nnodes", "--node-rank", "--dist-init-addr"):
        if get(name, None) is not None:
            ignored.append(name)
    return get("--enable-dp-attention", "false").lower() not in ("false", "0")


# SGLang 0.5.22's spelling of DP attention: --attn-dp-size N (alias --attention-data-parallel-size) is what
# --dp-size N --enable-dp-attention resolves to (arg_groups/parallel_hook.py handle_deprecated_dp_attention: attn_dp_size
# = dp_size, dp_size = 1; --dp-size then counts replicas of the server; sglang 0.5.22 and 0.5.23 wheels,
# arg_groups/fields/parallel.py ParallelConfig.attn_dp_size)
ATTN_DP_FLAGS = ("--attn-dp-size", "--attention-data-parallel-size")


def attn_dp_size(r: Reading) -> bool:
    """--attn-dp-size N > 1: DP attention over N groups, read as --dp-size N --enable-dp-attention; with --dp-size
    replicas beside it refused (replicas of a DP-attention server are not priced). -> whether it turns DP attention on."""
    given = [(f, v) for f, v in ((f, r.get(f, None)) for f in ATTN_DP_FLAGS) if v is not None]
    if not given:
        return False
    flag, raw = given[0]
    options, said = release_options(r.release, r.release_post)
    if flag not in options:  # a release before 0.5.22 (refused before: tokens)
        raise K3PlanError(
            f"--serve: {flag}: {said}'s parser has no such option (from 0.5.22); write --dp-size N --enable-dp-attention"
        )
    n = flag_int(ATTN_DP_FLAGS[0], raw)
    if n == 1:
        return False
    if r.dp > 1:
        raise K3PlanError(
            f"--serve: --attn-dp-size {n} with --dp-size {r.dp}: SGLang runs {r.dp} replicas of an attention-DP server "
            "then (parallel_hook.py handle_deprecated_dp_attention: --dp-size counts replicas beside --attn-dp-size); "
            "not priced, give one of them"
        )
    r.dp = n
    return True


def dp_attention_tp(tp_size: int, dp: int) -> int:
    if tp_size % dp:
        raise K3PlanError(
            f"--serve: --enable-dp-attention with --tp-size {tp_size} and --dp-size {dp}: SGLang splits the server's "
            "GPUs into dp_size attention groups; expected a --tp-size that --dp-size divides"
        )
    return tp_size // dp


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


# DeepSeek-V4.1's Engram tables in host memory (sglang 0.5.21 wheel (PyPI), sglang/srt/layers/engram.py
# EngramEmbedding.__init__: under SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE (environ.py EnvBool(False)) the fp8 rows and
# e8m0 scales are views of a _HostTable -- a mmap'd host buffer pinned with cudaHostRegister, one shared copy or one
# shard a rank by SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT ("shared" | "per_rank", else a ValueError) -- in place of the
# device Parameters; the Engram module's wkv / q_weight / k_weight stay on the device; the same in the 0.5.22 and
# 0.5.23 wheels): k3plan's --engram host
ENGRAM_HOST_ENV = "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE"
ENGRAM_LAYOUT_ENV = "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT"
ENGRAM_HOST_SOURCE = (
    "sglang 0.5.21 wheel (PyPI), sglang/srt/layers/engram.py EngramEmbedding.__init__ / _init_host_table and "
    f"_HostTable ({ENGRAM_HOST_ENV}: the tables' rows in pinned host memory, the projections on the device)"
)


def engram_host_env(r: Reading) -> None:
    """``SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1`` (and its layout variable) read as --engram host
    (ENGRAM_HOST_SOURCE); an unknown layout is refused as SGLang refuses it."""
    layout = r.env.get(ENGRAM_LAYOUT_ENV)
    if layout is not None:
        r.env_read.add(ENGRAM_LAYOUT_ENV)
        if layout not in ("shared", "per_rank"):
            raise K3PlanError(
                f"--serve: {ENGRAM_LAYOUT_ENV}={layout}: SGLang refuses it at start ('Invalid "
                f"{ENGRAM_LAYOUT_ENV}={layout!r}; expected ...', {ENGRAM_HOST_SOURCE}); expected shared or per_rank"
            )
    on = r.env.get(ENGRAM_HOST_ENV)
    if on is None:
        return
    r.env_read.add(ENGRAM_HOST_ENV)
    if env_on(on) and r.engram is None:
        r.engram = "host"


# DeepSeek-V4's routed-expert layout: SGLang reads SGLANG_DSV4_FP4_EXPERTS (an EnvBool, default True: the FP4 / MXFP4
# experts the released checkpoints hold) for a DeepSeek-V4 config only, and otherwise detects the layout from the
# checkpoint (sglang 0.5.12-0.5.23 wheels, srt/environ.py SGLANG_DSV4_FP4_EXPERTS = EnvBool(True); srt/configs/
# model_config.py ModelConfig: is_fp4_experts = the variable where set, try_detect_fp4_experts where not). Set true it
# is the bundled checkpoints' own layout, read; set false it reads the experts as FP8 (the re-packaged FP8-expert
# checkpoints, sgl-project/DeepSeek-V4-*-FP8), which k3plan does not bundle: refused for a DeepSeek-V4 model
FP4_EXPERTS_ENV = "SGLANG_DSV4_FP4_EXPERTS"
FP4_EXPERTS_SOURCE = (
    "sglang 0.5.12-0.5.23 wheels (PyPI), srt/environ.py SGLANG_DSV4_FP4_EXPERTS = EnvBool(True) (EnvBool.parse: true / "
    "1 / yes / y, false / 0 / no / n, any case; else ValueError); srt/configs/model_config.py is_fp4_experts"
)


def dsv4_fp4_experts_env(r: Reading) -> None:
    """``SGLANG_DSV4_FP4_EXPERTS`` read as SGLang parses it (FP4_EXPERTS_SOURCE): true is the bundled DeepSeek-V4
    checkpoints' FP4-expert layout; false on a DeepSeek-V4 model is the FP8-expert layout, not priced; a value
    EnvBool does not take is refused as SGLang refuses it."""
    raw = r.env.get(FP4_EXPERTS_ENV)
    if raw is None:
        return
    r.env_read.add(FP4_EXPERTS_ENV)
    value = raw.lower()
    if value not in ("true", "1", "yes", "y", "false", "0", "no", "n"):
        raise K3PlanError(
            f"--serve: {FP4_EXPERTS_ENV}={raw}: SGLang refuses it ('\"{value}\" is not a valid boolean value', "
            f"{FP4_EXPERTS_SOURCE}); expected 1 or 0"
        )
    if value in ("false", "0", "no", "n") and _bundled(r).startswith("deepseek-v4"):
        raise K3PlanError(
            f"--serve: {FP4_EXPERTS_ENV}={raw} reads DeepSeek-V4's routed experts as FP8 ({FP4_EXPERTS_SOURCE}), the "
            "layout of the re-packaged FP8-expert checkpoints, not the FP4 experts of the checkpoint k3plan bundles; "
            "not priced"
        )


# DeepSeek-V4's compressor-state dtype (sglang 0.5.14-0.5.23 wheels (PyPI), srt/environ.py
# SGLANG_DSV4_COMPRESS_STATE_DTYPE = EnvStr("float32"); model_executor/pool_configurator.py
# _get_dsv4_compress_state_dtype_sizes: float32 / fp32 -> 4 B, bfloat16 / bf16 -> 2 B, stripped and lower-cased,
# anything else a ValueError): the element of every compressor-state ring the pool prices (engines/sglang/dsv4_pool.py
# sglang_dsv4_pool state_bytes). The 0.5.11-0.5.13 wheels have no such variable: set there it changes nothing
STATE_DTYPE_ENV = "SGLANG_DSV4_COMPRESS_STATE_DTYPE"
STATE_DTYPE_FROM = (0, 5, 14)
STATE_DTYPE_SOURCE = (
    "sglang 0.5.14-0.5.23 wheels (PyPI), srt/environ.py SGLANG_DSV4_COMPRESS_STATE_DTYPE (default float32), "
    "model_executor/pool_configurator.py _get_dsv4_compress_state_dtype_sizes"
)
STATE_DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2}


def dsv4_state_dtype_env(r: Reading) -> None:
    """``SGLANG_DSV4_COMPRESS_STATE_DTYPE`` read as SGLang reads it (STATE_DTYPE_SOURCE); a value it refuses is
    refused as SGLang refuses it."""
    raw = r.env.get(STATE_DTYPE_ENV)
    if raw is None:
        return
    r.env_read.add(STATE_DTYPE_ENV)
    if r.release is not None and r.release < STATE_DTYPE_FROM:
        return  # not a variable that release reads (STATE_DTYPE_SOURCE)
    value = raw.strip().lower()
    if value not in STATE_DTYPE_BYTES:
        raise K3PlanError(
            f"--serve: {STATE_DTYPE_ENV}={raw}: SGLang refuses it ('Unsupported {STATE_DTYPE_ENV}={value!r}. Expected "
            f"one of: float32, fp32, bfloat16, bf16.', {STATE_DTYPE_SOURCE})"
        )
    r.dsv4_state_bytes = STATE_DTYPE_BYTES[value]


# SGLang's low-latency DeepEP token cap a rank (read by the DeepEP dispatcher: deepep_config below)
DEEPEP_TOKENS_ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"

# SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE (srt/environ.py EnvBool(False), declared in the 0.5.12-0.5.17 wheels (PyPI) and in
# no file of the 0.5.11 or 0.5.18-0.5.23 ones): set true it turns --moe-a2a-backend into megamoe whatever the command
# gives ('SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE is set, auto-configuring --moe-a2a-backend megamoe': server_args.py
# ServerArgs._handle_a2a_moe in 0.5.12-0.5.14, arg_groups/overrides.py _a2a_backend_overrides in 0.5.15-0.5.17), and
# megamoe then sets ep_size = tp_size (the same handler / _a2a_ep_size); false, or at a release that names it nowhere,
# it does nothing. A value EnvBool.parse refuses is read by EnvField.get as the default, False (a warning only)
USE_MEGA_MOE_ENV = "SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE"
USE_MEGA_MOE_READ: tuple[Release, Release] = ((0, 5, 12), (0, 5, 18))  # [first read, first not read)


def use_mega_moe_env(r: Reading) -> None:
    """``SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE`` as the command's release reads it (the comment at USE_MEGA_MOE_ENV): true at
    a release that reads it makes the all-to-all megamoe (read after --moe-a2a-backend, before anything reads it);
    listed elsewhere."""
    raw = r.env.get(USE_MEGA_MOE_ENV)
    if raw is None:
        return
    r.env_read.add(USE_MEGA_MOE_ENV)
    lo, hi = USE_MEGA_MOE_READ
    release = r.release if r.release is not None else NEWEST_RELEASE
    if ENV_BOOL.get(raw.lower()) is True and lo <= release < hi:
        if r.options.get("moe_a2a_backend") != MEGA_MOE_A2A:
            r.caveats.append(
                f"{USE_MEGA_MOE_ENV}={raw}: SGLang {release_text(release)} runs --moe-a2a-backend {MEGA_MOE_A2A} in "
                f"place of the command's {r.options.get('moe_a2a_backend')} (ServerArgs' a2a overrides), and so does "
                "k3plan"
            )
        r.options["moe_a2a_backend"] = MEGA_MOE_A2A  # read from here on as the flag's megamoe is
        return
    r.ignored.append(f"{USE_MEGA_MOE_ENV}={raw}")


KNOWN_ENV = frozenset(
    {
        K3_OPT_ENV,  # Kimi-K3's MXFP4 expert padding under AITER, read by fit's shard rule (engines/sglang/moe_padding.py)
        LONG_CONTEXT_ENV,
        SYMM_PREALLOC_ENV,
        ENGRAM_HOST_ENV,
        ENGRAM_LAYOUT_ENV,
        FP4_EXPERTS_ENV,
        STATE_DTYPE_ENV,
        DEEPEP_TOKENS_ENV,
        USE_MEGA_MOE_ENV,
        *MEGA_MOE_ENV,
    }
)


def tokens(
    model: str | None, rest: list[str], *, release: Release | None = None, release_post: int = 0
) -> tuple[str | None, list[str]]:
    """`sglang serve MODEL ...`: the positional MODEL read as --model-path MODEL; a --config file's flags first
    (serve_values.config_file_args); an abbreviated flag as the one it stands for in ``release``'s parser
    (``unabbreviated`` over ``release_options``); a flag that parser does not register refused
    (``refuse_unregistered``)."""
    options, said = release_options(release, release_post)
    rest = [unabbreviated(tok, options, said) for tok in config_file_args(rest, engine=ENGINE)]
    for tok in rest:
        refuse_unregistered(tok, options, said)
    rest = by_kind(rest, _read_release(release, release_post) if release is not None else None, said)
    return None, (rest if model is None else ["--model-path", model, *rest])


def _bundled(r: Reading) -> str:
    """The bundled model the command serves ('' where it names none k3plan can price)."""
    if r.resolve is None or not r.model:
        return ""
    try:
        return r.resolve(r.model)
    except K3PlanError:  # a checkpoint k3plan cannot price is refused by name where parse_serve resolves the model
        return ""


# the bundled checkpoints SGLang serves as DeepseekV4ForCausalLM (configs/deepseek_v41.py maps V4.1's architecture to it)
DSV4_FAMILY = (
    "deepseek-v4-flash",
    "deepseek-v4-flash-0731",
    "deepseek-v4-pro",
    "deepseek-v4-pro-0813",
    "deepseek-v4.1-flash",
)
V4_PAGE_SOURCE = (
    "not read: SGLang sets page_size 256 for DeepseekV4ForCausalLM on a CUDA or ROCm device whatever the command gives "
    "(sglang 0.5.13 wheel arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults 'server_args.page_size = 256'; "
    "0.5.15 arg_groups/overrides.py _deepseek_v4_overrides and 0.5.19-0.5.22 arg_groups/model_overrides/deepseek_v4.py "
    "overrides['page_size'] = page_size, 128 only on an NPU, declarations applied last writer wins over the raw inputs: "
    "arg_groups/overrides.py declare_resolution; configs/deepseek_v41.py maps DeepseekV41ForCausalLM to it)"
)


def _deepseek_v4(r: Reading) -> bool:
    """The command serves a DeepSeek-V4 checkpoint (SGLang's models/deepseek_v4.py; not V4.1's)."""
    return _bundled(r) in DSV4_FAMILY[:-1]


# SGLang serves DeepSeek-V4.1 (model_type deepseek_v41, DeepseekV41ForCausalLM) from 0.5.21: configs/deepseek_v41.py
# (normalize_deepseek_v41_config maps it onto DeepseekV4ForCausalLM) first ships in the 0.5.21 wheel; the 0.5.20
# wheel names deepseek_v41 nowhere in sglang/srt, so its config and class are unknown to it
V41_FROM: Release = (0, 5, 21)


# DeepSeek-V4.1's vision tower and the parallelism SGLang builds it under: engines/sglang/vision.py
# (V41_VISION_LM_ONLY_FROM, V41_VISION_AT, v41_vision_refused)


def v41_vision(r: Reading) -> None:
    """DeepSeek-V4.1's vision tower as the release builds it (``V41_VISION_LM_ONLY_FROM``): under 0.5.21
    --language-model-only is listed as ignored (the tower is built all the same: engines/sglang/__init__.py counts
    it); where it is built, pipeline parallelism or an all-to-all the release refuses with it is refused with
    SGLang's ValueError."""
    if not _bundled(r).startswith("deepseek-v4.1"):
        return
    lm_only = r.flags.get("--language-model-only", "false").lower() not in ("false", "0")
    old = r.release is not None and r.release < V41_VISION_LM_ONLY_FROM
    if lm_only and old:
        r.get("--language-model-only")
        r.ignored.append("--language-model-only")
    elif lm_only:
        return
    a2a = r.options.get("moe_a2a_backend", SGLANG_A2A_DEFAULT)
    refused = v41_vision_refused(a2a=a2a, pp=r.pp, amd=r.device_name.startswith("amd-"), old=old)
    if refused is None:
        return
    text, at = refused
    raise K3PlanError(
        f"--serve: DeepSeek-V4.1's vision tower with --pp-size {r.pp} and --moe-a2a-backend {a2a}: SGLang refuses it "
        f"at start, 'ValueError: {text}' ({at}, sglang/srt/models/deepseek_v4.py {V41_VISION_AT}); remove them"
        + ("" if old else " or add --language-model-only")
    )


DECODER_REPLAY_FLAG = "--enable-decoder-swa-bounded-replay"
DECODER_REPLAY_AT = (
    "sglang 0.5.21-0.5.23 wheels (PyPI), sglang/srt/arg_groups/fields/exec_.py enable_decoder_swa_bounded_replay ('after "
    "the last kv_source layer, run the remaining layers over only the last window_size tokens of a prefill. Main and "
    "indexer KV stay exact'), arg_groups/deepseek_v4_hook.py validate_deepseek_v41_features (DeepSeek-V4.1 only: "
    "ValueError with the prefill CUDA graph or DP attention), models/deepseek_v4.py DeepseekV4Model.__init__ (assert "
    "config.kv_source_layer_ids), layers/attention/deepseek_v4_backend.py (the late layers' tail metadata)"
)


def decoder_swa_replay(r: Reading) -> None:
    """DeepSeek-V4.1's decoder SWA bounded replay (``DECODER_REPLAY_FLAG``): the layers after the last kv_source layer
    run a prefill over each request's last window only; the KV pool and what the start sizes are unchanged, so the
    flag is read and nothing is priced for it. SGLang refuses it at start with DP attention or a prefill CUDA graph
    the command locks on (refused here with its ValueError; DeepSeek-V4's prefill graph is off by default,
    engines/sglang/prefill_graph.py), and a DeepSeek-V4 (not V4.1) config has no kv_source_layer_ids, which its model
    asserts (refused); another model's code never reads it (listed as ignored)."""
    raw = r.flags.get(DECODER_REPLAY_FLAG)
    if raw is None:
        return
    r.get(DECODER_REPLAY_FLAG)
    if not _on(raw):
        return
    model = _bundled(r)
    if model.startswith("deepseek-v4.1"):
        locked = r.prefill_backend not in (None, "disabled")
        for feature, on in (("the prefill CUDA graph", locked), ("DP attention", r.dp_attention)):
            if on:
                raise K3PlanError(
                    f"--serve: {DECODER_REPLAY_FLAG}: SGLang refuses it at start, 'ValueError: {DECODER_REPLAY_FLAG} "
                    f"cannot be combined with {feature} yet; disable one of them.' ({DECODER_REPLAY_AT})"
                )
        return
    if model.startswith("deepseek-v4"):
        raise K3PlanError(
            f"--serve: {DECODER_REPLAY_FLAG} on {model}: SGLang's DeepSeek-V4 model fails at start (it asserts "
            f"config.kv_source_layer_ids, 'decoder SWA bounded replay needs kv_source_layer_ids', a DeepSeek-V4.1 "
            f"config key this checkpoint's config.json does not carry) ({DECODER_REPLAY_AT}); remove it"
        )
    r.ignored.append(DECODER_REPLAY_FLAG)


def refuse_v41_before(r: Reading) -> None:
    """A DeepSeek-V4.1 command read as a release before ``V41_FROM``: refused, as that SGLang cannot load it."""
    if r.release is not None and r.release < V41_FROM and _bundled(r).startswith("deepseek-v4.1"):
        raise K3PlanError(
            f"--serve: {r.model} under sglang {release_text(r.release)}: SGLang serves DeepSeek-V4.1 from "
            f"{release_text(V41_FROM)} (sglang {release_text(V41_FROM)} wheel (PyPI), sglang/srt/configs/"
            "deepseek_v41.py; earlier wheels have no deepseek_v41 config or model); give --engine-version "
            f"{release_text(V41_FROM)} or later"
        )


def _order(version: str) -> tuple[int, int, int, int, int]:
    """A release read's place (engines/sglang/server_flags.py RELEASES): 0.5.0rc2 before 0.5.0, 0.4.8 before
    0.4.8.post1 (benchmarks/sglang_server_flags.py order)."""
    m = _READ_VERSION.fullmatch(version)
    assert m is not None, version
    return int(m[1]), int(m[2]), int(m[3]), int(m[5]) - 100 if m[4] else 0, int(m[6] or 0)


_READ_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:(rc)(\d+))?(?:\.post(\d+))?")


def _read_release(release: Release, post: int = 0) -> str:
    """The release read (engines/sglang/server_flags.py RELEASES) whose parser ``release`` (``post``: its
    post-release number) has: itself where read, else the newest read before it (0.5.0, never published: its last
    release candidate, 0.5.0rc2), the oldest read for one before them all."""
    at = (*release, 0, post)
    read = [r for r in SERVER_FLAG_RELEASES if _order(r) <= at]
    return read[-1] if read else SERVER_FLAG_RELEASES[0]


def _by_release() -> dict[str, frozenset[str]]:
    """The options each release read registers (a flag's RANGES runs, first and last read inclusive; a flag RANGES
    does not name: every release read), and what argparse also matches a prefix against: the parser's own --help.
    Each release's and each run's place computed once (~650 flags x ~90 releases: a regex a comparison cost an
    import ~0.3 s)."""
    places = [(r, _order(r)) for r in SERVER_FLAG_RELEASES]
    every = ((SERVER_FLAG_RELEASES[0], SERVER_FLAG_RELEASES[-1]),)
    out: dict[str, set[str]] = {r: {"--help"} for r in SERVER_FLAG_RELEASES}
    for flag in SERVER_FLAGS:
        runs = [(_order(first), _order(last)) for first, last in SERVER_FLAG_RANGES.get(flag, every)]
        for r, at in places:
            if any(first <= at <= last for first, last in runs):
                out[r].add(flag)
    return {r: frozenset(flags) for r, flags in out.items()}


_BY_RELEASE = _by_release()
_UNION = SERVER_FLAGS | {"--help"}


def release_options(release: Release | None, post: int = 0) -> tuple[frozenset[str], str]:
    """The options SGLang's parser of ``release`` (``post``: its post-release number) registers (with --help) and
    what they are, for the prefix matching and the refusal of an option it lacks; None (no release named): the union
    of the releases read, an option any of them takes."""
    if release is None:
        return _UNION, f"sglang {SERVER_FLAG_RELEASES[0]}-{SERVER_FLAG_RELEASES[-1]} (any of them)"
    read = _read_release(release, post)
    asked = release_text(release) + (f".post{post}" if post else "")
    if read == asked:
        return _BY_RELEASE[read], f"sglang {read}"
    how = "the oldest read" if _order(read) > (*release, 0, post) else "the newest read before it"
    return _BY_RELEASE[read], f"sglang {asked} (read as {read}, {how})"


def _registered_in(flag: str) -> str:
    """The releases read that register ``flag``, in words."""
    runs = SERVER_FLAG_RANGES.get(flag, ((SERVER_FLAG_RELEASES[0], SERVER_FLAG_RELEASES[-1]),))
    return ", ".join(a if a == b else f"{a}-{b}" for a, b in runs)


# another engine's spellings a SGLang command is sometimes given, with SGLang's own (vLLM's engine arguments)
OTHER_SPELLINGS = {
    "--max-num-seqs": "vLLM's flag; SGLang's is --max-running-requests",
    "--max-num-batched-tokens": "vLLM's flag; SGLang's is --chunked-prefill-size",
    "--max-model-len": "vLLM's flag; SGLang's is --context-length",
    "--num-gpu-blocks-override": "vLLM's flag",
    "--speculative-config": "vLLM's speculative-decoding flag; SGLang's is --speculative-algorithm with its companions",
    "--num-speculative-tokens": "vLLM's speculative-decoding flag; SGLang's is --speculative-num-draft-tokens",
}


def refuse_unregistered(token: str, options: frozenset[str], said: str) -> None:
    """A flag the release's parser does not register: refused in one line naming the flag and the release, as
    SGLang's argparse stops at it ('unrecognized arguments'), with the releases read that do register it."""
    name = token.partition("=")[0]
    if not name.startswith("--") or name == "--" or name in options:
        return
    where = (
        f"registered in sglang {_registered_in(name)}"
        if name in SERVER_FLAGS
        else f"no sglang release read, {SERVER_FLAG_RELEASES[0]}-{SERVER_FLAG_RELEASES[-1]}, registers it"
    )
    hint = f"; {OTHER_SPELLINGS[name]}" if name in OTHER_SPELLINGS else ""
    raise K3PlanError(
        f"--serve: {name}: {said}'s parser has no such option (argparse stops at 'unrecognized arguments'; {where}: "
        f"engines/sglang/server_flags.py, read from the wheels){hint}; remove it or name the release it runs with "
        "--engine-version"
    )


def option_kind(flag: str, read: str | None) -> str:
    """How ``flag`` takes its value in the release read ``read`` (engines/sglang/server_flags.py KINDS): "switch",
    "list" or "value"; None (no release): its kind where every release read agrees, else "value"."""
    kind = SERVER_FLAG_KINDS.get(flag, "value")
    if isinstance(kind, str):
        return kind
    if read is None:
        return "value"
    return next((k for a, b, k in kind if _order(a) <= _order(read) <= _order(b)), "value")


def by_kind(rest: list[str], read: str | None, said: str) -> list[str]:
    """The flags as the release's argparse takes their values (``option_kind``): a list option's values up to the next
    flag joined into one (--cuda-graph-bs 1 2 4: '1 2 4'); a switch given a value refused, as argparse stops at it
    ('ignored explicit argument', or the value left over: 'unrecognized arguments')."""
    out: list[str] = []
    i = 0
    while i < len(rest):
        tok = rest[i]
        name, eq, _ = tok.partition("=")
        kind = option_kind(name, read) if name.startswith("--") else "value"
        after = i + 1
        while after < len(rest) and not rest[after].startswith("-"):
            after += 1
        if kind == "switch" and (eq or after > i + 1):
            value = tok.partition("=")[2] if eq else rest[i + 1]
            what = f"ignored explicit argument {value!r}" if eq else f"unrecognized arguments: {value}"
            raise K3PlanError(
                f"--serve: {name} {value}: {name} is a switch in {said}'s parser (it takes no value: engines/sglang/"
                f"server_flags.py KINDS), and argparse stops at '{what}'; write {name} alone"
            )
        if kind == "list" and not eq and after > i + 1:
            out.append(f"{name}={' '.join(rest[i + 1 : after])}")
            i = after
            continue
        out.append(tok)
        i += 1
    return out


# another engine's values a SGLang flag is sometimes given
OTHER_VALUES = {("--kv-cache-dtype", "nvfp4_ds_mla"): "nvfp4_ds_mla is vLLM's DeepSeek-V4.1 record, not SGLang's"}


def check_choices(r: Reading) -> None:
    """A value k3plan reads outside the choices the release's parser gives the option (engines/sglang/server_flags.py
    CHOICES): refused as SGLang's argparse refuses it ('invalid choice'). A release whose choices were not read
    (a module constant of another file) is not checked."""
    if r.release is None:
        return
    read = _read_release(r.release, r.release_post)
    for flag, rows in SERVER_FLAG_CHOICES.items():
        value = r.flags.get(flag)
        if value is None:
            continue
        choices = next((c for a, b, c in rows if _order(a) <= _order(read) <= _order(b)), None)
        if choices is not None and value not in choices:
            _, said = release_options(r.release, r.release_post)
            raise K3PlanError(
                f"--serve: {flag} {value}: {said}'s parser refuses it, 'argument {flag}: invalid choice: {value!r} "
                f"(choose from {', '.join(choices)})' (engines/sglang/server_flags.py CHOICES, read from the wheel)"
                + (f"; {OTHER_VALUES[flag, value]}" if (flag, value) in OTHER_VALUES else "")
            )


def unabbreviated(token: str, options: frozenset[str] = _UNION, said: str = "") -> str:
    """A flag as SGLang's parser reads it (argparse, allow_abbrev on: serve_values.unabbreviated, the prefix matching
    vLLM's reader shares) over ``options`` (``release_options``: engines/sglang/server_flags.py, the options of the
    releases read), ``said`` what they are."""
    return shared_unabbreviated(token, options, said or "the releases read", engine="SGLang", where="server_args.py")


def nvfp4_runner_caveat(r: Reading, runner: str | None) -> None:
    """SGLang 0.5.15 holds a ModelOpt NVFP4 checkpoint's routed experts as its bytes under flashinfer_trtllm only
    (sglang/srt/layers/quantization/modelopt_quant.py ModelOptNvFp4FusedMoEMethod: create_weights leaves
    w13 / w2_blockscale_swizzled None and process_weights_after_loading aliases them to the loaded scales); the other
    runners allocate a swizzled copy of every expert's block scales beside them (1 B a 16 weights, unpriced). On
    SM100 auto resolves to flashinfer_trtllm for DeepseekV3ForCausalLM + modelopt_fp4 when --moe-a2a-backend is none
    (arg_groups/overrides.py _deepseek_moe_quant_resolution)."""
    trtllm = runner == "flashinfer_trtllm" or (runner in (None, "auto") and r.options.get("moe_a2a_backend") == "none")
    if not trtllm:
        r.caveats.append(
            f"--moe-runner-backend {runner or 'auto'} with --moe-a2a-backend {r.options.get('moe_a2a_backend')}: "
            "SGLang keeps a swizzled copy of the NVFP4 experts' block scales beside them (1 B a 16 weights), not priced"
        )


def quark_reading(r: Reading) -> None:
    """A Quark OCP MXFP4 DeepSeek-R1 (models/bundled/deepseek-r1-0528-mxfp4): the MTP draft is refused -- its layer's
    stored format is not settled (the bundle's provenance.json: one card version quantizes it, the other leaves it
    BF16), and SGLang builds it by the checkpoint's exclude list (sglang 0.5.15 wheel models/deepseek_nextn.py
    DeepseekV3ForCausalLMNextN: quant_config None when the list names model.layers.61, an MXFP4 eh_proj otherwise).
    And the absorbed MLA's copies: with aiter on gfx950 SGLang requantizes w_kc / w_vc to MXFP4 (sglang 0.5.12 / 0.5.15
    wheels deepseek_common/deepseek_weight_loader.py post_load_weights: _use_aiter_gfx95 and quant 'quark' call
    quark/utils.py quark_post_load_weights), which the stack prices as its bf16 copies."""
    if r.speculative is not None:
        raise K3PlanError(
            f"--serve: {r.model} with --speculative-algorithm: the checkpoint's MTP layer (the draft SGLang loads) has "
            "no settled stored format in the public sources (models/bundled/deepseek-r1-0528-mxfp4/provenance.json "
            "mtp_layer); k3plan prices this checkpoint without speculative decoding only"
        )
    r.caveats.append(
        "the absorbed MLA's w_kc / w_vc: with SGLANG_USE_AITER on gfx950 SGLang requantizes them to MXFP4 "
        "(quark_post_load_weights); priced as the stack's bf16 copies, more than the engine holds there"
    )


# --enable-dp-lm-head (sglang 0.5.15 and 0.5.23 wheels (PyPI), sglang/srt/models/deepseek_v2.py and deepseek_v4.py
# DeepseekV2ForCausalLM / DeepseekV4ForCausalLM; Kimi-K3's KimiK3LinearForCausalLM in kimi_k3.py, LM_HEAD_K3 below): the
# LM head is ParallelLMHead(..., use_attn_tp_group=enable_dp_lm_head), vocab-split over the attention-TP group with it
# and over the whole TP group (tp_size = attention TP x dp_size) without; the embedding is over the attention-TP group
# under DP attention either way (layers/vocab_parallel_embedding.py get_embedding_tp_kwargs). k3plan's dp-attention
# stack splits the vocabulary over its tp, the attention-TP group (engines/dp_attention/stack.yaml sharding vocab):
# what the flag runs; without it the command sets the head's split over every device of a stage on the stack
# (Stack.with_lm_head_whole_tp, the cite below), which the budget, the engine's start check and the step read.
# arg_groups/overrides.py: _data_parallelism_defaults turns it off at dp_size 1; _dp_lm_head_validation asserts DP
# attention when it is on
DP_LM_HEAD_AT = "sglang 0.5.15 wheel (PyPI), sglang/srt/arg_groups/overrides.py _dp_lm_head_validation"
SGLANG = "sgl-project/sglang"
LM_HEAD_K3 = Source(
    repo=SGLANG,
    file="python/sglang/srt/models/kimi_k3.py",
    symbol="KimiK3LinearForCausalLM.__init__ (lm_head = ParallelLMHead(..., use_attn_tp_group="
    "get_server_args().enable_dp_lm_head)); KimiK3ForConditionalGeneration.language_model is it",
    commit="0000e9b46f38dd9055ecad825a42c47a047077e6",
    note="the sglang 0.5.23 wheel's kimi_k3.py builds it alike (use_attn_tp_group=get_parallel().enable_dp_lm_head)",
)
LM_HEAD_DEEPSEEK = Source(
    repo=SGLANG,
    file="python/sglang/srt/models/deepseek_v2.py",
    symbol="DeepseekV2ForCausalLM.__init__ (ParallelLMHead(..., use_attn_tp_group=enable_dp_lm_head)); "
    "deepseek_v4.py DeepseekV4ForCausalLM.__init__ alike; DeepseekV3ForCausalLM, Kimi-K2.x's language model, "
    "subclasses it",
    note="read in the sglang 0.5.15 and 0.5.23 wheels (PyPI), not at a pinned commit",
)
LM_HEAD_SPLIT = Source(
    repo=SGLANG,
    file="python/sglang/srt/layers/vocab_parallel_embedding.py",
    symbol="VocabParallelEmbedding.__init__ (use_attn_tp_group False: tp_size = get_parallel().tp_size, the whole "
    "TP group; the vocabulary padded to a multiple of it)",
    note="read in the sglang 0.5.23 wheel (PyPI), not at a pinned commit",
)
LM_HEAD_WHOLE_TP = Cite(
    holds="under DP attention without --enable-dp-lm-head the LM head's vocabulary is split over the whole TP group, "
    "tp_size = attention TP x dp_size (every GPU of a stage); the logits are all-gathered over it "
    "(layers/logits_processor.py LogitsProcessor: dp_gather_replicate of the hidden states, the TP all-gather, "
    "dp_scatter)",
    sources=(LM_HEAD_DEEPSEEK, LM_HEAD_K3, LM_HEAD_SPLIT),
)
# the model classes whose LM head was read (above): DeepSeek-V2/V3/R1/V4 and Kimi-K2.x (DeepseekV3ForCausalLM), K3
READ_HEADS = ("deepseek", "kimi-k2", "kimi-k3")
# Kimi-Linear's class passes no use_attn_tp_group: its head is over the whole TP group with the flag too, and so is its
# embedding (a VocabParallelEmbedding without get_embedding_tp_kwargs), which k3plan holds over the attention-TP group
LM_HEAD_KIMI_LINEAR = Cite(
    holds="Kimi-Linear's LM head over the whole TP group whatever --enable-dp-lm-head says (no use_attn_tp_group)",
    sources=(
        Source(
            repo=SGLANG,
            file="python/sglang/srt/models/kimi_linear.py",
            symbol="KimiLinearForCausalLM.__init__ (ParallelLMHead(vocab_size, hidden_size, quant_config, prefix): "
            "use_attn_tp_group left False); KimiLinearModel.__init__ (embed_tokens VocabParallelEmbedding, no "
            "get_embedding_tp_kwargs)",
            note="read in the sglang 0.5.15 and 0.5.23 wheels (PyPI), not at a pinned commit",
        ),
        LM_HEAD_SPLIT,
    ),
)
KIMI_LINEAR_EMBED = (
    "under DP attention SGLang splits Kimi-Linear's embedding over the whole TP group as well (kimi_linear.py "
    "KimiLinearModel: VocabParallelEmbedding without get_embedding_tp_kwargs, sglang 0.5.15 / 0.5.23 wheels); k3plan holds it "
    "over the attention-TP group: the weights high by the embedding's share beyond 1 / (tp x dp)"
)
DP_LM_HEAD_UNREAD = (
    "under DP attention without --enable-dp-lm-head SGLang splits the LM head of the DeepSeek and Kimi-K2 / K3 "
    "classes over the whole TP group (ParallelLMHead use_attn_tp_group=False); {model}'s SGLang head was not read, so "
    "k3plan holds it over the attention-TP group, as that flag does: the weights may be high by the head's share "
    "beyond 1 / tp"
)


def dp_lm_head(r: Reading, get: Callable[[str, str | None], str | None]) -> None:
    """--enable-dp-lm-head as SGLang resolves it: under DP attention the head over the attention-TP group (k3plan's
    dp-attention vocabulary split) with it and over the whole TP group without it (``Reading.lm_head_whole_tp``, for
    the model classes whose head was read; a caveat for the others), off at --dp-size 1, refused with SGLang's
    assertion under --dp-size > 1 without DP attention."""
    raw = get("--enable-dp-lm-head", None)
    on = raw is not None and raw.lower() not in ("false", "0")
    if on and r.dp > 1 and not r.dp_attention:
        raise K3PlanError(
            "--serve: --enable-dp-lm-head without --enable-dp-attention: SGLang stops at 'Please enable dp attention "
            f"when setting enable_dp_lm_head.' ({DP_LM_HEAD_AT})"
        )
    if raw is not None and not r.dp_attention:
        r.ignored.append("--enable-dp-lm-head")  # dp 1: SGLang turns it off, the head over the TP group as priced
    if not r.dp_attention or r.dp <= 1:
        return  # at dp 1 the whole TP group is the attention-TP group: the stack's split either way
    model = r.resolve(r.model) if r.model and r.resolve is not None else ""
    if model.startswith("kimi-linear"):
        r.lm_head_whole_tp = LM_HEAD_KIMI_LINEAR
        r.caveats.append(KIMI_LINEAR_EMBED)
    elif on:
        return  # the head over the attention-TP group: the stack's rule
    elif model.startswith(READ_HEADS):
        r.lm_head_whole_tp = LM_HEAD_WHOLE_TP
    else:
        r.caveats.append(DP_LM_HEAD_UNREAD.format(model=model or r.model))


def read(r: Reading) -> None:
    """An SGLang command's flags, in the order the refusals come: the model, the split, the context, the chunk, the
    batch, the memory options, --moe-a2a-backend (SGLang's default none), the launch-line flags (DP attention),
    the dtypes, the Engram host switch, the quantization (vLLM's spellings are refused before, in ``tokens``: no
    SGLang parser registers them, OTHER_SPELLINGS names SGLang's own)."""
    get = r.get
    check_choices(r)  # the values the release's parser refuses
    r.model = get("--model-path", "") or get("--model", "")
    if not r.model:
        raise K3PlanError("--serve: sglang.launch_server needs --model-path MODEL")
    # ServerArgs.device: None detects the platform (utils get_device), 'cuda' on NVIDIA and ROCm GPUs alike, the one
    # k3plan prices; another device (npu, xpu, hpu, cpu) runs other kernels and pools
    device = get("--device", None)
    if device is not None and (device.lower() != "cuda" or r.platform != "gpu"):
        raise K3PlanError(
            f"--serve: --device {device}: k3plan prices SGLang on CUDA / ROCm GPUs ('cuda', what SGLang detects "
            "there); expected cuda or no --device"
        )
    refuse_v41_before(r)
    r.parallel()
    get("--enable-expert-parallel", None)  # vLLM's switch: taken, not read (SGLang's EP is --ep-size)
    ep_size = get("--ep-size", get("--ep", get("--expert-parallel-size", None)))  # ServerArgs' three spellings
    r.ep = flag_int("--ep-size", ep_size) if ep_size else None
    # SGLang before 0.4.9's switch for the same: ServerArgs.__post_init__ sets ep_size = tp_size whatever --ep-size
    # says (the sglang 0.4.3.post2 and 0.4.8 wheels, server_args.py 'if self.enable_ep_moe: self.ep_size =
    # self.tp_size'); its DeepSeek recipes of that time pass it
    ep_moe = get("--enable-ep-moe", None)
    ep_moe_on = ep_moe is not None and ep_moe.lower() not in ("false", "0")
    if ep_moe_on:
        r.ep = r.tp
    if r.ep == 1 and r.tp > 1:
        # ServerArgs' default ep_size 1: no expert parallelism, each expert's intermediate split over the TP group
        # (moe_tp_size = tp_size / ep_size) -- the same bytes a device as EP over it, which k3plan prices
        r.ep = None
    elif r.ep is not None and 1 < r.ep < r.tp:
        # EP inside the TP group: ep_size ranks of whole experts, each split over moe_tp_size = tp_size // ep_size
        # (sglang 0.5.7 wheel, distributed/parallel_state.py initialize_model_parallel: moe_tp_size =
        # tensor_model_parallel_size // moe_ep_size) -- the same bytes a device as EP over every rank, as k3plan's
        # mesh prices; the rules that follow the split (the shard padding, the shared expert) read engine_ep
        if r.tp % r.ep:
            raise K3PlanError(
                f"--serve: --ep-size {r.ep} does not divide --tp-size {r.tp}; expected a divisor (SGLang splits each "
                "expert over tp_size / ep_size ranks)"
            )
        r.moe_ep, r.ep = r.ep, None
    raw_context = get("--context-length", None)
    if raw_context is not None:
        r.context = flag_int("--context-length", raw_context)
    sg_chunk = get("--chunked-prefill-size", None)
    if sg_chunk is not None:
        r.chunk = flag_int("--chunked-prefill-size", sg_chunk, lo=-1)
        if r.chunk == -1 or r.chunk == 0:
            raise K3PlanError(
                f"--serve: --chunked-prefill-size {sg_chunk}: chunked prefill off is not priced; give a chunk size"
            )
    r.running = get("--max-running-requests", None)
    r.batch = flag_int("--max-running-requests", r.running) if r.running is not None else 0
    r.batch_source = (
        "the command's flag"
        if r.running is not None
        else "SGLang's default: min(pool // 2, the request pool); 256 for DeepSeek-V4 (engines/sglang/dsv4_pool.py "
        "DSV4_RUNNING); the engine line says which"
    )
    r.memory_options()
    # --moe-a2a-backend: first registered in 0.4.10.post2 (choices ["deepep"] beside --enable-deepep-moe), a command
    # of an earlier release refused with it (tokens: engines/sglang/server_flags.py)
    a2a = get("--moe-a2a-backend", None)
    # SGLang's own default is none (server_args.py ServerArgs.moe_a2a_backend, engines/flags.py SGLANG_A2A), not
    # the DeepEP deployment the sglang stack prices by default: a command without the flag runs none
    r.options["moe_a2a_backend"] = a2a if a2a is not None else SGLANG_A2A_DEFAULT
    use_mega_moe_env(r)  # SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE, where the release reads it, makes it megamoe
    slots = get("--max-mamba-cache-size", None)  # the state pool's slots (engines/sglang/memory.py SGLANG_MAMBA)
    r.mamba_cache_size = flag_int("--max-mamba-cache-size", slots) if slots is not None else None
    r.dp_attention = launch_flags(get, r.options, r.ignored)  # issue 48: the flags k3plan's launch lines write
    r.dp_attention = attn_dp_size(r) or r.dp_attention
    dp_lm_head(r, get)
    r.dtypes()
    if r.kv_raw == "nvfp4_ds_mla":
        raise K3PlanError("--serve: --kv-cache-dtype nvfp4_ds_mla is vLLM's DeepSeek-V4.1 record, not SGLang's")
    engram_host_env(r)
    dsv4_fp4_experts_env(r)
    dsv4_state_dtype_env(r)
    r.quantization()
    from k3plan.engines.stack import load_stack

    runner = get("--moe-runner-backend", None)  # ServerArgs.moe_runner_backend: the MoE kernel
    r.moe_runner = runner  # as given, for the expert-format rule (Stack.moe_runner, engines/sglang/fp4_scales.py)
    choices = load_stack("sglang").options["moe_runner_backend"].choices
    if runner in choices:  # the runners whose holding of DeepSeek-V4's FP4 experts was read (stack.yaml)
        r.options["moe_runner_backend"] = runner  # set after moe_a2a_backend: its formats are the runner's
    elif runner is not None:
        r.caveats.append(
            f"--moe-runner-backend {runner}: the MoE kernel; k3plan prices the experts in the stack's runtime format "
            "as SGLang's auto runner holds them (a runner that converts the experts at load is not priced; one that "
            "keeps Fp8MoEMethod holds DeepSeek-V4's FP4 expert scales in fp32, not priced under --moe-a2a-backend none)"
        )
    if r.model and r.resolve is not None and fp4_storage(r.resolve(r.model)) == "nvfp4":
        nvfp4_runner_caveat(r, runner)
    prefill_backend(r)  # the prefill graph a command locks (before decode_graph reads --disable-cuda-graph)
    decode_graph(r)  # the decode graphs its derived fraction reserves for
    cap = get("--max-total-tokens", None)  # the pool's token cap (engines/sglang/memory.py sglang_kv_pool)
    r.max_total_tokens = flag_int("--max-total-tokens", cap) if cap is not None else None
    page = get("--page-size", None)  # the pool's page (engines/sglang/memory.py sglang_kv_pool)
    r.page_size = flag_int("--page-size", page) if page is not None else None
    if r.page_size is not None and _bundled(r) in DSV4_FAMILY:
        # SGLang's DeepSeek-V4 defaults write page_size 256 over the command's on a CUDA / ROCm device, V4.1 too (its
        # config maps DeepseekV41ForCausalLM to DeepseekV4ForCausalLM): the pool and the row read SGLang's page
        if r.page_size != PAGE:
            r.ignored.append(f"--page-size {r.page_size}")
            r.caveats.append(f"--page-size {r.page_size}: {V4_PAGE_SOURCE}")
        r.page_size = None
    swa = get("--swa-full-tokens-ratio", None)  # DeepSeek-V4's sub-pools (engines/sglang/dsv4_pool.py)
    if swa is not None:
        r.swa_ratio = float(fraction("--swa-full-tokens-ratio", swa))
    tails = get("--swa-prefix-tails", None)  # DeepSeek-V4.1's cap-mode headroom (engines/sglang/dsv4_pool.py)
    if tails is not None:  # 'should be a non-negative integer' (PREFIX_TAILS_SOURCE: kv_cache_hook.py)
        r.swa_prefix_tails = flag_int("--swa-prefix-tails", tails, lo=0)
    ratio = get("--mamba-full-memory-ratio", None)  # the state pool's share (engines/sglang/memory.py SGLANG_MAMBA)
    if ratio is not None:
        r.mamba_ratio = positive_float("--mamba-full-memory-ratio", ratio)
    raw_dcp = get("--dcp-size", None)  # decode context parallelism (engines/sglang/memory.py SGLANG_DCP)
    dcp = flag_int("--dcp-size", raw_dcp) if raw_dcp is not None else 1
    if dcp > 1 and r.dp_attention:
        raise K3PlanError(
            f"--serve: --dcp-size {dcp} with --enable-dp-attention: how SGLang forms the DCP group inside an "
            "attention-DP group was not read; remove one of them"
        )
    read_dcp(
        r,
        dcp,
        flag="--dcp-size",
        tp_flag="--tp-size",
        engine="SGLang",
        group="SGLang's DCP group is a share of the TP group",
        pool=f"each rank's pool as without DCP, the allocator {dcp}x its tokens in pages of {dcp}x the page",
    )
    # speculative decoding (engines/sglang/spec.py): the algorithm and its steps, top-k and draft tokens as SGLang
    # resolves them; the draft is priced by fit once the checkpoint is loaded
    r.speculative = read_speculative(get, r.ignored, r.model, r.release)
    if r.model and r.resolve is not None and fp4_storage(r.resolve(r.model)) == "quark_mxfp4":
        quark_reading(r)
    fp4_indexer(r)
    symm_mem(r)
    mega_moe(r)  # after --moe-a2a-backend is read
    prefill_conditions(r)  # after speculative decoding, --dcp-size and --enable-symm-mem are read
    # HiCache's controller threads on GPU 0 in 0.4.3.post3-0.4.6.post2 (engines/sglang/hicache.py): a caveat
    gpu0 = hicache_gpu0_caveat(
        on=_on(r.flags.get(HICACHE_FLAG)), release=r.release, post=r.release_post, tp=r.tp, platform=r.platform
    )
    if gpu0 is not None:
        r.caveats.append(gpu0)
    shared_fusion(r)  # after DP attention and the all-to-all are read
    dense_tp(r)
    ep_moe_copy(r, ep_moe_on)
    fp4_scales(r, runner)  # after the all-to-all and the runner are read
    mlp_whole_tp(r)  # after --moe-dense-tp-size and the shared experts' fusion are read
    deepep_config(r, deepep_mode(r))  # after the all-to-all is read
    fi_mxfp4_precision(r)
    v41_vision(r)  # after the split and the all-to-all are read
    decoder_swa_replay(r)  # after DP attention and the prefill backend are read
    # flags that change the pool in ways k3plan does not price: refused with what they do, never priced as without
    # the attention backend as given: listed as ignored (k3plan.engines.serve.IGNORED), read for the fraction's aiter
    # cut of 0.4.7-0.5.4 (engines/sglang/aiter_fraction.py, applied in app/fit.py where the model is known)
    r.attention_backend = r.flags.get("--attention-backend")
    redundant = get("--ep-num-redundant-experts", None)
    if redundant is not None and r.platform != "tpu":
        # physical expert copies on each MoE layer, priced by the budget's weights (engines/sglang/eplb.py, applied
        # in app/fit.py where the model's expert count is known); SGLang's EPLB state itself is not priced
        r.eplb = (flag_int("--ep-num-redundant-experts", redundant, lo=0), 0)
    refuse_unpriced(get, UNPRICED, "SGLang")


FP4_INDEXER = "--enable-deepseek-v4-fp4-indexer"
# AMD's gfx95 GPUs (CDNA 4: MI350X / MI355X): the one of k3plan's AMD hardware SGLang's is_gfx95_supported holds on
GFX95 = ("amd-mi355x",)
# SGLang's start check of --enable-deepseek-v4-fp4-indexer by release, newest first: (the first release of the form,
# whether gfx95 passes, the ValueError's text, where it is raised). SM100 (is_sm100_supported: compute capability
# major 10, every Blackwell datacenter GPU of k3plan's: BLACKWELL) passes in every one; SM120 (k3plan has none) from
# 0.5.17; earlier releases than 0.5.15 were not read (priced as 0.5.15's)
FP4_INDEXER_CHECKS: tuple[tuple[Release, bool, str, str], ...] = (
    (
        (0, 5, 20),
        True,
        "--enable-deepseek-v4-fp4-indexer requires SM100, SM120, or gfx95 GPUs with FP4 indexer support.",
        "sglang 0.5.20 wheel (PyPI), sglang/srt/arg_groups/serving_hook.py handle_environment_variables; the same in "
        "0.5.21-0.5.23",
    ),
    (
        (0, 5, 19),
        False,
        "--enable-deepseek-v4-fp4-indexer requires SM100 or SM120 GPUs with DeepGEMM FP4 indexer support.",
        "sglang 0.5.19 wheel (PyPI), sglang/srt/arg_groups/serving_hook.py handle_environment_variables",
    ),
    (
        (0, 5, 17),
        False,
        "--enable-deepseek-v4-fp4-indexer requires SM100 or SM120 GPUs with DeepGEMM FP4 indexer support.",
        "sglang 0.5.17 wheel (PyPI), sglang/srt/server_args.py ServerArgs._handle_environment_variables; the same in "
        "0.5.18",
    ),
    (
        (0, 0, 0),
        False,
        "--enable-deepseek-v4-fp4-indexer requires SM100 GPUs with DeepGEMM FP4 indexer support.",
        "sglang 0.5.15 wheel (PyPI), sglang/srt/server_args.py ServerArgs._handle_environment_variables; the same in "
        "0.5.16",
    ),
)
# what the flag does to the pool on an SM100 GPU: nothing SGLang sizes. DSV4PoolConfigurator prices a c4 index key at
# its FP8 bytes, index_head_dim + index_head_dim // 128 x 4 (132 B), whether or not the flag is set (sglang 0.5.15 and
# 0.5.17 wheels (PyPI), sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator._get_bytes_per_full_token:
# indexer_bytes); from 0.5.20 its __init__ takes get_dsv4_indexer_bytes_per_token(index_head_dim, _is_hip and
# enable_deepseek_v4_fp4_indexer), 'HIP takes the FP4-accurate byte count here. The NVIDIA FP4 path keeps the FP8
# estimate' (sglang 0.5.20 and 0.5.23 wheels). The index pool itself then allocates index_head_dim // 2 + 4 B a key
# (mem_cache/deepseek_v4_memory_pool.py get_bytes_per_token under use_fp4_indexer): the difference is left
# unallocated inside the static fraction, the token count the same
FP4_INDEXER_NVIDIA = (
    "sglang 0.5.15 / 0.5.17 / 0.5.20 / 0.5.23 wheels (PyPI), sglang/srt/model_executor/pool_configurator.py "
    "DSV4PoolConfigurator (the c4 index key priced at FP8's 132 B on NVIDIA with or without the flag)"
)
FP4_INDEXER_HIP = (
    "the DeepSeek-V4 indexer's c4 keys at FP4's bytes on HIP (sglang 0.5.20 wheel (PyPI), sglang/srt/model_executor/"
    "pool_configurator.py DSV4PoolConfigurator.__init__: get_dsv4_indexer_bytes_per_token(index_head_dim, _is_hip and "
    "enable_deepseek_v4_fp4_indexer)) and the HIP FP4 indexer's workspaces (layers/attention/dsv4/"
    "low_ratio_backend_hip.py prepare_fp4_decode_workspace / prepare_fp4_prefill_workspace)"
)


def fp4_indexer_check(release: Release | None) -> tuple[Release, bool, str, str]:
    """SGLang's start check of --enable-deepseek-v4-fp4-indexer in ``release`` (``FP4_INDEXER_CHECKS``; None: the
    newest read)."""
    if release is None:
        return FP4_INDEXER_CHECKS[0]
    return next(c for c in FP4_INDEXER_CHECKS if release >= c[0])


def fp4_indexer(r: Reading) -> None:
    """--enable-deepseek-v4-fp4-indexer: on an SM100 GPU listed as ignored (the pool's size is the same with it:
    FP4_INDEXER_NVIDIA); on gfx95 where the release allows it, refused as not priced (FP4_INDEXER_HIP); on any other GPU
    refused with the ValueError SGLang raises at start (FP4_INDEXER_CHECKS)."""
    raw = r.get(FP4_INDEXER, None)
    if raw is None or raw.lower() in ("false", "0"):
        return
    first, gfx95, text, at = fp4_indexer_check(r.release)
    if r.device_name in BLACKWELL:
        r.ignored.append(FP4_INDEXER)
        return
    if gfx95 and r.device_name in GFX95:
        raise K3PlanError(
            f"--serve: {FP4_INDEXER} on {r.device_name}: {FP4_INDEXER_HIP} is not priced by k3plan (SGLang "
            f"{release_text(first)} on); remove it to price SGLang without it"
        )
    raise K3PlanError(
        f"--serve: {FP4_INDEXER} on {r.device_name or 'this GPU'}: SGLang refuses it at start, 'ValueError: {text}' "
        f"({at}); remove it, or price an SM100 GPU ({', '.join(BLACKWELL)})"
    )


SYMM_MEM = "--enable-symm-mem"


def symm_mem(r: Reading) -> None:
    """--enable-symm-mem: the symmetric-memory pool each GPU's worker preallocates, SGLANG_SYMM_MEM_PREALLOC_GB_SIZE
    GiB (SGLang's default 4 where the command's environment sets none), after the KV pool and the CUDA graphs, out of
    the 1 - mem_fraction_static share (engines/sglang/releases.py SYMM_PREALLOC_SOURCE): the start check prices it
    there (Reading.symm_mem_bytes, engines/sglang/memory.py sglang_kv_pool). Refused for a release before 0.5.11,
    whose allocation was not read. NCCL's own buffers under the NCCL_NVLS_ENABLE / NCCL_CUMEM_ENABLE it sets are
    NCCL's sizing, left out as --enable-nccl-nvls's are (memory.py SGLANG_UNPRICED)."""
    raw = r.get(SYMM_MEM, None)
    if raw is None or raw.lower() in ("false", "0"):
        return
    if r.release is not None and not follows(r.release, SYMM_PREALLOC_FROM):
        raise K3PlanError(
            f"--serve: {SYMM_MEM} read as SGLang {release_text(r.release)}: its symmetric-memory allocation before "
            f"{release_text(SYMM_PREALLOC_FROM)} was not read (the 0.5.7 wheel allocates no preallocated pool; "
            "0.5.8-0.5.10 were not read); remove it, or read the command as a later release (fit --engine-version)"
        )
    given = r.env.get(SYMM_PREALLOC_ENV)
    gib = SYMM_PREALLOC_GIB if given is None else flag_int(SYMM_PREALLOC_ENV, given, lo=-1)
    if given is not None:
        r.env_read.add(SYMM_PREALLOC_ENV)
    r.symm_mem_bytes = max(gib, 0) * GiB
    r.symm_mem_source = (
        f"{max(gib, 0)} GiB a GPU: SGLang's symmetric-memory pool ("
        + (
            f"{SYMM_PREALLOC_ENV}={given}"
            if given is not None
            else f"{SYMM_PREALLOC_ENV}'s default {gib} under {SYMM_MEM}"
        )
        + f"; {SYMM_PREALLOC_SOURCE})"
    )


ENV_BOOL = {"true": True, "1": True, "yes": True, "y": True, "false": False, "0": False, "no": False, "n": False}


def _env_bool(r: Reading, name: str) -> bool | None:
    """An SGLang EnvBool as srt/environ.py EnvBool.parse reads it (true / 1 / yes / y, false / 0 / no / n, any case;
    else a ValueError); None where the command leaves it unset."""
    raw = r.env.get(name)
    if raw is None:
        return None
    got = ENV_BOOL.get(raw.lower())
    if got is None:
        raise K3PlanError(
            f"--serve: {name}={raw}: SGLang refuses it ('\"{raw.lower()}\" is not a valid boolean value')"
        )
    return got


def fp4_scales(r: Reading, runner: str | None) -> None:
    """DeepSeek-V4's FP4 expert scales as the command's release holds them on its GPU under its all-to-all and MoE
    runner (engines/sglang/fp4_scales.py): ``Reading.expert_format`` where that differs from the stack's option
    choices, which fit sets over the stack's runtime format of the ds_fp4 experts."""
    if not _bundled(r).startswith("deepseek-v4"):
        return
    if JIT_DEEPGEMM_ENV in r.env:
        _env_bool(r, JIT_DEEPGEMM_ENV)  # a value EnvBool refuses, refused
        r.env_read.add(JIT_DEEPGEMM_ENV)
    r.expert_format = dsv4_fp4_expert_format(
        release=r.release,
        device=r.device_name,
        a2a=r.options.get("moe_a2a_backend", SGLANG_A2A_DEFAULT),
        runner=runner,
        env=r.env,
    )


def mega_moe(r: Reading) -> None:
    """--moe-a2a-backend megamoe's symmetric buffer, priced where it was read (engines/sglang/mega_moe.py: SGLang
    0.5.15 on an SM100 GPU): the tokens a rank it is sized for (SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK,
    SGLang's default 1,024) and FP4 dispatch (SGLANG_OPT_DEEPGEMM_MEGA_MOE_USE_FP4_ACTS) go to the start check
    (Reading.mega_moe_cap, engines/sglang/memory.py sglang_kv_pool: out of the 1 - mem_fraction_static share, after
    the pool). SGLANG_OPT_FIX_MEGA_MOE_MEMORY false (a second copy of the L1 expert weights) is refused. Off the
    MegaMoE path nothing reads the variables' memory (layers/moe/mega_moe.py alone sizes by them): listed as ignored.
    At another release or GPU a variable that sizes the buffer is refused, and the buffer is left out (a caveat)."""
    given = [n for n in MEGA_MOE_ENV if n in r.env]
    r.env_read.update(given)
    if r.options.get("moe_a2a_backend") != MEGA_MOE_A2A:
        r.ignored += [f"{n}={r.env[n]}" for n in given]
        return
    fp4 = _env_bool(r, FP4_ACTS_ENV)
    if _env_bool(r, FIX_MEMORY_ENV) is False:
        raise K3PlanError(
            f"--serve: {FIX_MEMORY_ENV}={r.env[FIX_MEMORY_ENV]}: SGLang then keeps DeepGEMM's interleaved copy of each "
            "MoE layer's L1 (w13) expert weights and scales beside the originals (sglang 0.5.15 wheel, layers/moe/"
            "mega_moe.py build_mega_moe_experts_weights: transform_weights_for_mega_moe); the copy is not priced by "
            "k3plan; remove it (SGLang sets it true under megamoe: server_args.py _handle_a2a_moe)"
        )
    read = r.release == MEGA_MOE_READ and r.device_name in BLACKWELL
    if not read:
        sizing = [n for n in (CAP_ENV, FP4_ACTS_ENV) if n in r.env]
        where = f"SGLang {release_text(r.release)}" if r.release is not None else "this release"
        if sizing:
            raise K3PlanError(
                f"--serve: {sizing[0]}: the MegaMoE buffer's size is not priced by k3plan at {where} on "
                f"{r.device_name or 'this GPU'} (read for SGLang {release_text(MEGA_MOE_READ)} on an SM100 GPU: "
                f"{', '.join(BLACKWELL)}); remove it to price the engine without"
            )
        r.caveats.append(
            f"--moe-a2a-backend {MEGA_MOE_A2A}: DeepGEMM's MegaMoE symmetric buffer, allocated after the KV pool out of "
            f"the 1 - mem_fraction_static share, is not priced at {where} on {r.device_name or 'this GPU'} (read for "
            f"SGLang {release_text(MEGA_MOE_READ)} on an SM100 GPU)"
        )
        return
    raw = r.env.get(CAP_ENV)
    r.mega_moe_cap = flag_int(CAP_ENV, raw) if raw is not None else CAP_DEFAULT
    r.mega_moe_fp4_acts = bool(fp4)
    r.ignored += [f"{n}={r.env[n]}" for n in given if n == FIX_MEMORY_ENV]
    r.caveats.append(
        f"--moe-a2a-backend {MEGA_MOE_A2A}: DeepGEMM's MegaMoE buffer (engines/sglang/mega_moe.py) is made on the "
        "first forward, after the KV pool is sized: it does not move the pool, and the start check only floors it against the "
        "1 - mem_fraction_static share (the activations and CUDA graphs share it, not priced): SGLang can run out of "
        "memory there at the CUDA-graph capture or the first batch"
    )


# the decode CUDA-graph flags (ServerArgs' cuda_graph_config: the list of batches and the max batch, each with its
# -decode spelling; --cuda-graph-max-bs is 0.5.19's deprecated alias of -decode and gone from 0.5.20)
GRAPH_BS_FLAGS = ("--cuda-graph-bs-decode", "--cuda-graph-bs")
GRAPH_MAX_FLAGS = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")


def decode_graph(r: Reading) -> None:
    """SGLang's decode CUDA-graph max batch where the command sets it (the largest of its batch list, else its max
    batch: memory_hook.py handle_gpu_memory_settings 'max_bs = max(bs)' when a list is given), and where it sets
    neither, its release's cap on the GPU class's default (engines/sglang/releases.py GRAPH_CAP_FROM):
    --max-running-requests from 0.5.22; and whether the decode graphs are off. They feed the derived
    mem_fraction_static only (Stack.decode_graph_bs, decode_graph_cap, decode_graph_off); the flags stay listed as
    ignored where --mem-fraction-static is given, and are read, not listed, where it is not."""
    derived = "mem_fraction_static" not in r.options
    peek = r.get if derived else r.flags.get
    # the decode graphs switched off (server_args.py _parse_cuda_graph_config: --disable-cuda-graph, then
    # --disable-decode-cuda-graph, then --cuda-graph-backend-decode, each over the one before): no decode graph nor
    # DeepEP term in the derived fraction (memory_hook.py: backend DISABLED)
    decode_switch = r.get("--disable-decode-cuda-graph", None)  # not among the flags listed as harmless: read here
    if decode_switch is not None and not derived:
        r.ignored.append("--disable-decode-cuda-graph")
    off = any(
        v is not None and v.lower() not in ("false", "0") for v in (peek("--disable-cuda-graph", None), decode_switch)
    )
    backend = peek("--cuda-graph-backend-decode", None)
    if backend is not None:
        off = backend.lower() == "disabled"
    r.decode_graph_off = off
    lists = [peek(f, None) for f in GRAPH_BS_FLAGS]
    maxes = [peek(f, None) for f in GRAPH_MAX_FLAGS]
    given = next((v for v in lists if v is not None), None)
    for flag, v in zip(GRAPH_MAX_FLAGS, maxes):  # moot beside a list, still parsed as an int
        if v is not None:
            argparse_int(flag, v)
    if given is not None:
        sizes = [flag_int(GRAPH_BS_FLAGS[0], v) for v in given.split()]
        if not sizes:
            raise K3PlanError(f"--serve: {GRAPH_BS_FLAGS[1]}: expected one or more batch sizes")
        r.decode_graph_bs = max(sizes)
        return
    top = next((v for v in maxes if v is not None), None)
    if top is not None:
        r.decode_graph_bs = flag_int(GRAPH_MAX_FLAGS[0], top)
    elif follows(r.release, GRAPH_CAP_FROM) and r.running is not None:
        r.decode_graph_cap = flag_int("--max-running-requests", r.running)


def _on(value: str | None) -> bool:
    return value is not None and value.lower() not in ("false", "0")


def prefill_backend(r: Reading) -> None:
    """The prefill CUDA-graph backend the command locks, as the release reads its flags (engines/sglang/prefill_graph.py:
    a locked backend skips every rule): to 0.5.13 --enforce-piecewise-cuda-graph (on, over every rule) and
    --disable-piecewise-cuda-graph (ServerArgs._handle_piecewise_cuda_graph; --disable-cuda-graph leaves it as it is,
    _handle_gpu_memory_settings reads disable_piecewise_cuda_graph alone); from 0.5.14 _parse_cuda_graph_config's
    --disable-cuda-graph, then --disable-prefill-cuda-graph, then --cuda-graph-backend-prefill (whose dest the
    deprecated --disable-piecewise-cuda-graph, --enforce-piecewise-cuda-graph and --enable-breakable-cuda-graph also
    write: sglang 0.5.14-0.5.19 wheels server_args.py add_cli_args, DeprecatedStoreConstAction), each over the one
    before. It feeds the derived mem_fraction_static only (Stack.prefill_backend); the flags are peeked here and
    read (taken off the ignored list) where the fraction is derived."""
    derived = "mem_fraction_static" not in r.options
    flags = r.flags
    release = r.release if r.release is not None else NEWEST_RELEASE
    if release < PREFILL_TC_UNTIL_LOCKS:
        if _on(flags.get("--enforce-piecewise-cuda-graph")):
            r.prefill_backend = "tc_piecewise"
        elif _on(flags.get("--disable-piecewise-cuda-graph")):
            r.prefill_backend = "disabled"
    else:
        backend = None
        if _on(flags.get("--disable-cuda-graph")) or _on(flags.get("--disable-prefill-cuda-graph")):
            backend = "disabled"
        aliases = (
            ("--disable-piecewise-cuda-graph", "disabled"),
            ("--enforce-piecewise-cuda-graph", "tc_piecewise"),
            ("--enable-breakable-cuda-graph", "breakable"),
        )
        for flag, value in aliases:
            if _on(flags.get(flag)):
                backend = value
        given = flags.get("--cuda-graph-backend-prefill")
        if given is not None:
            if given.lower() not in PREFILL_BACKENDS:
                raise K3PlanError(
                    f"--serve: --cuda-graph-backend-prefill {given}: expected one of {', '.join(sorted(PREFILL_BACKENDS))}"
                )
            backend = given.lower()
        r.prefill_backend = backend
    if derived:
        for flag in (
            "--enforce-piecewise-cuda-graph",
            "--disable-piecewise-cuda-graph",
            "--disable-prefill-cuda-graph",
            "--enable-breakable-cuda-graph",
            "--cuda-graph-backend-prefill",
        ):
            r.get(flag, None)


# what a command runs that a prefill-graph rule reads (engines/sglang/prefill_graph.py CONDITIONS), by flag; the
# rest (speculative decoding, --enable-symm-mem, --dcp-size) as read above
PREFILL_CONDITION_FLAGS = (
    ("--enable-torch-compile", "torch_compile"),
    ("--enable-hierarchical-cache", "hicache"),
    ("--enable-two-batch-overlap", "two_batch_overlap"),
)


def prefill_conditions(r: Reading) -> None:
    """What the command runs that SGLang's prefill-graph rules read (Stack.prefill_conditions): speculative decoding,
    --enable-symm-mem, --dcp-size > 1, torch.compile, HiCache, two-batch overlap; those flags are read (taken off the
    ignored list) where the fraction is derived."""
    derived = "mem_fraction_static" not in r.options
    got = set()
    if r.speculative is not None:
        got.add("speculative")
    if r.symm_mem_bytes > 0 or _on(r.flags.get(SYMM_MEM)):
        got.add("symm_mem")
    if r.dcp > 1:
        got.add("dcp")
    # a disaggregated worker's role (still listed as ignored: its decode-graph terms are not priced either)
    mode = (r.flags.get("--disaggregation-mode") or "null").lower()
    if mode in ("prefill", "decode"):
        got.add(f"pd_{mode}")
    for flag, name in PREFILL_CONDITION_FLAGS:
        value = r.get(flag, None) if derived else r.flags.get(flag)
        if _on(value):
            got.add(name)
    r.prefill_conditions = tuple(sorted(got))


# the models whose checkpoint is DeepseekV3ForCausalLM with 256 routed experts (bundled names, by prefix): what
# 0.4.6's determine_n_share_experts_fusion fuses (Kimi-K2's 384 experts are not)
SHARED_CLONE_MODELS = ("deepseek-v3", "deepseek-r1")
SHARED_CLONES = Cite(
    holds="SGLang 0.4.6 fuses DeepSeek-V3's shared expert into the routed MoE as tp_size clones (n_share_experts_fusion "
    "= tp_size), each TP-split like a routed expert: one whole shared expert a GPU, not 1/tp",
    sources=(
        Source(
            repo=SGLANG,
            file="python/sglang/srt/models/deepseek_v2.py",
            symbol="DeepseekV2ForCausalLM.determine_n_share_experts_fusion, DeepseekV2MoE.__init__, load_weights",
            note=SHARED_CLONES_SOURCE,
        ),
    ),
)


# the first release read whose parser has SGLang's large-scale EP flags: --moe-dense-tp-size, --deepep-mode,
# --deepep-config and --disable-shared-experts-fusion (sglang 0.4.7 wheel (PyPI), sglang/srt/server_args.py
# ServerArgs.add_cli_args, and every wheel read after it to 0.5.23; the 0.4.3 wheel has none of them, 0.4.4-0.4.6 were
# not read: 0.4.6 fuses by --n-share-experts-fusion, engines/sglang/releases.py SHARED_CLONES_SOURCE)
LARGE_EP_FLAGS_FROM: Release = (0, 4, 7)


def _large_ep_flag(r: Reading, flag: str) -> str | None:
    """``flag``'s value (None where the command does not give it); refused under a release before
    ``LARGE_EP_FLAGS_FROM``, whose parser was not read."""
    raw = r.get(flag, None)
    if raw is not None and r.release is not None and r.release < LARGE_EP_FLAGS_FROM:
        raise K3PlanError(
            f"--serve: {flag} read as SGLang {release_text(r.release)}: the option was read from "
            f"{release_text(LARGE_EP_FLAGS_FROM)} on (sglang 0.4.7 wheel, server_args.py; the 0.4.3 wheel has no such "
            "option); remove it, or read the command as a later release (fit --engine-version)"
        )
    return raw


# SGLang fuses DeepSeek-V3's shared expert into the routed MoE as one more expert (num_fused_shared_experts =
# n_shared_experts, 1) unless --disable-shared-experts-fusion is given or a condition turns it off: on an NVIDIA GPU of
# SM 80 and up without expert parallelism and, from 0.5.6, on an AMD GPU of gfx942 and up (every AMD GPU k3plan has:
# MI300X / MI325X gfx942, MI355X gfx950) under expert parallelism too. FusedMoE then holds the fused expert as a local
# expert on every EP rank beside its routed share (num_local_experts = routed // moe_ep_size + num_fused_shared_experts),
# split over moe_tp_size = tp_size // ep_size like a routed expert: without EP 1/tp of it, what the unfused
# DeepseekV2MLP holds over the TP group (no memory effect there); under EP each rank tp // ep of it where the flag's
# unfused DeepseekV2MLP holds 1/tp (k3plan's split). 0.5.3-0.5.5 fuse on CUDA only and never under expert parallelism;
# from 0.5.11 two-batch / single-batch overlap turns the fusion off, and so does an all-to-all backend of the DeepEP
# class (DeepEP's own shared expert stays a whole DeepseekV2MLP on every rank: the stack's a2a choice, as priced)
SHARED_EP_FROM: Release = (0, 5, 6)
SHARED_EP_OVERLAP_FROM: Release = (0, 5, 11)  # 'SBO/TBO enabled: incompatible with fusing shared expert'
SHARED_EP_SOURCE = Source(
    repo=SGLANG,
    file="python/sglang/srt/models/deepseek_v2.py",
    symbol="DeepseekV2ForCausalLM.determine_num_fused_shared_experts (get_moe_expert_parallel_world_size() > 1 turns "
    "fusion off unless _is_hip and capability >= (9, 4)); layers/moe/fused_moe_triton/layer.py FusedMoE.__init__ "
    "(num_local_experts = (num_experts - num_fused_shared_experts) // moe_ep_size + num_fused_shared_experts)",
    note="read in the sglang 0.5.6, 0.5.7, 0.5.11, 0.5.13, 0.5.15, 0.5.17 and 0.5.19-0.5.22 wheels (PyPI); 0.5.23 "
    "moves the conditions to DeepseekV2ForCausalLM.shared_experts_fusion_disable_reason, the same; the 0.5.3-0.5.5 "
    "wheels turn fusion off under expert parallelism on every GPU",
)
SHARED_EP = Cite(
    holds="SGLang from 0.5.6 fuses DeepSeek-V3's shared expert into the routed MoE on an AMD GPU of gfx942 and up under "
    "expert parallelism: every EP rank holds it as a local expert, split over moe_tp_size = tp // ep (one whole a GPU at "
    "ep = tp), not 1/tp",
    sources=(SHARED_EP_SOURCE,),
)
# the checkpoints of DeepseekV3ForCausalLM with 256 routed experts and one shared expert k3plan bundles (resolved
# names, by prefix), whose quantization fuses the shared expert with the routed ones (DeepSeek-V3 / R1's FP8 and the
# Quark MXFP4 R1, whose exclude list leaves the shared experts quantized with the routed ones): what
# determine_num_fused_shared_experts fuses on an AMD GPU. The NVFP4 R1 (ModelOpt) is NVIDIA's
SHARED_EP_MODELS = ("deepseek-v3", "deepseek-r1-0528-mxfp4")
SHARED_OFF_FLAG = "--disable-shared-experts-fusion"
TBO_FLAG = "--enable-two-batch-overlap"  # read as PREFILL_CONDITION_FLAGS reads it


def _fused_shared(r: Reading) -> Cite | str | None:
    """What SGLang's default fusion of DeepSeek-V3's shared expert holds beyond k3plan's split (``shared_fusion``): a
    Cite where it holds the expert whole on every GPU, a caveat's text where it holds more than k3plan prices, None
    where nothing."""
    if r.dp_attention or r.options.get("moe_a2a_backend", SGLANG_A2A_DEFAULT) != "none":
        return None
    release = r.release if r.release is not None else NEWEST_RELEASE  # no release named: the newest read
    model = r.resolve(r.model) if r.model and r.resolve is not None else ""
    if SHARED_CLONES_FROM <= release < SHARED_ONE_FROM and model.startswith(SHARED_CLONE_MODELS):
        if r.device_name.startswith("nvidia-"):
            return SHARED_CLONES
        if r.device_name.startswith("amd-"):
            return (
                f"SGLang {release_text(release)} on an AMD GPU: 0.4.6-0.4.6.post3 clone DeepSeek-V3's shared expert "
                "tp_size times into the routed MoE (one whole a GPU), 0.4.6.post4-0.4.6.post5 do not; k3plan splits it "
                f"1/tp ({SHARED_CLONES_SOURCE})"
            )
        return None
    ep = r.engine_ep or 1
    if release < SHARED_EP_FROM or ep <= 1 or not r.device_name.startswith("amd-"):
        return None
    if not model.startswith(SHARED_EP_MODELS):
        return None
    # two-batch overlap as prefill_conditions read it (listed as ignored where the fraction is given: read here)
    if release >= SHARED_EP_OVERLAP_FROM and "two_batch_overlap" in r.prefill_conditions:
        if TBO_FLAG in r.ignored:
            r.ignored.remove(TBO_FLAG)
        return None
    if ep == r.tp:
        return SHARED_EP
    return (
        f"SGLang {release_text(release)} on an AMD GPU at --ep-size {ep} of --tp-size {r.tp}: each EP rank holds the "
        f"fused shared expert split {r.tp // ep} ways (moe_tp_size), k3plan splits it {r.tp} ways; add "
        f"{SHARED_OFF_FLAG} for what k3plan prices ({SHARED_EP_SOURCE.note})"
    )


def ep_moe_copy(r: Reading, ep_moe: bool) -> None:
    """SGLang 0.4.8.post1-0.4.9.post4's second copy of the routed experts under --enable-ep-moe with SGLANG_USE_AITER
    on an AMD GPU (engines/sglang/ep_moe_copy.py): ``Reading.expert_copies``, which fit applies to a block-FP8
    checkpoint's experts; SGLANG_USE_AITER is then read, not listed as ignored."""
    copies = ep_moe_copies(
        release=r.release, post=r.release_post, amd=r.device_name.startswith("amd-"), env=r.env, ep_moe=ep_moe
    )
    if copies is not None:
        r.expert_copies = copies
        r.env_read.add(AITER_ENV)


def shared_fusion(r: Reading) -> None:
    """DeepSeek-V3's shared expert as SGLang fuses it into the routed MoE (``_fused_shared``). 0.4.6
    (engines/sglang/releases.py SHARED_CLONES_FROM): cloned tp_size times on an NVIDIA GPU (SM 90 and up: every one
    k3plan has) without DP attention (the dp-attention stack holds the shared experts whole already) or an all-to-all
    backend: whole on every GPU (``Reading.shared_expert_whole``); on an AMD GPU a caveat (the 0.4.6 post-releases
    disagree there). From 0.5.6 (``SHARED_EP_FROM``) one fused copy a rank on an AMD GPU under expert parallelism
    without DP attention or an all-to-all backend: whole at ep = tp; a caveat where ep < tp (tp // ep of it a rank,
    not priced). --disable-shared-experts-fusion (from 0.4.7) turns the fusion off: the shared expert an unfused
    DeepseekV2MLP, over the TP group or whole under an all-to-all backend, k3plan's split in every case (fused without
    EP the two hold the same bytes a GPU); it is read where it stops a fusion above and listed as ignored elsewhere."""
    off = _on(_large_ep_flag(r, SHARED_OFF_FLAG))
    fused = _fused_shared(r)
    if off:
        if fused is None:
            r.ignored.append(SHARED_OFF_FLAG)
    elif isinstance(fused, str):
        r.caveats.append(fused)
    elif fused is not None:
        r.shared_expert_whole = fused


# --moe-dense-tp-size: the TP width of the dense layers' MLP (DeepSeek-V3's first three layers, Kimi-K2's first).
# DeepseekV2DecoderLayer.__init__ builds a dense layer's DeepseekV2MLP with tp_rank 0, tp_size 1 where
# enable_moe_dense_fully_dp() (moe_dense_tp_size == 1): whole on every GPU; else over the TP group (tp_size, every GPU
# of a stage under DP attention). ServerArgs asserts the value is 1 or None to 0.5.12 and None, 1 or tp_size from 0.5.13
# (tp_size: the TP group, as without it). The shared experts do not follow it (DeepseekV2MoE: over the TP group, whole
# under an all-to-all backend); nor do Kimi-K3's and Kimi-Linear's dense MLPs (kimi_k3.py KimiK3MLP: the TP or the
# attention-TP group by --enable-dense-mlp-attn-tp; kimi_linear.py: the TP group), and DeepSeek-V4 has no dense layer
DENSE_TP_FLAG = "--moe-dense-tp-size"
DENSE_TP_ANY_FROM: Release = (0, 5, 13)  # tp_size accepted besides 1
DENSE_TP_SOURCE = Source(
    repo=SGLANG,
    file="python/sglang/srt/models/deepseek_v2.py",
    symbol="DeepseekV2DecoderLayer.__init__ (dense layer: DeepseekV2MLP(tp_rank=0, tp_size=1) where "
    "layers/communicator.py enable_moe_dense_fully_dp(), moe_dense_tp_size == 1; 0.5.22-0.5.23 parallel_group="
    "'replicated' where layers/layer_boundary/layout.py is_dense_ffn_fully_dp())",
    note="read in the sglang 0.4.7, 0.4.9.post2, 0.4.10, 0.5.6, 0.5.11, 0.5.15, 0.5.17, 0.5.19-0.5.23 wheels (PyPI); "
    "ServerArgs.check_server_args asserts 1 or None to 0.5.12, None, 1 or tp_size from 0.5.13 (0.5.19-0.5.23 "
    "arg_groups/validation_hook.py)",
)
DENSE_WHOLE = Cite(
    holds="SGLang's --moe-dense-tp-size 1 builds each dense layer's MLP whole on every GPU (tp_size 1)",
    sources=(DENSE_TP_SOURCE,),
)
# the bundled models by SGLang class (resolved names, by prefix): DeepseekV2DecoderLayer's (DeepSeek-V3 / R1 and
# Kimi-K2.x, whose language model is DeepseekV3ForCausalLM: kimi_k25.py), and those whose class reads no such flag
DENSE_TP_MODELS = ("deepseek-v3", "deepseek-r1", "kimi-k2")
DENSE_TP_UNREAD_BY = ("kimi-k3", "kimi-linear", "deepseek-v4")


def dense_tp(r: Reading) -> None:
    """--moe-dense-tp-size as SGLang reads it (``DENSE_TP_SOURCE``): 1 holds the dense layers' MLP whole on every GPU
    (``Reading.dense_mlp_whole``, for DeepseekV2DecoderLayer's models); tp_size (from 0.5.13) is the TP group, as
    without it; another value is refused with ServerArgs' assertion; a model whose class does not read it lists it as
    ignored."""
    raw = _large_ep_flag(r, DENSE_TP_FLAG)
    if raw is None:
        return
    n = flag_int(DENSE_TP_FLAG, raw)
    wide = r.release is None or r.release >= DENSE_TP_ANY_FROM
    if n != 1 and not (wide and n == r.tp):
        text = (
            "moe_dense_tp_size only supports None, 1, or tp_size currently"
            if wide
            else "moe_dense_tp_size only support 1 and None currently"
        )
        raise K3PlanError(
            f"--serve: {DENSE_TP_FLAG} {n} with --tp-size {r.tp}: SGLang stops at 'AssertionError: {text}' "
            f"({DENSE_TP_SOURCE.note}); give 1" + (f" or {r.tp}" if wide else "")
        )
    model = _bundled(r)
    if model.startswith(DENSE_TP_UNREAD_BY) or n == r.tp:
        r.ignored.append(DENSE_TP_FLAG)  # the class reads no such flag, or it names the TP group: the stack's split
        return
    if not model.startswith(DENSE_TP_MODELS):
        raise K3PlanError(
            f"--serve: {DENSE_TP_FLAG} {n}: how SGLang builds {model or r.model}'s dense MLP under it was not read (read "
            "for DeepseekV2DecoderLayer's models: DeepSeek-V3 / R1 and Kimi-K2.x); remove it to price the TP split"
        )
    r.dense_mlp_whole = DENSE_WHOLE


# Under DP attention SGLang splits the attention over the attention-TP group (tp_size // dp_size) and builds
# DeepseekV2DecoderLayer's MLPs over the whole TP group, every GPU of the server: a dense layer's DeepseekV2MLP takes
# tp_rank / tp_size None (the linear layers' default, get_tensor_model_parallel_world_size(); 0.5.22-0.5.23
# parallel_group 'tp', get_parallel().tp_group) unless --moe-dense-tp-size 1 holds it whole (dense_tp above); the
# shared experts' DeepseekV2MLP likewise, held whole (tp_size 1) only under DeepEP / an all-to-all backend and, from
# 0.5.6, the FP4 all-gather of the flashinfer_cutlass runner (should_use_flashinfer_cutlass_moe_fp4_allgather: a
# ModelOpt FP4 checkpoint with moe_ep_size == attn_dp_size) or, from 0.5.12, SGLANG_SHARED_EXPERT_TP1; a shared expert
# fused into the routed MoE is a FusedMoE expert split over moe_tp_size = tp_size // ep_size, 1/tp_size without EP (the
# same bytes). k3plan's dp-attention stack splits the MLPs over its tp, the attention-TP group (engines/dp_attention/
# stack.yaml sharding mlp; the shared experts whole), which TPU serving reads too: the SGLang command sets the split
# over the whole TP group as the roles' override (Stack.with_mlp_whole_tp). 0.4.6's fused clones (shared_fusion) are
# one whole shared expert a GPU, and from 0.5.6 an AMD GPU under expert parallelism holds the fused one split over
# tp_size // ep_size (whole at ep = tp_size): both kept whole
MLP_WHOLE_TP_SOURCE = Source(
    repo=SGLANG,
    file="python/sglang/srt/models/deepseek_v2.py",
    symbol="DeepseekV2DecoderLayer.__init__ (a dense layer's DeepseekV2MLP(tp_rank=None, tp_size=None) where "
    "moe_dense_tp_size != 1; 0.5.23 parallel_group='tp'); DeepseekV2MoE.__init__ (shared_experts DeepseekV2MLP with "
    "tp_rank=0, tp_size=1 only where enable_deepep_moe (0.4.5-0.4.10) or an all-to-all backend, "
    "should_use_flashinfer_cutlass_moe_fp4_allgather() or SGLANG_SHARED_EXPERT_TP1: else the TP group); "
    "layers/linear.py MergedColumnParallelLinear / RowParallelLinear (tp_size None: "
    "get_tensor_model_parallel_world_size(), the whole TP group; 0.5.23 _resolve_linear_group('tp'))",
    note="read in the sglang 0.4.3, 0.4.5, 0.4.6, 0.4.6.post2, 0.4.7, 0.4.8, 0.4.8.post1, 0.4.9, 0.4.9.post2, "
    "0.4.9.post4, 0.4.10, 0.5.6, 0.5.15 and 0.5.23 wheels (PyPI); the attention over get_attention_tp_size() "
    "(layers/dp_attention.py compute_dp_attention_world_info: attn_tp_size = tp_size // dp_size); the FP4 all-gather "
    "condition in the 0.5.6 and 0.5.11-0.5.23 wheels (not in 0.4.10), SGLANG_SHARED_EXPERT_TP1 in the 0.5.12-0.5.23 "
    "wheels (not in 0.5.11)",
)
MLP_WHOLE_TP = Cite(
    holds="under DP attention SGLang splits a DeepSeek-V3-class model's dense-layer MLP, and without an all-to-all "
    "backend its shared experts, over the whole TP group (tp_size = attention TP x dp_size, every GPU of the server), "
    "not the attention-TP group",
    sources=(MLP_WHOLE_TP_SOURCE,),
)
FP4_ALLGATHER_FROM: Release = (0, 5, 6)  # the first wheel read with should_use_flashinfer_cutlass_moe_fp4_allgather
SHARED_TP1_ENV = "SGLANG_SHARED_EXPERT_TP1"
SHARED_TP1_ENV_FROM: Release = (0, 5, 12)  # in the 0.5.12 wheel's deepseek_v2.py, not in 0.5.11's
SHARED_TP1 = Cite(
    holds="SGLang builds the shared experts whole on every GPU (DeepseekV2MLP tp_rank 0, tp_size 1; 0.5.22-0.5.23 "
    "parallel_group 'replicated') under SGLANG_SHARED_EXPERT_TP1 (0.5.12 on) or the FlashInfer CUTLASS FP4 "
    "all-gather (0.5.6 on), an all-to-all backend or not",
    sources=(MLP_WHOLE_TP_SOURCE,),
)


def _dp_shared_whole_tp(r: Reading, model: str, release: Release) -> bool | Cite:
    """Whether SGLang splits DeepSeek-V3-class (and V4's) shared experts over its whole TP group under DP attention
    (``MLP_WHOLE_TP``): True; where it holds them whole on every GPU without an all-to-all backend, the Cite that says
    so (which ``mlp_whole_tp`` sets as ``Reading.shared_expert_whole``: the stack's moe_a2a_backend none splits them
    over the attention-TP group otherwise), with a caveat where it holds a share k3plan does not price; False under an
    all-to-all backend (the stack's own rule holds them whole)."""
    if r.options.get("moe_a2a_backend", SGLANG_A2A_DEFAULT) != "none":
        return False  # DeepEP and the other all-to-all backends: tp_size 1, whole
    if SHARED_CLONES_FROM <= release < SHARED_ONE_FROM and model.startswith(SHARED_CLONE_MODELS):
        if r.device_name.startswith("amd-"):
            r.caveats.append(
                f"SGLang {release_text(release)} on an AMD GPU under DP attention: 0.4.6-0.4.6.post3 clone DeepSeek-V3's "
                "shared expert tp_size times into the routed MoE (one whole a GPU, as priced), 0.4.6.post4-0.4.6.post5 "
                f"split it over the whole TP group ({SHARED_CLONES_SOURCE})"
            )
        return SHARED_CLONES  # 0.4.6's tp_size clones: one whole shared expert a GPU
    ep = r.engine_ep or 1
    if release >= SHARED_EP_FROM and ep > 1 and r.device_name.startswith("amd-") and model.startswith(SHARED_EP_MODELS):
        overlap = release >= SHARED_EP_OVERLAP_FROM and "two_batch_overlap" in r.prefill_conditions
        if not overlap:
            if ep != r.tp:
                r.caveats.append(
                    f"SGLang {release_text(release)} on an AMD GPU at --ep-size {ep} of --tp-size {r.tp}: each EP rank "
                    f"holds the fused shared expert split {r.tp // ep} ways (moe_tp_size); k3plan holds it whole "
                    f"({SHARED_EP_SOURCE.note})"
                )
            return SHARED_EP  # fused, every EP rank a local copy: whole at ep = tp_size
    runner = r.get("--moe-runner-backend", None)
    if (
        release >= FP4_ALLGATHER_FROM
        and runner == "flashinfer_cutlass"
        and fp4_storage(model) == "nvfp4"
        and ep == r.dp
    ):
        return SHARED_TP1  # the FP4 all-gather: tp_size 1, whole
    on = r.env.get(SHARED_TP1_ENV)
    if on is not None and release >= SHARED_TP1_ENV_FROM:
        r.env_read.add(SHARED_TP1_ENV)
        if env_on(on):
            return SHARED_TP1
    return True


# DeepSeek-V4 under DP attention (V4-Flash / V4-Pro, and V4.1, which configs/deepseek_v41.py serves with the same
# DeepseekV4ForCausalLM): every DeepseekV4DecoderLayer builds deepseek_v2.DeepseekV2MoE (no dense MLP), whose shared
# expert is the DeepseekV2MLP above, over the whole TP group on the same conditions (whole under an all-to-all
# backend, the FP4 all-gather or SGLANG_SHARED_EXPERT_TP1) and never fused into the routed experts (fusion off always
# in 0.5.12-0.5.14, without --enforce-shared-experts-fusion, which k3plan refuses, in 0.5.15-0.5.23); DeepseekV4Model's
# embed_tokens is VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled()): whole on every GPU, where V3's is
# over the attention-TP group (use_attn_tp_group / get_embedding_tp_kwargs). The attention (MQALayer: wq_b and wo_a
# ColumnParallelLinear, wo_b RowParallelLinear over the attention-TP group; wq_a / wkv replicated) and the LM head
# (ParallelLMHead use_attn_tp_group=enable_dp_lm_head: dp_lm_head) are split as the dp-attention stack and V3's
# command already split them. So the roles SGLang moves off the attention-TP group are the shared expert (over the
# whole TP group) and the embedding (whole), set through the same override (Stack.with_mlp_whole_tp)
V4_DP_MODELS = ("deepseek-v4",)  # deepseek-v4-flash, deepseek-v4-pro, deepseek-v4.1-flash (resolved names, by prefix)
MLP_WHOLE_TP_V4_SOURCE = Source(
    repo=SGLANG,
    file="python/sglang/srt/models/deepseek_v4.py",
    symbol="DeepseekV4DecoderLayer.__init__ (0.5.23 DeepseekV4DecoderLayerBase: mlp = deepseek_v2.DeepseekV2MoE("
    "is_deepseek_v4=True) in every layer, no dense MLP); DeepseekV4Model.__init__ (embed_tokens = "
    "VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled()): tp_size 1 under DP attention, "
    "layers/vocab_parallel_embedding.py); MQALayer.__init__ (wq_b / wo_a / wo_b over get_attention_tp_size(), 0.5.15 "
    "get_parallel().attn_tp_size, 0.5.22-0.5.23 parallel_group 'attn_tp'); DeepseekV4ForCausalLM."
    "determine_num_fused_shared_experts (0.5.12-0.5.14: fusion off; 0.5.15-0.5.22: off without "
    "enforce_shared_experts_fusion) and 0.5.23's shared_experts_fusion_disable_reason (the same, read by "
    "layers/moe/utils.py resolve_shared_experts_config from model_loader/loader.py)",
    note="read in the sglang 0.5.12-0.5.23 wheels (PyPI): the embedding and the DeepseekV2MoE layer in each; the "
    "shared expert's DeepseekV2MLP in deepseek_v2.py DeepseekV2MoE.__init__ (tp_rank=0, tp_size=1 if "
    "_shared_expert_use_tp1 in 0.5.12-0.5.21, parallel_group='replicated' if _shared_expert_use_tp1 else 'tp' in "
    "0.5.22-0.5.23); V4.1's architectures rewritten to DeepseekV4ForCausalLM in 0.5.23 configs/deepseek_v41.py",
)
MLP_WHOLE_TP_V4 = Cite(
    holds="under DP attention SGLang splits DeepSeek-V4's shared expert, without an all-to-all backend, over the "
    "whole TP group (tp_size = attention TP x dp_size, every GPU of the server) and holds its embedding whole on "
    "every GPU, not over the attention-TP group; V4 has no dense MLP",
    sources=(MLP_WHOLE_TP_V4_SOURCE, MLP_WHOLE_TP_SOURCE),
)


def mlp_whole_tp(r: Reading) -> None:
    """The dense MLP and the shared experts over SGLang's whole TP group under DP attention (``MLP_WHOLE_TP``):
    ``Reading.mlp_whole_tp``, the roles it moves, for DeepseekV2DecoderLayer's models (DeepSeek-V3 / R1, Kimi-K2.x)
    in every release read (0.4.3-0.5.23); for DeepSeek-V4 (``MLP_WHOLE_TP_V4``, 0.5.12-0.5.23) its shared expert
    likewise and its embedding whole. Where SGLang holds the shared experts whole without an all-to-all backend
    (0.4.6's clones, AMD's fused copy at ep = tp_size, the FP4 all-gather, SGLANG_SHARED_EXPERT_TP1) the reading's
    ``shared_expert_whole`` says so instead."""
    if not r.dp_attention or r.dp <= 1:
        return
    model = _bundled(r)
    release = r.release if r.release is not None else NEWEST_RELEASE
    v4 = model.startswith(V4_DP_MODELS)
    if not v4 and not model.startswith(DENSE_TP_MODELS):
        return
    roles: tuple[str, ...] = () if v4 or r.dense_mlp_whole is not None else ("dense_mlp",)
    split = _dp_shared_whole_tp(r, model, release) if r.shared_expert_whole is None else False
    if split is True:
        roles += ("shared_expert",)
    elif isinstance(split, Cite):
        r.shared_expert_whole = split  # whole on every GPU (Stack.with_shared_expert_whole)
    if v4:
        r.mlp_whole_tp = (roles + ("embed",), MLP_WHOLE_TP_V4)
    elif roles:
        r.mlp_whole_tp = (roles, MLP_WHOLE_TP)


# --deepep-mode (auto / normal / low_latency): which DeepEP kernels run and so which buffers DeepEPBuffer.get_deepep_buffer
# sizes (normal: NVLink / RDMA bytes from DeepEP's dispatch and combine configs; low_latency: the low-latency RDMA bytes
# for the dispatch tokens a rank; auto: both). The buffer is built at the first dispatch (the dispatchers' _get_buffer),
# after the KV pool is sized (ModelRunner.initialize runs no forward before init_memory_pool): it lives in the
# 1 - mem_fraction_static share, which the derived fraction sizes with a flat 2 GiB whatever the mode
# (releases.py DEEPEP_RESERVE_SOURCE). normal also turns the CUDA graphs off ('Cuda graph is disabled because
# deepep_mode=`normal`'), after mem_fraction_static is derived in every release read: the fraction and so the pool as
# with the graphs on. The pool is the same in every mode; the buffer each sizes is checked against what the fraction
# leaves (engines/sglang/deepep.py, memory.py sglang_kv_pool)
DEEPEP_MODE_SOURCE = (
    "sglang 0.5.15 and 0.5.23 wheels (PyPI), sglang/srt/layers/moe/token_dispatcher/deepep.py DeepEPBuffer."
    "get_deepep_buffer (built lazily from _DeepEPDispatcherImplNormal / _DeepEPDispatcherImplLowLatency._get_buffer); "
    "server_args.py ServerArgs.__post_init__ (_handle_gpu_memory_settings before _handle_a2a_moe's normal-mode "
    "switch-off) in the 0.4.7-0.4.10 (the fraction first in __post_init__), 0.5.6-0.5.17 wheels, arg_groups/pipeline.py "
    "run_resolution_pipeline (handle_gpu_memory_settings before moe_hook.py handle_a2a_moe) in 0.5.19-0.5.23"
)
# --deepep-config (JSON or a file): DeepEPConfig's num_sms and the normal dispatch / combine configs (DeepEP's Config:
# SMs, NVLink and RDMA chunk and buffer sizes), which set the normal-mode buffer's bytes in get_deepep_buffer; and
# SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 128, asserted <= 1024), the low-latency buffer's token cap.
# Both size only DeepEP's Buffer, which SGLang builds lazily at the first dispatch (_DeepEPDispatcherImplNormal /
# LowLatency._get_buffer): model_runner.py ModelRunner.initialize runs no forward between load_model and
# init_memory_pool, so the buffer is allocated after the pool is sized, out of the memory the fraction leaves (from
# 0.5.15 a derived fraction holds 2 GiB for it: releases.py DEEPEP_RESERVE_SOURCE). The pool is the same with or
# without them; the buffer they size, DeepEP's defaults included, is priced as what SGLang allocates after its pool
# (engines/sglang/deepep.py sglang_deepep_buffer; the start check: memory.py sglang_kv_pool). A config file named on
# the command cannot be read: refused
DEEPEP_CONFIG_REFUSAL = (
    "DeepEP's normal-mode buffer sizes from a tuned config file (num_sms, NVLink / RDMA chunk and buffer sizes: sglang "
    "0.5.15 wheel, layers/moe/token_dispatcher/deepep.py DeepEPConfig, DeepEPBuffer.get_deepep_buffer; utils/common.py "
    "load_json_config reads a file where the value is not JSON), whose contents k3plan cannot read,"
)
DEEPEP_BUFFER_SOURCE = (
    "sglang 0.5.15.post1 wheel (PyPI), sglang/srt/layers/moe/token_dispatcher/deepep.py DeepEPConfig.__init__, "
    "DeepEPBuffer.get_deepep_buffer (lazily from the dispatchers' _get_buffer), _DeepEPDispatcherImplBase.__init__ "
    "(SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK, assert <= 1024), model_executor/model_runner.py "
    "ModelRunner.initialize (no forward between load_model and init_memory_pool); deepseek-ai/DeepEP csrc/config.hpp "
    "@9af0e0d0 (the commit SGLang's Dockerfile pins: engines/sglang/deepep.py DEEPEP_COMMIT) Config.get_nvl_buffer_size_hint / get_rdma_buffer_size_hint / get_low_latency_rdma_size_hint, "
    "deep_ep/buffer.py @04b06f7a Buffer.num_sms, get_dispatch_config / get_combine_config"
)
DEEPEP_CONFIG_FIELDS = CONFIG_DEFAULTS  # DeepEP's Config and its pybind defaults (csrc/deep_ep.cpp)
DEEPEP_TOKENS_DEFAULT = 128  # environ.py EnvInt(128)
DEEPEP_TOKENS_MAX = 1024  # the dispatcher's assert (DeepEP's FINISHED_SUM_TAG)


def deepep_mode(r: Reading) -> str | None:
    """--deepep-mode: one of SGLang's choices (``DEEPEP_MODE_SOURCE``), returned for deepep_config, which prices the
    buffer it sizes where one is built; None where not given (SGLang's default auto)."""
    raw = _large_ep_flag(r, "--deepep-mode")
    if raw is None:
        return None
    if raw not in DEEPEP_MODES:
        raise K3PlanError(f"--serve: --deepep-mode {raw}: expected one of {', '.join(DEEPEP_MODES)}")
    return raw


# --deepep-config reaches memory through DeepEP's buffer alone: DeepEPConfig is read by DeepEPBuffer.get_deepep_buffer,
# which only the DeepEP dispatcher (_DeepEPDispatcherImplNormal / LowLatency._get_buffer) calls, and, for its num_sms, by
# the batch overlap's DeepGEMM SM split (an SM count, no bytes). Without a DeepEP all-to-all no
# such buffer is built, so the flag sizes nothing: the target's --moe-a2a-backend deepep, or the draft's deepep that
# SGLang picks for an NVFP4 checkpoint's FP8 NextN MoE under SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE (speculative_moe_a2a_backend;
# --speculative-moe-a2a-backend itself is not read by k3plan), keeps the refusal
DEEPEP_CONFIG_SOURCE = (
    "sglang 0.5.15 wheel (PyPI), sglang/srt/layers/moe/token_dispatcher/deepep.py DeepEPConfig.__init__ "
    "(get_deepep_config) and its only readers, DeepEPBuffer.get_deepep_buffer and the DeepGEMM SM split of "
    "batch_overlap/operations_strategy.py (num_sms); arg_groups/overrides.py _a2a_backend_overrides (deepep only "
    "under --enable-deepep-waterfill, which k3plan does not read) and _deepseek_spec_moe_resolution (the draft's "
    "deepep under SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE)"
)
DEEPEP_NEXTN_ENV = "SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE"


def _deepep_tuned(raw: str) -> tuple[int, int, tuple[dict[str, int], dict[str, int]]]:
    """--deepep-config's JSON: the (NVLink, RDMA) channel-token products of its normal dispatch / combine configs,
    the larger of the two each (get_deepep_buffer takes the max of their size hints), and the two configs with
    DeepEP's defaults filled in; one line on what SGLang or DeepEP refuses."""
    got = json_object("--deepep-config", raw)
    configs = []
    for part in ("normal_dispatch", "normal_combine"):  # DeepEPConfig.__init__ indexes both
        one = got.get(part)
        if not isinstance(one, dict):
            raise K3PlanError(f"--serve: --deepep-config: SGLang reads config_parsed[{part!r}] (KeyError without it)")
        unknown = sorted(set(one) - set(DEEPEP_CONFIG_FIELDS))
        if unknown:
            raise K3PlanError(f"--serve: --deepep-config: DeepEP's Config takes no {unknown[0]!r}")
        values = {**DEEPEP_CONFIG_FIELDS, **one}
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values.values()):
            raise K3PlanError(f"--serve: --deepep-config: {part}: DeepEP's Config takes non-negative integers")
        configs.append(values)
    if configs[0]["num_sms"] != configs[1]["num_sms"]:  # DeepEPConfig.__init__'s assert
        raise K3PlanError("--serve: --deepep-config: SGLang asserts normal_dispatch's num_sms == normal_combine's")
    nvl = max(c["num_sms"] // 2 * c["num_max_nvl_chunked_recv_tokens"] for c in configs)
    rdma = max(c["num_sms"] // 2 * c["num_max_rdma_chunked_recv_tokens"] for c in configs)
    return nvl, rdma, (configs[0], configs[1])


def deepep_config(r: Reading, mode: str | None = None) -> None:
    """--deepep-mode, --deepep-config and SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK: where a DeepEP all-to-all
    builds the buffer they size, read into ``Reading.deepep`` (priced after the pool: engines/sglang/deepep.py,
    memory.py sglang_kv_pool; ``DEEPEP_BUFFER_SOURCE``), a config file refused (``DEEPEP_CONFIG_REFUSAL``); listed as
    ignored where none is built (``DEEPEP_CONFIG_SOURCE``)."""
    raw = r.get("--deepep-config", None)
    tokens_raw = r.env.get(DEEPEP_TOKENS_ENV)
    if tokens_raw is not None:
        r.env_read.add(DEEPEP_TOKENS_ENV)
    built = r.options.get("moe_a2a_backend", SGLANG_A2A_DEFAULT) == "deepep" or _on(r.env.get(DEEPEP_NEXTN_ENV))
    if not built:
        if raw is not None:
            r.ignored.append("--deepep-config")
        if mode is not None:
            r.ignored.append("--deepep-mode")
        return
    configs = None
    if raw is not None:
        if not raw.strip().startswith("{"):
            raise K3PlanError(
                f"--serve: --deepep-config: {DEEPEP_CONFIG_REFUSAL} is not priced by k3plan; give the config as JSON, "
                "or remove it to price SGLang without it"
            )
        configs = _deepep_tuned(raw)[2]
    tokens = DEEPEP_TOKENS_DEFAULT
    if tokens_raw is not None:
        tokens = flag_int(DEEPEP_TOKENS_ENV, tokens_raw)
        if tokens > DEEPEP_TOKENS_MAX:
            raise K3PlanError(
                f"--serve: {DEEPEP_TOKENS_ENV}={tokens}: SGLang asserts it is at most {DEEPEP_TOKENS_MAX} "
                f"({DEEPEP_BUFFER_SOURCE})"
            )
    r.deepep = (mode or "auto", configs, tokens)
    if not r.device_name.startswith("nvidia-"):  # DeepEP's CUDA build is the one read (engines/sglang/deepep.py)
        r.caveats.append(
            f"DeepEP's all-to-all buffer on {r.device_name or 'this GPU'}, made at the first dispatch after SGLang "
            "sizes its pool out of what --mem-fraction-static leaves, is not priced by k3plan (engines/sglang/deepep.py "
            "sizes DeepEP's CUDA build)"
        )


# --flashinfer-mxfp4-moe-precision (its choices by release: engines/sglang/server_flags.py CHOICES): the activation
# precision of the FlashInfer MXFP4 MoE. "default" is SGLang's own. "fp8" (from 0.5.19) on SM 90 takes FlashInfer's
# Humming W4A8 path: preprocess_moe_weights_for_sm90_mixed_gemm_humming returns the same SM 90 interleaved layout as
# the W4A16 path's interleave_moe_weights_for_sm90_mixed_gemm / interleave_moe_scales_for_sm90_mixed_gemm (uint8, the
# input's shape: torch.empty_like), and SGLang keeps beside them an FP32 residual scale a local expert for w13 and
# for w2 and one FP32 scalar a MoE layer (w13_humming_residual_scale, w2_humming_residual_scale,
# humming_fc2_act_scale): 8 B a local expert and 4 B a layer, under 0.1 MiB for every bundled model, not priced.
# Elsewhere ("bf16", or "fp8" on Blackwell, whose trtllm path raises NotImplementedError for it at the first forward
# in 0.5.19's mxfp4_flashinfer_trtllm_moe.py) it stays refused, unread
FI_MXFP4_PRECISION = "--flashinfer-mxfp4-moe-precision"
FI_MXFP4_PRECISION_SOURCE = (
    "sglang 0.5.19 wheel (PyPI), sglang/srt/layers/quantization/mxfp4_flashinfer_cutlass_moe.py "
    "Mxfp4FlashinferCutlassMoEMethod.process_weights_after_loading (_use_sm90_humming: SM 90 and precision fp8) and "
    "mxfp4.py Mxfp4MoEMethod.__init__ (the same switch for the generic MXFP4 MoE); flashinfer-python 0.7.2.post1 "
    "wheel (PyPI), flashinfer/fused_moe/prepare.py preprocess_moe_weights_for_sm90_mixed_gemm_humming"
)


def fi_mxfp4_precision(r: Reading) -> None:
    """--flashinfer-mxfp4-moe-precision: "default", or "fp8" on a Hopper GPU (``FI_MXFP4_PRECISION_SOURCE``),
    listed as ignored; any other value refused, not priced. The release's choices are checked before (check_choices)."""
    raw = r.get(FI_MXFP4_PRECISION, None)
    if raw is None:
        return
    hopper = r.device_name.startswith("nvidia-") and r.device_name not in BLACKWELL
    if raw == "default" or (raw == "fp8" and hopper):
        r.ignored.append(FI_MXFP4_PRECISION)
        return
    raise K3PlanError(
        f"--serve: {FI_MXFP4_PRECISION} {raw}: the FlashInfer MXFP4 MoE at {raw} activations on {r.device_name} "
        "is not priced by k3plan; remove it to price SGLang without it"
    )


# ServerArgs flags with a memory effect k3plan does not model (python/sglang/srt/server_args.py): none left
# unconditionally since --deepep-config is read by deepep_config above (a config file refused where DeepEP builds its
# buffer, JSON read with the buffer's growth named).
# --deepep-mode, --moe-dense-tp-size and --disable-shared-experts-fusion are read (deepep_mode, dense_tp,
# shared_fusion above)
UNPRICED: dict[str, str] = {}


def check_env(env: dict[str, str], *, stack: str = "") -> None:
    """No SGLang variable is refused by value."""


def era_fraction_caveat(r: Reading) -> None:
    """A command read as a release before 0.5.3 that gives no --mem-fraction-static: the fraction that release
    derives (engines/sglang/fraction_eras.py era_fraction, which the stack's reserve follows: Stack.release_fraction),
    said with its source."""
    if r.release is None or r.device_gib is None or "mem_fraction_static" in r.options:
        return
    tp_size = r.tp  # --tp-size as given: every GPU of a stage under DP attention (split below)
    got = era_fraction(
        r.release,
        gpu_mib=r.device_gib * 1024,
        tp_size=tp_size,
        pp=r.pp,
        dp_attention=r.dp_attention,
        cuda=not r.device_name.startswith("amd-"),
    )
    if got is None:
        return
    r.caveats.append(
        f"mem_fraction_static {got[0]:.4g}: SGLang {release_text(r.release)}'s default for a "
        f"{r.device_gib * 1024:,.0f} MiB GPU at tp_size {tp_size} x pp {r.pp}"
        + (" with DP attention" if r.dp_attention else "")
        + f", before the reserve derivation of {release_text(RESERVE_FORM_FROM)} ({got[1]})"
    )


def finish(r: Reading) -> None:
    """The stack: sglang, or dp-attention with --enable-dp-attention; SGLang's default chunk by GPU memory."""
    if r.chunk is None and r.device_gib is not None:
        # the flag's default by GPU memory, set before the DP division below as ServerArgs.__post_init__ orders them
        # (sglang 0.5.15 wheel server_args.py: _handle_gpu_memory_settings, then _handle_data_parallelism); a
        # release before 0.5.3 by its own rule (engines/sglang/fraction_eras.py era_chunk)
        era = None if r.release is None else era_chunk(r.release, gpu_mib=r.device_gib * 1024)
        if era is not None and r.release is not None:
            r.chunk, r.chunk_source = (
                era[0],
                (
                    f"SGLang {release_text(r.release)}'s default chunked_prefill_size {era[0]} for a "
                    f"{r.device_gib:.0f} GiB GPU ({era[1]})"
                ),
            )
        else:
            r.chunk, r.chunk_source = default_chunk(r.device_gib)
    era_fraction_caveat(r)
    r.stack = ENGINE
    if r.dp_attention:  # SGLang's --tp-size counts every GPU of the server; attention TP = tp_size / dp_size
        r.stack, r.tp = DP_ATTENTION.name, dp_attention_tp(r.tp, r.dp)
        # and it prefills chunked_prefill_size // dp_size a DP rank (server_args.py handle_data_parallelism; the
        # sglang stack's dp_attention_chunk): k3plan's chunk is a DP group's
        if r.chunk is not None:
            r.chunk = max(1, r.chunk // r.dp)
            if r.chunk_source:
                r.chunk_source += f", // dp_size {r.dp} a DP rank (server_args.py _handle_data_parallelism)"
