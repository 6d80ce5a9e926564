"""One serving engine, as k3plan prices it: a folder ``k3plan/engines/<engine>/`` holding its stack YAML
(``stack.yaml``: formats, cache, state, sharding, paging, reserve, each rule cited) and an ``ENGINE`` value of
this type in its ``__init__.py``: the engine's name (what ``--stack`` takes) and old names, the command that
starts it, the words and flags its logs and launch use, its DeepSeek-V4 cache layout and Engram placement, and
the expert formulation k3plan compiles for it. Callers outside engines/ read these attributes instead of
comparing engine names (issue 51: an engine's rules are in its folder only); the registry
(``k3plan.engines.registry``) finds the folders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from k3plan.engines.dsv4_layout import Dsv4Layout, EngramPlacement
from k3plan.engines.release import EngineCommit


@dataclass(frozen=True)
class HbmWorker:
    """A TPU engine's worker that sizes its KV pool from the HBM the devices report (kv_pool method
    ``utilization_minus_resident``): available = utilization x the HBM limit - the bytes in use when it asks, so a
    compiled step's temporaries, freed when it returns, run in the 1 - utilization left over. Each field is the
    engine's own, cited to its code: where the worker sizes the pool (``source``), where it refuses a pool of 0
    bytes and in which words (``no_pool``: a template over used / cap / over GiB and the utilization), where
    the weights overflow the HBM (``weights_oom``, ``weights_oom_at``), and its compact KDA-state slots
    (``compact_at``): on a state pool that leaves no attention block the torch_tpu plugin raises
    (``compact_short: "raise"``), tpu-inference skips the compact sizing and keeps vLLM's uniform pages
    (``"uniform"``); the temporaries its compiled step holds where they are priced (``step_temporaries``)."""

    source: str
    no_pool: str  # str.format over used, cap, over (GiB, 2 decimals) and util
    no_pool_at: str
    weights_oom: str
    weights_oom_at: str
    compact_at: str
    compact_short: Literal["raise", "uniform"]
    # the compiled step's temporaries at the largest token bucket, where the engine's rules size them (its
    # memory.py): a function of keyword arguments architecture, options (the stack's options the command set),
    # n_moe, top_k, expert_in, tokens (max_num_batched_tokens a rank) and dp (the attention-DP ranks) returning
    # (bytes a device, source) or None; the start fails where they exceed the 1 - utilization share
    step_temporaries: Optional[Callable[..., Optional[tuple[int, str]]]] = None
    # where the worker returns the HBM of all its devices summed and vLLM divides that sum by one page of the mesh's
    # cache (its blocks split across the devices): the blocks, tokens and the one-request check are counted over
    # the devices' pools together, and this names that code; "": the worker returns one device's pool
    sums_devices: str = ""
    # where --num-gpu-blocks-override pins the pool of a model with state groups and the engine gives every layer its
    # own array of the pinned blocks (the attention layers' pages and the state layers' slots alike, the compact state
    # sizing skipped): this names that code, and the worker then holds those arrays, whatever the budget left; "":
    # not priced (the pool read as the budget)
    pinned_layers: str = ""
    # where the compiled step holds a copy of every attention layer's cache (its donation refused): a function of
    # keyword argument options (the stack's options the command set) returning the source, or None where it does not;
    # the copies, a device's attention pages of every attention layer, are added to the step's temporaries
    attention_cache_copies: Optional[Callable[..., Optional[str]]] = None
    # a second executable compiled at start after the pool (tpu-inference's fused decode loop), apart from the step:
    # a function of keyword arguments options (the stack's options the command set), n_moe, n_attention (the
    # attention layers, the rest state layers) and max_num_seqs returning (bytes a device of its temporaries, source)
    # or None; the start fails where they exceed the HBM the step's temporaries run in
    loop_temporaries: Optional[Callable[..., Optional[tuple[int, str]]]] = None
    # where a kernel the step compiles at start asks the TPU's scalar memory for more than it holds: a function of
    # keyword arguments release, commit (the EngineCommit fit --engine-version named, or None), max_model_len,
    # max_num_seqs, dp (the attention-DP ranks), block (the KV block) and options returning (the engine's error, where it is raised) or None; asked for DeepSeek-V4 only (tpu-inference's
    # compressor kernel: engines/tpu_inference/dsv4_smem.py)
    dsv4_smem_refusal: Optional[Callable[..., Optional[tuple[str, str]]]] = None


# How an engine sizes its KV pool (fit --json's ``engine``): ``profile`` -- a fraction of HBM less the weights
# and a profiled activation (vLLM's Worker.determine_available_memory, k3plan.engines.vllm.memory);
# ``static`` -- a static fraction less the weights and the state pool (SGLang's ModelRunner.init_memory_pool,
# k3plan.engines.sglang.memory)
PoolRule = Literal["profile", "static"]
# where an engine sizing's weights come from: k3plan's own per-device figure, before anything the engine adds
WEIGHTS_SOURCE = "k3plan's weights a device (inventory x the stack's runtime formats x ShardSpecs)"
# The command family that starts an engine (k3plan.engines.launch): ``vllm serve``, SGLang's launch_server, MaxText
Launcher = Literal["vllm", "sglang", "jax"]
# the `vllm` command (vllm serve; lm_eval calls its vLLM backend by the same name): the launcher vocabulary, for the
# readers of the vLLM-family commands outside the vllm folder (engines/tpu_inference/llm_class.py)
VLLM_COMMAND: Launcher = "vllm"


@dataclass(frozen=True)
class Engine:
    """One engine's description. ``name``: the stack name (its folder is the name with '-' as '_');
    ``aliases``: names it had once, which load its stack (plan, calibrations and records taken under them)."""

    name: str
    package: str  # the folder's Python package (k3plan.engines.<package>)
    stack_path: Path  # the folder's stack.yaml
    launcher: Launcher
    dsv4: Dsv4Layout  # DeepSeek-V4's cache as the engine stores it (step/dsv4_cache derives the figures)
    engram: EngramPlacement  # where the engine keeps DeepSeek-V4.1's Engram tables by default
    aliases: tuple[str, ...] = ()
    # the place this engine takes among a machine's default stacks (the first that runs there; None: never a
    # default): engines.stack.default_stack_for
    default_rank: int | None = None
    pool_rule: PoolRule = "profile"
    # the words fit uses for the concurrency the engine logs at its pool, and the flag that caps running sequences
    concurrency_label: str = "its 'Maximum concurrency'"
    max_seqs_flag: str = "max_num_seqs"
    # the engine loads a multimodal model's vision tower with it (vLLM: unless --language-model-only or the tower's
    # modalities limited to 0, tower_off_by_limits; SGLang: for the
    # model classes that build one, engines/sglang/__init__.py); False: the language model alone, as k3plan's budget
    # prices it. ``vision_tower_architectures``: the model architectures (ModelSpec.architecture) whose tower it
    # builds; None: every multimodal model's
    loads_vision_tower: bool = False
    vision_tower_architectures: frozenset[str] | None = None
    # a question without a serve command prices a multimodal model as its language model alone: where the engine, told
    # nothing, builds the tower and refuses it at the stack's options, the warning that says so (keywords architecture,
    # tower_bytes, options, pp, vendor; None: no such refusal; SGLang's DeepSeek-V4.1: engines/sglang/vision.py)
    vision_refusal: Optional[Callable[..., Optional[str]]] = None
    # (model, release=, hardware=, vendor=, attn_tp=, kv_dtype=) -> ((role, bytes a device, source), ...): what the
    # engine on a GPU holds with the weights beside the model's tensors for a question without a serve command, as
    # its serve reading holds them (SGLang: DeepSeek-V4's RoPE tables and V4.1's bf16 wo_a, engines/sglang/memory.py
    # plain_loaded_extras over sglang_loaded_extras); read through Stack.engine_held by fit's setup and plan's weight
    # columns. None: nothing such
    loaded_extras: Optional[Callable[..., tuple[tuple[str, int, str], ...]]] = None
    # a model class that skips its tower where the command's --limit-mm-per-prompt sets every modality the tower
    # serves to 0: (architecture, the first release that does, the modalities, the source); a TPU plugin's
    # command (no release) is read at the plugin's vLLM, later than any first release here
    tower_off_by_limits: tuple[tuple[str, tuple[int, int, int], frozenset[str], str], ...] = ()
    # the routed-expert formulation k3plan compiles and prices for the engine (k3plan.validate.experts):
    # ``layer`` (every local expert dequantized a layer), ``tiled`` (TILE_EXPERTS at once), ``ragged``
    expert_form: str = "layer"
    # the graph whose temporaries the analytic model counts (k3plan.step.temporaries): ``kernels`` -- the engine's
    # attention and expert kernels, which materialize neither the scores nor the dequantized experts; ``xla`` -- a
    # graph written in XLA ops (the porting study's, k3plan's validate graph): attention scores materialized over
    # the chunk x context, the MoE's rows over every token-expert pair, the experts dequantized in XLA
    temp_graph: Literal["kernels", "xla"] = "kernels"
    # names a temporaries grid recorded before records named their form -> the form compiled then
    # (validate.temp_fit reads the records of 2026-12-01)
    recorded_forms: dict[str, str] = field(default_factory=dict)
    # the engine whose rules price a stack YAML no folder holds (a user's own): one engine says so
    prices_unnamed: bool = False
    # hardware kind -> the command that starts the engine there, where it is not ``launcher``
    launcher_on: dict[str, Launcher] = field(default_factory=dict)
    # the engine runs attention data parallelism inside one ``vllm serve`` over every device (tpu-inference's
    # --additional-config sharding_strategy: k3plan.engines.launch.tpu_sharding_strategy)
    tpu_dp_attention: bool = False
    # the serve flags its own CI passes, each with its cited config (launch lines add them)
    ci_serve_flags: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # the KV block (tokens) a run that sets no --block-size gets, and where that was read (None: the stack's paging)
    default_block: tuple[int, str] | None = None
    # (async or not, where it was read): the scheduling a run used where its source does not publish it
    scheduling_default: tuple[bool, str] | None = None
    # stack options a published run that does not set them ran at: the engine's own defaults where the stack's
    # (k3plan's deployment) differ (app/score.py prices each run so, as --serve reads a command)
    run_options: dict[str, str] = field(default_factory=dict)
    # the scheduler runs a prefill whenever one forms, in a step of its own (speed.scheduler.simulate's
    # prefill_first, its rule cited there); False: vLLM V1's, which mixes prefill chunks into decode steps
    prefill_first: bool = False
    # the engine loop (scheduler, input preparation, output processing a step) whose published host time a step
    # the speed model's host term reads (an engine_family of evidence/engine_step_overheads.yaml); None: none
    engine_loop: str | None = None
    # a TPU engine's worker that sizes the pool from the HBM in use (kv_pool utilization_minus_resident): its rules
    hbm_worker: HbmWorker | None = None
    # what in k3plan's pricing follows the release fit --engine-version names (k3plan.engines.release), in words for
    # the command's caveat; "": no rule k3plan prices for the engine differs by release
    by_release: str = ""
    # the models (bundled names, by prefix) those rules concern; (): every model the engine serves
    by_release_models: tuple[str, ...] = ()
    # further rules that follow the release, each (the models it concerns, by prefix, (): every one; its words), so a
    # command's caveat names those of its model only
    by_release_rules: tuple[tuple[tuple[str, ...], str], ...] = ()
    # the oldest release whose code k3plan read for this engine; a command of an older one is priced by the code
    # each rule cites, with a caveat saying so (None: no release read)
    oldest_release_read: tuple[int, int, int] | None = None
    # the release a GPU question that names none is read as: the newest whose code k3plan read (vLLM:
    # engines/vllm/releases.py NEWEST_RELEASE, SGLang: engines/sglang/releases.py NEWEST_RELEASE); None: each rule's
    # cited code
    newest_release_read: tuple[int, int, int] | None = None
    # the newest release whose code k3plan read for this engine, where it is newer than the default above (vLLM: 0.34.0
    # is read and priced under --engine-version, not yet the default: engines/vllm/releases.py NEWEST_READ); a command
    # of a later release is priced by its rules, with a caveat saying so. None: the default above
    latest_release_read: tuple[int, int, int] | None = None
    # (the hex digits of a commit fit --engine-version names) -> its EngineCommit (k3plan.engines.release), placed by
    # the table of the engine's main history k3plan ships, or None where the table does not hold it (tpu-inference:
    # engines/tpu_inference/commits.py); None: the engine takes release numbers only
    commit_of: Optional[Callable[[str], Optional[EngineCommit]]] = None
    # () -> the words a refusal of a commit the table does not hold names (what --engine-version takes)
    commit_expected: Optional[Callable[[], str]] = None
    # (release, async_scheduling, pp, v2_runner) -> the batches of the prefill budget a windowed KV group holds pages
    # for, as a serve command runs (vLLM: engines/vllm/releases.py in_flight_batches); None: not the engine's rule
    windowed_in_flight: Optional[Callable[..., int]] = None
    # (release, the stack's alignment, hardware=, fp8_kv=) -> (alignment, why): the token alignment of the attention block the engine's
    # release sets for a hybrid MLA + linear-attention model (vLLM from 0.27.0: 128, engines/vllm/releases.py
    # hybrid_mla_align; read through Stack.hybrid_align); None: the stack's paging.align_tokens at every release
    hybrid_mla_align: Optional[Callable[..., Optional[tuple[int, str]]]] = None
    # (release, hardware, fp8_kv=, env=) -> (tokens, why): the KV block the engine's release runs a dense-MLA model at
    # (every layer one MLA spec) where the command gives no --block-size (vLLM: engines/vllm/mla_block.py; fit sets it
    # as Stack.engine_block, which the budget's page and the engine's pool read); None: the stack's paging.align_tokens
    dense_mla_block: Optional[Callable[..., Optional[tuple[int, str]]]] = None
    # (release=, device=, a2a=, runner=, env=) -> (format, why): the runtime format the engine's release holds a
    # DeepSeek-V4 checkpoint's FP4 routed experts (ds_fp4) in on the GPU ``device`` under the all-to-all, MoE runner
    # and environment given, where that differs from the stack's option choices (SGLang's DeepGEMM scale packing on
    # SM100: engines/sglang/fp4_scales.py dsv4_fp4_expert_format; read through Stack.expert_format_on by fit with or
    # without --serve and by plan's weight columns per GPU); None: the stack's option choices hold it on every GPU
    expert_format: Optional[Callable[..., Optional[tuple[str, str]]]] = None
    # (architecture, hardware, vendor, intermediate, shards) -> (num, den, why): a device holds num / den of the
    # experts' even share where the engine TP-splits them (no expert parallelism) and pads a shard by the model's
    # rule (vLLM: engines/vllm/moe_padding.py expert_shard_pad; the budget's weights read it through
    # Stack.expert_pad); None: the engine pads no shard k3plan prices
    expert_shard_pad: Optional[Callable[..., Optional[tuple[int, int, str]]]] = None
    # (architecture, vendor, experts, redundant, ep) -> (num, den, why): a rank holds num / den of the experts' share
    # where the command adds redundant expert copies (vLLM's EPLB: engines/vllm/eplb.py redundant_expert_pad; read
    # through Stack.expert_pad as the shard padding is); None: the engine's redundant experts are not priced
    redundant_expert_pad: Optional[Callable[..., Optional[tuple[int, int, str]]]] = None
    # (release, vendor, backend, speculative, context, kv_heads_per_tp) -> (scale, why): a factor the engine applies to
    # its static memory fraction after setting it (SGLang 0.4.7-0.5.4 under aiter: engines/sglang/aiter_fraction.py;
    # read through Stack.fraction_scale); None: no such rule
    fraction_scale: Optional[Callable[..., Optional[tuple[float, str]]]] = None
    # the FP4 checkpoint storage formats (models/formats.py) whose bytes k3plan read the engine holding as stored on
    # the GPUs that run them (engines/fp4_paths.py): priced there, refused elsewhere and under other engines
    fp4_storage_held: frozenset[str] = frozenset()
    # where the engine resolves --kv-cache-dtype auto to the KV dtype a checkpoint's quantization config names (a
    # ModelOpt kv_cache_quant_algo FP8: engines/serve_values.py checkpoint_kv_dtype), in words for the note; "": it
    # keeps the model's own dtype (Stack.for_model)
    checkpoint_kv_auto: str = ""
    # the first release that resolves it so (vLLM: 0.14.0); None: every release. Before it, auto keeps the model's dtype
    checkpoint_kv_auto_from: Optional[tuple[int, int, int]] = None
    # (model architectures, KV dtype, where read): the KV dtype the engine on a GPU resolves --kv-cache-dtype auto to
    # for a model of those architectures (ModelSpec.architecture) whatever its checkpoint declares (SGLang's
    # DeepseekV4ForCausalLM: fp8_e4m3, engines/sglang/releases.py DSV4_KV_AT); (): none (Stack.architecture_kv)
    architecture_kv: tuple[tuple[frozenset[str], str, str], ...] = ()
    # release -> {option: (value, where read)}: the stack options whose default the engine changed between releases,
    # at that release's value where the question gives none (vLLM: engines/vllm/releases.py option_defaults; the
    # stack YAML's default is the newest release's). None: no option default moves with the release
    option_defaults: Optional[Callable[[tuple[int, int, int]], dict[str, tuple[str, str]]]] = None
    # (release, gpu_mib=, tp_size=, pp=, dp_attention=, cuda=) -> (the fraction, where read): the static memory fraction
    # the engine derives in a release whose derivation is not the stack's own (Option.auto), where the question gives
    # none (SGLang before 0.5.3: engines/sglang/fraction_eras.py era_fraction); None from the release: the stack's
    release_fraction: Optional[Callable[..., Optional[tuple[float, str]]]] = None
    # a term of the stack's derived reserve (AutoFraction: "deepep") -> the first release whose engine reserves it; a
    # question read as an earlier release leaves it out (SGLang's DeepEP buffers from 0.5.15: engines/sglang/releases.py
    # DEEPEP_RESERVE_FROM)
    reserve_terms_from: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # (release, model_type=, cuda=, dp_attention=, a2a=, pp=, backend=, conditions=) -> whether the engine captures a
    # prefill graph before it derives its fraction (.on, .breakable, .why), which the derived reserve counts (SGLang:
    # engines/sglang/prefill_graph.py prefill_graph); None from the hook: a model it has no reading of (the stack's
    # own AutoFraction.prefill_graph); None: the stack's own
    prefill_graph: Optional[Callable[..., Any]] = None

    def resolves_checkpoint_kv(self, release: tuple[int, int, int] | None) -> bool:
        """Whether the engine at ``release`` (None: its newest read) resolves --kv-cache-dtype auto from the
        checkpoint's quantization config (``checkpoint_kv_auto``, from ``checkpoint_kv_auto_from``)."""
        first = self.checkpoint_kv_auto_from
        return bool(self.checkpoint_kv_auto) and (first is None or release is None or tuple(release) >= first)

    def launcher_for(self, kind: str | None) -> Launcher:
        """The command family that starts the engine on a machine of ``kind`` ("tpu", "gpu"; None: ``launcher``)."""
        return self.launcher_on.get(kind or "", self.launcher)

    @property
    def names(self) -> tuple[str, ...]:
        """The name and every old name."""
        return (self.name, *self.aliases)
