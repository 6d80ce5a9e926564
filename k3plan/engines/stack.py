"""Serving stacks: what a runtime does with the weights, the cache and the memory.

A stack is a YAML file (bundled as ``k3plan/engines/<engine>/stack.yaml`` or a user path) fixing the runtime
format of each weight role, the KV-cache dtype and layout, the KDA state dtypes and slots, the
sharding rules (each cited to the engine code that holds it), paging, how the engine sizes its
cache pool, the engine's memory reserve, the expert collective pattern and the platforms it runs
on. Engine flags that change any of these are stack options: ``load_stack("sglang:
moe_a2a_backend=none,mem_fraction_static=0.85")`` or ``Stack.with_options``. The schema's sections are in
``stack_sections.py`` (cache, state, memory, parallel layout) and ``stack_options.py`` (flags, refusals, derived
reserves, kernel rules); this module holds the ``Stack`` that composes them and its loaders.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Optional

import msgspec
from msgspec import UnsetType

from k3plan.columns import each
from k3plan.engines.registry import StackRef, aliases, engine_names, engines, registry
from k3plan.engines.stack_options import (  # noqa: F401  # the schema's names, read through this module too
    REFUSED,
    AbsorbedCopies,
    AutoFraction,
    ComputeDtype,
    DpAttentionChunk,
    Effect,
    Experts,
    FormatCompute,
    GmmTile,
    Option,
    PlatformRule,
    Refusal,
    SequenceParallelMoe,
    TokenBuckets,
)
from k3plan.engines.stack_sections import (  # noqa: F401
    Cite,
    Collectives,
    DefaultParallel,
    DpExperts,
    KVCache,
    KVLayout,
    KVPool,
    Logits,
    Paging,
    Pipeline,
    Reserve,
    Sharding,
    Source,
    Splits,
    State,
    merged_rules,
    updated,
)
from k3plan.errors import K3PlanError
from k3plan.specfile import Spec, convert, read_yaml_mapping
from k3plan.units import MiB

# Names a stack had once -> the stack that prices what it meant (each engine's ``Engine.aliases``, issue 34)
STACK_ALIASES = aliases()
# The default stack of a machine: the first of these that runs on it (Stack.runs_on, the stack's cited platforms),
# in the order of the engines' ``Engine.default_rank`` (each engine's folder says why it takes its place)
DEFAULT_STACK_ORDER = tuple(
    e.name for e in sorted(engines(), key=lambda e: e.default_rank or 0) if e.default_rank is not None
)
DEFAULT_STACK = DEFAULT_STACK_ORDER[0]  # load_stack()'s default name only; commands take default_stack_for(hardware)
KV_DTYPES = ("bf16", "fp8", "fp8_ds_mla", "fp32")
KINDS = ("tpu", "gpu")
ENGRAM_PLACEMENTS = ("hbm", "host")  # --engram: where DeepSeek-V4.1's n-gram tables live


# a sharding rule target over every device of a stage, ("dp", "tp"): an engine's whole TP group under DP attention
# (SGLang's tp_size = attention TP x dp), which cuts the LM head there (Stack.lm_head_whole_tp); k3plan.sharding.mesh
# expands it (Mesh.expand), never one of Mesh.aliases
WHOLE_TP = "tp_x_dp"
# the axis and its target Stack.with_mlp_whole_tp sets for a role other than an MLP's (``mlp: tp_x_dp``): the embedding
# whole on every device (SGLang's DeepSeek-V4 VocabParallelEmbedding(enable_tp=False) under DP attention)
DP_ATTENTION_SPLITS: dict[str, tuple[str, str | None]] = {"embed": ("vocab", None)}


class Stack(Spec):
    name: str
    description: str
    platform: Literal["tpu", "gpu", "any"] = "any"
    # hardware kinds ("tpu", "gpu"), vendors ("nvidia", "amd", "google") or hardware names
    # ("nvidia-b300"); empty: derived from ``platform``
    platforms: tuple[str, ...] = ()
    platforms_source: str = ""
    runtime_formats: dict[str, str]  # role (or "default") -> storage format or "checkpoint"
    runtime_formats_source: str
    activation_dtype: Literal["bf16", "f32"] = "bf16"
    # the dtype each weight format's matmuls compute in (the FLOP/s peak they run at)
    compute_dtype: ComputeDtype = msgspec.field(default_factory=ComputeDtype)
    kv_cache: KVCache
    state: State
    paging: Paging
    reserve: Reserve
    kv_pool: Optional[KVPool] = None
    sharding: Sharding
    collectives: Collectives
    logits: Logits
    default_parallel: DefaultParallel = msgspec.field(default_factory=DefaultParallel)
    dp_experts: DpExperts = msgspec.field(default_factory=DpExperts)
    experts: Experts = msgspec.field(default_factory=Experts)  # the routed-expert kernel's row tiling (Experts)
    # the compiled token counts a step pads to (None: a step runs at its own tokens)
    token_buckets: Optional[TokenBuckets] = None
    splits: Optional[Splits] = None  # splits the engine refuses for this layout (None: any)
    sequence_parallel_moe: Optional[SequenceParallelMoe] = None
    # None: the engine holds no absorbed-MLA copy beside kv_b_proj (it holds one or the other)
    absorbed_copies: Optional[AbsorbedCopies] = None
    pipeline: Optional[Pipeline] = None  # None: the stack has no pipeline parallelism (--pp 1 only)
    default_parallel_source: str = ""
    options: dict[str, Option] = {}
    refusals: tuple[Refusal, ...] = ()  # deployments the engine's code refuses or cannot run for some models
    chosen: dict[str, str] = {}  # options applied to this stack (name -> value)
    # options given explicitly (NAME:option=value, with_options), even at their default value: an option whose
    # engine derives its value when the flag is absent (Option.auto) runs the value given
    given: tuple[str, ...] = ()
    # the engine runs attention data parallelism inside one server (SGLang --enable-dp-attention): its tp_size
    # counts every device of a stage (tp x dp), and a rule that reads DP attention applies (AutoFraction's
    # DP-attention terms)
    dp_attention: bool = False
    # None: the engine takes its chunk flag as one DP group's (DpAttentionChunk)
    dp_attention_chunk: Optional[DpAttentionChunk] = None
    # kind -> the engine whose memory rules apply there (PlatformRule; Stack.bind)
    on_platform: dict[Literal["tpu", "gpu"], PlatformRule] = {}
    # the kind whose ``on_platform`` rule this stack was bound with (Stack.bind); None: unbound
    bound: Optional[Literal["tpu", "gpu"]] = None
    # options given (NAME:option=value) that only an ``on_platform`` rule's engine has: applied when the stack is
    # bound to that kind
    pending: dict[str, str] = {}
    # where a model's Engram tables live (DeepSeek-V4.1, --engram): "hbm" or "host"; None: the engine's default
    # (Engine.engram in its folder, cited)
    engram_placement: Optional[Literal["hbm", "host"]] = None
    # in host memory, a copy a DP replica ("replica") or one a node ("node": vLLM's dp_shared_memory); None: the
    # engine's default (EngramPlacement.host_copies)
    engram_host_copies: Optional[Literal["replica", "node"]] = None
    # the batches of the prefill budget a windowed KV group holds pages for (vLLM's max_concurrent_batches, set from
    # a serve command's release and scheduling: engines/vllm/releases.py); None: the engine's own default. One value:
    # the budget's charge for a request (step/dsv4_cache.engine_charge) and the engine's pool both read it
    windowed_in_flight: Optional[int] = None
    # the engine release a serve command runs (fit --engine-version, or its family's newest read): the budget's charge
    # for a DeepSeek-V4 request follows the same release's groups as the engine's pool; None: the engine's newest read
    engine_release: Optional[tuple[int, int, int]] = None
    # a serve command's --block-size where the budget's charge for a DeepSeek-V4 request reads the engine's groups
    # (their block as the engine's pool has it), and a dense-MLA model's page (Stack.dense_mla_block); None: the block
    # the engine resolves by default
    engine_block: Optional[int] = None
    # the serve command's environment settings the engine's rules read (VLLM_ATTENTION_BACKEND: Stack.dense_mla_block),
    # sorted (name, value) pairs; (): none given
    engine_env: tuple[tuple[str, str], ...] = ()
    # a serve command's MoE runner as given (SGLang's --moe-runner-backend, any value: the engine's expert-format rule
    # reads runners the stack's option moe_runner_backend has no choice for); None: that option's choice
    # (Stack.expert_format_on)
    moe_runner: Optional[str] = None
    # a serve command's --swa-full-tokens-ratio (SGLang's DeepSeek-V4 sliding-window share of the pool), which the
    # budget's charge for a request reads as the engine's start check does (step/dsv4_cache.engine_charge); None: the
    # engine's default
    engine_swa_ratio: Optional[float] = None
    # a serve command's DeepSeek-V4 compressor-state element in bytes (SGLang's SGLANG_DSV4_COMPRESS_STATE_DTYPE: 4
    # float32, 2 bfloat16), which the budget's charge for a request reads as the engine's start check does
    # (step/dsv4_cache.engine_charge); None: the engine's default
    engine_state_bytes: Optional[int] = None
    # (num, den, why): a device holds num / den of the experts' even share, the engine TP-splitting them without
    # expert parallelism and padding each shard by the model's rule (Engine.expert_shard_pad, set from a serve
    # command); None: whole experts a rank, or shards the engine does not pad. The budget's weights apply it
    # (step/weight_budget.weight_terms) and the engine's sizing reads those weights: one figure
    expert_pad: Optional[tuple[int, int, str]] = None
    # (copies, why): a rank holds its routed experts ``copies`` times, the engine keeping the loaded tensors beside
    # the ones its kernels read (Engine rules read from a serve command: SGLang 0.4.8.post1-0.4.9.post4's EP MoE under
    # aiter, engines/sglang/ep_moe_copy.py); None: once. The budget's weights hold them (step/weight_budget.
    # weight_terms), the step reads one copy, and the engine's sizing reads those weights: one figure
    expert_copies: Optional[tuple[int, str]] = None
    # (scale, why): a factor the engine applies to its static memory fraction after setting it, given or derived
    # (Engine.fraction_scale: SGLang 0.4.7-0.5.4 under aiter, set from a serve command); None: none. reserve_fraction
    # applies it, so the budget's reserve and the engine's pool read one fraction
    fraction_scale: Optional[tuple[float, str]] = None
    # (layers, width) of the model's vision encoder where the engine counts the model multimodal and cuts its derived
    # memory fraction for it (AutoFraction.vlm; set by for_model); None: no cut
    vision_encoder: Optional[tuple[int, int]] = None
    # the engine builds the model's vision tower, whole on every device (a serve command whose engine loads it:
    # Engine.loads_vision_tower, vLLM without --language-model-only); the budget's weights hold it
    # (step/weight_budget.weight_budget) and the engine's sizing reads them: one figure. False: the language model alone
    vision_whole: bool = False
    # (role, bytes a device, source) of what a serve command's engine holds with the weights beside the model's own
    # tensors and counts in the weights its start check subtracts (SGLang: its speculative draft, DeepSeek-V4's RoPE
    # tables, engines/sglang/memory.py sglang_loaded_extras); the budget's weights hold them as terms of their own
    # (step/weight_budget.weight_budget) and the engine's sizing reads those weights: one figure. (): none
    extra_weights: tuple[tuple[str, int, str], ...] = ()
    # the stack's own KV dtype where for_model set the engine's by the model's architecture (Engine.architecture_kv,
    # a GPU rule): a binding to a TPU (plan's space binds after for_model: Stack.bindings) takes it back. None: not set
    kv_before_architecture: Optional[str] = None
    # the LM head's vocabulary split over every device of a stage (``tp_x_dp``: the engine's whole TP group under DP
    # attention, a serve command's choice -- SGLang without --enable-dp-lm-head), where the stack's rules put it on
    # the attention-TP group: a role override of the sharding (``with_lm_head_whole_tp``, cited), so the budget's
    # weights, the engine's sizing and the step read one split. False: the stack's own rule
    lm_head_whole_tp: bool = False
    # SGLang's decode CUDA-graph max batch as a serve command sets it (--cuda-graph-max-bs[-decode], the largest of
    # --cuda-graph-bs[-decode]), and the cap its release puts on the GPU class's default (--max-running-requests from
    # 0.5.22): what the derived fraction reserves graphs for (AutoFraction.reserved_mib); None: the class's max_bs
    decode_graph_bs: Optional[int] = None
    decode_graph_cap: Optional[int] = None
    decode_graph_off: bool = False  # the decode graphs not captured: no graph or DeepEP term in the derived fraction
    # the model's type (ModelSpec.architecture, set by for_model), which the engine's prefill-graph rule reads
    # (Engine.prefill_graph); None: the stack's own AutoFraction.prefill_graph
    model_type: Optional[str] = None
    # SGLang's prefill graph as a serve command sets it: the backend it locks (engines/sglang/prefill_graph.py
    # BACKENDS; None: the engine's resolution) and what else it runs that the rule reads (CONDITIONS)
    prefill_backend: Optional[str] = None
    prefill_conditions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        self._refusals_known()
        self._copies_typed()
        self._platforms_agree()

    def _refusals_known(self) -> None:
        for r in self.refusals:
            for name, values in r.options.items():
                opt = self.options.get(name)
                if opt is None:
                    raise ValueError(f"refusals: unknown option {name!r}; known: {', '.join(self.options) or 'none'}")
                bad = [v for v in values if opt.choices and v not in opt.choices]
                if bad:
                    raise ValueError(f"refusals: option {name} has no choice {bad}; choices: {', '.join(opt.choices)}")

    def _copies_typed(self) -> None:
        from k3plan.models.formats import FORMATS

        role = self.compute_dtype.roles.get("mla_absorbed")
        if self.absorbed_copies is not None and (role is None or role.dtype not in FORMATS):
            raise ValueError(
                "absorbed_copies: declare compute_dtype.roles.mla_absorbed with a storage dtype (bf16 or fp8), "
                "the dtype the copies are held and run in"
            )

    def absorbed_copy_format(self, role: str, checkpoint_fmt: str) -> str | None:
        """The storage format of the absorbed-MLA copies (W_UK / W_UV) the engine holds beside one kv_b_proj of
        ``role`` and checkpoint format ``checkpoint_fmt`` (``absorbed_copies``): the mla_absorbed role's dtype (else
        the stack's default compute dtype).
        None: no copy apart from kv_b_proj (no such rule, or the copies are views of its own weight)."""
        ac = self.absorbed_copies
        if ac is None:
            return None
        if ac.held_as == "kv_cache":
            # quantized to the cache's dtype; no quantized cache: not read, kv_b_proj held as loaded
            return "fp8" if self.kv_cache.dtype in ("fp8", "fp8_ds_mla") else None
        rule = self.compute_dtype.roles.get("mla_absorbed")  # a stack built without validation may lack it
        fmt = rule.dtype if rule is not None else self.compute_dtype.default
        if ac.views_when_same_format and self.runtime_format(role, checkpoint_fmt) == fmt:
            return None
        return fmt

    def _platforms_agree(self) -> None:
        if self.platforms and self.platform != "any":
            kinds = {p for p in self.platforms if p in KINDS}
            if kinds and kinds != {self.platform}:
                raise ValueError(f"platform {self.platform!r} disagrees with platforms {list(self.platforms)}")

    def runtime_format(self, role: str, checkpoint_fmt: str) -> str:
        """The format a tensor of ``role`` stored as ``checkpoint_fmt`` is resident in: ``role@fmt`` (a
        conversion the engine makes only of that checkpoint format: torchtpu-vllm's fp32 MXFP4 scales),
        then ``role``, then ``default``; "checkpoint" keeps the stored format."""
        fmt = self.runtime_formats.get(
            f"{role}@{checkpoint_fmt}",
            self.runtime_formats.get(role, self.runtime_formats.get("default", "checkpoint")),
        )
        return checkpoint_fmt if fmt == "checkpoint" else fmt

    def refused(self, *, layers: frozenset[str]) -> list[str]:
        """One line a Refusal that applies to a model with layers of these kinds at this stack's options: the
        engine, as cited, does not run what is priced."""
        return [
            f"stack {self.label}: {REFUSED}: {r.cited}"
            for r in self.refusals
            if r.applies(layers=layers, chosen=self.chosen)
        ]

    @property
    def label(self) -> str:
        """The stack as ``--stack`` takes it back: its name, then the options chosen away from their
        defaults (``vllm:all2all_backend=deepep_low_latency``; '+' joins several, as plan --stacks reads
        them) and any option given whose engine derives it when absent (``sglang:mem_fraction_static=0.88``:
        not SGLang's derived fraction). A bundled stack with no option given is its name."""
        changed = [f"{k}={v}" for k, _, v in self.changed_options()] + [f"{k}={v}" for k, v in self.pending.items()]
        return self.name + (":" + "+".join(changed) if changed else "")

    def changed_options(self) -> list[tuple[str, Option, str]]:
        """(name, option, value) of each option chosen away from its default, in the order chosen. An option
        the engine derives when its flag is absent (``Option.auto``) is changed whenever it is given, at its
        ``default`` too: that default is only k3plan's figure off a GPU, and the engine runs the value given."""
        out = []
        for k, v in self.chosen.items():
            opt = self.options.get(k)
            if opt is None:
                continue
            if opt.auto is not None:
                same = k not in self.given
            elif opt.sets == "reserve":
                same = float(v) == float(opt.default)
            else:
                same = v == str(opt.default)
            if not same:
                out.append((k, opt, v))
        return out

    def reserve_fraction(
        self, *, usable_bytes: int, tp: Any, pp: Any, chunk: Any, vendor: str | None, dp: Any = 1
    ) -> Any:
        """The reserve (a fraction of usable HBM) the engine runs with at this point: where the reserve
        option derives its value when the flag is not given (``Option.auto``, SGLang's mem_fraction_static)
        and it was left at its default, 1 - the derived fraction (on a GPU: the rule reads a GPU's memory and
        graphs); else the stack's reserve. ``chunk``: the prefill chunk of one DP group (None: the engine's
        default for the GPU); ``dp``: the DP groups of a stage, which a DP-attention engine (``dp_attention``)
        counts in its tp_size and its graph padding, and whose chunk it is given for all of them
        (``engine_chunk``). ``tp``, ``pp``, ``chunk`` and ``dp``: ints (fit) or numpy columns of one machine's
        configurations (plan's evaluate), the same value to the bit."""
        reserve = self._reserve_fraction(usable_bytes=usable_bytes, tp=tp, pp=pp, chunk=chunk, vendor=vendor, dp=dp)
        if self.fraction_scale is None:
            return reserve
        # the engine's cut of the fraction it set (Stack.fraction_scale): 1 - (1 - reserve) x scale
        scale = self.fraction_scale[0]
        return each(lambda v: round(1 - (1 - v) * scale, 12), reserve)

    def _reserve_fraction(
        self, *, usable_bytes: int, tp: Any, pp: Any, chunk: Any, vendor: str | None, dp: Any = 1
    ) -> Any:
        """``reserve_fraction`` before the engine's ``fraction_scale``."""
        auto = self.reserve_auto(vendor=vendor)
        if auto is None:
            return self.reserve.fraction_of_usable_hbm
        era = self.release_fraction(usable_bytes=usable_bytes, tp=tp, pp=pp, vendor=vendor, dp=dp)
        if era is not None:  # a release whose engine derives its fraction otherwise (Engine.release_fraction)
            return era
        deepep = self.chosen.get("moe_a2a_backend") == "deepep" and self._reserves_term("deepep")
        prefill, prefill_deepep = self.prefill_graph_terms(vendor=vendor, pp=pp)
        frac = auto.fraction(
            gpu_bytes=usable_bytes,
            tp=tp * dp if self.dp_attention else tp,
            pp=pp,
            chunk=None if chunk is None else self.engine_chunk(chunk, dp=dp),
            deepep=deepep,
            cuda=vendor == "nvidia",
            dp_attention_dp=dp if self.dp_attention else None,
            vision=self.vision_encoder,
            decode_bs=self.decode_graph_bs,
            decode_cap=self.decode_graph_cap,
            decode_off=self.decode_graph_off,
            prefill=prefill,
            prefill_deepep=prefill_deepep,
        )
        # a derived fraction <= 0 (more MiB reserved than the GPU has: a long chunk flag under DP attention) leaves
        # the engine no room at all; k3plan reserves the whole device rather than more than it (nothing fits)
        return each(lambda v: min(round(1 - v, 12), 1.0), frac)

    def prefill_graph(self, *, vendor: str | None, pp: int) -> Any:
        """The engine's prefill graph at this stack's release (``engine_release``; None: the engine's newest read),
        model (``model_type``), vendor, DP attention, --moe-a2a-backend, ``pp`` and command (``prefill_backend``,
        ``prefill_conditions``): the engine's rule's answer (Engine.prefill_graph: .on, .breakable, .why); None where
        the engine has no rule or no reading of the model (the stack's own AutoFraction.prefill_graph holds)."""
        from k3plan.engines.registry import engine_rules

        rules = engine_rules(self.name)
        if rules.prefill_graph is None or self.model_type is None:
            return None
        release = self.engine_release or rules.newest_release_read
        if release is None:
            return None
        return rules.prefill_graph(
            tuple(release),
            model_type=self.model_type,
            cuda=vendor == "nvidia",
            dp_attention=bool(self.dp_attention),
            a2a=str(self.chosen.get("moe_a2a_backend", "none")),
            pp=int(pp),
            backend=self.prefill_backend,
            conditions=frozenset(self.prefill_conditions),
        )

    def prefill_graph_terms(self, *, vendor: str | None, pp: Any) -> tuple[Any, Any]:
        """(whether the derived reserve counts the prefill graph, whether its DeepEP delta counts) at ``pp`` (an int or
        a column of configurations: the rule read at each distinct value), from ``prefill_graph``; (None, None): the
        stack's own AutoFraction.prefill_graph."""

        def one(stages: int) -> tuple[bool, bool] | None:
            got = self.prefill_graph(vendor=vendor, pp=stages)
            return None if got is None else (bool(got.on), bool(got.deepep_delta))

        if not hasattr(pp, "shape"):
            got = one(int(pp))
            return (None, None) if got is None else got
        import numpy as np

        values, inverse = np.unique(pp, return_inverse=True)
        answers = [one(int(v)) for v in values]
        if any(a is None for a in answers):
            return None, None
        on = np.array([a[0] for a in answers if a is not None])[inverse.reshape(pp.shape)]
        delta = np.array([a[1] for a in answers if a is not None])[inverse.reshape(pp.shape)]
        return on, delta

    def hybrid_align(self, hardware: str = "") -> tuple[int, str]:
        """The token alignment of the attention block for a hybrid MLA + linear-attention model at the engine release
        the stack runs (``engine_release``; None: the engine's newest read) and where it was read
        (``Engine.hybrid_mla_align``, on ``hardware`` with the stack's KV dtype); (paging.align_tokens, "") where the
        engine's rule leaves the stack's."""
        from k3plan.engines.registry import engine_rules

        rules = engine_rules(self.name)
        release = self.engine_release or rules.newest_release_read
        if rules.hybrid_mla_align is None or release is None:
            return self.paging.align_tokens, ""
        fp8 = str(self.kv_cache.dtype).startswith("fp8")
        got = rules.hybrid_mla_align(release, self.paging.align_tokens, hardware=hardware, fp8_kv=fp8)
        return (self.paging.align_tokens, "") if got is None else got

    def dense_mla_block(self, hardware: str = "") -> tuple[int, str]:
        """The KV block, in tokens, of a dense-MLA model (every attention layer one MLA spec) and where it was read: the
        command's --block-size (``engine_block``), else the block the engine release the stack runs (``engine_release``;
        None: the engine's newest read) resolves on ``hardware`` with the stack's KV dtype and the command's environment
        (``Engine.dense_mla_block``); (paging.align_tokens, "") where the engine's rule leaves the stack's. One value:
        the budget's page (step/cache.py cache_inputs), the engine's pool and the speed model's read it."""
        from k3plan.engines.registry import engine_rules

        rules = engine_rules(self.name)
        release = self.engine_release or rules.newest_release_read
        if rules.dense_mla_block is None or release is None:
            return self.paging.align_tokens, ""
        if self.engine_block:
            return self.engine_block, f"--block-size {self.engine_block} (the command's)"
        fp8 = str(self.kv_cache.dtype).startswith("fp8")
        got = rules.dense_mla_block(tuple(release), hardware, fp8_kv=fp8, env=dict(self.engine_env))
        return (self.paging.align_tokens, "") if got is None else got

    def expert_format_on(self, hardware: str, checkpoint_fmt: str = "ds_fp4") -> tuple[str, str] | None:
        """(format, why): the runtime format the engine release the stack runs (``engine_release``; None: the newest
        read) holds a ``checkpoint_fmt`` checkpoint's routed experts in on ``hardware`` under the stack's all-to-all,
        its MoE runner (``moe_runner``, else the option's choice) and the command's environment (``engine_env``), where
        that differs from the stack's option choices (``Engine.expert_format``: SGLang's DeepGEMM scale packing on
        SM100, engines/sglang/fp4_scales.py); None where they hold it. One rule: fit with and without --serve
        (setup.make_setup, ``on_hardware``) and plan's weight columns per GPU read it."""
        from k3plan.engines.registry import engine_rules

        rule = engine_rules(self.name).expert_format
        if rule is None or checkpoint_fmt != "ds_fp4" or not hardware:
            return None
        return rule(
            release=None if self.engine_release is None else tuple(self.engine_release),
            device=hardware,
            a2a=str(self.chosen.get("moe_a2a_backend", "none")),
            runner=self.moe_runner or self.chosen.get("moe_runner_backend"),
            env=dict(self.engine_env),
        )

    def on_hardware(self, hardware: str) -> Stack:
        """The stack with the routed experts in the format its engine holds them on ``hardware`` where that differs
        from the option choices (``expert_format_on``, set by ``with_expert_format``); else itself."""
        return self.with_expert_format(self.expert_format_on(hardware))

    def with_swa_ratio(self, ratio: float | None) -> Stack:
        """The stack with a serve command's --swa-full-tokens-ratio (``engine_swa_ratio``); None: as it is."""
        return self if ratio is None else updated(self, engine_swa_ratio=float(ratio))

    def with_state_bytes(self, size: int | None) -> Stack:
        """The stack with a serve command's DeepSeek-V4 compressor-state element (``engine_state_bytes``); None: as it
        is."""
        return self if size is None else updated(self, engine_state_bytes=int(size))

    def with_moe_runner(self, runner: str | None) -> Stack:
        """The stack with a serve command's MoE runner as given (``moe_runner``); None: as it is."""
        return self if runner is None else updated(self, moe_runner=str(runner))

    def _reserves_term(self, term: str) -> bool:
        """Whether the engine release the stack runs (``engine_release``; None: the newest read) reserves ``term`` of the
        derived reserve (``Engine.reserve_terms_from``)."""
        from k3plan.engines.registry import engine_rules

        first = engine_rules(self.name).reserve_terms_from.get(term)
        return first is None or self.engine_release is None or tuple(self.engine_release) >= first

    def release_fraction(self, *, usable_bytes: int, tp: Any, pp: Any, vendor: str | None, dp: Any = 1) -> Any:
        """The reserve (1 - the fraction) where the engine release the stack runs (``engine_release``) derives its
        static fraction by another rule than the stack's (``Engine.release_fraction``: SGLang before 0.5.3), read at
        the GPU's memory in MiB and tp_size (every GPU of a stage under DP attention) x pp; None: the stack's own
        derivation. ``tp``, ``pp`` and ``dp``: ints or columns of one machine's configurations (each value alone)."""
        from k3plan.engines.registry import engine_rules

        release = self.engine_release
        hook = None if release is None else engine_rules(self.name).release_fraction
        if hook is None or release is None:
            return None
        sizes = tp * dp if self.dp_attention else tp

        def one(size: float, stages: float) -> float | None:
            got = hook(
                release,
                gpu_mib=usable_bytes / MiB,
                tp_size=int(size),
                pp=int(stages),
                dp_attention=self.dp_attention,
                cuda=vendor == "nvidia",
            )
            return None if got is None else min(round(1 - got[0], 12), 1.0)

        if not (hasattr(sizes, "shape") or hasattr(pp, "shape")):
            return one(sizes, pp)
        import numpy as np

        sizes, pp = np.broadcast_arrays(sizes, pp)
        got = [one(s, p) for s, p in zip(sizes.ravel(), pp.ravel())]
        return None if None in got else np.array(got).reshape(sizes.shape)

    def release_fraction_source(self, *, usable_bytes: int, tp: int, pp: int, vendor: str | None, dp: int = 1) -> str:
        """Where the release's own fraction (``release_fraction``) was read; "" where the stack's derivation holds."""
        from k3plan.engines.registry import engine_rules

        release = self.engine_release
        hook = None if release is None else engine_rules(self.name).release_fraction
        if hook is None or release is None:
            return ""
        got = hook(
            release,
            gpu_mib=usable_bytes / MiB,
            tp_size=tp * dp if self.dp_attention else tp,
            pp=pp,
            dp_attention=self.dp_attention,
            cuda=vendor == "nvidia",
        )
        return "" if got is None else got[1]

    def engine_chunk(self, chunk: int, *, dp: int) -> int:
        """The prefill chunk the engine's flag is given for a chunk of ``chunk`` tokens a DP group (the launch's,
        and what a derived reserve reads): where the engine divides the flag by dp_size under DP attention (the
        stack's ``dp_attention_chunk`` rule: SGLang, after it derived its memory fraction from the flag), every
        DP group's chunk, chunk x dp; else the chunk."""
        return chunk * dp if self.dp_attention and self.dp_attention_chunk is not None else chunk

    def reserve_auto(self, *, vendor: str | None) -> AutoFraction | None:
        """The reserve option's derivation when the stack runs at that option's default on a GPU of
        ``vendor`` (the rule reads a GPU's memory and its CUDA/HIP graphs). None: a fixed reserve, the
        option given (then the value given is the reserve, its default value too: the engine runs the flag
        as given), or no NVIDIA/AMD GPU."""
        if vendor not in ("nvidia", "amd"):
            return None
        for name, opt in self.options.items():
            if opt.sets == "reserve" and opt.auto is not None and name not in self.given:
                return opt.auto
        return None

    def bind(self, hw: Any) -> Stack:
        """The stack as it runs on the HardwareSpec ``hw``: where ``on_platform`` names another engine for
        hw's kind, that engine's sections and options (``PlatformRule``); else itself. make_setup binds the
        stack it loads; plan's space binds one per kind (``bindings``)."""
        if hw.kind in self.on_platform:
            return self._bound(hw.kind)
        if self.pending:
            kinds = ", ".join(k for k, r in self.on_platform.items() if set(self.pending) <= set(r.options))
            raise K3PlanError(
                f"stack {self.label}: option(s) {', '.join(self.pending)} apply on {kinds or 'no machine'} "
                f"({', '.join(f'{k}: {r.stack}' for k, r in self.on_platform.items())}), not on {hw.name}; "
                f"expected a {kinds or 'matching'} machine or the stack without them"
            )
        return self

    def bindings(self) -> list[Stack]:
        """The stack bound to each kind of machine it runs on (``bind``), its platforms narrowed to that kind so
        that ``runs_on`` keeps each to its own machines: what a search over machines of several kinds holds
        (plan's space). [itself] where no ``on_platform`` rule applies; a kind whose engine lacks an option
        given is left out."""
        if not self.on_platform:
            return [self]
        allowed = self.platforms or ((self.platform,) if self.platform != "any" else KINDS)
        out = []
        for kind in KINDS:
            mine = tuple(p for p in allowed if p == kind or _kind_of(p) == kind)
            if not mine or (kind not in self.on_platform and self.pending):
                continue
            st = self._bound(kind) if kind in self.on_platform else self
            if kind == "tpu" and st.kv_before_architecture is not None:  # the architecture's KV dtype is a GPU rule
                st = updated(st, kv_cache=updated(st.kv_cache, dtype=st.kv_before_architecture))
            out.append(updated(st, platforms=mine, bound=kind, kv_before_architecture=None))
        return out

    def _bound(self, kind: Literal["tpu", "gpu"]) -> Stack:
        """This stack with ``on_platform[kind]``'s sections and options taken from that engine's stack YAML,
        the options given for them applied and the others at their defaults."""
        rule = self.on_platform[kind]
        src = parse_stack(rule.stack)
        missing = [o for o in rule.options if o not in src.options]
        if missing:
            raise K3PlanError(
                f"stack {self.name}: on_platform {kind} takes option(s) {', '.join(missing)} that stack {rule.stack} "
                f"does not have; known: {', '.join(src.options) or 'none'}"
            )
        update: dict[str, Any] = {sec: getattr(src, sec) for sec in rule.sections}
        if rule.dp_experts is not None:
            update["dp_experts"] = rule.dp_experts
        options = {**self.options, **{k: o for k, o in src.options.items() if k in rule.options}}
        base = updated(self, **update, options=options, on_platform={}, pending={}, bound=kind)
        return base.with_options(**self.pending).with_defaults()

    def for_spec_decode(self, verify_tokens: int | None) -> Stack:
        """The stack as it runs with speculative decoding checking ``verify_tokens`` tokens a verify step
        (k3plan's --spec-tokens k: k + 1, SGLang's speculative_num_draft_tokens at topk 1): the state pool
        holds the engine's ratio with speculative decoding and ``state.slots_per_verify_token`` more slots
        for each token checked (``State``), and an engine whose planner charges the drafter's layers (DeepSeek-V4.1 on
        vLLM: step/dsv4_cache.engine_charge) reads the count; itself where that changes nothing (None: no speculative
        decoding)."""
        from k3plan.engines.registry import engine_rules

        st = self.state
        if not verify_tokens or (
            st.ratio is None
            and not st.slots_per_verify_token
            and not st.slots_per_draft_token
            and st.verify is None
            and engine_rules(self.name).dsv4.request_charge is None
        ):
            return self
        return updated(self, state=self.state.with_(verify_tokens=verify_tokens))

    def verify_state_slots(self, verify_tokens: int) -> tuple[int, int]:
        """(read, written) KDA state slots a step checking ``verify_tokens`` tokens moves a sequence a KDA layer:
        one each at plain decode (1: the state updated in place); with speculative decoding the stack's
        ``state.verify`` rule, or, where a stack has none, each token checked priced as a sequence of its own
        (``verify_tokens`` read and written: what the decode roofline at batch x tokens counts)."""
        rule = self.state.verify
        if verify_tokens <= 1:
            return 1, 1
        if rule is None:
            return verify_tokens, verify_tokens
        return rule.reads, rule.writes + rule.writes_per_verify_token * verify_tokens

    def for_dp(self, dp: int) -> Stack:
        """The stack as it runs at ``dp`` DP groups: at DP 1 a ``collectives.dp1_experts`` pattern replaces the
        experts' (vLLM's DeepEP backends need DP > 1, else it runs allgather_reducescatter); else itself."""
        c = self.collectives
        if dp != 1 or c.dp1_experts is None:
            return self
        return updated(self, collectives=updated(c, experts=c.dp1_experts))

    def sp_moe_on(self, *, family: str, tp: Any, dp: Any, ep: Any) -> Any:
        """Whether the engine runs sequence-parallel MoE for a model of ``family`` at (tp, dp, ep): ints or
        numpy columns alike (``SequenceParallelMoe``); False where the stack or the model has no such rule."""
        sp = self.sequence_parallel_moe
        if sp is None or family not in sp.families or self.chosen.get(sp.option) not in sp.values:
            return False
        return (tp > 1) & (dp > 1) & (ep > 1)

    def for_mesh(self, *, family: str, tp: int, dp: int, ep: int) -> Stack:
        """The stack as it runs for a model of ``family`` at one (tp, dp, ep): ``with_sp_moe`` where the engine
        runs sequence-parallel MoE there (``sp_moe_on``), else itself. setup.make_setup and plan's row_setup
        call it; plan's weight columns read ``sp_moe_on`` over columns (step.weights.sp_moe_rows)."""
        return self.with_sp_moe() if self.sp_moe_on(family=family, tp=tp, dp=dp, ep=ep) else self

    def with_sp_moe(self) -> Stack:
        """The stack with its sequence-parallel MoE role overrides merged over the sharding's (and cited)."""
        sp = self.sequence_parallel_moe
        if sp is None:
            return self
        sh = self.sharding
        overrides = dict(sh.role_overrides)
        for role, rules in sp.role_overrides.items():
            overrides[role] = {**overrides.get(role, {}), **rules}
        cite = {**sh.cite, **{f"role:{r}": Cite(holds=sp.holds, sources=sp.sources) for r in sp.role_overrides}}
        return updated(self, sharding=updated(sh, role_overrides=overrides, cite=cite if sh.cite else {}))

    def with_kv_dtype(self, kv_dtype: str | None) -> Stack:
        if kv_dtype is None:
            return self
        if kv_dtype not in KV_DTYPES:
            raise K3PlanError(f"--kv-dtype {kv_dtype!r}: expected one of {', '.join(KV_DTYPES)}")
        return updated(self, kv_cache=updated(self.kv_cache, dtype=kv_dtype))

    def with_in_flight(self, batches: int | None) -> Stack:
        """The stack with its windowed KV groups holding pages for ``batches`` batches in flight (``windowed_in_flight``);
        None: as it is."""
        if batches is None:
            return self
        if batches < 1:
            raise ValueError(f"batches in flight {batches}: expected at least 1")
        return updated(self, windowed_in_flight=batches)

    def with_engine_release(
        self, release: tuple[int, int, int] | None, block: int | None = None, env: dict[str, str] | None = None
    ) -> Stack:
        """The stack as the engine release ``release`` runs it (``engine_release``), at a command's --block-size
        ``block`` (``engine_block``) and its environment settings ``env`` (``engine_env``); None: as it is."""
        st = self if release is None else updated(self, engine_release=tuple(release))._release_defaults(release)
        if env:
            st = updated(st, engine_env=tuple(sorted(env.items())))
        return st if block is None else updated(st, engine_block=block)

    def _release_defaults(self, release: tuple[int, int, int]) -> Stack:
        """The stack's reserve at ``release``'s default where the engine changed that option's default between
        releases (``Engine.option_defaults``) and the question gave none; the option stays as chosen (its label
        unchanged), only the reserve and its source follow the release."""
        from k3plan.engines.registry import engine_rules

        hook = engine_rules(self.name).option_defaults
        st = self
        for name, (value, source) in ({} if hook is None else hook(release)).items():
            opt = self.options.get(name)
            if opt is None or opt.sets != "reserve" or name in self.given:
                continue
            frac = float(value)
            reserve = Reserve(
                fraction_of_usable_hbm=round(1 - frac, 12),
                source=f"{opt.flag} {frac:g}, release {'.'.join(map(str, release))}'s default: the engine leaves "
                f"{1 - frac:.0%} of HBM ({source})",
            )
            st = updated(st, reserve=reserve)
        return st

    def for_model(self, model: Any, release: tuple[int, int, int] | None = None) -> Stack:
        """The stack for a model (k3plan.models Model): its KV dtype the checkpoint's where the engine resolves its
        default (auto) from the checkpoint's quantization config (``Engine.checkpoint_kv_auto``: a ModelOpt
        kv_cache_quant_algo FP8 is an fp8 cache); where its derived reserve cuts the fraction for a multimodal model
        of the rule's architectures (AutoFraction.vlm), the model's vision encoder (``vision_encoder``); else itself.
        fit (setup.make_setup) and plan (plan.search) call it alike, before a KV dtype asked for (with_kv_dtype);
        ``release``: the engine release a command runs (None: the engine's newest read)."""
        from k3plan.engines.registry import engine_rules
        from k3plan.models.families.moonvit import vision_encoder_dims

        st = self
        if engine_rules(self.name).prefill_graph is not None:  # the model the engine's prefill-graph rule reads
            st = updated(st, model_type=model.spec.architecture)
        ckpt = self.checkpoint_kv(model, release)
        if ckpt is not None and ckpt[0] != st.kv_cache.dtype:
            st = updated(st, kv_cache=updated(st.kv_cache, dtype=ckpt[0]))
        arch = self.architecture_kv(model) if ckpt is None else None
        if arch is not None and arch[0] != st.kv_cache.dtype:
            st = updated(st, kv_cache=updated(st.kv_cache, dtype=arch[0]), kv_before_architecture=st.kv_cache.dtype)
        # its own options' rules, and those of the engines a bind takes options from (plan binds its stacks after
        # this: Stack.bindings), so that fit's bound stack and plan's hold one vision encoder
        options = [*st.options.values()]
        for rule in self.on_platform.values():
            options += parse_stack(rule.stack).options.values()
        rules = [opt.auto.vlm for opt in options if opt.auto is not None and opt.auto.vlm is not None]
        if not any(model.spec.architecture in r.architectures for r in rules):
            return st
        dims = vision_encoder_dims(model.inventory)
        return st if dims is None else updated(st, vision_encoder=dims)

    def with_prefill_graph(self, backend: str | None, conditions: tuple[str, ...] = ()) -> Stack:
        """The stack with a serve command's prefill backend (``prefill_backend``) and the conditions it runs that the
        engine's prefill-graph rule reads (``prefill_conditions``); none set: as it is."""
        if backend is None and not conditions:
            return self
        return updated(self, prefill_backend=backend, prefill_conditions=tuple(sorted(conditions)))

    def checkpoint_kv(self, model: Any, release: tuple[int, int, int] | None = None) -> tuple[str, str] | None:
        """(the KV dtype, where the engine resolves it) where the stack's engine takes --kv-cache-dtype auto from the
        checkpoint's quantization config and ``model``'s declares one (``Engine.checkpoint_kv_auto``,
        serve_values.checkpoint_kv_dtype), at ``release`` (None: the stack's ``engine_release``, else the engine's
        newest read; ``Engine.resolves_checkpoint_kv``); None: the stack's own dtype."""
        from k3plan.engines.registry import engine_rules
        from k3plan.engines.serve_values import checkpoint_kv_dtype

        rules = engine_rules(self.name)
        where = rules.checkpoint_kv_auto if rules.resolves_checkpoint_kv(release or self.engine_release) else ""
        kv = checkpoint_kv_dtype(model.name) if where else None
        return None if kv is None else (kv, where)

    def architecture_kv(self, model: Any) -> tuple[str, str] | None:
        """(the KV dtype, where the engine sets it) where the stack's engine on a GPU resolves --kv-cache-dtype auto
        by ``model``'s architecture (``Engine.architecture_kv``: SGLang's DeepSeek-V4, fp8); None: no such rule (a
        stack bound to a TPU neither)."""
        from k3plan.engines.registry import engine_rules

        if self.bound == "tpu" or self.platform == "tpu":
            return None
        for archs, kv, where in engine_rules(self.name).architecture_kv:
            if model.spec.architecture in archs:
                return kv, where
        return None

    def with_decode_graph(self, bs: int | None, cap: int | None, off: bool = False) -> Stack:
        """The stack with a serve command's decode CUDA-graph batch (``decode_graph_bs``), its cap
        (``decode_graph_cap``) and whether the decode graphs are off (``decode_graph_off``); none set: as it is."""
        if bs is None and cap is None and not off:
            return self
        return updated(self, decode_graph_bs=bs, decode_graph_cap=cap, decode_graph_off=off)

    def with_vision_whole(self, whole: bool) -> Stack:
        """The stack with the model's vision tower built whole on every device (``vision_whole``); False: as it is."""
        return updated(self, vision_whole=True) if whole else self

    def with_extra_weights(self, terms: tuple[tuple[str, int, str], ...]) -> Stack:
        """The stack with what the engine holds beside the model's tensors in its weights (``extra_weights``);
        (): as it is."""
        return updated(self, extra_weights=tuple(terms)) if terms else self

    def engine_held(self, model: Any, hardware: Any, *, attn_tp: int) -> tuple[tuple[str, int, str], ...]:
        """What the stack's engine on ``hardware`` (a GPU) holds with the weights beside ``model``'s tensors for a
        question without a serve command, at attention TP ``attn_tp``, the release the stack runs
        (``engine_release``) and its KV dtype (``Engine.loaded_extras``: SGLang's DeepSeek-V4 RoPE tables and V4.1's
        bf16 wo_a, as its serve reading holds them); () where the engine holds none or on a TPU. fit's setup puts them
        in ``extra_weights`` (setup.make_setup) and plan's weight columns add them per row, so fit, fit --serve of
        the same command and plan's rows hold one figure."""
        from k3plan.engines.registry import engine_rules

        rule = engine_rules(self.name).loaded_extras
        if rule is None or hardware.kind != "gpu" or self.bound == "tpu":
            return ()
        return rule(
            model,
            release=None if self.engine_release is None else tuple(self.engine_release),
            hardware=hardware.name,
            vendor=hardware.vendor,
            attn_tp=attn_tp,
            kv_dtype=self.kv_cache.dtype,
        )

    def with_lm_head_whole_tp(self, cite: Cite | None) -> Stack:
        """The stack with the LM head's vocabulary split over the whole TP group, every device of a stage
        (``lm_head_whole_tp``: the ``lm_head`` role's override ``vocab: tp_x_dp``, cited by ``cite``, where the
        engine holds it so); None: as it is."""
        if cite is None:
            return self
        sh = self.sharding
        overrides = {**sh.role_overrides, "lm_head": {**sh.role_overrides.get("lm_head", {}), "vocab": WHOLE_TP}}
        cited = {**sh.cite, "role:lm_head": cite} if sh.cite else {}
        return updated(self, lm_head_whole_tp=True, sharding=updated(sh, role_overrides=overrides, cite=cited))

    def with_mlp_whole_tp(self, roles: tuple[str, ...], cite: Cite | None) -> Stack:
        """The stack with the MLP of ``roles`` (``dense_mlp``, ``shared_expert``) split over the whole TP group, every
        device of a stage (the roles' override ``mlp: tp_x_dp``), and the ``embed`` role among them whole on every
        device (``vocab: null``), cited by ``cite``, where the engine holds them so under DP attention (SGLang,
        engines/sglang/serve.py mlp_whole_tp: DeepSeek-V4's embedding); no roles or no cite: as it is."""
        if cite is None or not roles:
            return self
        sh = self.sharding
        overrides = dict(sh.role_overrides)
        cited = dict(sh.cite) if sh.cite else {}
        for role in roles:
            axis, target = DP_ATTENTION_SPLITS.get(role, ("mlp", WHOLE_TP))
            overrides[role] = {**overrides.get(role, {}), axis: target}
            if cited:
                cited[f"role:{role}"] = cite
        return updated(self, sharding=updated(sh, role_overrides=overrides, cite=cited))

    def with_shared_expert_whole(self, cite: Cite | None) -> Stack:
        """The stack with the shared experts whole on every device (the ``shared_expert`` role's override ``mlp:
        null``, cited by ``cite``, where the engine holds them so: SGLang 0.4.6's tp_size clones fused into the routed
        MoE); None: as it is."""
        if cite is None:
            return self
        sh = self.sharding
        overrides = {**sh.role_overrides, "shared_expert": {**sh.role_overrides.get("shared_expert", {}), "mlp": None}}
        cited = {**sh.cite, "role:shared_expert": cite} if sh.cite else {}
        return updated(self, sharding=updated(sh, role_overrides=overrides, cite=cited))

    def with_dense_mlp_whole(self, cite: Cite | None) -> Stack:
        """The stack with the dense layers' MLP whole on every device (the ``dense_mlp`` role's override ``mlp:
        null``, cited by ``cite``, where the engine holds it so: SGLang's --moe-dense-tp-size 1); None: as it is."""
        if cite is None:
            return self
        sh = self.sharding
        overrides = {**sh.role_overrides, "dense_mlp": {**sh.role_overrides.get("dense_mlp", {}), "mlp": None}}
        cited = {**sh.cite, "role:dense_mlp": cite} if sh.cite else {}
        return updated(self, sharding=updated(sh, role_overrides=overrides, cite=cited))

    def with_expert_pad(self, pad: tuple[int, int, str] | None) -> Stack:
        """The stack with its TP-split expert shards padded by ``pad`` (``expert_pad``: num / den of the even share,
        and why); None: as it is."""
        if pad is None:
            return self
        if pad[0] < pad[1] or pad[1] < 1:
            raise ValueError(f"expert padding {pad[0]} / {pad[1]}: expected at least 1")
        return updated(self, expert_pad=(int(pad[0]), int(pad[1]), str(pad[2])))

    def with_expert_copies(self, copies: tuple[int, str] | None) -> Stack:
        """The stack whose engine holds each rank's routed experts ``copies[0]`` times (``expert_copies``, and why);
        None: as it is."""
        if copies is None:
            return self
        if copies[0] < 1:
            raise ValueError(f"expert copies {copies[0]}: expected at least 1")
        return updated(self, expert_copies=(int(copies[0]), str(copies[1])))

    def with_expert_format(self, fmt: tuple[str, str] | None, checkpoint_fmt: str = "ds_fp4") -> Stack:
        """The stack whose engine holds the routed experts stored as ``checkpoint_fmt`` in ``fmt[0]`` (and why), set
        over its runtime formats (``runtime_format``: ``expert@<checkpoint format>``); None: as it is."""
        if fmt is None:
            return self
        from k3plan.models.formats import get_format

        get_format(fmt[0])  # refuses a format k3plan does not know
        return updated(self, runtime_formats={**self.runtime_formats, f"expert@{checkpoint_fmt}": str(fmt[0])})

    def with_fraction_scale(self, scale: tuple[float, str] | None) -> Stack:
        """The stack whose engine multiplies its static memory fraction by ``scale`` (``fraction_scale``: the factor
        and why); None: as it is."""
        if scale is None:
            return self
        if not 0 < scale[0] <= 1:
            raise ValueError(f"fraction scale {scale[0]}: expected in (0, 1]")
        return updated(self, fraction_scale=(float(scale[0]), str(scale[1])))

    def with_engram(self, placement: str | None, host_copies: str | None = None) -> Stack:
        """The stack with a model's Engram tables in HBM ("hbm") or host memory ("host"), and in host memory a
        copy a DP replica ("replica") or one a node ("node"); None: as it is."""
        st = self
        if host_copies is not None:
            if host_copies not in ("replica", "node"):
                raise K3PlanError(f"Engram host copies {host_copies!r}: expected replica or node")
            st = updated(st, engram_host_copies=host_copies)
        if placement is None:
            return st
        if placement not in ENGRAM_PLACEMENTS:
            raise K3PlanError(f"--engram {placement!r}: expected one of {', '.join(ENGRAM_PLACEMENTS)}")
        return updated(st, engram_placement=placement)

    def runs_on(self, hw: Any) -> bool:
        """Whether this stack runs on a machine: ``hw`` is a HardwareSpec, a hardware kind ("tpu",
        "gpu") or a bundled hardware name ("nvidia-b300"). A kind runs when the stack runs on some
        machine of that kind. Callers: plan/ must skip (hardware, stack) pairs where this is False
        and fit must warn (k3plan.setup's note)."""
        allowed = self.platforms or ((self.platform,) if self.platform != "any" else KINDS)
        if isinstance(hw, str) and hw in (*KINDS, "any"):
            return hw == "any" or any(p == hw or _kind_of(p) == hw for p in allowed)
        if isinstance(hw, str):
            from k3plan.hardware import load_hardware

            hw = load_hardware(hw)
        tags = {hw.kind, hw.name, getattr(hw, "vendor", None)}
        return any(p in tags for p in allowed)

    def with_options(self, **values: str | float) -> Stack:
        """The stack with engine options set (by name, '-' or '_'); unknown names and values are
        errors naming what is known."""
        st = self
        for raw, value in values.items():
            name = raw.replace("-", "_")
            opt = self.options.get(name)
            if opt is None and any(name in r.options for r in self.on_platform.values()):
                st = updated(st, pending={**st.pending, name: str(value)})  # applied by bind
                continue
            if opt is None:
                known = ", ".join(self.options) or "none"
                known += "".join(f"; on {k} ({r.stack}'s): {', '.join(r.options)}" for k, r in self.on_platform.items())
                raise K3PlanError(f"stack {self.name}: unknown option {raw!r}; known: {known}")
            st = st._apply(name, opt, value)
            st = updated(st, given=(*(g for g in st.given if g != name), name))
        return st

    def with_defaults(self) -> Stack:
        """Apply every option's default (load_stack does this, so a bundled stack is what the
        engine does when no flag is given)."""
        st = self
        for name, opt in self.options.items():
            if name not in self.chosen:
                st = st._apply(name, opt, opt.default)
        return st

    def _apply(self, name: str, opt: Option, value: str | float) -> Stack:
        chosen = {**self.chosen, name: str(value)}
        if opt.sets == "reserve":
            try:
                frac = float(value)
            except (TypeError, ValueError):
                raise K3PlanError(
                    f"stack {self.name}: option {name} ({opt.flag}) {value!r}: expected a number in (0, 1]"
                ) from None
            if not 0 < frac <= 1 or round(1 - frac, 12) >= 1:  # 1e-300 rounds to a reserve of all HBM
                raise K3PlanError(
                    f"stack {self.name}: option {name} ({opt.flag}) {value!r}: expected a number in (0, 1]"
                )
            reserve = Reserve(
                fraction_of_usable_hbm=round(1 - frac, 12),
                source=f"{opt.flag} {frac:g}: the engine leaves {1 - frac:.0%} of HBM ({opt.source.text()})",
            )
            return updated(self, reserve=reserve, chosen=chosen)
        effect = opt.choices.get(str(value))
        if effect is None:
            raise K3PlanError(
                f"stack {self.name}: option {name} ({opt.flag}) {value!r}: expected one of {', '.join(opt.choices)}"
            )
        update: dict[str, Any] = {"chosen": chosen}
        if effect.role_overrides is not None:
            sh = self.sharding
            # a choice replaces what the option's other choices added
            others = {k for e in opt.choices.values() if e.role_overrides for k in e.role_overrides}
            overrides = {**{k: v for k, v in sh.role_overrides.items() if k not in others}, **effect.role_overrides}
            cite = {**sh.cite, **effect.cite}
            update["sharding"] = Sharding(
                rules=sh.rules,
                role_overrides=overrides,
                source=sh.source,
                cite={k: v for k, v in cite.items() if k in set(sh.rules) | {f"role:{r}" for r in overrides}},
                expert_placement=sh.expert_placement,
            )
        if effect.collectives is not None:
            update["collectives"] = effect.collectives
        if effect.expert_placement is not None:
            sharding = update.get("sharding", self.sharding)
            update["sharding"] = updated(sharding, expert_placement=effect.expert_placement)
        state: dict[str, int | None] = {}
        if effect.state_slots_per_request is not None:
            state["ratio" if self.state.ratio is not None else "slots_per_request"] = effect.state_slots_per_request
            if self.state.ratio is not None:
                state["ratio_spec"] = effect.state_slots_per_request_spec
        if not isinstance(effect.state_cap, UnsetType):  # an explicit null lifts a cap another choice set
            state["cap"] = effect.state_cap
        if state:
            update["state"] = self.state.with_(**state)
        if effect.state_shard_by_heads is not None:
            update["state"] = updated(update.get("state", self.state), shard_by_heads=effect.state_shard_by_heads)
        if effect.kv_dtype is not None:
            update["kv_cache"] = updated(self.kv_cache, dtype=effect.kv_dtype)
        if effect.kv_layout is not None:
            kv = update.get("kv_cache", self.kv_cache)
            update["kv_cache"] = updated(kv, layout=effect.kv_layout)
        if effect.kv_replicate_across_tp is not None:
            kv = update.get("kv_cache", self.kv_cache)
            update["kv_cache"] = updated(kv, replicate_across_tp=effect.kv_replicate_across_tp)
        if effect.platforms is not None:
            update["platforms"] = effect.platforms
        if effect.splits is not None:
            update["splits"] = effect.splits
        if effect.tp_max is not None:
            splits = update.get("splits") or self.splits or Splits(holds=effect.description or f"option {name}")
            update["splits"] = updated(splits, tp_max=effect.tp_max, tp_max_source=effect.tp_max_source)
        if effect.compute_formats is not None:
            # the choice's rules replace the stack's for those formats (each choice of an option sets the same ones)
            cd = self.compute_dtype
            formats = {**cd.formats, **effect.compute_formats}
            update["compute_dtype"] = updated(cd, formats=formats)
        if effect.runtime_formats is not None:
            # set over the stack's (each choice of an option sets the same keys, so a later choice replaces them)
            update["runtime_formats"] = {**self.runtime_formats, **effect.runtime_formats}
        if any(e.absorbed_copies is not None for e in opt.choices.values()):
            # the choice's model code decides the copies: a choice without a rule holds none (kv_b_proj as loaded)
            update["absorbed_copies"] = effect.absorbed_copies
        return updated(self, **update)


def _kind_of(tag: str) -> str | None:
    """The hardware kind a platform tag implies (a vendor or a bundled hardware name)."""
    if tag in KINDS:
        return tag
    if tag in ("nvidia", "amd") or tag.startswith(("nvidia-", "amd-")):
        return "gpu"
    if tag == "google" or tag.startswith("tpu-"):
        return "tpu"
    return None


def default_stack_for(hw: Any) -> tuple[str, str]:
    """(stack name, why) for a machine when no --stack is given: the first of DEFAULT_STACK_ORDER
    that runs there (``Stack.runs_on``, from each stack's cited platforms). ``hw``: a HardwareSpec."""
    for name in DEFAULT_STACK_ORDER:
        st = load_stack(name)
        if st.runs_on(hw):
            where = ", ".join(st.platforms) or st.platform
            return name, (
                f"stack {name}: the default for {hw.name}, the first of {', '.join(DEFAULT_STACK_ORDER)} that runs "
                f"there ({name} runs on {where}; cited in its YAML's platforms_source)"
            )
    raise K3PlanError(f"no bundled stack runs on {hw.name}; pass --stack NAME or a stack YAML path")


def list_stacks() -> list[str]:
    """The bundled stacks: one an engine folder (k3plan.engines.registry)."""
    return engine_names()


def parse_ref(ref: str) -> tuple[str, dict[str, str]]:
    """'sglang:moe_a2a_backend=none,mem_fraction_static=0.85' -> ('sglang', {...}) (``StackRef.parse``)."""
    got = StackRef.parse(ref)
    return got.name, got.options


@lru_cache(maxsize=64)
def load_stack(ref: str = DEFAULT_STACK) -> Stack:
    base, values = parse_ref(ref)
    return parse_stack(base).with_options(**values).with_defaults()


@lru_cache(maxsize=16)
def parse_stack(base: str) -> Stack:
    """A stack YAML (a bundled engine's name or a path) as written: no option applied (``load_stack`` applies them).
    An old name (``Engine.aliases``) loads its engine's stack; the stack's name says which."""
    engine = registry().get(base)
    path = engine.stack_path if engine is not None else Path(base).expanduser()
    if engine is None and not (path.suffix in (".yaml", ".yml") and path.is_file()):
        raise K3PlanError(f"unknown stack {base!r}; known: {', '.join(list_stacks())} (or a stack YAML path)")
    return convert(Stack, read_yaml_mapping(str(path), path), str(path))
