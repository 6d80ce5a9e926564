"""The stack YAML's rules that depend on the engine's flags and the machine (k3plan.engines.stack.Stack holds
them): compute dtypes a weight format runs in, refusals, absorbed-MLA copies, sequence-parallel MoE, the options
(an engine flag and each choice's ``Effect``), the reserve an engine derives on a GPU (``AutoFraction``), DP
attention's chunk, the rule another engine brings on one kind of machine (``PlatformRule``), the expert kernel's
row tiling and the token buckets."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

import msgspec
from msgspec import UNSET, UnsetType

from k3plan.columns import each, maximum, minimum, where
from k3plan.engines.stack_sections import (
    Cite,
    Collectives,
    DpExperts,
    ExpertPlacement,
    KVLayout,
    NonNeg,
    NonNegFloat,
    Pos,
    Source,
    Sources,
    Splits,
    Text,
)
from k3plan.specfile import Spec
from k3plan.units import GiB, MiB


class FormatCompute(Spec):
    """The dtype the engine's matmul kernel computes in for weights held in one runtime format: the
    activations' dtype at the tensor core / MXU (fp8 when the kernel quantizes them to fp8, W8A8; bf16
    when it dequantizes the weights to bf16 or runs a weight-only w4a16 kernel). ``platforms``: where a
    machine runs another kernel (a hardware name, then a vendor, then a kind, first match wins)."""

    dtype: Literal["bf16", "fp8", "fp4", "int8"]
    platforms: dict[str, Literal["bf16", "fp8", "fp4", "int8"]] = {}
    holds: str  # which kernel runs and what it does with the activations
    sources: Sources

    def on(self, hw: Any) -> tuple[str, str]:
        """(dtype, the tag that chose it or 'default') on a HardwareSpec."""
        for tag in (hw.name, getattr(hw, "vendor", None), hw.kind):
            if tag in self.platforms:
                return self.platforms[tag], tag
        return self.dtype, "default"


# ops whose weights the engine re-makes at load, so their matmuls need not run in the checkpoint format's dtype
# (k3plan.step.ops tags them, Op.compute_role): decode's absorbed MLA runs kv_b_proj as the W_UK / W_UV
# batched matmuls built from it
COMPUTE_ROLES = ("mla_absorbed",)


class ComputeDtype(Spec):
    """The matmul compute dtype by runtime weight format (``formats``: mxfp4, fp8_block, ...), each cited
    to the engine kernel that runs it; a format not listed computes in ``default``. ``roles``: an op the
    engine runs on weights it re-made at load (COMPUTE_ROLES), whatever the format; a role not listed
    falls back to its weight's format."""

    default: Literal["bf16", "fp8", "fp4", "int8"] = "bf16"
    default_source: str = "not declared by the stack: k3plan assumes the activations' bf16"
    formats: dict[str, FormatCompute] = {}
    roles: dict[Literal["mla_absorbed"], FormatCompute] = {}

    def __post_init__(self) -> None:
        super().__post_init__()
        from k3plan.models.formats import FORMATS

        unknown = [f for f in self.formats if f not in FORMATS]
        if unknown:
            raise ValueError(f"compute_dtype.formats: unknown storage format(s) {unknown}; known: {', '.join(FORMATS)}")

    def of(self, fmt: str, hw: Any, role: str | None = None) -> tuple[str, str]:
        """(dtype, why) of a matmul over weights held in ``fmt`` on the HardwareSpec ``hw``; ``role``: the
        op's compute role (Op.compute_role), which a rule in ``roles`` decides before the format."""
        by_role = self.roles.get(role) if role is not None else None  # type: ignore[call-overload]
        if by_role is not None:
            dtype, tag = by_role.on(hw)
            where = "" if tag == "default" else f" on {tag}"
            return dtype, f"{role} ({fmt} weights){where}: {dtype} ({by_role.holds})"
        rule = self.formats.get(fmt)
        if rule is None:
            return self.default, f"{fmt}: {self.default} ({self.default_source})"
        dtype, tag = rule.on(hw)
        where = "" if tag == "default" else f" on {tag}"
        return dtype, f"{fmt}{where}: {dtype} ({rule.holds})"


REFUSED = "the engine does not run this as priced"  # how a Refusal's line reads (report's findings match it)


class Refusal(Spec):
    """A deployment the engine's own code refuses or cannot run, at the commits read: k3plan still prices
    the stack's layout (what a device would hold if the engine ran it) and every output that names the stack
    for such a model says so. It applies to a model with layers of every kind in ``layers`` (mla, kda), at
    the option values ``options`` (name -> the values it applies at; any, when empty)."""

    layers: tuple[Literal["mla", "kda"], ...] = ()
    options: dict[str, tuple[str, ...]] = {}
    says: str  # what the engine does, in one clause: the check that raises, the op that is missing
    sources: Sources

    def applies(self, *, layers: frozenset[str], chosen: dict[str, str]) -> bool:
        return set(self.layers) <= layers and all(chosen.get(k) in v for k, v in self.options.items())

    @property
    def cited(self) -> str:
        src = self.sources[0]
        at = f" @{src.commit[:8]}" if src.commit else ""
        return f"{self.says} ({src.repo} {src.file} {src.symbol.split(' (')[0]}{at})"


class AbsorbedCopies(Spec):
    """The absorbed MLA's W_UK / W_UV: the engine splits them out of each MLA layer's kv_b_proj at load (its
    own TP shard: split by heads as kv_b_proj is) for decode, in the dtype ``compute_dtype.roles.mla_absorbed``
    declares, and keeps kv_b_proj beside them for prefill's MHA path. A device then holds both, and decode
    reads the copies, not kv_b_proj. ``views_when_same_format``: the copies are views of kv_b_proj's own
    weight when its runtime format already is that dtype (nothing more held, decode reads kv_b_proj's bytes);
    false: always new tensors."""

    views_when_same_format: bool
    holds: str
    sources: Sources
    # True: the engine deletes kv_b_proj once the copies are made (tpu-inference's VllmMLAAttention), so a device
    # holds the copies in its place and every pass, prefill's too, runs the absorbed form
    replaces_source: bool = False
    # the copies' storage: None, the mla_absorbed role's dtype; "kv_cache": the KV cache's dtype (tpu-inference
    # quantizes them to kv_cache_quantized_dtype), with no copies made -- kv_b_proj held as loaded -- where that dtype
    # is not a quantized one (the rule was read at an fp8 cache only)
    held_as: Optional[Literal["kv_cache"]] = None
    # the copies' scales: None, as the format holds them; "f32_per_head_axis1": one float32 scale for each (head,
    # latent) of W_UK_T [N, P, L] and each (head, v) of W_UV [N, L, V], quantize_tensor(..., axis=1)
    scales: Optional[Literal["f32_per_head_axis1"]] = None


class SequenceParallelMoe(Spec):
    """The engine's sequence-parallel MoE (vLLM ParallelConfig.use_sequence_parallel_moe): on for a model
    whose engine MoE block reads it (``families``: k3plan's model family, which config.json's architectures
    decide), with the option ``option`` at one of ``values``, and TP > 1, DP > 1 and expert parallelism
    (ep > 1: k3plan's launch passes --enable-expert-parallel whenever ep > 1). Then the MoE input is split
    over the TP ranks by tokens and the block's ``role_overrides`` apply (vLLM DeepseekV2MoE: the shared
    experts built with disable_tp, whole on every GPU)."""

    families: Annotated[tuple[str, ...], msgspec.Meta(min_length=1)]
    option: str
    values: Annotated[tuple[str, ...], msgspec.Meta(min_length=1)]
    role_overrides: dict[str, dict[str, Optional[str]]]
    holds: str
    sources: Sources


class Effect(Spec):
    """What one choice of an engine option changes in the stack."""

    role_overrides: Optional[dict[str, dict[str, Optional[str]]]] = None  # merged over the stack's
    cite: dict[str, Cite] = {}  # citations for the override keys it adds ("role:<key>")
    collectives: Optional[Collectives] = None
    state_slots_per_request: Optional[Pos] = None
    state_slots_per_request_spec: Optional[Pos] = None  # the slots a request with speculative decoding on
    # caps the state slots a request whatever the other options (State.cap); null: no cap (an explicit null lifts
    # a cap another choice set); absent (UNSET): the cap as it is
    state_cap: Union[Pos, None, UnsetType] = UNSET
    kv_dtype: Optional[Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]] = None
    # the MLA cache entry this choice lays out (tpu-inference MLA_TRANSPOSE_KV_CACHE)
    kv_layout: Optional[KVLayout] = None
    platforms: Optional[tuple[str, ...]] = None
    expert_placement: Optional[ExpertPlacement] = None  # a backend whose kernels assert divisibility (DeepEP)
    # compute-dtype rules by runtime weight format, set over the stack's compute_dtype.formats
    compute_formats: Optional[dict[str, FormatCompute]] = None
    # runtime formats ("role" or "role@checkpoint_fmt" -> format) set over the stack's runtime_formats: a choice that
    # changes the kernel, and with it what the engine holds (SGLang's MoE runner behind --moe-a2a-backend none)
    runtime_formats: Optional[dict[str, str]] = None
    runtime_formats_sources: Optional[Sources] = None  # the engine code behind runtime_formats
    # more environment the launch writes at this choice, a variable the priced format needs beside the option's own
    # (tpu-inference's fp4 requantization: MOE_REQUANTIZE_BLOCK_SIZE=512 with MOE_REQUANTIZE_WEIGHT_DTYPE=fp4)
    launch_env: Optional[dict[str, str]] = None
    # the KDA state split by heads over TP at this choice (State.shard_by_heads; None: the stack's): tpu-inference's
    # K3 without DP attention splits it over ATTN_HEAD, under DP attention by sequences only
    state_shard_by_heads: Optional[bool] = None
    # the MLA cache whole on every TP rank at this choice (KVCache.replicate_across_tp; None: the stack's):
    # tpu-inference's 2-D mesh before its MLA check splits the cache's pages over the 'model' axis, its attention TP
    kv_replicate_across_tp: Optional[bool] = None
    # the (tp, dp) splits the engine runs at this choice, replacing the stack's (tpu-inference without DP attention
    # runs attention TP over every device with one DP group, which its DP-attention rule refuses)
    splits: Optional[Splits] = None
    # the largest attention TP the choice is priced at (Splits.tp_max, set over the stack's splits) and its source
    tp_max: Optional[Pos] = None
    tp_max_source: Optional[Source] = None
    # the absorbed-MLA copies this choice's model code makes (set over the stack's absorbed_copies)
    absorbed_copies: Optional[AbsorbedCopies] = None
    description: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compute_formats:
            ComputeDtype(formats=self.compute_formats)  # refuses a format k3plan does not know


class GpuClass(Spec):
    """SGLang's defaults for a class of GPU memory (server_args' GPU-memory branch)."""

    below_gib: Optional[float]  # applies when the GPU's memory is below this (None: any)
    chunked_prefill_size: Pos  # the engine's default chunk (k3plan writes its own)
    cuda_graph_max_bs: NonNeg
    cuda_graph_max_bs_small_tp: Optional[NonNeg] = None  # at tp < 4, where it differs


class VlmScale(Spec):
    """SGLang's cut of its derived fraction for a multimodal model (ServerArgs.adjust_mem_fraction_for_vlm): the
    fraction x base_ratio x clamp(1 - sensitivity x (L x W^2 / (baseline_layers x baseline_width^2) - 1), min_factor,
    max_factor), L and W the vision encoder's layers and width, for the model classes the engine counts as
    multimodal (``architectures``, k3plan's names)."""

    base_ratio: float
    sensitivity: float
    min_factor: float
    max_factor: float
    baseline_layers: Pos
    baseline_width: Pos
    architectures: tuple[str, ...]
    source: Source

    def factor(self, *, layers: int, width: int) -> float:
        """The engine's factor for a vision encoder of ``layers`` x ``width``, in its own float arithmetic."""
        ratio = layers * (width**2) / (self.baseline_layers * (self.baseline_width**2))
        dynamic = max(self.min_factor, min(self.max_factor, 1.0 - self.sensitivity * (ratio - 1.0)))
        return self.base_ratio * dynamic


class AutoFraction(Spec):
    """How SGLang derives --mem-fraction-static when it is not given (memory_hook.py
    handle_gpu_memory_settings): reserved MiB = base + max(chunk, min_activation_tokens) x
    per_activation_token + tp x pp x per_parallel_rank + the CUDA graphs' (reserve_for_graph_mb: decode
    max_bs x per_decode_graph_bs; where the prefill graph is captured, its MLA term and DeepEP's
    breakable-prefill delta on CUDA), at least ``floor_mib`` on a GPU above ``floor_above_gib``, then
    DeepEP's all-to-all buffers on top; fraction = round((gpu MiB - reserved) / gpu MiB, 3). Every
    figure in MiB, as the engine's."""

    gpu_classes: Annotated[tuple[GpuClass, ...], msgspec.Meta(min_length=1)]
    base_mib: NonNegFloat
    per_activation_token_mib: NonNegFloat
    min_activation_tokens: NonNeg
    per_parallel_rank_mib: NonNegFloat
    per_decode_graph_bs_mib: NonNegFloat
    # whether the engine captures a prefill CUDA graph for this model at its defaults (the two prefill terms
    # count only then)
    prefill_graph: bool
    prefill_graph_source: Source
    prefill_graph_mla_mib: NonNegFloat
    prefill_graph_deepep_cuda_mib: NonNegFloat
    floor_above_gib: NonNegFloat
    floor_mib: NonNegFloat
    deepep_mib: NonNegFloat
    dp_attention_per_graph_bs_dp_mib: NonNegFloat = 0.0  # reserve_for_graph_mb under DP attention: max_bs x dp x this
    # a decode max_bs above this adds ``dp_attention_large_bs_mib`` x max_bs x dp_size more
    dp_attention_large_bs_above: NonNeg = 0
    dp_attention_large_bs_mib: NonNegFloat = 0.0
    round_digits: int = 3
    # the cut for a multimodal model's vision encoder, after the rounding (None: the engine makes none)
    vlm: Optional[VlmScale] = None
    source: Source

    def gpu_class(self, *, gpu_mib: float) -> GpuClass:
        """The engine's defaults for a GPU of ``gpu_mib`` (the first class it is below)."""
        return next(r for r in self.gpu_classes if r.below_gib is None or gpu_mib < r.below_gib * GiB / MiB)

    def reserved_mib(
        self,
        *,
        gpu_mib: float,
        tp: Any,
        pp: Any,
        chunk: Any,
        deepep: bool,
        cuda: bool,
        dp_attention_dp: Any = None,
        decode_bs: int | None = None,
        decode_cap: int | None = None,
        decode_off: bool = False,
        prefill: Any = None,
        prefill_deepep: Any = None,
    ) -> Any:
        """The MiB SGLang keeps out of the static pools for a GPU of ``gpu_mib`` at ``tp`` x ``pp`` (its
        tp_size: every GPU of a stage under DP attention) and a prefill chunk of ``chunk`` tokens
        (--chunked-prefill-size, which k3plan's launch line passes; None: the engine's default for the GPU);
        ``dp_attention_dp``: the dp_size under --enable-dp-attention (None: no DP attention), whose decode
        graphs pad max_bs x dp_size. ``tp``, ``pp``, ``chunk`` and ``dp_attention_dp`` are ints (fit: one
        configuration) or numpy columns of one GPU's configurations (plan), the same arithmetic in the same
        order (k3plan.columns), so a plan row's value is fit's to the bit. ``decode_bs``: the decode graphs' max batch
        as a serve command sets it, else the GPU class's, capped at ``decode_cap`` (the release's cap: Stack.
        decode_graph_cap); ``decode_off``: the decode graphs not captured (--disable-cuda-graph): no decode graph
        term and no DeepEP term (reserve_for_graph_mb, reserve_for_deepep_a2a_mb: backend DISABLED), the DP padding
        kept (it reads only the decode max_bs). ``prefill``: whether the engine captures the prefill graph (a bool or
        a column of them: engines/sglang/prefill_graph.py, by release, model and launch; None: ``prefill_graph``), and
        ``prefill_deepep`` whether that graph's DeepEP delta counts (a breakable graph under DeepEP; None: DeepEP on
        CUDA)."""
        row = self.gpu_class(gpu_mib=gpu_mib)
        small = row.cuda_graph_max_bs_small_tp
        bs = row.cuda_graph_max_bs if small is None else where(tp < 4, small, row.cuda_graph_max_bs)
        if decode_bs is not None:
            bs = decode_bs
        elif decode_cap is not None:
            bs = minimum(bs, decode_cap)
        graphs = 0.0 if decode_off else bs * self.per_decode_graph_bs_mib
        delta = (deepep and cuda) if prefill_deepep is None else prefill_deepep
        if decode_off:
            deepep = False
        if dp_attention_dp is not None:
            graphs = graphs + bs * dp_attention_dp * self.dp_attention_per_graph_bs_dp_mib
            graphs = where(
                bs > self.dp_attention_large_bs_above,
                graphs + bs * dp_attention_dp * self.dp_attention_large_bs_mib,
                graphs,
            )
        on = self.prefill_graph if prefill is None else prefill
        graphs = graphs + where(
            on, self.prefill_graph_mla_mib + where(delta, self.prefill_graph_deepep_cuda_mib, 0.0), 0.0
        )
        tokens = row.chunked_prefill_size if chunk is None else chunk
        reserved = (
            self.base_mib
            + maximum(tokens, self.min_activation_tokens) * self.per_activation_token_mib
            + tp * pp * self.per_parallel_rank_mib
            + graphs
        )
        if gpu_mib > self.floor_above_gib * GiB / MiB:
            reserved = maximum(reserved, self.floor_mib)
        return reserved + (self.deepep_mib if deepep else 0.0)

    def fraction(
        self,
        *,
        gpu_bytes: int,
        tp: Any,
        pp: Any,
        chunk: Any,
        deepep: bool,
        cuda: bool,
        dp_attention_dp: Any = None,
        vision: tuple[int, int] | None = None,
        decode_bs: int | None = None,
        decode_cap: int | None = None,
        decode_off: bool = False,
        prefill: Any = None,
        prefill_deepep: Any = None,
    ) -> Any:
        """round((gpu MiB - reserved MiB) / gpu MiB, round_digits), Python's round of each value (columns.each);
        ``vision``: the (layers, width) of a multimodal model's vision encoder, whose cut (``vlm``) follows."""
        mib = gpu_bytes / MiB
        reserved = self.reserved_mib(
            gpu_mib=mib,
            tp=tp,
            pp=pp,
            chunk=chunk,
            deepep=deepep,
            cuda=cuda,
            dp_attention_dp=dp_attention_dp,
            decode_bs=decode_bs,
            decode_cap=decode_cap,
            decode_off=decode_off,
            prefill=prefill,
            prefill_deepep=prefill_deepep,
        )
        cut = 1.0 if vision is None or self.vlm is None else self.vlm.factor(layers=vision[0], width=vision[1])
        return each(lambda v: round(float(v), self.round_digits) * cut, (mib - reserved) / mib)


class Option(Spec):
    """An engine flag as a stack option: a closed set of choices (each an Effect) or a fraction of
    HBM that sets the reserve (``sets: reserve``: reserve = 1 - value, as vLLM's
    --gpu-memory-utilization and SGLang's --mem-fraction-static leave the rest)."""

    flag: str
    default: Union[str, float]
    choices: dict[str, Effect] = {}
    sets: Optional[Literal["reserve"]] = None
    auto: Optional[AutoFraction] = None  # what the engine derives when the flag is not given
    # a flag that takes no value (argparse store_true): the choice at which the launch writes the flag alone; at
    # the other choices it writes nothing
    switch: Optional[str] = None
    # an environment variable the engine reads as unset at this choice (tpu-inference's MOE_REQUANTIZE_WEIGHT_DTYPE:
    # "" keeps the checkpoint's dtype): the launch writes nothing there, as it would write a value the engine misreads
    unset: Optional[str] = None
    source: Source

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.choices) == bool(self.sets):
            raise ValueError("an option has either choices or sets: reserve")
        if self.choices and str(self.default) not in self.choices:
            raise ValueError(f"default {self.default!r} is not one of {', '.join(self.choices)}")
        if self.sets and not (isinstance(self.default, float) and 0 < self.default <= 1):
            raise ValueError("a fraction option's default must be a number in (0, 1]")
        if self.auto and not self.sets:
            raise ValueError("auto applies to a fraction option (sets: reserve)")
        if self.switch is not None and self.switch not in self.choices:
            raise ValueError(f"switch {self.switch!r} is not one of {', '.join(self.choices)}")
        if self.unset is not None and self.unset not in self.choices:
            raise ValueError(f"unset {self.unset!r} is not one of {', '.join(self.choices)}")
        set_by = {c: set(e.compute_formats or ()) for c, e in self.choices.items()}
        if any(set_by.values()) and len({frozenset(v) for v in set_by.values()}) > 1:
            raise ValueError(f"every choice sets the same compute_formats (a later choice replaces them): {set_by}")


class DpAttentionChunk(Spec):
    """How the engine reads its prefill-chunk flag under DP attention: it divides it by dp_size, so the flag
    carries every DP group's chunk (``Stack.engine_chunk``); k3plan's chunk is one DP group's."""

    holds: str
    sources: Sources


BindableSection = Literal["state", "paging", "reserve", "kv_pool", "absorbed_copies", "dp_attention_chunk"]


class PlatformRule(Spec):
    """Where a stack launches another engine on one kind of machine (dp-attention: SGLang
    --enable-dp-attention on GPUs, tpu-inference's attention DP on TPUs, k3plan.engines.dp_attention
    Engine.launcher_on): there the ``sections`` and ``options`` that engine decides are taken from its own
    stack YAML (``stack``), with the citations they have there -- each quantity written once, in the
    engine's file (``Stack.bind``)."""

    stack: str  # the bundled stack whose sections and options apply on this kind
    sections: Annotated[tuple[BindableSection, ...], msgspec.Meta(min_length=1)]
    options: tuple[str, ...] = ()  # that stack's options (flags) that apply here too
    holds: Text  # why this engine's rules apply on this kind
    # where that engine puts the experts at DP > 1 as this stack launches it (its own stack's rule is for a launch
    # without this stack's flags: SGLang's sglang.yaml prices --dp-size without DP attention); None: this stack's own
    dp_experts: Optional[DpExperts] = None


class GmmTile(Spec):
    """How the stack's routed-expert kernel tiles each expert group's rows: every visit of a (group, row tile)
    runs the MXU over a bucket of rows, masking the rows not the group's after the matmul, so a touched expert
    costs the bucket's rows of MXU work, not its routed rows (k3plan.step.gmm, where each rule is worked out;
    ``gmm_v2``: torchtpu-vllm's kernel, its default ``calculate_tiling``)."""

    rule: Literal["gmm_v2"]
    holds: Text
    sources: Sources


class FusedDequant(Spec):
    """The routed-expert kernels read quantized expert weights inside the kernel (a tile at a time), so no layer's
    experts are ever held dequantized in HBM: the temporaries carry no dequantization buffer for them."""

    holds: Text
    sources: Sources


class Experts(Spec):
    """What the stack's routed-expert kernel computes beyond the routed rows (None: the rows as routed)."""

    gmm_tile: Optional[GmmTile] = None
    # None: quantized experts are dequantized a layer at a time into a buffer (step.temporaries)
    fused_dequant: Optional[FusedDequant] = None


class TokenBuckets(Spec):
    """The engine compiles its forward for a ladder of token counts and pads every step's tokens up to the
    smallest that holds them (``k3plan.step.comm.padded_tokens``): by default ``min_tokens`` doubling, the last
    one the scheduler's token budget itself. Tensors the padded rows flow through (the TP collectives' messages) carry
    them; the rows' zero routing weights keep them out of the experts (``Experts``)."""

    min_tokens: Pos
    holds: Text
    sources: Sources
