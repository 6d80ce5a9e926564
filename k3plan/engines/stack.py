"""Serving stacks: what a runtime does with the weights, the cache and the memory.

A stack is a YAML file (bundled in ``k3plan/engines/stacks/`` or a user path) fixing the runtime
format of each weight role, the KV-cache dtype and layout, the KDA state dtypes and slots, the
sharding rules (each cited to the engine code that holds it), paging, how the engine sizes its
cache pool, the engine's memory reserve, the expert collective pattern and the platforms it runs
on. Engine flags that change any of these are stack options: ``load_stack("sglang:
moe_a2a_backend=none,mem_fraction_static=0.85")`` or ``Stack.with_options``.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypeVar, Union

import msgspec
from msgspec import UNSET, UnsetType
from msgspec.structs import force_setattr

from k3plan.columns import each, maximum, where
from k3plan.errors import K3PlanError
from k3plan.resources import data_dir
from k3plan.specfile import Spec, convert, read_yaml_mapping
from k3plan.structs import replace
from k3plan.units import GiB, MiB

STACK_DIR = data_dir("engines/stacks")
DEFAULT_STACK = "torchtpu-vllm"  # load_stack()'s default name only; commands take default_stack_for(hardware)
# Names a stack had once -> the stack that prices what it meant (issue 34): "vllm-tpu" priced vLLM's model code
# on TPU through tpu-inference, which does not run K3 that way; the engine that does is the torch_tpu plugin.
STACK_ALIASES = {"vllm-tpu": "torchtpu-vllm"}
# The default stack of a machine: the first of these that runs on it (Stack.runs_on, the stack's
# cited platforms). vLLM first (the torch_tpu plugin on TPU, whose K3 CI serves the model nightly;
# vLLM's own on the GPUs of its K3 recipe), then
# SGLang (kimi_k3.py's CUDA and HIP paths), so H100, H20, MI300X and MI325X -- outside the vLLM
# recipe's list -- get sglang.
DEFAULT_STACK_ORDER = ("torchtpu-vllm", "vllm", "sglang")
KV_DTYPES = ("bf16", "fp8", "fp8_ds_mla", "fp32")
KINDS = ("tpu", "gpu")
ENGRAM_PLACEMENTS = ("hbm", "host")  # --engram: where DeepSeek-V4.1's n-gram tables live


# The stack YAML's schema: msgspec Structs (k3plan.specfile.Spec: frozen, keyword-only, unknown keys refused),
# checked by parse_stack through specfile.convert (issue 33: a fresh fit builds no pydantic model). A rule of a
# class is its ``__post_init__`` (a ValueError, which convert words at the object's key).
Pos = Annotated[int, msgspec.Meta(ge=1)]
NonNeg = Annotated[int, msgspec.Meta(ge=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
Text = Annotated[str, msgspec.Meta(min_length=1)]  # a string that must not be empty

_S = TypeVar("_S", bound=Spec)


def updated(obj: _S, **update: Any) -> _S:
    """``obj`` with ``update`` set and no rule checked again (pydantic's ``model_copy(update=...)``, which the
    stack's derivations -- with_options, bind, for_dp, ... -- and their callers relied on: a value built from
    checked parts, e.g. a stack whose compute_dtype a probe swaps). structs.replace re-runs ``__post_init__``."""
    out: Any = copy.copy(obj)  # a Struct (mypy sees Spec as a dataclass-like base)
    for name, value in update.items():
        if name not in obj.__struct_fields__:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
        force_setattr(out, name, value)
    return out


class Source(Spec):
    """Where an engine holds a rule: repository, file, class (or function), optionally the commit
    read. ``found: false`` says the code was not in the stored snapshot and ``note`` says what is
    assumed instead, never silently invented."""

    repo: str
    file: str
    symbol: str  # class or function that holds the rule
    commit: Optional[str] = None
    found: bool = True
    note: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.found and not self.note.strip():
            raise ValueError("a source with found: false must say in note what is assumed")

    def text(self) -> str:
        at = f"@{self.commit[:8]}" if self.commit else ""
        head = f"{self.repo}{at} {self.file} {self.symbol}"
        if not self.found:
            return f"not found or not read in the stored {self.repo} snapshot ({self.file} {self.symbol}); assumed: {self.note}"
        return head + (f" ({self.note})" if self.note else "")


Sources = Annotated[tuple[Source, ...], msgspec.Meta(min_length=1)]  # at least one


class Cite(Spec):
    """One rule in words and the engine code it comes from."""

    holds: str  # what the engine does with these tensors
    sources: Sources


class KVLayout(Spec):
    """How the engine lays one token's absorbed-MLA cache entry out, a layer: the latent (kv_lora_rank
    values) and the rope part (qk_rope_head_dim values) each rounded up to a multiple, in the KV dtype
    (tpu-inference pads both to the 128-lane tile unless MLA_TRANSPOSE_KV_CACHE: 512 + 128 = 640 values
    for K3, not 576). A stack without one stores the 576 values as they are."""

    latent_align: Pos = 1
    rope_align: Pos = 1
    holds: Text
    sources: Sources

    def values_per_token(self, *, kv_lora_rank: int, qk_rope_head_dim: int) -> int:
        def up(n: int, m: int) -> int:
            return -(-n // m) * m

        return up(kv_lora_rank, self.latent_align) + up(qk_rope_head_dim, self.rope_align)


class KVCache(Spec):
    dtype: Literal["bf16", "fp8", "fp8_ds_mla", "fp32"]
    replicate_across_tp: bool  # MLA latent is shared by all heads: every TP rank holds it
    split_across_dp: bool = True  # sequences (and their KV) split across DP groups
    source: str
    layout: Optional[KVLayout] = None  # the engine's padded entry (None: kv_lora + rope values)


class VerifyState(Spec):
    """KDA state slots a verify step of T tokens (k3plan's --spec-tokens k: T = k + 1) moves a sequence a KDA
    layer: the engine reads ``reads`` slots and writes ``writes + writes_per_verify_token`` x T (one state a
    token checked, so it can roll back to the accepted one; ``Stack.verify_state_slots``). A plain decode step
    (T = 1) reads and writes one slot in place, whatever the rule."""

    reads: Pos  # slots read: the last accepted state (and a copy's source, if any)
    writes_per_verify_token: NonNeg  # slots written for each token a verify step checks
    writes: NonNeg = 0  # slots written once a step on top (a copy back into the pool)
    caveat: str = ""  # what the rule assumes of K3's KDA layers; printed with the verify step
    sources: Sources


class State(Spec):
    recurrent_dtype: Literal["f32", "bf16"]
    conv_dtype: Literal["f32", "bf16"]
    shard_by_heads: bool = True
    # KDA state slots one running request holds (where ``ratio`` is given: derived from it, ``__post_init__``)
    slots_per_request: Pos = 1
    # the slots a running request the engine's pool holds before a cap and speculative decoding (SGLang
    # calculate_mamba_ratio); None: ``slots_per_request`` is given as it is
    ratio: Optional[Pos] = None
    ratio_spec: Optional[Pos] = None  # ``ratio`` with speculative decoding on (None: ratio)
    cap: Optional[Pos] = None  # an option that caps the ratio whatever the others say
    # with speculative decoding, the slots a running request more for each token a verify step checks (SGLang's
    # intermediate SSM and conv states a draft token)
    slots_per_verify_token: NonNeg = 0
    # with speculative decoding, the slots a running request more for each draft token, verify tokens - 1
    # (vLLM's MambaSpec.num_speculative_blocks: num_speculative_tokens)
    slots_per_draft_token: NonNeg = 0
    verify: Optional[VerifyState] = None  # the state a verify step moves (None: each token checked as a sequence)
    verify_tokens: NonNeg = 0  # tokens a verify step checks (0: no speculative decoding)
    # the state pool holds whole layer groups (vLLM's hybrid KV-cache manager: step.memory.held_layers)
    layer_groups: bool = False
    source: str

    def __post_init__(self) -> None:
        """``slots_per_request`` from ``ratio`` where it is given: the ratio (with speculative decoding
        ``ratio_spec``), at most ``cap``, plus ``slots_per_verify_token`` x ``verify_tokens`` and
        ``slots_per_draft_token`` x (``verify_tokens`` - 1)."""
        super().__post_init__()
        if self.ratio is not None:
            spec = self.verify_tokens
            r = self.ratio_spec if spec and self.ratio_spec is not None else self.ratio
            if self.cap is not None:
                r = min(r, self.cap)
            drafts = max(spec - 1, 0) * self.slots_per_draft_token
            me: Any = self  # a Struct (mypy sees Spec as a dataclass-like base)
            force_setattr(me, "slots_per_request", r + spec * self.slots_per_verify_token + drafts)

    def with_(self, **changes: int | None) -> State:
        """This state with fields changed and ``slots_per_request`` resolved again (``__post_init__``)."""
        return replace(self, **changes)


class Paging(Spec):
    kind: Literal["hybrid", "separate", "none"]
    align_tokens: Pos = 64
    source: str


class Reserve(Spec):
    fraction_of_usable_hbm: Annotated[float, msgspec.Meta(ge=0.0, lt=1.0)]
    source: str


class KVPool(Spec):
    """How the engine sizes its cache pool; ``step.memory.budget_terms`` applies it (temps_in_reserve)."""

    method: Literal["utilization_minus_profile", "utilization_minus_resident", "static_fraction", "whole_free_hbm"]
    knob: Optional[str] = None  # the stack option that sets the fraction, if any
    describe: str
    source: str

    @property
    def temps_in_reserve(self) -> bool:
        """static_fraction (SGLang profile_max_num_token: rest = free after load - total x (1 -
        mem_fraction_static)): the activations live in the 1 - fraction left, so the temporaries
        come out of the reserve; utilization_minus_profile (vLLM: utilization x total - weights -
        profiled peak) subtracts them on top of it. utilization_minus_resident (the torch_tpu vLLM plugin:
        utilization x limit - the bytes still in use after the profile run, engines/vllm_memory.py): a compiled
        step's temporaries are freed when it returns, so they too run in the 1 - utilization left over."""
        return self.method in ("static_fraction", "utilization_minus_resident")


class ExpertPlacement(Spec):
    """What the engine does when the expert group (EP) does not divide the routed experts.
    ``uneven: true``: it places them anyway, ``E // ep`` a rank and one more on the first ``E % ep``
    ranks (vLLM determine_expert_map), so the fullest device holds ceil(E / ep) and binds;
    ``uneven: false``: the engine asserts divisibility, and k3plan refuses the split (a fallback)."""

    uneven: bool
    placement: Optional[Literal["linear", "round_robin"]] = None  # which experts a rank holds when uneven
    holds: str
    sources: Sources

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.uneven and self.placement is None:
            raise ValueError("an uneven expert placement names its placement (linear or round_robin)")

    def note(self, split: str, fullest: int) -> str:
        """What every output says of an uneven split (``split``: ``UnevenSplit.describe``'s words): the
        engine's rule, and that the fullest device (``fullest`` experts a layer) binds."""
        src = self.sources[0]
        return (
            f"{split} ({src.repo} {src.symbol}, {self.placement} placement); the fullest binds: the "
            f"weights, expert temporaries and expert bytes a step reads are a {fullest}-expert device's"
        )


class Sharding(Spec):
    rules: dict[str, str | None]
    # role (or "role@kind", e.g. "attn@kda") -> rules that replace the global ones for those tensors
    role_overrides: dict[str, dict[str, str | None]] = {}
    source: str
    # one entry per rule: logical axis name, or "role:<override key>"
    cite: dict[str, Cite] = {}
    # None (a stack that does not say): EP must divide the experts, as before the rule existed
    expert_placement: Optional[ExpertPlacement] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.cite:
            return
        keys = set(self.rules) | {f"role:{r}" for r in self.role_overrides}
        missing, stray = sorted(keys - set(self.cite)), sorted(set(self.cite) - keys)
        if missing:
            raise ValueError(f"rules without a citation: {', '.join(missing)}")
        if stray:
            raise ValueError(f"citations for no rule: {', '.join(stray)}")

    def rules_for(self, role: str, kind: str | None = None) -> dict[str, str | None]:
        """The rules one tensor sees: global, then its role's override, then role@kind's."""
        return merged_rules(self.rules, self.role_overrides, role, kind)

    @property
    def uneven_axes(self) -> frozenset[str]:
        """Logical axes a mesh size that does not divide them still splits (the fullest device
        holding the ceiling): the expert axis where the engine places experts unevenly."""
        return frozenset({"expert"}) if self.expert_placement and self.expert_placement.uneven else frozenset()


def merged_rules(
    rules: dict[str, str | None], role_overrides: dict[str, dict[str, str | None]], role: str, kind: str | None
) -> dict[str, str | None]:
    """Global rules, then ``role_overrides[role]``, then ``role_overrides["role@kind"]`` (kind None: none)."""
    out = {**rules, **role_overrides.get(role, {})}
    if kind is not None:
        out.update(role_overrides.get(f"{role}@{kind}", {}))
    return out


class Collectives(Spec):
    """How the MoE layers exchange tokens (k3plan.step.ops.collective_ops): ``all_to_all`` (EP dispatch
    and combine, ``dispatch_dtype`` on the wire), ``all_reduce`` (local experts, one all-reduce over the
    expert group) or ``allgather_reducescatter`` (vLLM's default all2all backend, AgRsAll2AllManager:
    with DP > 1 the DP group all-gathers its ranks' tokens and reduce-scatters the expert outputs, then
    the attention-TP group all-reduces; with DP 1 only the TP all-reduce)."""

    experts: Literal["all_to_all", "all_reduce", "allgather_reducescatter"]
    dispatch_dtype: Literal["fp8", "bf16", "f32"] = "bf16"  # all-to-all payload (dispatch and combine)
    source: str
    # the pattern the engine runs instead when DP is 1 (None: the same at any DP); ``source`` says why
    dp1_experts: Optional[Literal["all_to_all", "all_reduce", "allgather_reducescatter"]] = None
    # a LatentMoE's all-reduce (``all_reduce`` / ``allgather_reducescatter``'s TP all-reduce): ``fused``, the
    # routed latent and the hidden-wide output in one call (SGLang's fused-front buffer); ``apart``, two calls of
    # the same bytes -- the routed latent before its norm and up-projection, then the shared expert's output
    # (vLLM MoERunner._maybe_reduce_routed_output_before_transform / _maybe_reduce_shared_expert_output)
    latent_reduce: Literal["fused", "apart"] = "fused"
    latent_reduce_sources: tuple[Source, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.latent_reduce == "apart" and not self.latent_reduce_sources:
            raise ValueError("latent_reduce: 'apart' needs latent_reduce_sources (the engine code that reduces twice)")


class Pipeline(Spec):
    """How the engine splits the decoder layers over ``--pipeline-parallel-size`` stages: each stage
    holds floor(L / pp) layers and the L mod pp left over go one each to the stages before the last,
    counting back from the second-to-last (``before_last``: vLLM get_pp_indices, which keeps the
    last stage, with the LM head, and the first, with the embedding, light) or to the last ones
    (``last``: SGLang get_pp_indices). Stages hold their layers only (PPMissingLayer elsewhere); the
    embedding is built on the first stage, the final norm and LM head on the last."""

    remainder: Literal["before_last", "last"]
    sends: tuple[str, ...] = ("hidden_states", "residual")  # the tensors a stage sends the next (IntermediateTensors)
    source: Source


class Logits(Spec):
    """How the engine turns the vocabulary-split logits into tokens, and the collective that takes
    (a step's op list: ``k3plan.step.ops.collective_ops``). ``all_gather``: the logits processor
    all-gathers each device's [rows, vocab/TP] of logits over TP, then samples on whole rows.
    ``partitioned_argmax``: the logits stay split; the greedy argmax is partitioned by XLA: each
    shard's max and its index all-gathered (2 calls of a row's 4 bytes a device)."""

    gather: Literal["all_gather", "partitioned_argmax"]
    holds: str
    sources: Sources


class DefaultParallel(Spec):
    tp: Union[int, Literal["all"]] = "all"
    dp: Union[int, Literal["all"]] = 1


class DpExperts(Spec):
    """Where the engine puts the routed experts when DP > 1: ``tp_x_dp``, always over every device of
    a stage (ep = tp x dp: vLLM's FusedMoE TP-splits them over TP x DP, or holds them whole over TP x DP
    with --enable-expert-parallel); ``tp``, over one DP group's TP ranks (ep = tp: each DP group is an
    independent replica holding every expert, SGLang without --enable-dp-attention); ``either``: the
    split decides (both searched, fit defaults to every device)."""

    over: Literal["tp_x_dp", "tp", "either"] = "either"
    # where the engine puts them instead when TP is 1 (tpu-inference's DP attention: the experts over its expert
    # axis, every device, at attention TP 1; over the tensor axis alone above it); None: ``over``
    tp1_over: Optional[Literal["tp_x_dp", "tp"]] = None
    holds: str = ""
    sources: tuple[Source, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.over != "either" or self.tp1_over is not None) and not self.sources:
            raise ValueError(f"dp_experts over {self.over}: cite the engine code that places the experts")
        if self.tp1_over is not None and self.over == "either":
            raise ValueError("dp_experts: tp1_over names the TP-1 exception to a fixed over (tp_x_dp or tp)")

    def over_at(self, tp: int) -> str:
        """``over`` at this TP (``tp1_over`` at TP 1 where the stack gives one)."""
        return self.tp1_over if tp == 1 and self.tp1_over is not None else self.over

    def summary_at(self, tp: int) -> str:
        """The placement in words, at this TP."""
        over = self.over_at(tp)
        if over == "tp":
            return "each DP group is an independent replica holding the experts over its own TP ranks"
        return "the engine spreads the experts over every TP x DP rank" if over == "tp_x_dp" else ""

    def ep(self, *, tp: int, dp: int) -> int | None:
        """The one EP size the engine runs at ``tp`` x ``dp`` (None: either)."""
        over = self.over_at(tp)
        if dp == 1 or over == "either":
            return None
        return tp * dp if over == "tp_x_dp" else tp


@lru_cache(maxsize=64)
def _tp_choices(width: int, multiple: int) -> tuple[int, ...]:
    """The TP sizes that leave each device a multiple of ``multiple`` of a ``width``-wide FFN (plan asks it for
    every refused row of a search: one list a model)."""
    return tuple(t for t in range(1, width + 1) if width % t == 0 and (width // t) % multiple == 0)


class Splits(Spec):
    """The (tp, dp) splits the engine's code runs the stack's layout at, where it refuses some: k3plan refuses
    the others in one line (exit 2) naming the rule and its source. ``dp_for_tp``: attention TP above 1 runs only
    with more than one DP group (where the engine holds that); ``expert_width_multiple``: TP splits each routed
    expert's FFN width and must leave a multiple of it a device (0: no such rule; ``expert_width_source``)."""

    dp_for_tp: Optional[Source] = None
    expert_width_multiple: NonNeg = 0
    expert_width_source: Optional[Source] = None
    holds: Text

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.expert_width_multiple and self.expert_width_source is None:
            raise ValueError("splits: expert_width_multiple needs expert_width_source (the engine code that refuses)")

    def refusal(self, *, tp: int, dp: int, expert_width: int) -> str | None:
        """Why the engine does not run ``tp`` x ``dp`` for a model whose routed experts are ``expert_width``
        wide (0: no MoE), or None."""

        def cite(src: Source) -> str:
            return f"{src.repo} {src.file} {src.symbol.split(' (')[0]}"

        if self.dp_for_tp is not None and tp > 1 and dp == 1:
            return (
                f"tp {tp} x dp 1: the engine runs attention TP > 1 only with more than one DP group "
                f"({cite(self.dp_for_tp)}); expected --dp > 1 or --tp 1"
            )
        m, src = self.expert_width_multiple, self.expert_width_source
        if m and src is not None and expert_width and tp > 1 and (expert_width % tp or (expert_width // tp) % m):
            ok = _tp_choices(expert_width, m)
            return (
                f"tp {tp}: the engine splits each routed expert's {expert_width}-wide FFN over TP and needs a multiple "
                f"of {m} a device ({cite(src)}); expected --tp one of {', '.join(map(str, ok))}"
            )
        return None


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
    ) -> Any:
        """The MiB SGLang keeps out of the static pools for a GPU of ``gpu_mib`` at ``tp`` x ``pp`` (its
        tp_size: every GPU of a stage under DP attention) and a prefill chunk of ``chunk`` tokens
        (--chunked-prefill-size, which k3plan's launch line passes; None: the engine's default for the GPU);
        ``dp_attention_dp``: the dp_size under --enable-dp-attention (None: no DP attention), whose decode
        graphs pad max_bs x dp_size. ``tp``, ``pp``, ``chunk`` and ``dp_attention_dp`` are ints (fit: one
        configuration) or numpy columns of one GPU's configurations (plan), the same arithmetic in the same
        order (k3plan.columns), so a plan row's value is fit's to the bit."""
        row = self.gpu_class(gpu_mib=gpu_mib)
        small = row.cuda_graph_max_bs_small_tp
        bs = row.cuda_graph_max_bs if small is None else where(tp < 4, small, row.cuda_graph_max_bs)
        graphs = bs * self.per_decode_graph_bs_mib
        if dp_attention_dp is not None:
            graphs = graphs + bs * dp_attention_dp * self.dp_attention_per_graph_bs_dp_mib
            graphs = where(
                bs > self.dp_attention_large_bs_above,
                graphs + bs * dp_attention_dp * self.dp_attention_large_bs_mib,
                graphs,
            )
        if self.prefill_graph:
            graphs = graphs + (
                self.prefill_graph_mla_mib + (self.prefill_graph_deepep_cuda_mib if deepep and cuda else 0.0)
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
    ) -> Any:
        """round((gpu MiB - reserved MiB) / gpu MiB, round_digits), Python's round of each value (columns.each)."""
        mib = gpu_bytes / MiB
        reserved = self.reserved_mib(
            gpu_mib=mib, tp=tp, pp=pp, chunk=chunk, deepep=deepep, cuda=cuda, dp_attention_dp=dp_attention_dp
        )
        return each(lambda v: round(float(v), self.round_digits), (mib - reserved) / mib)


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
    --enable-dp-attention on GPUs, tpu-inference's attention DP on TPUs, k3plan.engines.flags
    ENGINE_FOR_STACK_ON): there the ``sections`` and ``options`` that engine decides are taken from its own
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


class Experts(Spec):
    """What the stack's routed-expert kernel computes beyond the routed rows (None: the rows as routed)."""

    gmm_tile: Optional[GmmTile] = None


class TokenBuckets(Spec):
    """The engine compiles its forward for a ladder of token counts and pads every step's tokens up to the
    smallest that holds them (``k3plan.step.comm.padded_tokens``): by default ``min_tokens`` doubling, the last
    one the scheduler's token budget itself. Tensors the padded rows flow through (the TP collectives' messages) carry
    them; the rows' zero routing weights keep them out of the experts (``Experts``)."""

    min_tokens: Pos
    holds: Text
    sources: Sources


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
    # (k3plan.step.dsv4_cache.ENGRAM_PLACEMENT, cited)
    engram_placement: Optional[Literal["hbm", "host"]] = None

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
        auto = self.reserve_auto(vendor=vendor)
        if auto is None:
            return self.reserve.fraction_of_usable_hbm
        deepep = self.chosen.get("moe_a2a_backend") == "deepep"
        frac = auto.fraction(
            gpu_bytes=usable_bytes,
            tp=tp * dp if self.dp_attention else tp,
            pp=pp,
            chunk=None if chunk is None else self.engine_chunk(chunk, dp=dp),
            deepep=deepep,
            cuda=vendor == "nvidia",
            dp_attention_dp=dp if self.dp_attention else None,
        )
        # a derived fraction <= 0 (more MiB reserved than the GPU has: a long chunk flag under DP attention) leaves
        # the engine no room at all; k3plan reserves the whole device rather than more than it (nothing fits)
        return each(lambda v: min(round(1 - v, 12), 1.0), frac)

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
            out.append(updated(st, platforms=mine, bound=kind))
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
        for each token checked (``State``); itself where that changes nothing (None: no speculative decoding)."""
        st = self.state
        if not verify_tokens or (
            st.ratio is None and not st.slots_per_verify_token and not st.slots_per_draft_token and st.verify is None
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

    def with_engram(self, placement: str | None) -> Stack:
        """The stack with a model's Engram tables in HBM ("hbm") or host memory ("host"); None: as it is."""
        if placement is None:
            return self
        if placement not in ENGRAM_PLACEMENTS:
            raise K3PlanError(f"--engram {placement!r}: expected one of {', '.join(ENGRAM_PLACEMENTS)}")
        return updated(self, engram_placement=placement)

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
        if effect.kv_dtype is not None:
            update["kv_cache"] = updated(self.kv_cache, dtype=effect.kv_dtype)
        if effect.kv_layout is not None:
            kv = update.get("kv_cache", self.kv_cache)
            update["kv_cache"] = updated(kv, layout=effect.kv_layout)
        if effect.platforms is not None:
            update["platforms"] = effect.platforms
        if effect.compute_formats is not None:
            # the choice's rules replace the stack's for those formats (each choice of an option sets the same ones)
            cd = self.compute_dtype
            formats = {**cd.formats, **effect.compute_formats}
            update["compute_dtype"] = updated(cd, formats=formats)
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
    return sorted(p.stem for p in STACK_DIR.glob("*.yaml"))


def parse_ref(ref: str) -> tuple[str, dict[str, str]]:
    """'sglang:moe_a2a_backend=none,mem_fraction_static=0.85' -> ('sglang', {...}); options may
    also be joined by '+' (for lists that are themselves comma-separated, e.g. plan --stacks)."""
    base, sep, opts = ref.partition(":")
    if not sep or "=" not in opts:
        return ref, {}
    values: dict[str, str] = {}
    for part in opts.replace("+", ",").split(","):
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise K3PlanError(f"stack {ref!r}: expected NAME:option=value[,option=value...]")
        if key.strip().replace("-", "_") in {k.replace("-", "_") for k in values}:  # was: the last one won
            raise K3PlanError(f"stack {ref!r}: option {key.strip()!r} is given twice; expected each option once")
        values[key.strip()] = value.strip()
    return base, values


@lru_cache(maxsize=64)
def load_stack(ref: str = DEFAULT_STACK) -> Stack:
    base, values = parse_ref(ref)
    return parse_stack(base).with_options(**values).with_defaults()


@lru_cache(maxsize=16)
def parse_stack(base: str) -> Stack:
    """A stack YAML (a bundled name or a path) as written: no option applied (``load_stack`` applies them).
    An old name (STACK_ALIASES) loads the stack it maps to; the stack's name says which."""
    base = STACK_ALIASES.get(base, base)
    path = STACK_DIR / f"{base}.yaml"
    if not path.is_file():
        path = Path(base).expanduser()
        if not (path.suffix in (".yaml", ".yml") and path.is_file()):
            raise K3PlanError(f"unknown stack {base!r}; known: {', '.join(list_stacks())} (or a stack YAML path)")
    return convert(Stack, read_yaml_mapping(str(path), path), str(path))
