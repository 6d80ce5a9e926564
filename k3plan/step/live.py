"""Bytes live at each op's peak, a device, in the graph a stack runs (issue 15 item 3), over columns.

Each op of the step's one list (k3plan.step.ops) answers the buffers live while it runs, by name (``Op.live``,
a ``LiveBuffers``; ``Op.live_bytes`` their sum), where its builder is given ``LiveAt`` (the formulation the stack
compiles, ``form_for`` below: its engine's ``Engine.expert_form``, the activation bytes and EP); the op that holds them and what they are:

- MoE, on the routed experts' down projection (the grouped matmul at which the block's buffers peak: see
  the ragged_dot rows below; its other grouped matmuls hold none): router logits (f32) and top-k;
  group_sort's gathered rows and the ragged_dot outputs are [tokens x top_k, *] (the tokens are replicated over the expert axes, so every
  device sorts all pairs): xs [tk, latent] (the down output takes its buffer), gate and up [tk, inter]
  in the activation dtype; the scatter-add combine [tokens, latent]; and the dequantized experts: form
  ``layer`` and ``ragged`` hold the device's local experts (w1, w3, w2) dequantized, ``tiled`` one
  tile of ``TILE_EXPERTS`` experts.
- MLA (the attention op, absorbed, prefill and decode alike): the scores (f32) over the cache's ``context``
  keys for each query and local head, which the fused softmax replaces by the probabilities (f32, one array
  live, not two), the causal mask (1 B a query a key) and the cache as the dots read it (bf16, the
  entry padded to 128 lanes: a copy whatever the cache's dtype).
- KDA: prefill's chunked scan op holds q/k/v/g and the decayed k/q copies [tokens, heads, d] (f32) and
  the per-chunk [64, 64] matrices (M, A, T and Aqk); decode's recurrence a new state beside the old.
- dense MLP (K3's layer 1), on its down projection: gate and up [tokens, intermediate / tp].
- lm_head: the last token's logits (f32) [sequences, vocab / tp].
Every other op (projections, norms, the shared experts, collectives) holds none: its buffers are not the
stage's peak.

Across ops (a step-level term, not one op's: ``resident_live``) stay the residual stream (two copies: x and
the branch output), where a compiler copies the donated cache one layer's cache slice, the scan's stacked bf16 weight matrices in the dots' tile layout and
one more MoE layer's experts dequantized ahead of use. ``stage_live`` builds the step's op list at one temp-model
point (a prefill chunk or a decode step, with the live buffers) and the resident terms; ``live_features`` reads
the features off that list. The stage's temp model is ``c_peak x max over the ops' live bytes + c_rest x the
other ops' sum + c_resident x residual + c_cache x cache slice + c_fixed``, one coefficient set a
stack, set on compiled points by k3plan.validate.temp_fit (benchmarks/bench_temp_grid.py; results and
limits in reports/validation/README.md; k3plan.validate.temp_fit also fits ``c_live x (largest op +
resident) + c_fixed``). In its shipped form (coefficients from the ``k3lanes`` grid's fit half and an error
band, k3plan/evidence/temp_model.yaml) it is tier (c) of the temp evidence (k3plan.budget.temp_model): where no
measured or compiled calibration matches, fit and plan count the band's upper end. Its held-out error on the
grid (12 points, deviceless tpu7x) is median 15.5%, worst 32.4%: the goal of 10% / 25% is not met.
"""

from __future__ import annotations

from typing import Any, ClassVar

from k3plan.columns import gcd, maximum, minimum
from k3plan.engines.registry import engine_rules
from k3plan.models.inventory import Tensor
from k3plan.models.spec import ModelSpec
from k3plan.step.memory import KDA_CHUNK_TOKENS, cdiv, heads_local
from k3plan.step.op import LiveBuffers, Op
from k3plan.step.ops import WeightGroup, decode_ops, prefill_ops
from k3plan.structs import Frozen

Col = Any
TILE_EXPERTS = 4  # experts dequantized at once by the ``tiled`` form (K3 TP=32: 28 local = 7 tiles)


def form_for(stack: str) -> str:
    """The expert formulation a stack's engine runs (``Engine.expert_form``, k3plan.validate.experts compiles
    it): ``layer`` unless its engine's folder says otherwise."""
    return engine_rules(stack).expert_form


F32 = 4
BF16 = 2
TPU_LANES = 128  # the minor dim of a TPU memory tile (the dumps' T(8,128) / T(16,128) layouts)
RESIDUAL = "residual stream (2 copies)"
CACHE_SLICE = "one layer's cache slice (copied where not updated in place)"
RELAYOUT = "the scan's stacked bf16 weight matrices, copied into the dots' (16,128) tile layout"
AHEAD = "one more MoE layer's experts, dequantized ahead of use"


class LiveAt(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    """What the op builders (k3plan.step.ops ``decode_ops`` / ``prefill_ops``, ``live=``) need beyond the
    step's own columns to answer each op's live buffers: the expert formulation (``form_for``), the
    activation bytes and EP. Its methods are the rules below, one an op kind."""

    __coerce__ = False

    form: str
    act: Col
    ep: Col
    WEIGHT_ROLES: ClassVar[frozenset[str]] = frozenset({"expert", "dense_mlp", "lm_head"})  # ``weight`` may answer

    def weight(self, spec: ModelSpec, t: Tensor, *, rows, sequences, tp) -> LiveBuffers | None:
        """A weight op's buffers (``rows`` rows, ``sequences`` of them sampled): a block's peak is at its down
        projection (the weight that contracts the block's intermediate width, its last axis ``mlp``), where
        the routed experts' down ragged_dot holds xs / its output, gate and up (``moe_live``) and the dense
        MLP's down projection gate and up; the LM head its logits; None for every other weight."""
        if t.role == "lm_head":
            return lm_head_live(spec, seqs=sequences, tp=tp)
        if not t.axes or t.axes[-1] != "mlp":
            return None
        if t.role == "expert":
            return moe_live(spec, tokens=rows, ep=self.ep, act=self.act, form=self.form)
        if t.role == "dense_mlp" and spec.dense_intermediate:
            return dense_mlp_live(spec, rows=rows, tp=tp, act=self.act)
        return None

    def mla(self, spec: ModelSpec, *, seqs, queries, context, tp) -> LiveBuffers:
        return mla_live(spec, seqs=seqs, queries=queries, context=context, tp=tp, act=self.act)

    def kda(self, spec: ModelSpec, *, seqs, queries, tp, decode: bool) -> LiveBuffers:
        return kda_live(spec, seqs=seqs, queries=queries, tp=tp, decode=decode)


def moe_live(spec: ModelSpec, *, tokens, ep, act, form: str) -> LiveBuffers:
    moe = spec.moe
    tk = tokens * moe.top_k
    held = experts_held(spec, ep=ep, form=form)
    return LiveBuffers(
        name="moe.experts",
        buffers={
            "router logits and top-k (f32)": tokens * (moe.num_experts * F32 + moe.top_k * 8),
            # xs and the down projection's output share one buffer (xs is dead once gate and up are computed;
            # tpu7x dump, jax-native TP16 prefill 2048: ragged-dot-none.5 f32[16384, 512] at gather_fusion's
            # offset), and h = silu(gate) x up is formed inside the down ragged_dot's operand fusion: one
            # [tk, latent] and two [tk, inter] arrays live at once
            "ragged_dot rows: xs, then the output in its place [tokens x top_k, latent]": tk * moe.expert_in * act,
            "ragged_dot rows: gate, up [tokens x top_k, inter]": 2 * tk * moe.expert_intermediate * act,
            "combine [tokens, latent]": tokens * moe.expert_in * act,
            f"dequantized experts ({form})": held * 3 * moe.expert_in * moe.expert_intermediate * act,
            # the tiled form over more than one tile is a scan whose carry accumulates the tiles' outputs, and
            # h = silu(gate) x up, the down ragged_dot's lhs, is its own array inside the loop: one more [tk,
            # latent] and one more [tk, inter] (tpu7x dump of the k3lanes grid's vllm-tpu TP16 prefill 8,192, 8
            # local experts = 2 tiles: at the peak xs gather_offload_custom_fusion.27 and the scan's carry
            # wide.param.8{1} bf16[131072,3584], 896 MiB each, beside gate / up ragged-dot-none.3 / .4 and h
            # fusion.723 bf16[131072,3072], 768 MiB each; at TP32 its 4 local experts are one tile, no loop)
            "tiled scan: the tiles' accumulator [tk, latent] and h [tk, inter]": (
                (form == "tiled") * (tiles(spec, ep=ep) > 1) * tk * (moe.expert_in + moe.expert_intermediate) * act
            ),
        },
    )


def tiles(spec: ModelSpec, *, ep) -> Col:
    """Scan steps of the ``tiled`` form: the device's local experts over tiles of gcd(local, TILE_EXPERTS)."""
    local = cdiv(spec.moe.num_experts, ep)
    return local // gcd(local, TILE_EXPERTS)


def experts_held(spec: ModelSpec, *, ep, form: str) -> Col:
    """Experts a weight (w1, w3 or w2) that one MoE layer holds dequantized at once: ``layer`` / ``ragged``
    the device's local experts; ``tiled`` one tile of gcd(local, TILE_EXPERTS) (what
    k3plan.validate.experts._tiled dequantizes a scan step) plus the zero expert its rhs() puts in front
    (tpu7x dumps of the k3lanes grid, vllm-tpu TP32: concatenate.111 bf16[5,3072,3584] for a 4-expert
    tile in prefill, concatenate.75-98 the same in decode)."""
    local = cdiv(spec.moe.num_experts, ep)
    if form == "tiled":
        return gcd(local, TILE_EXPERTS) + 1
    return local


def mla_live(spec: ModelSpec, *, seqs, queries, context, tp, act) -> LiveBuffers:
    mla = spec.mla
    hl = heads_local(mla.heads, tp)
    entry = mla.kv_lora_rank + mla.qk_rope_head_dim
    sqc = seqs * queries * context
    lanes = cdiv(entry, TPU_LANES) * TPU_LANES
    copied = (hl * queries > 1) * 1
    return LiveBuffers(
        name="mla.attention",
        buffers={
            # one f32 [heads, queries, context] array: the TPU compiler fuses mask + max + exp into one
            # fusion whose f32 output (the probabilities) is written as the scores die (deviceless tpu7x
            # dump of the grid's vllm-tpu TP16 prefill 2048: scores f32[4096, 2048, 2] live 1143-1148,
            # probabilities f32[1, 2, 2048, 4096] from 1148; no bf16 copy), so scores and probabilities
            # are never live together
            "scores, then probabilities in their place (f32) [seqs, heads, queries, context]": sqc * hl * F32,
            "causal mask (1 B) [seqs, queries, context]": sqc,
            # the cache as the attention's dots read it: bf16 (the TPU runs default-precision dots on bf16
            # operands, so an f32 cache is converted too) with the entry minor, padded to whole 128-lane
            # tiles (tpu7x dumps: bf16[128, 4096, 160]{2,1,0:T(16,128)} = 256 MiB for jax-native's f32 KV
            # at batch 128, context 4,096, TP16; bf16[32, 2048, 160] = 32 MiB for vllm-tpu's bf16 KV at
            # batch 32, context 2,048), whatever the cache's own dtype; only where a sequence's dot has more
            # than one row (local heads x queries): one decode query of one local head is a matrix-vector
            # product the compiler runs on the cache as stored (vllm-tpu TP32 decode batch 64: no such copy)
            "cache in the dots' layout (bf16, entry padded to 128 lanes)": seqs * context * lanes * BF16 * copied,
        },
    )


def kda_live(spec: ModelSpec, *, seqs, queries, tp, decode: bool) -> LiveBuffers:
    kda = spec.kda
    assert kda is not None
    hl, d = heads_local(kda.heads, tp), kda.head_dim
    if decode:
        return LiveBuffers(
            name="kda.recurrence",
            buffers={"new state beside the old (f32)": seqs * hl * d * d * F32},
        )
    n = seqs * cdiv(queries, KDA_CHUNK_TOKENS) * KDA_CHUNK_TOKENS
    return LiveBuffers(
        name="kda.chunked_scan",
        buffers={
            "q, k, v, g and decayed k/q copies (f32) [tokens, heads, d]": 7 * n * hl * d * F32,
            "per-chunk M, A, T, Aqk (f32) [tokens, heads, 64]": 4 * n * hl * KDA_CHUNK_TOKENS * F32,
        },
    )


def dense_mlp_live(spec: ModelSpec, *, rows, tp, act) -> LiveBuffers:
    inter = cdiv(spec.dense_intermediate, tp)
    return LiveBuffers(name="dense.mlp", buffers={"gate and up [tokens, inter / tp]": 2 * rows * inter * act})


def lm_head_live(spec: ModelSpec, *, seqs, tp) -> LiveBuffers:
    return LiveBuffers(
        name="lm_head", buffers={"logits (f32) [seqs, vocab / tp]": seqs * cdiv(spec.vocab_size, tp) * F32}
    )


def stage_live(
    spec: ModelSpec,
    *,
    stage: str,
    form: str,
    act,
    weights: list[WeightGroup],
    tp,
    ep,
    dp,
    batch,
    tokens,
    context,
    kv_bytes_per_token_layer=0,
    state_bytes_per_layer=0,
    scan_bf16_weight_bytes=0,
) -> tuple[list[Op], dict[str, Col]]:
    """(ops, resident) for one prefill chunk (``tokens`` of one sequence: ``batch`` 1) or one decode step
    (``batch`` sequences, ``tokens`` = 1) over a cache of ``context`` tokens, a DP group's share: the step's op
    list (k3plan.step.ops ``prefill_ops`` / ``decode_ops`` over ``weights``, the groups with their shares a
    device) with each op's live buffers, and the step-level ``resident_live``. The ops' bytes read the KV and
    the KDA state of ``kv_bytes_per_token_layer`` / ``state_bytes_per_layer`` a layer."""
    from k3plan.step.work import experts_touched

    moe = spec.moe
    at = LiveAt(form=form, act=act, ep=ep)
    cache = dict(
        kv_bytes_per_token=spec.n_mla * kv_bytes_per_token_layer,
        state_bytes_per_sequence=spec.n_kda * state_bytes_per_layer,
    )
    if stage == "prefill":
        if batch != 1:
            raise ValueError(f"a prefill chunk is one sequence's (batch 1), not {batch}")
        seqs, rows = 1, tokens
        touched = experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=tokens)
        ops = prefill_ops(
            spec,
            weights=weights,
            **cache,
            tp=tp,
            chunk=tokens,
            ep_tokens=tokens,
            touched=touched,
            context=context,
            live=at,
        )
    else:
        seqs = rows = cdiv(batch, dp)
        ep_tokens = minimum(batch, seqs * maximum(1, ep // tp))  # as step.decode.decode_terms
        touched = experts_touched(num_experts=moe.num_experts, top_k=moe.top_k, batch=ep_tokens)
        ops = decode_ops(
            spec,
            weights=weights,
            **cache,
            tp=tp,
            seqs=seqs,
            ep_tokens=ep_tokens,
            touched=touched,
            context=context,
            live=at,
        )
    held = {op.live.name for op in ops if op.live is not None}
    blocks = _blocks(spec, stage)
    if held != blocks:  # an inventory in which no op is a block's down projection (a fused expert weight): say so
        raise ValueError(f"{spec.family}: no op of the {stage} step holds {', '.join(sorted(blocks - held))}")
    resident = resident_live(
        spec, form=form, act=act, ep=ep, seqs=seqs, rows=rows, context=context,
        kv_bytes_per_token_layer=kv_bytes_per_token_layer, state_bytes_per_layer=state_bytes_per_layer,
        scan_bf16_weight_bytes=scan_bf16_weight_bytes,
    )  # fmt: skip
    return ops, resident


def _blocks(spec: ModelSpec, stage: str) -> set[str]:
    """The live buffers a ``stage`` step of ``spec`` answers (each on one op)."""
    out = {"lm_head"}
    if spec.n_moe:
        out.add("moe.experts")
    if spec.n_mla:
        out.add("mla.attention")
    if spec.kda is not None and spec.n_kda:
        out.add("kda.chunked_scan" if stage == "prefill" else "kda.recurrence")
    if spec.num_layers - spec.n_moe > 0 and spec.dense_intermediate:
        out.add("dense.mlp")
    return out


def resident_live(
    spec: ModelSpec,
    *,
    form: str,
    act,
    ep,
    seqs,
    rows,
    context,
    kv_bytes_per_token_layer=0,
    state_bytes_per_layer=0,
    scan_bf16_weight_bytes=0,
) -> dict[str, Col]:
    """What stays live across the step's ops (no one op's), by name, for ``seqs`` sequences of ``rows`` rows
    in all: the residual stream, and one layer's cache slice (the larger of an MLA layer's KV and a KDA
    layer's state, a device): the copy a compiler makes where it does not update the donated cache in place
    (the CPU backend does; the TPU compiler did not at full size, reports/validation); and
    ``scan_bf16_weight_bytes``, the bf16 weight matrices (not experts) of the layers the graph scans over,
    a device: a bf16 argument is laid out in (8,128)(2,1) tiles and the dots read (16,128)(2,1), so the
    compiler copies each stacked matrix whole, once, ahead of the loop (deviceless tpu7x dumps of the
    k3lanes grid, vllm-tpu TP32 prefill 2,048 and decode b16 c4096: copy.972 / copy.974
    bf16[2,3584,7168]{2,1,0:T(16,128)(2,1)} of the latent projections, 98 MiB each, and the q/k/v/g/o,
    router, f_a and shared-expert matrices, 271 MiB in all, live at both peaks; an f32 argument's
    (8,128) tile is the dots' own, so fp32 weights are not copied)."""
    ahead = 0
    if spec.n_moe > 1:
        ahead = 3 * experts_held(spec, ep=ep, form=form) * spec.moe.expert_in * spec.moe.expert_intermediate * act
    return {
        RESIDUAL: 2 * rows * spec.hidden_size * act,
        CACHE_SLICE: seqs * maximum(context * kv_bytes_per_token_layer, state_bytes_per_layer),
        RELAYOUT: scan_bf16_weight_bytes,
        # the dequantization depends on the weights only, so the scheduler may run another layer's ahead of its
        # use; tpu7x dumps of the k3lanes grid: jax-native TP32 prefill 2,048 holds two of the unrolled last
        # layer's f32 weights (fusion.275 / fusion.277 f32[4,3584,3072], outside the loop) at the scan's peak,
        # vllm-tpu TP32 decode b16 both scan steps' tiles (concatenate.75-78 and .96-98, 6 x 105 MiB)
        AHEAD: ahead,
    }


def live_features(ops: list[Op], resident: dict[str, Col]) -> dict[str, Col]:
    """The temp model's features (k3plan.validate.temp_fit.FEATURES without the constant) off the step's op
    list: ``peak`` the largest op's live bytes, ``rest`` the other ops' sum, ``resident`` what stays live
    across ops (residual stream, the scan's bf16 weight relayout, experts dequantized ahead of use) and
    ``cache`` one layer's cache slice. The ``total`` form's live bytes are peak + resident."""
    peak, rest = peak_and_rest(ops)
    return {
        "peak": peak,
        "rest": rest,
        "resident": resident[RESIDUAL] + resident[RELAYOUT] + resident[AHEAD],
        "cache": resident[CACHE_SLICE],
    }


def peak_and_rest(ops: list[Op]) -> tuple[Col, Col]:
    """(max over ops, sum of the others) of the ops' live bytes (ops holding none add nothing)."""
    peak = 0
    total = 0
    for op in ops:
        if op.live is not None:
            b = op.live.bytes
            peak = maximum(peak, b)
            total = total + b
    return peak, total - peak


def peak_op(ops: list[Op]) -> LiveBuffers:
    """The live buffers of the op at the peak (the first, where two tie)."""
    return max((op.live for op in ops if op.live is not None), key=lambda lb: lb.bytes)
