"""The stack YAML's sections (k3plan.engines.stack.Stack holds them): where a rule is cited (``Source``,
``Cite``), the KV cache and its layout, the KDA state pool, paging, the reserve and the KV pool's sizing, and the
parallel layout -- sharding rules, expert placement, collectives, pipeline, logits, the default split and the
splits an engine refuses."""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Annotated, Any, Literal, Optional, TypeVar, Union

import msgspec
from msgspec.structs import force_setattr

from k3plan.specfile import Spec
from k3plan.structs import replace

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
        utilization x limit - the bytes still in use after the profile run, engines/vllm/memory.py): a compiled
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
    # the largest attention TP the layout is read at (an option's choice sets it: tpu-inference's MODEL_IMPL_TYPE=vllm
    # is priced at tp 1 only); tp_max_source: the engine code, and why above it k3plan does not price it
    tp_max: Optional[Pos] = None
    tp_max_source: Optional[Source] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.expert_width_multiple and self.expert_width_source is None:
            raise ValueError("splits: expert_width_multiple needs expert_width_source (the engine code that refuses)")
        if self.tp_max is not None and self.tp_max_source is None:
            raise ValueError("splits: tp_max needs tp_max_source (the engine code, and why)")

    def refusal(self, *, tp: int, dp: int, expert_width: int) -> str | None:
        """Why the engine does not run ``tp`` x ``dp`` for a model whose routed experts are ``expert_width``
        wide (0: no MoE), or None."""

        def cite(src: Source) -> str:
            return f"{src.repo} {src.file} {src.symbol.split(' (')[0]}"

        if self.tp_max is not None and self.tp_max_source is not None and tp > self.tp_max:
            note = f": {self.tp_max_source.note}" if self.tp_max_source.note else ""
            return f"tp {tp}: this layout is priced at tp <= {self.tp_max} ({cite(self.tp_max_source)}){note}; expected --tp {self.tp_max}"
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
