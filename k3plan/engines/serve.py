"""A serve command as input (issue 34): ``vllm serve MODEL ...`` or ``python3 -m sglang.launch_server
--model-path MODEL ...`` read into the question k3plan answers: the model, the split, the workload and the
engine options that change memory. Every flag is read, listed as ignored (it changes nothing k3plan prices),
or refused in one line (a K3PlanError: exit 2) where k3plan cannot honour it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from k3plan.engines.flags import TORCHTPU_DEFAULT_BLOCK
from k3plan.engines.serve_values import MAX_FLAG_INT, flag_int  # noqa: F401  # read through here too
from k3plan.engines.sglang import serve as sglang_serve
from k3plan.engines.vllm import serve as vllm_serve
from k3plan.engines.vllm.serve import human_readable_int  # noqa: F401  # read through here too
from k3plan.errors import K3PlanError

# Hugging Face ids -> bundled models (k3plan/models/bundled), exact ids only: a checkpoint k3plan does not bundle
# (another release of the family, an AWQ / GPTQ / INT4 conversion) is refused by name, never priced as another
HF_MODELS = {
    "moonshotai/kimi-k3": "kimi-k3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-r1-0528": "deepseek-v3",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v3-0324": "deepseek-v3",
    "deepseek-ai/deepseek-v4-flash": "deepseek-v4-flash",
    "deepseek-ai/deepseek-v4-pro": "deepseek-v4-pro",
    # the later releases the torchtpu-vllm nightlies serve (configs/deepseek-v4-flash-dp8-ep.sh @7de7a3f5,
    # deepseek-v4-pro-dp16-ep.sh @5e1723db), read as the bundled configs: vllm-project/vllm#51041 compares the two
    # Flash config.json files (the same compress_ratios, sliding_window 128, 43 layers, expert_dtype fp4), and the
    # Pro nightly's "805 GiB of weights is 72.8 GiB/rank" is the bundled Pro's weights within 3%
    # (tests/engines/cases/torchtpu-dsv4-pro-dp16-nightly.yaml). The same thread reports vLLM holding more KV a token
    # for 0731 than for the preview on H20 (open, with MTP in both runs); tests/engines/cases/vllm-51454-* keep the
    # B200 0731 logs, whose concurrency k3plan does not match yet
    "deepseek-ai/deepseek-v4-flash-0731": "deepseek-v4-flash",
    "deepseek-ai/deepseek-v4-pro-0813": "deepseek-v4-pro",
    # the fp8 (128 x 128 block) DeepseekV3ForCausalLM checkpoints the bundled kimi-k2 config is
    "moonshotai/kimi-k2-instruct": "kimi-k2",
    "moonshotai/kimi-k2-base": "kimi-k2",
    "moonshotai/kimi-k2-instruct-0905": "kimi-k2",
    # Kimi-K2.5 has Kimi-K2.6's checkpoint layout (KimiK25ForConditionalGeneration, INT4 group-32 experts, the same
    # 64 shards of 595,148,192,736 B: models/bundled/kimi-k2.6/provenance.json); moonshotai/Kimi-K2.6 itself
    # resolves through that provenance.json (models.hub.bundled_of)
    "moonshotai/kimi-k2.5": "kimi-k2.6",
    "moonshotai/kimi-linear-48b-a3b-instruct": "kimi-linear-48b-a3b",
    "moonshotai/kimi-linear-48b-a3b-base": "kimi-linear-48b-a3b",
}
# names that say the checkpoint is a conversion k3plan cannot price (its bytes are not the bundled checkpoint's)
UNPRICED_MARKS = ("awq", "gptq", "int4", "w4a16", "gguf", "bnb", "nf4", "exl2")

# flags that change nothing k3plan prices (name -> values it takes: 0 a switch, 1 a value): host-side loading,
# parsers, compile buckets, the API server, multi-node wiring, KV transfer
IGNORED = {
    "--trust-remote-code": 0,
    "--enable-ep-weight-filter": 0,  # each rank streams only its experts' bytes: host RAM, not HBM
    "--language-model-only": 0,  # the vision tower is not loaded (without it: engines.vllm.memory adds the tower)
    "--limit-mm-per-prompt": 1,
    # how vLLM runs a vision encoder over the TP group (moonshotai/Kimi-K2.6 docs/deploy_guidance.md's vLLM line passes
    # "data": the tower replicated on every GPU, as engines/vllm/memory.py counts it whole on every device; the default
    # "weights" would shard it over TP: for K2.6 at most 0.88 GiB a device, the tower's whole)
    "--mm-encoder-tp-mode": 1,
    "--model-loader-extra-config": 1,
    "--load-format": 1,
    "--compilation-config": 1,
    "--enable-auto-tool-choice": 0,
    "--tool-call-parser": 1,
    "--reasoning-parser": 1,
    "--async-scheduling": 0,
    "--no-async-scheduling": 0,
    "--host": 1,
    "--port": 1,
    "--served-model-name": 1,
    "--tokenizer": 1,
    "--max-seq-len-to-capture": 1,  # vLLM V0's CUDA-graph capture length (gone in V1): graphs, not the pool
    "--enable-reasoning": 0,  # vLLM < 0.9's switch for --reasoning-parser: output parsing
    "--tokenizer-mode": 1,  # how the host tokenizes (vLLM's DeepSeek-V4 recipes: deepseek_v4)
    "--seed": 1,
    "--disable-log-requests": 0,
    "--enable-log-requests": 0,
    "--disable-log-stats": 0,
    "--enable-chunked-prefill": 0,  # vLLM V1's default; the chunk is --max-num-batched-tokens
    "--distributed-executor-backend": 1,
    "--enforce-eager": 0,
    "--enable-prefix-caching": 0,  # pool sizing unchanged; the hit rate is fit's --prefix-hit
    "--no-enable-prefix-caching": 0,
    "--mamba-cache-mode": 1,  # align: one state a block with prefix caching (torchtpu-vllm's gate)
    "--block-size": 1,  # read below: the page
    "--chat-template": 1,
    "--max-log-len": 1,
    "--uvicorn-log-level": 1,
    "--disable-uvicorn-access-log": 0,
    # vLLM's default (the hybrid KV cache manager on), as the DeepSeek-V4 recipes spell it out; the opposite switch,
    # --disable-hybrid-kv-cache-manager, changes the pool's layout and is not read
    "--no-disable-hybrid-kv-cache-manager": 0,
    # multi-node and disaggregation wiring the engines' own recipes pass: which host runs which rank, how KV moves
    "--disable-custom-all-reduce": 0,  # NCCL instead of the custom all-reduce: its buffers are outside the pool
    "--nnodes": 1,
    "--node-rank": 1,
    "--headless": 0,
    "--master-addr": 1,
    "--master-port": 1,
    "--data-parallel-size-local": 1,
    "--data-parallel-start-rank": 1,
    "--data-parallel-address": 1,
    "--data-parallel-rpc-port": 1,
    "--api-server-count": 1,
    "--kv-transfer-config": 1,  # a disaggregated deployment's KV connector: the pool is sized as without it
    # the torchtpu-vllm nightlies' EXTRA_SERVE_ARGS (kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/configs/
    # deepseek-v4-flash-dp8-ep.sh @7de7a3f5, deepseek-v4-pro-dp16-ep.sh @5e1723db): sampling defaults and how the
    # host reads the safetensors files, nothing on the device
    "--generation-config": 1,
    "--override-generation-config": 1,
    "--safetensors-load-strategy": 1,
    # sglang
    "--trust-remote": 0,
    "--dist-init-addr": 1,
    "--chunked-prefill-size": -1,  # read below
}
# environment variables a serve command's recipe sets before the engine, read as the engine reads them
IGNORED_ENV = {
    # torchtpu-vllm: the MoE weights' requantized dtype for its kernels (tpu_platform.py additional_env_vars);
    # k3plan prices the stack's runtime formats, the variable is listed, not priced
    "MOE_REQUANTIZE_WEIGHT_DTYPE",
    "MOE_REQUANTIZE_BLOCK_SIZE",
    "REQUANTIZE_WEIGHT_DTYPE",
    "REQUANTIZE_BLOCK_SIZE",
    "USE_MOE_FUSED_EP_KERNEL",
    "TPU_MULTIHOST_BACKEND",
    "TORCH_TPU_TOPOLOGY",
    "VLLM_USE_V1",
    "VLLM_LOGGING_LEVEL",
    "HF_TOKEN",
    "HF_HOME",
    "HF_HUB_ENABLE_HF_TRANSFER",
    "CUDA_VISIBLE_DEVICES",
    "NCCL_DEBUG",
    "VLLM_WORKER_MULTIPROC_METHOD",
    "SGLANG_LOG_LEVEL",
    # the torchtpu-vllm DeepSeek-V4 nightlies' exports (configs/deepseek-v4-flash-dp8-ep.sh @7de7a3f5,
    # deepseek-v4-pro-dp16-ep.sh @5e1723db): model-implementation switches, kernel layouts, timeouts and the
    # profiler; the weights' formats are the stack's runtime formats k3plan prices
    "NEW_MODEL_DESIGN",
    "MODEL_IMPL_TYPE",
    "TPU_ROPE_CACHE_ROW_MAJOR",
    "TPU_MOE_HASH_TABLE_ROW_MAJOR",
    "TPU_DSV4_HONOR_CONTINUE_FINAL_MESSAGE",
    "MOE_FUSED_EP_ENABLE_W4A8",
    "MOE_FUSED_EP_V2_HEIGHT_RUNGS_OVERRIDE",
    "TPU_MOE_SKIP_PADDED_TOKENS",
    "RAGGED_GATHER_REDUCE_VERSION",
    "LIBTPU_INIT_ARGS",
    "VLLM_USE_BREAKABLE_CUDAGRAPH",
    "VLLM_USE_AOT_COMPILE",
    "VLLM_NO_USAGE_STATS",
    "VLLM_ENGINE_READY_TIMEOUT_S",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S",
    "VLLM_RPC_TIMEOUT",
    "VLLM_SHM_BROADCAST_TIMEOUT_S",
    "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY",
    "TORCH_DIST_TIMEOUT",
    "VLLM_ROCM_USE_AITER",  # vLLM on ROCm: AITER's kernels (the vLLM recipes' AMD hardware_overrides)
    "VLLM_ROCM_USE_SKINNY_GEMM",
    "VLLM_ROCM_USE_AITER_MOE",
    "SAFETENSORS_FAST_GPU",  # loading straight to the GPU: host-side, the weights land the same
    # FlashInfer's MoE kernels for fp8 / fp4 weights (the vLLM recipes' hopper / blackwell overrides)
    "VLLM_USE_FLASHINFER_MOE_FP8",
    "VLLM_USE_FLASHINFER_MOE_FP4",
    "CAPTURE_PROFILE",
    "USE_PHASED_PROFILER",
}
KV = {"auto": None, "bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_ds_mla": "fp8_ds_mla"}
# checkpoint formats an engine's --quantization may name for a checkpoint k3plan prices as stored; torchtpu-vllm's
# deepseek_v4_fp8 (tpu_platform.py TpuPlatform.supported_quantization @0095cdcb) reads the same fp8 bytes
QUANT_OK = ("", "compressed-tensors", "fp8", "mxfp4", "deepseek_v4_fp8")
CONTROL = frozenset(chr(c) for c in range(32)) - {"\t", "\n", "\r"} | {"\x7f"}


@dataclass(frozen=True)
class ServeQuestion:
    """What a serve command asks, in fit's terms."""

    engine: str  # vllm | sglang
    model: str
    stack: str
    tp: int
    pp: int
    dp: int
    ep: int | None
    context: int | None  # --max-model-len / --context-length as given; None: the model's own maximum
    chunk: int | None
    batch: int  # max_num_seqs / max_running_requests: as given, else the engine's default (batch_source)
    stack_options: dict[str, str]
    kv_dtype: str | None
    ignored: tuple[str, ...] = field(default=())
    caveats: tuple[str, ...] = field(default=())  # flags read whose effect k3plan's figures do not follow
    expert_parallel: bool = True  # vLLM's --enable-expert-parallel (SGLang: its own EP flags)
    language_model_only: bool = False  # vLLM's --language-model-only: a multimodal model's vision tower not loaded
    moe_backend: str | None = None
    max_running_requests: int | None = None  # SGLang's --max-running-requests as given (None: its own default)
    batch_source: str = "the command's flag"
    chunk_source: str = "the command's flag"
    context_auto: bool = False  # vLLM's --max-model-len auto / -1: the engine fits the length to its pool
    num_gpu_blocks_override: int | None = None  # vLLM's --num-gpu-blocks-override: the pool's block count
    block_size: int | None = None  # --block-size as given
    env: dict[str, str] = field(default_factory=dict)  # VAR=value prefixes
    # SGLang's --engram-config placement as k3plan's --engram ("hbm" / "host"); None: the engine's default
    engram: str | None = None

    @property
    def stack_ref(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.stack_options.items())
        return f"{self.stack}:{opts}" if opts else self.stack


def model_of(name: str) -> str:
    """A Hugging Face id (HF_MODELS, exact) or a bundled model's own name (k3plan's launch lines) -> the bundled
    model; anything else is refused by name (a checkpoint k3plan would otherwise price as another's bytes)."""
    from k3plan.models.loader import bundled_models

    key = name.strip().rstrip("/").lower()
    if key in bundled_models():
        return key
    from k3plan.models.hub import bundled_of  # each bundled model's own id, as k3plan's launch lines write it

    if bundled_of(key):
        return str(bundled_of(key))
    if key in HF_MODELS:
        return HF_MODELS[key]
    mark = next((m for m in UNPRICED_MARKS if m in key.replace("_", "-").split("/")[-1].split("-")), None)
    why = (
        f"its name says a {mark.upper()} conversion, whose bytes k3plan does not price"
        if mark
        else "k3plan bundles no config for that checkpoint and will not price it as another's"
    )
    raise K3PlanError(
        f"--serve: model {name!r} is not a checkpoint k3plan can price ({why}); expected one of "
        f"{', '.join(sorted(HF_MODELS))} or a bundled model name ({', '.join(bundled_models())})"
    )


def _split(command: str) -> list[str]:
    """The command as the shell would pass it: one line (backslash-newline continuations joined), no control
    characters (a pasted terminal escape is not part of any flag), quotes balanced."""
    bad = next((i for i, ch in enumerate(command) if ch in CONTROL), None)
    if bad is not None:
        raise K3PlanError(
            f"--serve: the command holds a control character ({command[bad]!r} at position {bad}): paste the "
            "command as plain text"
        )
    joined = command.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        argv = shlex.split(joined)
    except ValueError as err:
        raise K3PlanError(f"--serve: cannot split the command ({err}); expected a shell command line") from None
    return argv


def _env_prefix(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """``VAR=value ... vllm serve ...``: the environment a command sets for the engine, and the command."""
    import re

    env: dict[str, str] = {}
    i = 0
    while i < len(argv) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[i]):
        name, _, value = argv[i].partition("=")
        env[name] = value
        i += 1
    if i < len(argv) and argv[i] == "env":  # `env VAR=value cmd`
        more, rest = _env_prefix(argv[i + 1 :])
        return {**env, **more}, rest
    return env, argv[i:]


def parse_serve(
    command: str, *, platform: str, device_gib: float | None = None, device_name: str = ""
) -> ServeQuestion:
    """``platform``: the hardware's kind ("tpu" or "gpu"): vllm serve on a TPU is torchtpu-vllm, on a GPU vllm.
    ``device_gib`` / ``device_name``: the device's memory and name, for the defaults the engine picks by them
    (vLLM's max_num_seqs and max_num_batched_tokens, SGLang's chunked_prefill_size)."""
    env, argv = _env_prefix(_split(command))
    if argv[:2] == ["vllm", "serve"]:
        engine, rest = "vllm", argv[2:]
        model = ""
        if rest and not rest[0].startswith("-"):
            model, rest = rest[0], rest[1:]
    elif len(argv) >= 3 and argv[0].startswith("python") and argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
        # vLLM's API server module, the entry point `vllm serve` wraps: the same EngineArgs, the model as --model
        engine, model, rest = "vllm", "", argv[3:]
    elif len(argv) >= 3 and argv[0].startswith("python") and argv[1:3] == ["-m", "sglang.launch_server"]:
        engine, model, rest = "sglang", "", argv[3:]
    elif argv[:2] == ["sglang", "serve"]:
        # SGLang's own CLI: `sglang serve MODEL ...` is launch_server with --model-path MODEL (sgl-project/sglang@0298b5b4
        # python/sglang/cli/serve.py serve, _normalize_positional_model_path; the LLM backend's prepare_server_args)
        engine, model, rest = "sglang", "", argv[2:]
        if rest and not rest[0].startswith("-"):
            rest = ["--model-path", rest[0], *rest[1:]]
    else:
        got = argv[0] if argv else "nothing"
        raise K3PlanError(
            f"--serve: {got!r} is not an engine k3plan reads; expected 'vllm serve MODEL ...', "
            "'python3 -m vllm.entrypoints.openai.api_server --model MODEL ...', "
            "'python3 -m sglang.launch_server --model-path MODEL ...' or 'sglang serve MODEL ...'"
        )
    if engine == "vllm":
        rest = [vllm_serve.dashes(tok) for tok in rest]
    flags: dict[str, str] = {}
    ignored: list[str] = []
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("-") or tok in ("-", "--"):
            raise K3PlanError(f"--serve: unexpected argument {tok!r}; expected --flag [value]")
        name, eq, val = tok.partition("=")
        takes = IGNORED.get(name)
        switch = name in vllm_serve.VLLM_SWITCHES or (
            name.startswith("--no-") and "--" + name[5:] in vllm_serve.VLLM_SWITCHES
        )
        if eq:
            value = val
            i += 1
        elif not switch and takes != 0 and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value = rest[i + 1]
            i += 2
        else:
            value = "true"
            i += 1
        if name.startswith("--no-") and "--" + name[5:] in vllm_serve.VLLM_SWITCHES:
            name, value = "--" + name[5:], "false"
        flags[name] = value  # the engine takes the last occurrence
    for name, value in flags.items():
        if value == "" and IGNORED.get(name) != 0 and name not in vllm_serve.VLLM_SWITCHES:
            raise K3PlanError(f"--serve: {name}= is empty; expected a value")
    get = flags.pop
    if engine == "sglang":
        model = get("--model-path", "") or get("--model", "")
        if not model:
            raise K3PlanError("--serve: sglang.launch_server needs --model-path MODEL")
    else:
        flag_model = get("--model", "")
        model = model or flag_model
        if not model:
            raise K3PlanError("--serve: vllm serve needs a model: 'vllm serve MODEL ...' (or --model MODEL)")
    tp = flag_int(
        "--tensor-parallel-size", get("--tensor-parallel-size", get("-tp", get("--tp-size", get("--tp", "1"))))
    )
    pp = flag_int("--pipeline-parallel-size", get("--pipeline-parallel-size", get("-pp", get("--pp-size", "1"))))
    dp = flag_int("--data-parallel-size", get("--data-parallel-size", get("-dp", get("--dp-size", get("--dp", "1")))))
    ep_flag = get("--enable-expert-parallel", None)
    ep_size = get("--ep-size", get("--ep", None))
    expert_parallel = True
    ep: int | None
    if engine == "vllm":
        if ep_flag is None and platform == "tpu":
            raise K3PlanError(
                "--serve: vllm serve on a TPU without --enable-expert-parallel: the plugin's expert placement without "
                "EP was not read (its K3 CI always passes it); add --enable-expert-parallel"
            )
        # without EP vLLM splits each expert's intermediate over the TP x DP ranks: the same bytes a device as EP over
        # them, which k3plan prices, plus the K3 model's per-shard padding (engines.vllm.memory.moe_shard_padding)
        expert_parallel = ep_flag is not None and ep_flag.lower() not in ("false", "0")
        if not expert_parallel and platform == "tpu":
            raise K3PlanError(
                "--serve: vllm serve on a TPU with --no-enable-expert-parallel: the plugin's expert placement without "
                "EP was not read (its K3 CI always passes --enable-expert-parallel)"
            )
        # either way the experts spread over every TP x DP rank: with EP whole experts, without it each expert's
        # intermediate TP-split over the flattened dp x tp group (vllm-project/vllm@00c1c6a2
        # vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make, flatten_tp_across_dp_and_pcp:
        # "There are actually dp_size * pcp_size * tp_size devices ... we shard across all devices"); the bytes a
        # device are the same, which k3plan prices as EP over those ranks
        ep = tp * dp
    else:
        ep = flag_int("--ep-size", ep_size) if ep_size else None
    context_auto = False
    raw_context = get("--max-model-len", get("--context-length", None))
    context: int | None = None
    if raw_context is not None:
        if engine == "vllm" and raw_context.strip().lower() in ("auto", "-1"):
            context_auto = True  # human_readable_int_or_auto: the engine fits the length to its pool
        elif engine == "vllm":
            context = vllm_serve.human_readable_int("--max-model-len", raw_context)
        else:
            context = flag_int("--context-length", raw_context)
    raw_chunk = get("--max-num-batched-tokens", None)
    sg_chunk = get("--chunked-prefill-size", None)
    chunk: int | None = None
    chunk_source = "the command's flag"
    if engine == "vllm" and raw_chunk is not None:
        chunk = vllm_serve.human_readable_int("--max-num-batched-tokens", raw_chunk)
    elif engine == "sglang" and sg_chunk is not None:
        chunk = flag_int("--chunked-prefill-size", sg_chunk, lo=-1)
        if chunk == -1 or chunk == 0:
            raise K3PlanError(
                f"--serve: --chunked-prefill-size {sg_chunk}: chunked prefill off is not priced; give a chunk size"
            )
    elif raw_chunk is not None or sg_chunk is not None:
        flag = "--max-num-batched-tokens" if raw_chunk is not None else "--chunked-prefill-size"
        raise K3PlanError(f"--serve: {flag} is not {engine}'s flag")
    seqs = get("--max-num-seqs", None)
    running = get("--max-running-requests", None)
    batch_source = "the command's flag"
    if engine == "vllm":
        if running is not None:
            raise K3PlanError("--serve: --max-running-requests is SGLang's flag; vllm serve takes --max-num-seqs")
        large = (
            device_gib is not None and device_gib >= vllm_serve.VLLM_LARGE_GPU_GIB and "a100" not in device_name.lower()
        )
        if platform == "tpu":  # the plugin's get_device_total_memory raises: device_memory 0 (VLLM_DEFAULTS_SOURCE)
            large = False
        if chunk is None:
            chunk = 8192 if large else 2048
            chunk_source = f"vLLM's default max_num_batched_tokens {chunk}: {vllm_serve.VLLM_DEFAULTS_SOURCE}"
        if seqs is None:
            batch = min(1024 if large else 256, chunk)
            batch_source = f"vLLM's default max_num_seqs {batch}: {vllm_serve.VLLM_DEFAULTS_SOURCE}"
        else:
            batch = flag_int("--max-num-seqs", seqs)
    else:
        if seqs is not None:
            raise K3PlanError(
                "--serve: --max-num-seqs is vLLM's flag; sglang.launch_server takes --max-running-requests"
            )
        batch = flag_int("--max-running-requests", running) if running is not None else 0
        batch_source = (
            "the command's flag" if running is not None else "SGLang's default (min(pool // 2, the request pool))"
        )
    options: dict[str, str] = {}
    util = get("--gpu-memory-utilization", None)
    if util is not None:
        options["gpu_memory_utilization"] = _fraction("--gpu-memory-utilization", util)
    frac = get("--mem-fraction-static", None)
    if frac is not None:
        options["mem_fraction_static"] = _fraction("--mem-fraction-static", frac)
    moe_backend = get("--moe-backend", None)  # vLLM: marlin, deep_gemm_mega_moe, ...; the K3 floor applies to all
    a2a = get("--moe-a2a-backend", None)
    if engine == "sglang":
        # SGLang's own default is none (server_args.py ServerArgs.moe_a2a_backend, engines/flags.py SGLANG_A2A), not
        # the DeepEP deployment the sglang stack prices by default: a command without the flag runs none
        options["moe_a2a_backend"] = a2a if a2a is not None else "none"
    elif a2a is not None:
        raise K3PlanError("--serve: --moe-a2a-backend is SGLang's flag; vllm serve takes --all2all-backend")
    dp_attention = _launch_flags(engine, get, options, ignored)  # issue 48: the flags k3plan's launch lines write
    kv_raw = get("--kv-cache-dtype", "auto")
    if kv_raw not in KV:
        raise K3PlanError(f"--serve: --kv-cache-dtype {kv_raw!r}: expected one of {', '.join(KV)}")
    dtype = get("--dtype", "auto").strip().lower()
    if dtype not in ("auto", "bfloat16", "bf16"):  # vLLM's ModelConfig.dtype: the unquantized weights' and activations'
        raise K3PlanError(
            f"--serve: --dtype {dtype!r}: k3plan prices the checkpoint's bf16 (auto); expected auto or bfloat16"
        )
    engram = _engram_config(engine, get("--engram-config", None))
    quant = get("--quantization", get("-q", ""))
    if quant not in QUANT_OK:
        raise K3PlanError(f"--serve: --quantization {quant!r}: k3plan prices the checkpoint's own format only")
    override = get("--num-gpu-blocks-override", None)
    blocks_override = flag_int("--num-gpu-blocks-override", override) if override is not None else None
    if blocks_override is not None and engine != "vllm":
        raise K3PlanError("--serve: --num-gpu-blocks-override is vLLM's flag")
    for spec in ("--speculative-config", "--speculative-algorithm", "--num-speculative-tokens"):
        if spec in flags:
            raise K3PlanError(
                f"--serve: {spec}: speculative decoding through --serve is not read; use fit's --spec-tokens"
            )
    lm_only = flags.get("--language-model-only", "false").lower() not in ("false", "0")
    if not lm_only:
        flags.pop("--language-model-only", None)  # --no-language-model-only: vLLM's default, the tower loads
    block_raw = flags.get("--block-size")
    block = flag_int("--block-size", block_raw) if block_raw is not None else None
    for name in list(flags):
        if name in IGNORED:
            ignored.append(name)
            flags.pop(name)
    if flags:
        raise K3PlanError(
            f"--serve: flag {sorted(flags)[0]} is not one k3plan reads or knows to be harmless; remove it"
        )
    unknown_env = sorted(
        set(env)
        - IGNORED_ENV
        - {vllm_serve.LONG_CONTEXT_ENV, sglang_serve.LONG_CONTEXT_ENV, "TPU_VLLM_ENABLE_UNIFIED_BLOCK_POOL"}
    )
    if unknown_env:
        raise K3PlanError(
            f"--serve: environment variable {unknown_env[0]} is not one k3plan reads or knows to be harmless; remove it"
        )
    if env.get("MODEL_IMPL_TYPE", "vllm").strip() not in ("vllm", "auto", ""):
        raise K3PlanError(
            f"--serve: MODEL_IMPL_TYPE={env['MODEL_IMPL_TYPE']}: k3plan prices vLLM's model code (MODEL_IMPL_TYPE=vllm)"
        )
    if env.get("MOE_REQUANTIZE_BLOCK_SIZE", "512").strip() not in ("512", ""):
        raise K3PlanError(
            f"--serve: MOE_REQUANTIZE_BLOCK_SIZE={env['MOE_REQUANTIZE_BLOCK_SIZE']}: k3plan prices the requantized "
            "experts at the plugin's default block, 512"
        )
    ignored += [f"{k}={v}" for k, v in env.items() if k in IGNORED_ENV]
    stack = ("torchtpu-vllm" if platform == "tpu" else "vllm") if engine == "vllm" else "sglang"
    if dp_attention:  # SGLang's --tp-size counts every GPU of the server; attention TP = tp_size / dp_size
        stack, tp = "dp-attention", sglang_serve.dp_attention_tp(tp, dp)
        # and it prefills chunked_prefill_size // dp_size a DP rank (server_args.py handle_data_parallelism; the
        # sglang stack's dp_attention_chunk): k3plan's chunk is a DP group's
        chunk = None if chunk is None else max(1, chunk // dp)
    caveats: list[str] = []
    if stack == "torchtpu-vllm" and env.get("TPU_VLLM_ENABLE_UNIFIED_BLOCK_POOL", "").strip() in ("1", "true", "True"):
        caveats.append(
            "TPU_VLLM_ENABLE_UNIFIED_BLOCK_POOL=1: the plugin's unified pool grows the page to hold one KDA state "
            "(tpu_block_size_utils.py _derive_tpu_block_slot_config); k3plan prices the hybrid page its stack sets"
        )
    if (
        stack == "torchtpu-vllm"
        and block is not None
        and block != TORCHTPU_DEFAULT_BLOCK
        and KV[kv_raw] in (None, "bf16")
    ):
        ignored.remove("--block-size")
        caveats.append(
            f"--block-size {block}: the TTFT and TPOT models price the plugin's MLA kernel at its {TORCHTPU_DEFAULT_BLOCK}-token "
            "default page, the only one probe mla-engine timed at the engine's default blocks "
            f"(k3plan.engines.flags.TORCHTPU_DEFAULT_BLOCK); over {block}-token pages it runs fewer steps, so for this "
            "command they are high"
        )
    if engine == "sglang" and chunk is None and device_gib is not None:
        chunk, chunk_source = sglang_serve.default_chunk(device_gib)
    return ServeQuestion(
        engine=engine,
        model=model_of(model),
        stack=stack,
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        context=context,
        chunk=chunk,
        batch=batch,
        stack_options=options,
        kv_dtype=KV[kv_raw],
        ignored=tuple(ignored),
        caveats=tuple(caveats),
        expert_parallel=expert_parallel,
        moe_backend=moe_backend,
        language_model_only=lm_only,
        max_running_requests=flag_int("--max-running-requests", running) if running is not None else None,
        batch_source=batch_source,
        chunk_source=chunk_source,
        context_auto=context_auto,
        num_gpu_blocks_override=blocks_override,
        block_size=block,
        env=env,
        engram=engram,
    )


def _engram_config(engine: str, raw: str | None) -> str | None:
    """--engram-config's placement as --engram's word; None where the flag is absent (the engine's default)."""
    if raw is None:
        return None
    if engine != "sglang":
        raise K3PlanError(
            "--serve: --engram-config is SGLang's flag; k3plan reads no vLLM Engram flag (fit's --engram)"
        )
    return sglang_serve.engram_config(raw)


def _fraction(flag: str, value: str) -> str:
    """A memory fraction as both engines take it: a number in (0, 1] (vLLM's CacheConfig.gpu_memory_utilization:
    Field(gt=0, le=1))."""
    try:
        f = float(value)
    except ValueError:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a number in (0, 1]") from None
    if not 0 < f <= 1:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a number in (0, 1]")
    return value.strip()


def _launch_flags(engine: str, get, options: dict[str, str], ignored: list[str]) -> bool:
    """Issue 48: the real engine flags k3plan's launch lines write that the reading above does not take, read by
    each engine's own reader (engines/vllm/serve.py, engines/sglang/serve.py); -> whether SGLang's DP attention is
    on."""
    if engine == "vllm":
        vllm_serve.launch_flags(get, options)
        return False
    return sglang_serve.launch_flags(get, options, ignored)


def check_context(q: ServeQuestion, model_max: int | None) -> None:
    """The engine's own refusal of a context above the model's maximum (each family's rule, cited in its folder's
    serve.py), before k3plan prices anything: bad input, one line."""
    family = vllm_serve if q.engine == "vllm" else sglang_serve
    if (
        q.context is not None
        and model_max
        and q.context > model_max
        and q.env.get(family.LONG_CONTEXT_ENV, "").strip() not in ("1", "true", "True")
    ):
        raise K3PlanError(family.long_context_refusal(q.context, model_max))
