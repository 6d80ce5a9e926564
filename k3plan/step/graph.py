"""What k3plan validate's own step graph (validate/steps.py, validate/experts.py) moves beyond the op list's
ops: priced only where a caller says the step timed IS that graph (``probe step``, ``validate --target
local``), never for an engine's step (roofline, plan, fit and report never pass a ``ValidateGraph``, so
their figures, on every device kind, are unchanged by this module).

Three mechanisms, each seen in the profile of the K3-width step on a TPU v5e (k3plan/evidence/
probes/step-decode-tpu-v5-lite-20261204T060103Z-bd6aea.json and step-prefill-...-060121Z-cab1b1.json,
``device_profile``; the HLO names looked up in the same program compiled deviceless for v5e with the same
libtpu, whose memory_analysis matched the chip's to the byte) and in the code that makes it:

- ``relayout``: a routed expert's weight is held in the checkpoint's [E, out, in] layout and swapped to
  [E, in, out] for ``jax.lax.ragged_dot`` (validate/experts.py ``_rhs``); with the weight in a plain float
  format (no dequantization to fuse it into) the compiler materializes the swapped copy every call, a read
  and a write of the weight (the profile's ``copy.106``-``108``: bf16[32,3072,3584], 2.19 ms each on the
  v5e, = 2 x 704 MB at 643 GB/s). Not on the ops of an MXFP4 expert: its dequantization writes the
  operand anyway (that cost is the dequantization's, which no op of this module prices).
- ``scan slice``: a MoE layer inside the scan over the repeating block (validate/steps.py ``_run_layers``:
  ``dynamic_index_in_dim`` of the stacked weights) has its expert weights sliced out of the stack as a
  copy: the grouped matmul is a custom call (``tpu_custom_call``) that cannot fuse the slice as the dense
  dots do (the profile's ``constant_dynamic-slice_fusion.30``-``32``, 2.1 ms each, before their relayout
  copies ``copy.221``-``223``).
- ``prefill scores``: the prefill's MLA attention attends over the cache's whole capacity (the abstract
  model's ``capacity_tokens``: 5,120 slots for a 1,024-token chunk), masked, and materializes its f32
  scores [heads, tokens, capacity]: the profile's ``fusion.258`` writes them, ``fusion.421`` reads and
  rewrites them (softmax), ``fusion.246`` and ``fusion.248`` read them: ``SCORE_PASSES`` = 5 passes of
  the f32 array (15.4 ms on the v5e for 2.0 GB).
- ``decode scores``: decode's absorbed attention also materializes its f32 scores [batch, heads, capacity]
  and does not fuse the two dots' cache reads (reports/probes/grid-profile-20261204/tt-bf16-4l32e-decode-32x32768:
  ``fusion.317`` reads the cache and writes the scores, 2.67 ms; ``fusion.163`` reads them, 0.53 ms;
  ``fusion.179`` reads them and the cache again, 1.98 ms): ``DECODE_SCORE_PASSES`` = 3 passes of the scores and
  one more read of the cache (in the dots' dtype, ``kv_bytes``) than the op list's attention op. Small at
  16 x 8,192 (50 MB of scores: under the 25 largest ops of the first profile), 3.7 ms at 32 x 32,768. The
  compiler's rematerialized copies of the cache and the scores at that point (``copy.79.remat2``,
  ``fusion.168.remat2``: memory pressure) are not priced.

- ``expert operand``: the routed experts' ragged_dots take their weight in the activation dtype, written by XLA
  ops from the stored format every call, for every local expert (touched or not), and read back by the ragged_dot
  (its touched groups). From the grid's profiles (reports/probes/grid-profile-20261204/, N = one expert
  weight's elements a layer, a = the activation's bytes): a plain float weight in another dtype than the
  activations (jax-native: bf16 experts, f32 activations) is converted (``convert_bitcast_fusion``: 2N read, aN
  written); an MXFP4 weight is unpacked by ``quant.mxfp4_dequant`` as XLA lays it out: the packed bytes'
  relayout copy (N/2 -> N/2), their repeat (N/2 -> N), the codes fusion (N -> N), the scale's broadcast (to u8
  for E8M0 bytes, to the activation dtype for an f32 scale: sN written), the value fusion (N + sN -> aN); the
  ``tiled`` form also slices each tile's packed bytes (N/2 -> N/2) and pads a zero group ahead of it (aN ->
  aN (1 + 1/tile)). The ragged_dot then reads aN of the touched share, not the stored bytes the op list's
  grouped matmul reads: the difference is one more op.
- ``short conv``: validate's KDA short conv (validate/layers.py ``short_conv``) stacks the q, k and v projections,
  concatenates the conv state ahead of them and sums the kernel's shifted products, and XLA materializes it in two
  fusions over [3, tokens, width] in the activation dtype: ``maximum_maximum_fusion`` reads the projections and writes
  the concatenation, ``pad_maximum_fusion`` reads both and writes two [3, tokens, width] outputs (the 1,024-token
  prefill profiles: 0.23 + 0.65 ms a layer in bf16, 0.46 + 1.34 ms in f32, ~510 GB/s on the 6 passes):
  ``SHORT_CONV_PASSES`` = 6 passes a KDA layer, the op list's conv ops being its weights' reads only.
- ``KDA preparation`` (prefill): what XLA materializes between the short conv and the chunked scan that the op list's
  ``kda.chunked_scan`` (priced on ``probe kda --impl validate``, whose program takes q, k, v, g and beta as f32
  [batch, tokens, heads, head_dim] arrays: its HLO, compiled deviceless for the v5e by benchmarks/kda_probe_hlo.py,
  reports/probes/grid-profile-20261204/kda-probe-1024.hlo.txt.xz) does not run. Read off the 1,024-token prefill HLO
  (reports/probes/grid-profile-20261204/hlo.tar.xz: jn-bf16-2l16e f32, tt-bf16-2l16e and tt-mxfp4-2l16e bf16), per
  element of [tokens, width] a KDA layer, in bytes: q and k's l2norm as [tokens, heads, head_dim] f32 -- the conv
  output read (f32: once, 2 x 4, ``multiply_bitcast_fusion``; bf16: twice, 2 x 2 x 2, ``convert_bitcast_fusion`` and
  the squares' fusion), q, k, q^2 and k^2 written in f32 (16), each relaid out to the heads' tiling by a copy (4 x 8,
  ``copy`` of f32[128,8,96,128] {3,1,2,0} -> {3,2,1,0}, 152 us each), the two sums of squares read (2 x 4,
  ``reduce``): 64 in both dtypes, less the probe's own q x scale pass (8: its ``broadcast_multiply_fusion``, where
  validate divides inside the scan's first fusion); the gate g written in f32 in the chunk layout (4, the f_b
  projection's fusion; the probe reads its g); v read in the activation dtype, written in bf16 and relaid out (a + 2
  + 4) for the T @ v dot, which then reads 2 where the probe's reads its f32 v (4): a + 4. ``KDA_PREP_BYTES`` = 64 -
  8 + 4 + 4 = 64, plus a: 68 in f32, 66 in bf16 (the step's own ops for these arrays, the 78 and 76 bytes they move:
  1.48 ms in layer 0 in f32, 1.45 in bf16, ~660 GB/s). Layer 1 writes its g in the tokens' layout, relays it out and
  rewrites it in the chunk layout (3 more f32 passes, 0.39 ms against layer 0's 0.09): not priced (one layer of two,
  by the compiler's choice). Decode runs none of it (its q, k, v are [batch, heads, head_dim], in the alternate
  memory: the decode profiles' l2norm ops take a few us).
- ``alternate``: where the compiler placed the tiled form's intermediates. Its memory-space assignment puts the
  packed repeat, the scale broadcast and the zero-group pad of a 4-expert tile (44-110 MB) either in HBM or in the
  chip's alternate memory (``S(1)`` in the HLO layout: the v5e's 128 MiB VMEM), by its own cost model: every buffer at
  one row a group, none at 4-64 rows with 2 or 4 layers, 18 of 21 at 16 rows with 8 layers (the grid's profiles,
  reports/probes/grid-profile-20261204/: an MoE layer's tile scan 9.0-9.8 ms placed, 15.6-15.7 ms in HBM). The
  expected step takes the placement from the compiled program (``ValidateGraph.alternate``, probes/step/alternate.py:
  ``probe step`` reads it off the step it times; the committed grid records, reports/probes/grid-placement-20261204/)
  and drops the HBM bytes of a placed buffer's write and of its consumer's read; what the alternate memory's own
  traffic costs is not priced (no probe times it), so a placed step reads a little fast.
- ``zero-group rows``: the ``tiled`` form's ragged_dot for tile j takes the rows of tiles 0..j-1 as its leading
  zero group and multiplies them too (validate/experts.py ``_tiled``): over T tiles with the rows spread evenly,
  (T + 1) / 2 times the routed rows' FLOPs, (T - 1) / 2 of them extra, a grouped-matmul op of their own (the
  torchtpu-vllm MXFP4 prefill of 1,024 tokens: the four tiles' ragged_dots 17.6 ms, against 7.8 ms for the
  ``ragged`` form's three over the same rows, 2.3x where T = 4 gives 2.5x).

- ``MoE glue``: validate's experts (validate/experts.py ``local_experts``) gather each routed pair's row
  (xs [tokens x top_k, latent] written from the tokens' rows), multiply silu(gate) by up ([tokens x top_k, inter]:
  two read, one written), scale the down output by the routing weight ([tokens x top_k, latent] read and written)
  and scatter-add it back to [tokens, latent]: four passes over the routed rows in the activation dtype (the
  1,024-token prefill profile: ``gather_fusion`` 181 us, ``multiply_multiply_fusion`` 445 us,
  ``broadcast_multiply_fusion`` 352 us, ``scatter_custom_fusion.1`` 1,163 us). The scatter-add ran near 100 GB/s
  there; priced as its bytes on the copy records it is a lower bound (no record prices a scatter).

Each is an ``hbm`` op priced on the hbm probe's copy records (``OpCost.hbm_curve`` = hbm_copy: each moves
bytes it writes and reads back, as a copy does), the envelope of every hbm record where no copy was probed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3plan.models.spec import ModelSpec
    from k3plan.step.opcost import OpCost
    from k3plan.step.ops import WeightGroup

F32 = 4
SCORE_PASSES = 5  # fusion.258 writes, fusion.421 reads and writes, fusion.246 and fusion.248 read (v5e profile)
DECODE_SCORE_PASSES = 3  # fusion.317 writes, fusion.163 and fusion.179 read (grid profile, decode 32 x 32,768)
# maximum_maximum_fusion reads the projections, writes xx; pad_maximum_fusion reads both, writes two [3, T, W] (the
# 1,024-token prefill profiles, module doc ``short conv``)
SHORT_CONV_PASSES = 6
# q, k's l2norm (64) - the probe's q x scale (8) + g written (4) + v's bf16 relayout less the probe's f32 read (4):
# bytes an element of [tokens, width] a KDA layer, plus the activation's bytes (module doc ``KDA preparation``)
KDA_PREP_BYTES = 64
SOURCE = (
    "k3plan validate's step graph (step/graph.py; profile of k3plan/evidence/probes/step-*-tpu-v5-lite-20261204T0601*)"
)


@dataclass(frozen=True)
class ValidateGraph:
    """What the timed step's graph is, as far as its extra HBM traffic goes."""

    scanned_moe_layers: int  # MoE layers inside the scan over the repeating block (step.structure.LayerPlan)
    expert_relayout: bool  # experts in a plain float format: the swapped operand is a copy each call
    capacity_tokens: int  # cache slots a sequence's attention spans (validate.abstract_model.capacity_tokens)
    expert_format: str = "bf16"  # the routed experts' stored (runtime) format
    activation_bytes: int = 2  # the graph's activation dtype (Stack.activation_dtype): the ragged_dots' operand
    tiles: int = 0  # the ``tiled`` form's tiles a layer (validate/experts.py _tiled); 0: the ``ragged`` form
    tile: int = 1  # experts a tile
    kv_bytes: int = 0  # an MLA cache entry as the decode dots read it (bytes a token a layer); 0: not priced
    # the tiled form's intermediates the compiler placed in alternate memory (S(1)): (pass, share of its buffers),
    # read from the compiled step (probes/step/alternate.py); a pass there writes and is read back without HBM traffic
    alternate: tuple[tuple[str, float], ...] = ()


PLAIN = ("bf16", "fp16", "f16", "f32", "fp32")
BYTES = {"bf16": 2, "fp16": 2, "f16": 2, "f32": 4, "fp32": 4}


def validate_graph(
    spec: ModelSpec,
    *,
    expert_format: str,
    capacity_tokens: int,
    activation: str = "bf16",
    form: str = "ragged",
    ep: int = 1,
    kv_bytes: int = 0,
    alternate: tuple[tuple[str, float], ...] = (),
) -> ValidateGraph:
    """The graph of validate's step for ``spec`` (its layer plan as validate/steps.py folds it); ``activation``:
    the stack's activation dtype; ``form``: its experts' form (validate/experts.py: ragged or tiled)."""
    from math import gcd

    from k3plan.step.live import TILE_EXPERTS
    from k3plan.step.structure import layer_plan

    lplan = layer_plan(mixers=spec.mixers, mlps=spec.mlps)
    scanned = lplan.n_blocks * sum(1 for _, mlp in lplan.block if mlp == "moe")
    local = -(-spec.moe.num_experts // ep) if spec.moe is not None else 0
    tile = gcd(local, TILE_EXPERTS) if form == "tiled" and local else 1
    return ValidateGraph(
        scanned_moe_layers=scanned,
        expert_relayout=expert_format in PLAIN,
        capacity_tokens=capacity_tokens,
        expert_format=expert_format,
        activation_bytes=BYTES.get(activation, 2),
        tiles=local // tile if form == "tiled" and local else 0,
        tile=tile,
        kv_bytes=kv_bytes,
        alternate=tuple(sorted(alternate)),
    )


def operand_passes(graph: ValidateGraph) -> list[tuple[str, float, int]]:
    """(pass, bytes an element of the expert weight it reads and writes, calls a layer) of the XLA ops that write the
    ragged_dots' operand from the stored weight (module doc, ``expert operand``); [] where none runs."""
    a, fmt = graph.activation_bytes, graph.expert_format
    if fmt in PLAIN:
        s = BYTES[fmt]
        return [] if s == a else [("convert", s + a, 1)]
    if not fmt.startswith("mxfp4"):
        return []  # fp8 and others: no profile of theirs on the grid
    sb = 1 if fmt == "mxfp4" else a  # E8M0 bytes broadcast as bytes; an f32 scale in the activation dtype
    calls = max(graph.tiles, 1)
    out = [
        ("packed_relayout", 1.0, calls),
        ("packed_repeat", 1.5, calls),
        ("codes", 2.0, calls),
        ("scale_broadcast", float(sb), calls),
        ("value", 1.0 + sb + a, calls),
    ]
    if graph.tiles:
        out = [("tile_slice", 1.0, calls), *out, ("zero_group_pad", a * (2 + 1 / graph.tile), calls)]
        alt = dict(graph.alternate)
        if alt:  # a buffer in S(1): its producer's write and its consumer's read leave HBM (module doc, ``alternate``)
            rep, sc = alt.get("packed_repeat", 0.0), alt.get("scale_broadcast", 0.0)
            pad = alt.get("zero_group_pad", 0.0) * a * (1 + 1 / graph.tile)
            less = {
                "packed_repeat": rep,
                "codes": rep,
                "scale_broadcast": sb * sc,
                "value": sb * sc,
                "zero_group_pad": pad,
            }
            out = [(name, per - less.get(name, 0.0), c) for name, per, c in out]
    return out


def operand_read_share(graph: ValidateGraph) -> float:
    """The share of the ragged_dots' operand read from HBM: all of it but the zero-group pads in alternate memory."""
    return 1.0 - dict(graph.alternate).get("zero_group_pad", 0.0) if graph.tiles else 1.0


def graph_ops(
    spec: ModelSpec,
    *,
    weights: list[WeightGroup],
    graph: ValidateGraph,
    stage: str,
    rows: int,
    tp: int,
    touched_share: float = 1.0,
) -> list[OpCost]:
    """The HBM ops the graph adds to one step of ``stage`` over ``rows`` tokens (prefill: the chunk's), a device;
    ``touched_share``: of the local experts, the share the step's rows touch (the ragged_dots read theirs)."""
    from k3plan.step.opcost import OpCost

    out: list[OpCost] = []
    hbm: dict = {"kind": "hbm", "hbm_curve": "hbm_copy"}  # a dict: OpCost's optional fields stay unnamed
    passes = operand_passes(graph)
    for g in weights:
        if g.rep.role != "expert":
            continue
        n = float(g.params)  # one expert weight's elements a layer, a device
        for name, per, calls in passes:
            if per <= 0:  # wholly in alternate memory
                continue
            out.append(
                OpCost(
                    name=f"{g.name}.{name}",
                    category="experts",
                    count=g.count * calls,
                    bytes=round(per * n / calls),
                    **hbm,
                )
            )
        if graph.tiles > 1 and spec.moe is not None:
            experts = spec.moe.num_experts  # a device's local experts (ep = 1 on the grid; g.params spans them)
            touched = max(1.0, touched_share * experts)
            useful = 2.0 * rows * spec.moe.top_k * n / experts  # the routed rows' FLOPs, one weight
            out.append(
                OpCost(
                    name=f"{g.name}.zero_group_rows",
                    kind="grouped_matmul",
                    category="experts",
                    count=g.count,
                    flops=useful * (graph.tiles - 1) / 2,
                    tokens_per_group=rows * spec.moe.top_k / touched,
                )
            )
        extra = (graph.activation_bytes * n - float(g.bytes)) * touched_share * operand_read_share(graph)
        if passes and extra > 0:  # the ragged_dot reads the operand in the activation dtype, not the stored bytes
            out.append(
                OpCost(name=f"{g.name}.operand_read", category="experts", count=g.count, bytes=round(extra), kind="hbm")
            )
        nbytes = round(2 * float(g.bytes))  # read the weight, write its copy
        if graph.expert_relayout and g.count:
            out.append(OpCost(name=f"{g.name}.relayout", category="experts", count=g.count, bytes=nbytes, **hbm))
        if graph.scanned_moe_layers:
            out.append(
                OpCost(
                    name=f"{g.name}.scan_slice",
                    category="experts",
                    count=min(graph.scanned_moe_layers, g.count),
                    bytes=nbytes,
                    **hbm,
                )
            )
    moe_layers = max((g.count for g in weights if g.rep.role == "expert"), default=0)
    if moe_layers and spec.moe is not None:
        a, tk = graph.activation_bytes, rows * spec.moe.top_k
        latent, inter = spec.moe.expert_in, spec.moe.expert_intermediate
        for name, nbytes in (
            ("moe.gather_rows", (rows + tk) * latent * a),
            ("moe.silu_mul", 3 * tk * inter * a),
            ("moe.route_weight", 2 * tk * latent * a),
            ("moe.combine_scatter", (tk + rows) * latent * a),
        ):
            out.append(OpCost(name=name, category="experts", count=moe_layers, bytes=int(nbytes), **hbm))
    if spec.n_kda and spec.kda is not None:
        from k3plan.step.op import heads_split

        width = spec.kda.width // heads_split(spec.kda.heads, tp)  # the q, k, v projections' width a device
        out.append(  # the stack, the concatenation with the conv state and the conv's two outputs (module doc)
            OpCost(
                name="kda.short_conv",
                category="kda",
                count=spec.n_kda,
                bytes=SHORT_CONV_PASSES * 3 * rows * width * graph.activation_bytes,
                **hbm,
            )
        )
    if stage == "prefill" and spec.n_kda and spec.kda is not None:
        from k3plan.step.op import heads_split

        width = spec.kda.width // heads_split(spec.kda.heads, tp)
        out.append(  # q, k's l2norm, the gate and v as the chunked scan takes them (module doc ``KDA preparation``)
            OpCost(
                name="kda.preparation",
                category="kda",
                count=spec.n_kda,
                bytes=(KDA_PREP_BYTES + graph.activation_bytes) * rows * width,
                **hbm,
            )
        )
    if stage == "decode" and spec.n_mla and graph.kv_bytes:
        from k3plan.step.op import heads_split

        heads = spec.mla.heads // heads_split(spec.mla.heads, tp)
        scores = rows * heads * graph.capacity_tokens * F32
        out.append(  # written once, read twice
            OpCost(
                name="mla.decode_scores",
                category="attention",
                count=spec.n_mla,
                bytes=DECODE_SCORE_PASSES * scores,
                **hbm,
            )
        )
        out.append(
            OpCost(
                name="mla.decode_cache_reread",
                category="attention",
                count=spec.n_mla,
                bytes=rows * graph.capacity_tokens * graph.kv_bytes,
                kind="hbm",
            )
        )
    if stage == "prefill" and spec.n_mla:
        from k3plan.step.op import heads_split

        heads = spec.mla.heads // heads_split(spec.mla.heads, tp)
        scores = heads * rows * graph.capacity_tokens * F32
        out.append(
            OpCost(  # written and read back: the passes are a copy's traffic (hbm_copy)
                name="mla.prefill_scores",
                category="attention",
                count=spec.n_mla,
                bytes=SCORE_PASSES * scores,
                **hbm,
            )
        )
    return out


def validate_graph_note() -> str:
    return (
        f"expected includes the extra HBM ops of {SOURCE}: expert relayout and scan-slice copies, the experts' "
        "operand written in the activation dtype (MXFP4 unpack, scale broadcast, conversion), the MoE glue's passes, the KDA "
        "short conv's passes, its prefill's preparation passes (q, k's l2norm, g, v), MLA scores (prefill, decode)"
    )
