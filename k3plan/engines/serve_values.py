"""What a serve command's flags are worth as its engines read them: a whole number within what the engines' int32
tensors hold, the KV and checkpoint formats, the memory fractions (k3plan.engines.serve and each engine's own reader,
engines/<engine>/serve.py), and a command's reading in progress (Reading) with the readers of the flags every family
spells alike. Here, not in k3plan.engines.serve, so the families' readers import it without a cycle."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from k3plan.errors import K3PlanError
from k3plan.units import GiB, KiB, MiB

KV = {
    "auto": None,
    "bfloat16": "bf16",
    "bf16": "bf16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    # the other fp8 KV format both engines take (vLLM's CacheDType, SGLang's kv_cache_dtype choices in the 0.5.15
    # wheel's server_args.py): 1 B a value, as fp8_e4m3
    "fp8_e5m2": "fp8",
    "fp8_ds_mla": "fp8_ds_mla",
    # vLLM's DeepSeek-V4.1 record with an NVFP4 compressed cache (SM100 only): its pool in engines/vllm/dsv4_pages.py,
    # k3plan's budget prices V4.1's own formats whatever the dtype
    "nvfp4_ds_mla": "fp8_ds_mla",
}
# checkpoint formats an engine's --quantization may name for a checkpoint k3plan prices as stored; torchtpu-vllm's
# deepseek_v4_fp8 (tpu_platform.py TpuPlatform.supported_quantization @0095cdcb) reads the same fp8 bytes
QUANT_OK = ("", "compressed-tensors", "fp8", "mxfp4", "deepseek_v4_fp8")
# --quantization values that load a ModelOpt NVFP4 checkpoint as its own format: SGLang 0.5.15 takes modelopt_fp4 and
# modelopt (model_config.py: compatible with the checkpoint's "modelopt"; _get_modelopt_quant_type detects fp4), vLLM
# 0.31.0 both (config/model.py: ModelOptNvFp4Config.override_quantization_method turns either into modelopt_fp4 for a
# checkpoint whose quant_algo is NVFP4); read only for a checkpoint that is ModelOpt NVFP4
QUANT_MODELOPT_FP4 = ("modelopt", "modelopt_fp4")
# --quantization values that load an AMD Quark checkpoint (quant_method quark): SGLang 0.5.12 / 0.5.15 take quark
# (configs/model_config.py _verify_quantization raises for any method other than the checkpoint's own, no
# compatibility entry naming quark), vLLM 0.31.0 likewise (config/model.py: the checkpoint's quant_method must match);
# read only for a checkpoint that is Quark
QUANT_QUARK = ("quark",)
# the most sequences or tokens a flag may ask for: an int the engines' C++ / int32 tensors hold
MAX_FLAG_INT = 2**31 - 1


def env_on(value: str) -> bool:
    """An environment switch read as vLLM's envs read a boolean one: 1 / true / yes / on, any case."""
    return value.strip().lower() in ("1", "true", "yes", "on")


def physical_expert_share(experts: int, redundant: int, ranks: int) -> tuple[int, int] | None:
    """(per rank, fullest without): the physical experts a rank holds when an engine adds ``redundant`` copies to
    ``experts`` over ``ranks`` expert-parallel ranks, and what the fullest rank holds without them (ceil); None where
    the ranks do not divide the physical experts (both engines refuse that: engines/vllm/eplb.py, sglang/eplb.py)."""
    physical = experts + redundant
    if ranks > 1 and physical % ranks:
        return None
    return physical // ranks, -(-experts // ranks)


def same_checkpoint(a: str, b: str) -> bool:
    """Two model paths / ids naming one checkpoint as the engines compare them: case, spaces and a trailing / aside."""
    return a.strip().rstrip("/").lower() == b.strip().rstrip("/").lower()


def refuse_unpriced(get, table: dict[str, str], engine: str) -> None:
    """A flag of ``table`` (name -> what it sizes) the command gives: refused with what it does, never priced as
    without it (each engine's table of flags whose memory effect k3plan does not model). ``get``: the family's reader."""
    for name, what in table.items():
        if get(name, None) is not None:
            raise K3PlanError(
                f"--serve: {name}: {what} is not priced by k3plan; remove it to price {engine} without it"
            )


def flag_int(flag: str, value: str, *, lo: int = 1) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a whole number") from None
    if n < lo:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a {'positive' if lo == 1 else 'non-negative'} number")
    if n > MAX_FLAG_INT:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected at most {MAX_FLAG_INT:,}")
    return n


def argparse_int(flag: str, value: str) -> int:
    """A flag the engine's parser takes with type=int, where another flag makes its value moot (listed, not priced):
    a text int() refuses stops the engine at parse ('argument --x: invalid int value'), so it is bad input here too;
    any int, negative or 0, passes the parser."""
    return flag_int(flag, value, lo=-MAX_FLAG_INT)


def whole_number(field: str, value: Any, *, lo: int = 1) -> int:
    """A whole number a config's JSON holds (an int, or its text: "3" as pydantic's lax mode reads it), or a flag's
    text, read as flag_int reads a flag: a bool, float, null, list or object is refused, and so is a text int() cannot
    read ('²' passes str.isdigit, not int) or a number past MAX_FLAG_INT; one line naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise K3PlanError(f"--serve: {field} {value!r}: expected a whole number")
    return flag_int(field, str(value), lo=lo)


@dataclass(frozen=True)
class ServeCommand:
    """A command that starts one family's server, as a family's serve.py declares it (its COMMANDS) for
    k3plan.engines.serve to recognise: the first tokens ("python" matches python3, python3.11, ...), whether a
    positional MODEL may follow them, and how the refusal of an unknown command spells it."""

    prefix: tuple[str, ...]
    positional_model: bool
    usage: str

    def matches(self, argv: list[str]) -> bool:
        return len(argv) >= len(self.prefix) and all(
            a == p or (p == "python" and a.startswith("python")) for a, p in zip(argv, self.prefix, strict=False)
        )


@dataclass
class Reading:
    """One command's reading in progress: the flags left to read (``get`` takes one, the last occurrence) and what
    the family's ``read`` / ``finish`` and the shared readers below have made of them, for the final ServeQuestion."""

    flags: dict[str, str]
    platform: str
    device_gib: float | None
    device_name: str
    env: dict[str, str]
    model: str | None  # the positional MODEL where the command takes one, else None
    # the release the command runs (fit --engine-version, k3plan.engines.release), for the defaults that changed
    # between releases; None: the code each rule cites
    release: tuple[int, int, int] | None = None
    # its post-release number (fit --engine-version 0.4.8.post1: 1; 0 without one), for the rules that changed within a
    # release's post-releases (k3plan.engines.release.parse_post)
    release_post: int = 0
    # the engine's main commit fit --engine-version named (an EngineCommit, k3plan.engines.release; ``release`` is then
    # the release it follows), for the rules gated at the commit that changed them; None: a release or none named
    commit: Any = None
    # the model id -> the bundled model it is (engines.serve.model_of, one rule; it refuses a checkpoint k3plan
    # cannot price), for a family's rules that hold for one model only
    resolve: Callable[[str], str] | None = None
    async_scheduling: bool | None = None  # vLLM's --async-scheduling / --no-async-scheduling (None: not given)
    # config fields the command sets over the checkpoint's config before the model is built (read_hf_overrides)
    hf_overrides: tuple[tuple[str, int], ...] = ()
    # vLLM's LLM class started by a script rather than vllm serve (UsageContext.LLM_CLASS: its own engine-argument
    # defaults): the command's kind as the family that read it names it (engines/tpu_inference/llm_class.py); None:
    # vllm serve (UsageContext.OPENAI_API_SERVER) or another engine's server
    llm_class: str | None = None
    # the family's rule for --quantization on a checkpoint stored unquantized (the engine's online quantization):
    # (reading, method, bundled model) -> True where it prices it (setting its stack option), False to refuse it
    online_quant: Callable[[Any, str, str], bool] | None = None
    options: dict[str, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int | None = None
    # SGLang's --ep-size between 1 and --tp-size: each expert split over tp_size / ep_size ranks (moe_tp_size), the
    # engine's rules read it; the mesh spreads the experts over every rank (``ep`` None: the same bytes a device)
    moe_ep: int | None = None
    expert_parallel: bool = True
    # vLLM's --enable-eplb: (num_redundant_experts, window_size), the expert copies and the load-balancing state each
    # MoE model adds (engines/vllm/eplb.py); None: EPLB off
    eplb: tuple[int, int] | None = None
    # SGLang's --attention-backend as given (its fraction's aiter cut: engines/sglang/aiter_fraction.py); None: not given
    attention_backend: str | None = None
    context: int | None = None
    context_auto: bool = False
    chunk: int | None = None
    chunk_source: str = "the command's flag"
    batch: int = 0
    batch_source: str = "the command's flag"
    running: str | None = None  # --max-running-requests as given
    moe_backend: str | None = None
    # SGLang's --moe-runner-backend as given, any value (the expert-format rule reads runners the stack's option has no
    # choice for: Stack.moe_runner); None: not given
    moe_runner: str | None = None
    dp_attention: bool = False
    # where the engine splits the LM head over its whole TP group under DP attention (a Cite of the code; the family's
    # reader: engines/sglang/serve.py dp_lm_head); None: the stack's own rule
    lm_head_whole_tp: Any = None
    # SGLang 0.4.6's shared expert fused into the routed MoE as tp_size clones, one whole a GPU (a Cite:
    # Stack.with_shared_expert_whole; engines/sglang/serve.py shared_fusion); None: the stack's own split
    shared_expert_whole: Any = None
    # SGLang's --moe-dense-tp-size 1: the dense layers' MLP whole on every GPU (a Cite: Stack.with_dense_mlp_whole;
    # engines/sglang/serve.py dense_tp); None: the stack's own split
    dense_mlp_whole: Any = None
    # (roles, Cite): the dense MLP / shared-expert roles the engine splits over its whole TP group under DP attention
    # (SGLang 0.4.3-0.5.23 read: engines/sglang/serve.py mlp_whole_tp; Stack.with_mlp_whole_tp); None: the stack's own split
    mlp_whole_tp: Any = None
    # (copies, why): the engine holds the routed experts ``copies`` times a rank where the checkpoint's are block FP8
    # (SGLang 0.4.8.post1-0.4.9.post4's EP MoE under aiter: engines/sglang/ep_moe_copy.py; fit checks the format and
    # sets Stack.expert_copies); None: once
    expert_copies: Any = None
    # (format, why): the runtime format the engine holds the checkpoint's DeepSeek-V4 FP4 experts (ds_fp4) in where
    # the command's release and GPU decide it apart from the stack's options (SGLang's DeepGEMM scale packing:
    # engines/sglang/fp4_scales.py; Stack.with_expert_format); None: the stack's own
    expert_format: Any = None
    kv_raw: str = "auto"
    engram: str | None = None
    engram_host_copies: str | None = None  # vLLM's dp_shared_memory: "node" (None: the engine's default)
    engram_flag: bool = False  # --engram-config given (an engine refuses it for a model without Engram)
    blocks_override: int | None = None
    # the model class the reader found builds no vision tower whatever the flags say (tpu-inference's JAX Kimi model
    # drops the checkpoint's vision tensors): the question is read as --language-model-only
    text_only: bool = False
    kv_cache_memory_bytes: int | None = None  # vLLM's --kv-cache-memory-bytes: the pool as given
    hybrid_kv_off: bool = False  # vLLM's --disable-hybrid-kv-cache-manager, where it changes the pool's layout
    block: int | None = None
    stack: str = ""
    caveats: list[str] = field(default_factory=list)
    # speculative decoding as read (engines/vllm/spec.py SpecServe, engines/sglang/spec.py SglangSpec)
    speculative: Any = None
    compilation: Any = None  # vLLM's graph settings as read (engines/vllm/cudagraph.py CompilationRead)
    attention: Any = None  # vLLM's --attention-config fields as read (engines/vllm/attention_config.py)
    max_total_tokens: int | None = None  # SGLang's --max-total-tokens: the KV pool's token cap
    # SGLang's decode CUDA-graph max batch as the command sets it, and the cap its release puts on the default one
    # (engines/sglang/serve.py decode_graph): what its derived mem_fraction_static reserves graphs for
    decode_graph_bs: int | None = None
    decode_graph_cap: int | None = None
    decode_graph_off: bool = False  # SGLang's decode CUDA graphs switched off (engines/sglang/serve.py decode_graph)
    # SGLang's prefill graph as the command sets it: the backend it locks and what else it runs that the rule reads
    # (engines/sglang/serve.py prefill_graph_flags, engines/sglang/prefill_graph.py); None / (): the engine's own
    prefill_backend: str | None = None
    prefill_conditions: tuple[str, ...] = ()
    page_size: int | None = None  # SGLang's --page-size: the pool's page
    swa_ratio: float | None = None  # SGLang's --swa-full-tokens-ratio (DeepSeek-V4's sub-pools)
    dsv4_state_bytes: int = 4  # SGLang's DeepSeek-V4 compressor-state element (SGLANG_DSV4_COMPRESS_STATE_DTYPE)
    swa_prefix_tails: int | None = None  # SGLang's --swa-prefix-tails (DeepSeek-V4.1's sliding-window pool in cap mode)
    mamba_cache_size: int | None = None  # SGLang's --max-mamba-cache-size: the state (mamba) pool's slots
    # buffers the engine's model holds beside its weights, in the weights' measurement: (bytes a device, what and
    # where); None: none priced (tpu-inference's vLLM-code RoPE table: engines/tpu_inference/serve.py)
    model_buffers: tuple[int, str] | None = None
    mamba_ratio: float | None = None  # SGLang's --mamba-full-memory-ratio: the state pool's share of the KV memory
    dcp: int = 1  # vLLM's --decode-context-parallel-size, SGLang's --dcp-size (each family's serve.py)
    # SGLang's --enable-symm-mem pool a GPU and its source (engines/sglang/serve.py symm_mem); 0: none
    symm_mem_bytes: int = 0
    symm_mem_source: str = ""
    # SGLang's MegaMoE buffer's tokens a rank and FP4 dispatch where it is priced (engines/sglang/serve.py mega_moe);
    # 0: none priced
    mega_moe_cap: int = 0
    mega_moe_fp4_acts: bool = False
    # SGLang's DeepEP buffer where the command builds one (engines/sglang/serve.py deepep_config): (--deepep-mode,
    # --deepep-config's (dispatch, combine) configs or None, SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK); None: none
    deepep: Any = None
    # environment variables the family's reader priced (not listed as ignored, k3plan.engines.serve.IGNORED_ENV)
    env_read: set[str] = field(default_factory=set)

    def get(self, name: str, default=None):
        return self.flags.pop(name, default)

    def parallel(self) -> None:
        """The split both families spell alike: TP, PP and DP sizes."""
        get = self.get
        self.tp = flag_int(
            "--tensor-parallel-size", get("--tensor-parallel-size", get("-tp", get("--tp-size", get("--tp", "1"))))
        )
        self.pp = flag_int(
            "--pipeline-parallel-size", get("--pipeline-parallel-size", get("-pp", get("--pp-size", "1")))
        )
        self.dp = flag_int(
            "--data-parallel-size", get("--data-parallel-size", get("-dp", get("--dp-size", get("--dp", "1"))))
        )

    @property
    def engine_ep(self) -> int | None:
        """The EP size the engine's rules read: ``moe_ep`` where its MoE splits an expert inside the TP group, else
        ``ep`` (the mesh's)."""
        return self.moe_ep or self.ep

    def memory_options(self) -> None:
        """The memory fractions (either family's spelling: the stacks' options of those names) and --moe-backend."""
        util = self.get("--gpu-memory-utilization", None)
        if util is not None:
            self.options["gpu_memory_utilization"] = fraction("--gpu-memory-utilization", util)
        frac = self.get("--mem-fraction-static", None)
        if frac is not None:
            self.options["mem_fraction_static"] = fraction("--mem-fraction-static", frac)
        # vLLM: marlin, deep_gemm_mega_moe, ...; the K3 floor applies to all
        self.moe_backend = self.get("--moe-backend", None)

    def dtypes(self) -> None:
        """--kv-cache-dtype (KV) and --dtype (the unquantized weights' and activations': bf16 only)."""
        self.kv_raw = self.get("--kv-cache-dtype", "auto")
        if self.kv_raw not in KV:
            raise K3PlanError(f"--serve: --kv-cache-dtype {self.kv_raw!r}: expected one of {', '.join(KV)}")
        dtype = self.get("--dtype", "auto").strip().lower()
        # vLLM's ModelConfig.dtype: the unquantized weights' and activations'
        if dtype not in ("auto", "bfloat16", "bf16"):
            raise K3PlanError(
                f"--serve: --dtype {dtype!r}: k3plan prices the checkpoint's bf16 (auto); expected auto or bfloat16"
            )

    def quantization(self) -> None:
        """--quantization: the checkpoint's own method only (a ModelOpt NVFP4 or Quark checkpoint's where it is one;
        where the engine holds such a checkpoint as stored: engines/fp4_paths.py, applied once the engine is known)."""
        quant = self.get("--quantization", self.get("-q", ""))
        resolved = self.resolve(self.model) if self.model and self.resolve is not None else None
        if resolved is not None and checkpoint_quant(resolved, "quark") is not None:
            if quant not in ("", *QUANT_QUARK):
                raise K3PlanError(
                    f"--serve: --quantization {quant!r}: {resolved} is a Quark checkpoint, which the engines load as "
                    "quark only (another method does not match the checkpoint's quant_method)"
                )
            return
        if quant in QUANT_QUARK and resolved is not None:
            raise K3PlanError(
                f"--serve: --quantization {quant!r}: {resolved} is not a Quark checkpoint; k3plan prices the "
                "checkpoint's own format only"
            )
        if quant in QUANT_MODELOPT_FP4 and resolved is not None:
            if fp4_storage(resolved) == "nvfp4":
                return
            raise K3PlanError(
                f"--serve: --quantization {quant!r}: {resolved} is not a ModelOpt NVFP4 checkpoint; "
                "k3plan prices the checkpoint's own format only"
            )
        if quant not in QUANT_OK:
            raise K3PlanError(f"--serve: --quantization {quant!r}: k3plan prices the checkpoint's own format only")
        if quant and resolved is not None and stored_unquantized(resolved):
            # a checkpoint stored unquantized (no quantization_config): the method is applied at load, not read from
            # the checkpoint (vllm 0.21.0 wheel: config/model.py ModelConfig._verify_quantization keeps the argument
            # when config.json has none; layers/quantization/fp8.py Fp8Config.get_quant_method then takes
            # Fp8OnlineLinearMethod, is_checkpoint_fp8_serialized being False); priced only where the family's reader
            # read it (``online_quant``: vLLM's engines/vllm/online_quant.py), refused elsewhere
            if self.online_quant is not None and self.online_quant(self, quant, resolved):
                return
            raise K3PlanError(
                f"--serve: --quantization {quant!r}: {resolved} is stored unquantized, so the engine would quantize "
                "it at load; k3plan prices the checkpoint's own format only (drop --quantization)"
            )


@lru_cache(maxsize=16)
def bundled_quantization(model: str) -> dict[str, Any] | None:
    """Bundled model ``model``'s quantization_config (None: not a bundle, or none): its package file read once, through
    the models' own reader (models.loader.read_config), however many of a command's flags ask."""
    from k3plan.models.loader import BUNDLED_DIR, read_config

    path = BUNDLED_DIR / model / "config.json"
    q = read_config(path).get("quantization_config") if path.is_file() else None
    return q if isinstance(q, dict) else None


@lru_cache(maxsize=16)
def stored_unquantized(model: str) -> bool:
    """Bundled model ``model``'s config.json declares no quantization_config, at its top or in its text_config (where
    the multimodal Kimi checkpoints keep theirs, and where the engines read it too: vllm 0.21.0 wheel,
    model_loader/weight_utils.py get_quant_config); False for a model k3plan does not bundle."""
    from k3plan.models.loader import BUNDLED_DIR, read_config

    path = BUNDLED_DIR / model / "config.json"
    if not path.is_file():
        return False
    cfg = read_config(path)
    text = cfg.get("text_config")
    nested = text.get("quantization_config") if isinstance(text, dict) else None
    return not isinstance(cfg.get("quantization_config"), dict) and not isinstance(nested, dict)


def checkpoint_quant(model: str, method: str) -> dict[str, Any] | None:
    """Bundled model ``model``'s quantization_config where its quant_method is ``method`` (modelopt:
    models.config.ModelOptQuant; quark: QuarkQuant), else None."""
    q = bundled_quantization(model)
    return q if q is not None and q.get("quant_method") == method else None


def fp4_storage(model: str) -> str | None:
    """The FP4 storage format (models/formats.py; engines/fp4_paths.py FP4_PATHS) bundled model ``model``'s config
    declares: nvfp4 for ModelOpt NVFP4 (--quantization modelopt / modelopt_fp4 loads it as its own format), quark_mxfp4
    for a Quark checkpoint; None for any other."""
    modelopt = checkpoint_quant(model, "modelopt")
    if modelopt is not None and modelopt.get("quant_algo") == "NVFP4":
        return "nvfp4"
    return "quark_mxfp4" if checkpoint_quant(model, "quark") is not None else None


# --kv-cache-dtype auto (both engines' default) on a ModelOpt checkpoint whose kv_cache_quant_algo is FP8 is an fp8 KV
# cache, the scales it ships calibrated for it: vLLM resolves it before the cache is configured
# (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string via get_kv_cache_quant_algo_string, called from
# vllm/engine/arg_utils.py EngineArgs.create_engine_config; read in the 0.26.0, 0.27.0 and 0.31.0 wheels (PyPI),
# vllm-project/vllm#29980), SGLang when the model loads (sglang 0.5.15 wheel (PyPI),
# sglang/srt/model_executor/model_runner.py ModelRunner.configure_kv_cache_dtype: "auto" and the quant config's
# kv_cache_quant_algo "FP8" -> float8_e4m3fn)
CHECKPOINT_KV_SOURCE = (
    "the checkpoint's kv_cache_quant_algo FP8 (vllm 0.14.0 and 0.31.0 wheels, vllm/utils/torch_utils.py "
    "resolve_kv_cache_dtype_string from EngineArgs.create_engine_config, from 0.14.0; sglang from 0.5.3: the 0.5.15 "
    "wheel's sglang/srt/model_executor/model_runner.py ModelRunner.configure_kv_cache_dtype, engines/sglang/releases.py "
    "CHECKPOINT_KV_AT)"
)


def checkpoint_kv_dtype(model: str) -> str | None:
    """The KV dtype --kv-cache-dtype auto resolves to for bundled model ``model`` on a GPU engine (``CHECKPOINT_KV_SOURCE``):
    "fp8" where its ModelOpt config says kv_cache_quant_algo FP8, else None (the model's own dtype)."""
    q = checkpoint_quant(model, "modelopt")
    algo = q.get("kv_cache_quant_algo") if q is not None else None
    return "fp8" if isinstance(algo, str) and algo.upper() == "FP8" else None


# words in a variable's name whose value k3plan never echoes (a token or key a launch line carries: HF_TOKEN, ...)
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY")


def shown_env(name: str, value: str) -> str:
    """``NAME=value`` as k3plan lists a variable it read or ignored, the value masked where the name says it is a
    credential (``SECRET_WORDS``): fit's output and --json never carry a token from the command."""
    secret = any(w in name.upper() for w in SECRET_WORDS)
    return f"{name}=***" if secret and value else f"{name}={value}"


def fraction(flag: str, value: str) -> str:
    """A memory fraction as both engines take it: a number in (0, 1] (vLLM's CacheConfig.gpu_memory_utilization:
    Field(gt=0, le=1))."""
    try:
        f = float(value)
    except ValueError:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a number in (0, 1]") from None
    if not 0 < f <= 1:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a number in (0, 1]")
    return value.strip()


def positive_float(flag: str, value: str, *, most: float = 1e6) -> float:
    """A positive ratio (SGLang's --mamba-full-memory-ratio: state memory / full KV memory), at most ``most``."""
    try:
        f = float(value)
    except ValueError:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a positive number") from None
    if not 0 < f <= most:
        raise K3PlanError(f"--serve: {flag} {value!r}: expected a positive number up to {most:g}")
    return f


def config_file_args(rest: list[str], *, engine: str) -> list[str]:
    """``--config FILE.yaml`` as the engines read it: vLLM's FlexibleArgumentParser (_pull_args_from_config,
    load_config_file, read in yhfgyyf/vllm-deepseek-v4-sm89@b12eeaa2) and SGLang's ConfigArgumentMerger
    (python/sglang/srt/server_args_config_parser.py; sgl-project/sglang/docs/advanced_features/server_arguments.md:
    'CLI arguments will override config file values'). The file's keys become flags placed before the command's own
    (the command's win); a true bool is a switch (false: left out), a list a flag with one value each, a mapping a
    JSON value, anything else its text. The file is read where k3plan runs, as the engine would read it where it
    starts; one --config at most; a .yaml / .yml file only."""
    rest = [x for tok in rest for x in (tok.split("=", 1) if tok.startswith("--config=") else [tok])]
    if "--config" not in rest:
        return rest
    if rest.count("--config") > 1:
        raise K3PlanError(f"--serve: more than one --config file ({engine} reads one)")
    i = rest.index("--config")
    if i == len(rest) - 1 or rest[i + 1].startswith("-"):
        raise K3PlanError(f"--serve: --config takes a file ({engine}: a yaml file of its flags)")
    path = rest[i + 1]
    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise K3PlanError(f"--serve: --config {path!r}: {engine} reads a yaml / yml file only")
    from pathlib import Path

    from k3plan.specfile import read_yaml_mapping

    if not Path(path).is_file():
        raise K3PlanError(f"--serve: --config {path!r}: no such file here (k3plan reads it as {engine} would at start)")
    args: list[str] = []
    for key, value in read_yaml_mapping(f"--serve --config {path}", Path(path)).items():
        flag = "--" + str(key)
        if isinstance(value, bool):
            args += [flag] if value else []
        elif isinstance(value, list):
            args += [flag, *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args + rest[:i] + rest[i + 2 :]


def json_object(flag: str, raw: str) -> dict:
    """A flag whose value is a JSON object (a config: --compilation-config, --attention-config, --eplb-config,
    SGLang's --engram-config ...), or one line naming the flag."""
    try:
        got = json.loads(raw)
    except ValueError:
        raise K3PlanError(f"--serve: {flag} {raw[:60]!r}: expected a JSON object") from None
    if not isinstance(got, dict):
        raise K3PlanError(f"--serve: {flag} {raw[:60]!r}: expected a JSON object")
    return got


def suffix_int(text: str, flag: str = "a value") -> int | None:
    """vLLM's human_readable_int suffixes (vllm/utils/argparse_utils.py; vllm/engine/arg_utils.py @99d7eb5d): 'k' /
    'm' / 'g' / 't' are 10^3 / 10^6 / 10^9 / 10^12 (128k = 128,000, decimals allowed), 'K' / 'M' / 'G' / 'T' are
    2^10 / 2^20 / 2^30 / 2^40
    (128K = 131,072, whole numbers only: a decimal is a ValueError naming the suffix); None without a suffix.
    A count of 2^63 or more (no engine's int64 holds it) is bad input, one line naming ``flag``: read as a float
    (vLLM's int(float(number) * 10^3)) a 309-digit number is infinity and its int() an OverflowError, and a
    4,301-digit one is past Python's int-from-text limit."""
    import re
    from decimal import Decimal

    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    if m is None:
        return None
    number, suffix = m.groups()
    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": KiB, "M": MiB, "G": GiB, "T": 1024 * GiB}[suffix]
    if Decimal(number) * scale >= 2**63:
        raise K3PlanError(f"--serve: {flag} {text.strip()[:40]!r}: 2^63 or more; expected a number an int64 holds")
    if suffix in "kmgt":
        return int(float(number) * scale)
    if "." in number:
        raise ValueError(suffix)
    return int(number) * scale


def read_dcp(r: Reading, dcp: int, *, flag: str, tp_flag: str, engine: str, group: str, pool: str) -> None:
    """Decode context parallelism as both families read it: refused on a TPU (neither TPU engine's was read) and where
    the size does not divide the TP size (``group``: how the engine forms the DCP group inside the TP group), else
    set on the reading with a caveat naming the engine's pool rule (``pool``) and what k3plan's own figures leave out."""
    if dcp <= 1:
        return
    if r.platform == "tpu":
        raise K3PlanError(
            f"--serve: {flag} {dcp} on a TPU: {engine}'s decode context parallelism was not read; remove it"
        )
    if r.tp % dcp:
        raise K3PlanError(
            f"--serve: {flag} {dcp} does not divide {tp_flag} {r.tp}: {group}; expected a divisor of the TP size"
        )
    r.dcp = dcp
    r.caveats.append(
        f"{flag} {dcp}: the start check prices {engine}'s DCP pool ({pool}); k3plan's own budget table and its decode "
        "time are priced without DCP (every rank's attention over the whole context)"
    )


@dataclass(frozen=True, eq=False)  # hashed by identity: one table an engine, its options cached
class OptionTable:
    """The options an engine's argparse parser registers, by release read (a generated table of final releases, one
    run of releases an option: engines/vllm/serve_flags.py): ``flags`` the union, ``ranges`` the first and last
    release read of an option not in every one, ``releases`` the releases read (oldest first), ``engine`` how the
    refusal names the engine and ``where`` the parser's file it cites. SGLang's table (release candidates,
    post-releases, an option registered in several runs of releases, its kinds and choices) keeps its own reader,
    engines/sglang/serve.py release_options, and shares ``unabbreviated`` only."""

    engine: str
    where: str
    flags: frozenset[str]
    ranges: dict[str, tuple[str, str]]
    releases: tuple[str, ...]

    def read_release(self, release: tuple[int, ...]) -> str:
        """The release read whose parser ``release`` has: the newest read at or before it, the oldest read for one
        before them all."""
        from k3plan.engines.release import parse_release

        read = [r for r in self.releases if parse_release(r) <= release]
        return read[-1] if read else self.releases[0]

    def options(self, release: tuple[int, ...] | None) -> tuple[frozenset[str], str]:
        """The options the parser of ``release`` registers (with --help) and what they are; None (no release
        named): the union of the releases read, an option any of them takes."""
        if release is None:
            return _union_options(self), f"{self.engine} {self.releases[0]}-{self.releases[-1]} (any of them)"
        read = self.read_release(release)
        return _release_options(self, read), f"{self.engine} {read}"


@lru_cache(maxsize=None)
def _union_options(table: OptionTable) -> frozenset[str]:
    return table.flags | {"--help"}


@lru_cache(maxsize=None)
def _release_options(table: OptionTable, read: str) -> frozenset[str]:
    from k3plan.engines.release import parse_release

    at = parse_release(read)

    def has(flag: str) -> bool:
        first, last = table.ranges.get(flag, (table.releases[0], table.releases[-1]))
        return parse_release(first) <= at <= parse_release(last)

    return frozenset({f for f in table.flags if has(f)} | {"--help"})


def unabbreviated(token: str, options: frozenset[str], said: str, *, engine: str, where: str) -> str:
    """A flag as an argparse parser with allow_abbrev on (argparse's default, which SGLang's and vLLM's parsers keep)
    reads it: ``--name`` or ``--name=value`` whose name is a prefix of exactly one of its options stands for that
    option, a prefix of several stops the parser ('ambiguous option', exit 2); an exact option, a value, a
    single-dash flag or a prefix of none stays as written. ``options`` / ``said``: OptionTable.options; ``engine``
    / ``where``: the engine and its parser's file, for the refusal."""
    if not token.startswith("--") or token == "--":
        return token
    name, eq, value = token.partition("=")
    if name in options:
        return token
    matches = sorted(f for f in options if f.startswith(name))
    if len(matches) > 1:
        raise K3PlanError(
            f"--serve: {engine} refuses {name}: 'ambiguous option: {name} could match {', '.join(matches)}' "
            f"(argparse's prefix matching over the options of {said}, {where}); write the whole flag"
        )
    return matches[0] + eq + value if matches else token


def read_hf_overrides(
    r: Reading, flag: str, *, engine: str, source: str, allowed: tuple[str, ...] | None = None
) -> None:
    """A JSON object of Hugging Face config fields the engine sets over the checkpoint's config before it builds the
    model (``source``: where the engine's code does so), priced as the model k3plan builds from the bundled config
    with them set (k3plan.models.loader OVERRIDABLE: the fields its spec reads whole, or the engine's ``allowed``
    among them: those its model code was read to take from the config; the model keeps its name, so the rules kept
    for it still find it); any other field refused by name, in one line."""
    from k3plan.models.loader import OVERRIDABLE

    fields = OVERRIDABLE if allowed is None else tuple(k for k in OVERRIDABLE if k in allowed)
    raw = r.get(flag, None)
    if raw is None:
        return
    got = json_object(flag, raw)
    if not got:
        r.ignored.append(f"{flag} {{}}")
        return
    for key, value in got.items():
        if key not in fields:
            raise K3PlanError(
                f"--serve: {flag} {key}: {engine} sets it over the checkpoint's config before the model is built "
                f"({source}); k3plan prices an override of {', '.join(fields)} only; remove it"
            )
        least = 0 if key == "first_k_dense_replace" else 1
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_FLAG_INT:
            raise K3PlanError(f"--serve: {flag} {key} {value!r}: expected a whole number from {least}")
    r.hf_overrides = tuple(got.items())
    said = ", ".join(f"{k} {v:,}" for k, v in r.hf_overrides)
    r.caveats.append(
        f"{flag}: the model built from the bundled config with {said} set over it, as {engine} builds it ({source})"
    )
