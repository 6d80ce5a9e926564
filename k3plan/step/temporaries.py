"""Temporaries of a step, per device, written once over ``int | numpy array`` columns: the named live
buffers of one prefill chunk and of one decode step, one layer at a time (docs/k3-facts.md §6: the two
graphs are compiled apart, so the budget takes the larger). Each function returns a frozen typed result
with a field a buffer (``PrefillTemp``, ``DecodeTemp``), generic in the column type like
``k3plan.step.memory``'s; ``labelled()`` lists the buffers under the labels fit prints and its JSON keeps.
``budget.temp`` calls these with the ints of one Setup, ``plan`` with one entry per configuration.

Two graphs (``Engine.temp_graph``): an engine's kernels (``prefill_temp_terms`` / ``decode_temp_terms``: a paged
attention kernel that never materializes the scores, a grouped matmul over the device's share of the pairs) and a
graph written in XLA ops, the porting study's (``xla_prefill_temp_terms``: the scores over the chunk x context,
every token-expert pair's rows, the experts dequantized in XLA; the largest block, not the sum).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Generic

from k3plan.columns import C, logical_not, maximum, where
from k3plan.models.spec import ModelSpec
from k3plan.step.memory import KDA_CHUNK_TOKENS, cdiv, heads_local


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class TempTerm(Generic[C]):
    """One named live buffer: its label (the text fit prints and its JSON lists) and its bytes a device."""

    label: str
    bytes: C


class _Labelled(Generic[C]):
    """The temporaries' results: named fields in the order fit lists them, each with its label (``LABELS``);
    a field that is None is a buffer the model does not have (no KDA layers)."""

    __slots__ = ()
    LABELS: ClassVar[dict[str, str]]

    def labelled(self) -> tuple[TempTerm[C], ...]:
        """The terms in order, each under its label (fit's text and JSON); absent buffers left out."""
        out = []
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            v = getattr(self, f.name)
            if v is not None:
                out.append(TempTerm(self.LABELS[f.name], v))
        return tuple(out)

    @property
    def total_bytes(self) -> C:
        """The buffers' sum: an upper bound of one layer's live bytes (none are freed within the layer)."""
        total: Any = 0
        for t in self.labelled():
            total = total + t.bytes
        return total


_MOE_LABELS = {
    "router_bytes": "router logits and top-k (f32)",
    "expert_io_bytes": "expert inputs, gate/up and outputs",
    "combine_bytes": "combine buffer (f32, before the all-reduce / all-to-all)",
    "dequantized_experts_bytes": "one layer's local experts dequantized",
}


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class PrefillTemp(_Labelled[C]):
    """The live buffers of one prefill chunk, one layer at a time, per device (``prefill_temp_terms``)."""

    residual_bytes: C
    kda_projection_bytes: C | None  # None: no KDA layers
    kda_chunk_state_bytes: C | None
    mla_kv_bytes: C
    router_bytes: C
    expert_io_bytes: C
    combine_bytes: C
    dequantized_experts_bytes: C  # 0 where the experts are not quantized

    LABELS: ClassVar[dict[str, str]] = {
        "residual_bytes": "residual stream (2 live copies)",
        "kda_projection_bytes": "KDA q/k/v/gate projections",
        "kda_chunk_state_bytes": "KDA chunk states (f32)",
        "mla_kv_bytes": "MLA up-projected K/V over the context",
        **_MOE_LABELS,
    }


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class DecodeTemp(_Labelled[C]):
    """The live buffers of one decode step, one layer at a time, per device (``decode_temp_terms``)."""

    residual_bytes: C
    mla_scores_bytes: C
    logits_bytes: C
    kda_state_copy_bytes: C | None  # None: no KDA layers
    router_bytes: C
    expert_io_bytes: C
    combine_bytes: C
    dequantized_experts_bytes: C  # 0 where the experts are not quantized

    LABELS: ClassVar[dict[str, str]] = {
        "residual_bytes": "residual stream",
        "mla_scores_bytes": "absorbed MLA scores (f32)",
        "logits_bytes": "logits (f32)",
        "kda_state_copy_bytes": "KDA state update copy (f32)",
        **_MOE_LABELS,
    }


DEQUANTIZED_EXPERTS = _MOE_LABELS["dequantized_experts_bytes"]


@dataclass(frozen=True, slots=True, eq=False)  # eq: fields may be arrays (no truth value)
class GraphTemp(Generic[C]):
    """The live buffers of a stage of a graph written in XLA ops (``Engine.temp_graph`` "xla"), per device: the
    buffers of the block at which the stage peaks (``xla_prefill_temp_terms``) and those live across blocks.
    Over columns every block's terms are present, each zero on the rows where another block is the peak."""

    terms: tuple[TempTerm[C], ...]

    def labelled(self) -> tuple[TempTerm[C], ...]:
        return self.terms

    @property
    def total_bytes(self) -> C:
        total: Any = 0
        for t in self.terms:
            total = total + t.bytes
        return total


XLA_EXPERTS = "one layer's local experts in the activation dtype (dequantized or converted in XLA)"
XLA_AHEAD = "one more MoE layer's experts, dequantized ahead of use"
XLA_RESIDUAL = "residual stream (2 live copies)"


def xla_prefill_temp_terms(spec: ModelSpec, *, act, converted, tp: C, ep, chunk, context) -> GraphTemp[C]:
    """One prefill chunk of the porting study's graph (k3plan's validate graph, ``ragged`` experts): the largest
    block's buffers at its peak, by the rules of ``k3plan.step.live`` at coefficient 1 (MLA: the f32 scores, then
    probabilities in their place, [local heads, chunk, context], the causal mask and the cache in the dots' layout;
    MoE: group_sort's rows over every token-expert pair -- the tokens are replicated over the expert axes -- xs
    [chunk x top_k, latent], gate and up [chunk x top_k, inter], the router, the combine, and the device's local
    experts in the activation dtype; KDA's chunked scan; the dense MLP; the LM head), plus the residual stream and
    one more MoE layer's experts dequantized ahead of use (the scheduler runs a weight-only dequantization early).
    ``converted``: the routed experts are written in the activation dtype before their ragged_dots (quantized, or
    stored in another dtype). Against the porting study's real v7x slice (K3, 2x2x4, TP=32): within 15% from 4,096
    to 57,344 tokens but at 32,768 (tests/step/test_xla_temporaries.py; reports/validation/README.md)."""
    from k3plan.step.live import dense_mlp_live, kda_live, lm_head_live, mla_live, moe_live

    held: Any = 0  # w1, w3, w2 of the device's local experts (the ``ragged`` form dequantizes them whole)
    if spec.n_moe:
        held = cdiv(spec.moe.num_experts, ep) * 3 * spec.moe.expert_in * spec.moe.expert_intermediate * act
    blocks: list[tuple[str, dict[str, Any]]] = []
    if spec.n_mla:
        blocks.append(("MLA", mla_live(spec, seqs=1, queries=chunk, context=context, tp=tp, act=act).buffers))
    if spec.kda is not None and spec.n_kda:
        blocks.append(("KDA", kda_live(spec, seqs=1, queries=chunk, tp=tp, decode=False).buffers))
    if spec.n_moe:
        mb = moe_live(spec, tokens=chunk, ep=ep, act=act, form="ragged").buffers
        kept = {k: v for k, v in mb.items() if not k.startswith(("dequantized experts", "tiled scan"))}
        blocks.append(("MoE", {**kept, XLA_EXPERTS: where(converted, held, 0)}))
    if spec.num_layers - spec.n_moe > 0 and spec.dense_intermediate:
        blocks.append(("dense MLP", dense_mlp_live(spec, rows=chunk, tp=tp, act=act).buffers))
    blocks.append(("LM head", lm_head_live(spec, seqs=1, tp=tp).buffers))
    totals = []
    for _, bufs in blocks:
        total: Any = 0
        for v in bufs.values():
            total = total + v
        totals.append(total)
    peak: Any = 0
    for t in totals:
        peak = maximum(peak, t)
    scalar = not hasattr(peak, "shape")
    terms: list[TempTerm[C]] = [TempTerm(XLA_RESIDUAL, 2 * chunk * spec.hidden_size * act)]
    taken: Any = False
    for (name, bufs), total in zip(blocks, totals):
        is_peak = (total == peak) & logical_not(taken)  # the first block at the peak
        taken = taken | is_peak
        if scalar and not is_peak:
            continue
        terms += [TempTerm(f"{name}: {label}", where(is_peak, b, 0)) for label, b in bufs.items()]
    if spec.n_moe > 1:
        terms.append(TempTerm(XLA_AHEAD, where(converted, held, 0)))
    return GraphTemp(terms=tuple(terms))


def _moe_terms(spec: ModelSpec, *, tokens, ep, act, quantized) -> dict[str, Any]:
    """The MoE layer's buffers, as keyword arguments of ``PrefillTemp`` / ``DecodeTemp``."""
    moe = spec.moe
    local = cdiv(moe.num_experts, ep)
    rows = cdiv(tokens * moe.top_k * local, moe.num_experts)  # token-expert pairs on this device
    return dict(
        router_bytes=tokens * (moe.num_experts * 4 + moe.top_k * 8),
        expert_io_bytes=rows * (2 * moe.expert_in + 2 * moe.expert_intermediate) * act,
        combine_bytes=tokens * spec.hidden_size * 4,
        dequantized_experts_bytes=where(quantized, local * 3 * moe.expert_in * moe.expert_intermediate * act, 0),
    )


def _dsv4():
    from k3plan.step import dsv4_ops

    return dsv4_ops


def prefill_temp_terms(spec: ModelSpec, *, act, quantized, tp: C, ep, chunk, context) -> PrefillTemp[C]:
    """One prefill chunk of ``chunk`` tokens per DP group, attending over ``context`` tokens."""
    mla = spec.mla
    kda_proj = kda_states = None
    if spec.kda is not None and spec.n_kda:
        hk, d = heads_local(spec.kda.heads, tp), spec.kda.head_dim
        kda_proj = 5 * chunk * hk * d * act
        kda_states = cdiv(chunk, KDA_CHUNK_TOKENS) * hk * d * d * 4
    return PrefillTemp(
        residual_bytes=2 * chunk * spec.hidden_size * act,
        kda_projection_bytes=kda_proj,
        kda_chunk_state_bytes=kda_states,
        mla_kv_bytes=(
            # a 1-token chunk is a decode step to an MLA backend (vLLM's MLA metadata builders send a query of at
            # most reorder_batch_threshold >= 1 tokens down the absorbed decode path): its f32 scores over the
            # context, not the context's K/V up-projected (that read 7.5 GiB at 131,072 tokens on one v5e chip for a
            # "prefill" of one token, against 48 MiB of scores)
            where(
                chunk <= 1,
                heads_local(mla.heads, tp) * context * 4,
                context
                * heads_local(mla.heads, tp)
                * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim)
                * act,
            )
            if spec.dsv4 is None
            else _dsv4().prefill_gather_values(spec, chunk=chunk, context=context) * act  # DeepSeek-V4: no per-head K/V
        ),
        **_moe_terms(spec, tokens=chunk, ep=ep, act=act, quantized=quantized),
    )


def decode_temp_terms(spec: ModelSpec, *, act, quantized, tp: C, ep, dp, batch, context) -> DecodeTemp[C]:
    """One decode step for ``batch`` sequences at ``context`` tokens (a DP group's share)."""
    b = cdiv(batch, dp)
    kda_copy = None
    if spec.kda is not None and spec.n_kda:
        kda_copy = b * heads_local(spec.kda.heads, tp) * spec.kda.head_dim**2 * 4
    return DecodeTemp(
        residual_bytes=2 * b * spec.hidden_size * act,
        mla_scores_bytes=b
        * (
            heads_local(spec.mla.heads, tp) * context
            if spec.dsv4 is None
            else _dsv4().decode_score_values(spec, context=context, tp=tp)  # DeepSeek-V4: the keys it attends
        )
        * 4,
        logits_bytes=b * cdiv(spec.vocab_size, tp) * 4,
        kda_state_copy_bytes=kda_copy,
        **_moe_terms(spec, tokens=b, ep=ep, act=act, quantized=quantized),
    )


# ---- k3plan's own graph (validate's step, ``probe step``), buffer by buffer (issue 50) ----------------------------

VALIDATE_TILE = 4  # experts a scan step of the ``tiled`` form dequantizes (k3plan.step.live.TILE_EXPERTS)
MXFP4_BLOCK = 32  # inputs an MXFP4 scale covers
TPU_LANES = 128  # the minor dim of a TPU memory tile


def validate_temp_terms(
    spec: ModelSpec,
    *,
    stage: str,
    form: str,
    act: int,
    quantized: bool,
    tp: int,
    ep: int,
    rows: int,
    context: int,
    scan_moe: bool,
    scan_kda: bool,
    kda_kept: int,
    stacked_moe: bool,
    n_blocks: int,
) -> GraphTemp[int]:
    """The temporaries of one stage of k3plan's own graph (validate's step: ``k3plan.validate.steps``, which
    ``probe step`` and ``validate`` compile), a device: the buffers live at the step's largest live set, each
    priced from its shape. ``rows``: the decode batch or the prefill chunk (a prefill's context is its chunk);
    ``form``: the routed experts' formulation (``k3plan.validate.experts``: ragged / tiled); ``quantized``: the
    experts are stored MXFP4 (dequantized in XLA ops), else bf16; ``scan_moe`` /
    ``scan_kda``: an MoE / KDA layer sits in a scan of two or more blocks (``k3plan.step.structure.layer_plan``;
    a scan of one block the compiler unrolls); ``stacked_moe``: an MoE layer's weights are stacked for a scan of any
    length (``n_blocks`` blocks); ``kda_kept``: KDA layers whose conv inputs a prefill holds at its peak
    (``validate_kda_kept``).

    Two candidate instants, each its own live set, the larger the peak (``GraphTemp``'s terms are its buffers):
    the routed experts' matmuls of an MoE layer, and an MLA layer's attention. Every buffer below was read off the
    compiler's buffer assignment of a deviceless v5e compile of the same graph (benchmarks/grid_temp_compile.py
    --dump; reports/validation/grid-temp-v5e/README.md names the values)."""
    moe, mla = spec.moe, spec.mla
    e_loc = cdiv(moe.num_experts, ep)
    lt, inter = moe.expert_in, moe.expert_intermediate
    weight = e_loc * inter * lt  # elements of one expert weight (w1, w3 or w2) of one layer, a device
    decode = stage == "decode"
    tk = rows * moe.top_k
    terms: list[TempTerm[int]] = []
    # -- the routed experts' instant
    op: list[TempTerm[int]] = []
    shared: list[TempTerm[int]] = []
    if not quantized:  # stored in bf16, run by ragged_dots
        op.append(TempTerm("MoE: one expert weight copied into the ragged_dot's operand layout (bf16)", weight * 2))
        if act != 2:
            op.append(TempTerm(f"MoE: one expert weight converted to the activation dtype ({act} B)", weight * act))
        elif scan_moe:
            op.append(TempTerm("MoE: the scan step's layer sliced out of the stacked expert weight (bf16)", weight * 2))
    elif form == "tiled":
        tile = VALIDATE_TILE
        tile_w = tile * inter * lt
        op.append(TempTerm("MoE: one tile's expert weight dequantized (bf16)", tile_w * 2))
        if tk > moe.top_k:  # one token's rows: the compiler fuses the scale's broadcast into the dequantization
            op.append(TempTerm("MoE: the tile's scales broadcast over the weight (bf16)", tile_w * 2))
        op.append(TempTerm("MoE: the tile's E2M1 codes and their byte repeat (u8)", 2 * tile_w))
        scales = 3 * weight // MXFP4_BLOCK * 2  # w1, w3 and w2's scales of one layer in bf16
        if stacked_moe:  # the block's stacked packed codes are laid out apart from the dots' reads
            op.append(TempTerm("MoE: the stacked layer's packed codes copied into the dequantization's layout (u8), "
                               "w1, w3, w2", 3 * weight // 2))  # fmt: skip
        if scan_moe:
            op.append(TempTerm("MoE: the stack's scales converted (bf16), and the scan step's slice, w1, w3, w2",
                               (n_blocks + 1) * scales))  # fmt: skip
            if tk > moe.top_k:  # the scan step's operands are written whole (an unstacked layer's fuse into the dots)
                op.append(TempTerm("MoE: the tile's three operands with the zero group in front [tile + 1, ...] (bf16)",
                                   3 * (tile + 1) * inter * lt * 2))  # fmt: skip
        else:
            op.append(TempTerm("MoE: the layer's scales converted (bf16), w1, w3, w2", scales))
    else:  # MXFP4 in the ragged form: each weight dequantized whole
        for w in ("w1", "w3"):
            op.append(TempTerm(f"MoE: {w} dequantized in the activation dtype ({act} B)", weight * act))
        op.append(TempTerm("MoE: one expert weight copied into the ragged_dot's operand layout (bf16)", weight * 2))
    kda = spec.kda
    hk = heads_local(kda.heads, tp) if kda is not None else 0
    d = kda.head_dim if kda is not None else 0
    proj = hk * d  # one KDA projection's width
    moe_t = list(op)
    if decode:
        moe_t.append(
            TempTerm("MoE: ragged_dot rows xs and gate [tokens x top_k, latent + inter]", tk * (lt + inter) * act)
        )
        if kda is not None and spec.n_kda:
            window = kda.conv_kernel - 1
            moe_t.append(
                TempTerm("KDA: conv state update copy [batch, q/k/v, window, proj]", rows * 3 * window * proj * act)
            )
            if scan_kda:
                moe_t.append(
                    TempTerm("KDA: the scan step's new state (f32) [batch, heads, d, d]", rows * hk * d * d * 4)
                )
    else:
        # two instants of the MoE block: its weights' operands made ready (xs gathered: every operand live) and the
        # down ragged_dot (xs, gate and up live; of the operands only the down projection's, where each weight is
        # its own converted or dequantized copy -- the tiled form's scan step holds its tile's whole list)
        shared = [TempTerm("residual stream [tokens, hidden]", rows * spec.hidden_size * act)]
        if kda is not None and spec.n_kda:
            shared.append(TempTerm("KDA: q/k/v conv inputs kept for the conv state [layers, q/k/v, tokens, proj]",
                                   kda_kept * 3 * rows * proj * act))  # fmt: skip
            if act == 2:  # bf16 rows: the heap places the MoE block above the KDA scan's f32 region (see below)
                shared.append(TempTerm("KDA: the chunked scan's f32 intermediates [5, tokens, heads, d] and a bf16 "
                                       "copy", rows * proj * (5 * 4 + 2)))  # fmt: skip
        down_op = op
        if form != "tiled":
            own = [t for t in op if "converted" in t.label or "dequantized" in t.label]
            down_op = own[:1] if own else op
        rows_t = TempTerm("MoE: ragged_dot rows xs, gate and up [tokens x top_k, latent + 2 inter]",
                          tk * (lt + 2 * inter) * act)  # fmt: skip
        up = op + [TempTerm("MoE: ragged_dot rows xs [tokens x top_k, latent]", tk * lt * act)] + shared
        down = down_op + [rows_t] + shared
        moe_t = max((up, down), key=lambda ts: sum(t.bytes for t in ts))
        if not quantized and act != 2 and kda is not None and spec.n_kda and tk * inter <= weight:
            # bf16 experts converted to f32 (jax-native) while a gate / up rows array [tokens x top_k, inter] is no
            # larger than the converted weight [experts, inter, latent]: the weight fits in no region the rows free,
            # so the heap keeps the block's buffers apart rather than reusing the up instant's for the down's -- the
            # bf16 copy and the f32 conversion, the rows, the kept conv inputs and their copies padded by the conv's
            # window (pad_maximum_fusion f32[1, 3, tokens + 3, proj]). Deviceless v5e compiles hold all of them at
            # 512-3,584 tokens (2L 16E: equal sizes at 3,584); at 3,840 and 4,096 the converted weights share the
            # rows' regions (the 4,096 dump's f32[65536,3072] region holds f32[16,3072,3584]) and the larger instant
            # is the temp (reports/validation/grid-temp-v5e/README.md)
            pad = kda.conv_kernel - 1
            padded = TempTerm("KDA: the kept conv inputs padded by the conv's window [layers, q/k/v, tokens + "
                              "window - 1, proj]", kda_kept * 3 * (rows + pad) * proj * act)  # fmt: skip
            moe_t = op + [rows_t] + shared + [padded]
    candidates = [moe_t] if spec.n_moe else []
    # -- an MLA layer's attention
    if mla is not None and spec.n_mla:
        hl = heads_local(mla.heads, tp)
        lanes = cdiv(mla.kv_lora_rank + mla.qk_rope_head_dim, TPU_LANES) * TPU_LANES
        seqs, queries = (rows, 1) if decode else (1, rows)
        mla_t = [
            TempTerm("MLA: scores, then probabilities in their place (f32) [seqs, heads, queries, context]",
                     seqs * hl * queries * context * 4),
            TempTerm("MLA: the cache in the dots' layout (bf16, entry padded to 128 lanes) [seqs, context, entry]",
                     seqs * context * lanes * 2),
        ]  # fmt: skip
        if not decode:
            mla_t.append(TempTerm("MLA: causal mask (1 B) [queries, context]", queries * context))
            mla_t += [t for t in shared if not t.label.startswith("KDA: the chunked")]
        candidates.append(mla_t)
    best = max(candidates, key=lambda ts: sum(t.bytes for t in ts), default=[])
    terms += best
    return GraphTemp(terms=tuple(terms))


def validate_kda_kept(spec: ModelSpec, *, prefix: tuple[int, ...], block: tuple[str, ...], scan_moe: bool) -> int:
    """KDA layers whose q/k/v conv inputs a prefill still holds at its peak MoE layer (the conv state is their last
    tokens, written with the cache at the step's end): where an MoE layer sits in a scan, the peak is in the scan's
    step (its layer sliced out of the stack), after the unrolled prefix's KDA layers and the step's own; otherwise it
    is the last MoE layer, after every KDA layer (the 6L deviceless dump holds two such inputs, the 2L one two)."""
    if scan_moe:
        return sum(spec.mixers[i] == "kda" for i in prefix) + ("kda" in block)
    return spec.n_kda
