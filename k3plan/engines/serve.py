"""A serve command as input (issue 34): ``vllm serve MODEL ...`` or ``python3 -m sglang.launch_server
--model-path MODEL ...`` read into the question k3plan answers: the model, the split, the workload and the
engine options that change memory. Every flag is read, listed as ignored (it changes nothing k3plan prices),
or refused in one line (a K3PlanError: exit 2) where k3plan cannot honour it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from k3plan.engines.flags import TORCHTPU_DEFAULT_BLOCK
from k3plan.errors import K3PlanError

# Hugging Face ids -> bundled models (k3plan/models/configs)
HF_MODELS = {
    "moonshotai/kimi-k3": "kimi-k3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-r1-0528": "deepseek-v3",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v3-0324": "deepseek-v3",
    "moonshotai/kimi-linear-48b-a3b-instruct": "kimi-linear-48b-a3b",
    "moonshotai/kimi-linear-48b-a3b-base": "kimi-linear-48b-a3b",
}
HF_PREFIXES = {"moonshotai/kimi-k2": "kimi-k2"}

# flags that change nothing k3plan prices: host-side loading, parsers, compile buckets, the API server
IGNORED = {
    "--trust-remote-code": 0,
    "--enable-ep-weight-filter": 0,  # each rank streams only its experts' bytes: host RAM, not HBM
    "--language-model-only": 0,  # the vision tower is not loaded (without it: engines.vllm_memory adds the tower)
    "--limit-mm-per-prompt": 1,
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
    "--seed": 1,
    "--disable-log-requests": 0,
    "--enable-chunked-prefill": 0,  # vLLM V1's default; the chunk is --max-num-batched-tokens
    "--distributed-executor-backend": 1,
    "--enforce-eager": 0,
    "--enable-prefix-caching": 0,  # pool sizing unchanged; the hit rate is fit's --prefix-hit
    "--no-enable-prefix-caching": 0,
    "--mamba-cache-mode": 1,  # align: one state a block with prefix caching (torchtpu-vllm's gate)
    "--block-size": 1,  # the hybrid rule raises the block to hold one KDA state; a floor k3plan's rule meets
    # sglang
    "--trust-remote": 0,
    "--chunked-prefill-size": -1,  # read below
}
KV = {"auto": None, "bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_ds_mla": "fp8_ds_mla"}


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
    context: int | None
    chunk: int | None
    batch: int
    stack_options: dict[str, str]
    kv_dtype: str | None
    ignored: tuple[str, ...] = field(default=())
    caveats: tuple[str, ...] = field(default=())  # flags read whose effect k3plan's figures do not follow
    expert_parallel: bool = True  # vLLM's --enable-expert-parallel (SGLang: its own EP flags)
    language_model_only: bool = False  # vLLM's --language-model-only: a multimodal model's vision tower not loaded
    moe_backend: str | None = None
    max_running_requests: int | None = None  # SGLang's --max-running-requests as given (None: its own default)

    @property
    def stack_ref(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.stack_options.items())
        return f"{self.stack}:{opts}" if opts else self.stack


def model_of(name: str) -> str:
    """A Hugging Face id (HF_MODELS, HF_PREFIXES) or a bundled model's own name (k3plan's launch lines) -> the
    bundled model."""
    from k3plan.models.loader import bundled_models

    key = name.strip().rstrip("/").lower()
    if key in bundled_models():
        return key
    if key in HF_MODELS:
        return HF_MODELS[key]
    for prefix, model in HF_PREFIXES.items():
        if key.startswith(prefix):
            return model
    raise K3PlanError(
        f"--serve: model {name!r} is not a bundled model; expected one of "
        f"{', '.join(sorted({*HF_MODELS, *(p + '*' for p in HF_PREFIXES)}))}"
    )


def _int(flag: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a whole number") from None
    if n < 1:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a positive number")
    return n


def parse_serve(command: str, *, platform: str) -> ServeQuestion:
    """``platform``: the hardware's kind ("tpu" or "gpu"): vllm serve on a TPU is torchtpu-vllm, on a GPU vllm."""
    try:
        argv = shlex.split(command)
    except ValueError as err:
        raise K3PlanError(f"--serve: cannot split the command ({err}); expected a shell command line") from None
    if argv[:2] == ["vllm", "serve"] and len(argv) > 2:
        engine, model, rest = "vllm", argv[2], argv[3:]
    elif len(argv) >= 3 and argv[0].startswith("python") and argv[1:3] == ["-m", "sglang.launch_server"]:
        engine, model, rest = "sglang", "", argv[3:]
    else:
        raise K3PlanError(
            "--serve: expected 'vllm serve MODEL ...' or 'python3 -m sglang.launch_server --model-path MODEL ...'"
        )
    flags: dict[str, str] = {}
    ignored: list[str] = []
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("-") or tok in ("-", "--"):
            raise K3PlanError(f"--serve: unexpected argument {tok!r}; expected --flag [value]")
        name, eq, val = tok.partition("=")
        takes = IGNORED.get(name)
        if eq:
            value = val
            i += 1
        elif i + 1 < len(rest) and not rest[i + 1].startswith("-") and takes != 0:
            value = rest[i + 1]
            i += 2
        else:
            value = "true"
            i += 1
        flags[name] = value  # the engine takes the last occurrence
    get = flags.pop
    if engine == "sglang":
        model = get("--model-path", "") or get("--model", "")
        if not model:
            raise K3PlanError("--serve: sglang.launch_server needs --model-path MODEL")
    tp = _int("--tensor-parallel-size", get("--tensor-parallel-size", get("-tp", get("--tp-size", get("--tp", "1")))))
    pp = _int("--pipeline-parallel-size", get("--pipeline-parallel-size", get("--pp-size", "1")))
    dp = _int("--data-parallel-size", get("--data-parallel-size", get("--dp-size", "1")))
    ep_flag = get("--enable-expert-parallel", None)
    ep_size = get("--ep-size", None)
    expert_parallel = True
    ep: int | None
    if engine == "vllm":
        if ep_flag is None and platform == "tpu":
            raise K3PlanError(
                "--serve: vllm serve on a TPU without --enable-expert-parallel: the plugin's expert placement without "
                "EP was not read (its K3 CI always passes it); add --enable-expert-parallel"
            )
        # without EP vLLM splits each expert's intermediate over TP: the same bytes a device as EP over the TP
        # group, which k3plan prices, plus the K3 model's per-shard padding (engines.vllm_memory.moe_shard_padding)
        expert_parallel = ep_flag is not None and ep_flag.lower() not in ("false", "0")
        ep = tp * dp if expert_parallel else tp
    else:
        ep = _int("--ep-size", ep_size) if ep_size else None
    context = get("--max-model-len", get("--context-length", None))
    chunk = get("--max-num-batched-tokens", get("--chunked-prefill-size", None))
    running = flags.get("--max-running-requests")
    batch = get("--max-num-seqs", get("--max-running-requests", "1"))
    options: dict[str, str] = {}
    util = get("--gpu-memory-utilization", None)
    if util is not None:
        options["gpu_memory_utilization"] = util
    frac = get("--mem-fraction-static", None)
    if frac is not None:
        options["mem_fraction_static"] = frac
    moe_backend = get("--moe-backend", None)  # vLLM: marlin, deep_gemm_mega_moe, ...; the K3 floor applies to all
    a2a = get("--moe-a2a-backend", None)
    if engine == "sglang":
        # SGLang's own default is none (server_args.py ServerArgs.moe_a2a_backend, engines/flags.py SGLANG_A2A), not
        # the DeepEP deployment the sglang stack prices by default: a command without the flag runs none
        options["moe_a2a_backend"] = a2a if a2a is not None else "none"
    elif a2a is not None:
        raise K3PlanError("--serve: --moe-a2a-backend is SGLang's flag; vllm serve takes --all2all-backend")
    kv_raw = get("--kv-cache-dtype", "auto")
    if kv_raw not in KV:
        raise K3PlanError(f"--serve: --kv-cache-dtype {kv_raw!r}: expected one of {', '.join(KV)}")
    quant = get("--quantization", get("-q", ""))
    if quant not in ("", "compressed-tensors", "fp8", "mxfp4"):
        raise K3PlanError(f"--serve: --quantization {quant!r}: k3plan prices the checkpoint's own format only")
    for spec in ("--speculative-config", "--speculative-algorithm", "--num-speculative-tokens"):
        if spec in flags:
            raise K3PlanError(
                f"--serve: {spec}: speculative decoding through --serve is not read; use fit's --spec-tokens"
            )
    lm_only = flags.get("--language-model-only", "false").lower() not in ("false", "0")
    block = flags.get("--block-size")
    for name in list(flags):
        if name in IGNORED:
            ignored.append(name)
            flags.pop(name)
    if flags:
        raise K3PlanError(
            f"--serve: flag {sorted(flags)[0]} is not one k3plan reads or knows to be harmless; remove it"
        )
    stack = ("torchtpu-vllm" if platform == "tpu" else "vllm") if engine == "vllm" else "sglang"
    caveats: list[str] = []
    if (
        stack == "torchtpu-vllm"
        and block is not None
        and block != str(TORCHTPU_DEFAULT_BLOCK)
        and KV[kv_raw] in (None, "bf16")
    ):
        ignored.remove("--block-size")
        caveats.append(
            f"--block-size {block}: the TTFT and TPOT models price the plugin's MLA kernel at its {TORCHTPU_DEFAULT_BLOCK}-token "
            "default page, the only one probe mla-engine timed at the engine's default blocks "
            f"(k3plan.engines.flags.TORCHTPU_DEFAULT_BLOCK); over {block}-token pages it runs fewer steps, so for this "
            "command they are high"
        )
    return ServeQuestion(
        engine=engine,
        model=model_of(model),
        stack=stack,
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        context=_int("--max-model-len", context) if context else None,
        chunk=_int("--max-num-batched-tokens", chunk) if chunk else None,
        batch=_int("--max-num-seqs", batch),
        stack_options=options,
        kv_dtype=KV[kv_raw],
        ignored=tuple(ignored),
        caveats=tuple(caveats),
        expert_parallel=expert_parallel,
        moe_backend=moe_backend,
        language_model_only=lm_only,
        max_running_requests=_int("--max-running-requests", running) if running is not None else None,
    )
