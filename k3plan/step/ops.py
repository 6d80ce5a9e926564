"""A step as a list of operations, derived from the tensor inventory, over ``int | numpy array`` columns.

Weight ops come from the inventory, not from a hand list per family: the text tensors are grouped
by (role, layer kind, name within the layer, format, shape, axes), so every group shards alike and
is one op executed ``count`` times a step (once a tensor: q_b_proj x 24 MLA layers, the routed
experts' w1 x 92 MoE layers). Each op answers, a device and an execution: bytes read and written,
FLOPs, collective calls and the bytes a chip puts on the link. The step's terms are sums over the
list (``by_category``): decode bytes and FLOPs (step/decode.py) and the collectives' calls and bytes
(step/comm.py). Decode, for a DP group's ``b`` sequences at ``context`` tokens:

- matmul / norm (every non-expert, non-embedding weight; the embedding is a row gather): reads its
  per-device weight bytes, 2 x params a device x b FLOPs (norm weights count as params, as the
  linear term always has: 2 x active params a token, docs/k3-facts.md §5);
- grouped_matmul (routed experts): reads the expected touched share of its bytes, E(1-(1-k/E)^T) / E
  for the T tokens its EP group routes; 2 x (k/E) x T x params a device FLOPs;
- attention (absorbed MLA, a layer): reads b x context x KV bytes a token a layer;
  2 x 2 x heads x kv_lora x context FLOPs a sequence, split over TP when TP divides the heads;
- kda_decode (the KDA recurrence, a layer): reads and writes b x state bytes a layer (a speculative verify
  step: the slots the stack's ``state.verify`` rule moves a sequence, ``Stack.verify_state_slots``);
  3 x 2 x heads x d^2 FLOPs a token;
- collective: see step/comm.py (attention all-reduce over TP, expert all-to-all or all-reduce; the
  embedding, dense-MLP and logits collectives: ``tp_edge_ops``); under ``--pp`` the stage-to-stage
  send (step/p2p.py ``send_op``), on its own link.
Each op also answers the buffers live at its peak in the graph the stack compiles (``live``, named; ``live_bytes``
their sum), where the builder is given the stack's formulation (``live=LiveAt(...)``, k3plan.step.live): the
routed experts' down projection holds the MoE block's buffers, the dense MLP's down projection its gate and
up, the LM head the logits, attention and the KDA ops their own; every other op (projections, norms,
collectives) none. The time paths (fit's and plan's speed) build the list without them (``live`` None: no
cost over plan's rows); the temp model builds it at its own points with them (``k3plan.step.live.stage_live``)
and reads the peak and the rest over the list (``live_features``). ``to_op_costs`` maps the list onto
speed.ops.OpCost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from k3plan.models.inventory import Tensor, TensorInventory
from k3plan.models.spec import ModelSpec
from k3plan.step.collective import Collective
from k3plan.step.names import ABSORBED_LEAF, leaf_name, row_gather
from k3plan.step.op import Col, LiveBuffers, LiveRules, Op, heads_split
from k3plan.structs import Frozen, replace

if TYPE_CHECKING:
    from k3plan.step.compute import OpDtype

MATMUL_ROLES = ("attn", "router", "latent_proj", "shared_expert", "dense_mlp", "lm_head")
# decode's absorbed MLA: kv_b_proj's params run as the W_UK (query into the latent) and W_UV (latent out to the
# values) batched matmuls the engine splits from it at load -- the same params and FLOPs a token, in the dtype
# the stack declares for the role (sharding.stack.COMPUTE_ROLES; vllm.yaml / sglang.yaml compute_dtype.roles)
MLA_ABSORBED = "mla_absorbed"


class WeightGroup(Frozen):  # a Struct: ~1/6 of a frozen dataclass's class-creation cost (issue 33)
    """Tensors that shard alike: one op. ``bytes``/``params``: ONE tensor's share a device; ``shape``: its
    checkpoint shape on the fullest device (``ShardingPlan.per_device_shape``: the dims its ShardSpec splits
    divided), None over plan's columns (``step.weights.mesh_weight_groups``), which carry shares only."""

    __coerce__ = False

    name: str
    rep: Tensor
    count: int
    bytes: Col
    params: Col
    shape: tuple[int, ...] | None = None
    # ONE tensor's absorbed-MLA copies a device, which decode reads instead of ``bytes`` (kv_b_proj where the
    # engine holds W_UK / W_UV apart from it: budget.weights.absorbed_copy_bytes); None: decode reads ``bytes``
    decode_bytes: Col | None = None
    # the DP groups whose rows the op runs, for each row of the step's own: dp for an LM head split over the whole TP
    # group under DP attention (Stack.lm_head_whole_tp: the engine gathers every DP group's rows before the head and
    # each device multiplies them by its vocabulary shard); 1: the step's own rows
    gathered: Col = 1


def tensor_groups(inventory: TensorInventory) -> list[tuple[str, Tensor, int]]:
    """(name, representative, count) for every group of text tensors that is one op; worked out once
    an inventory (a plan's advice bounds the same model's step at several batches and splits)."""
    held = _GROUPS.get(id(inventory))
    if held is not None and held[0] is inventory:
        return held[1]
    out = _tensor_groups(inventory)
    _GROUPS[id(inventory)] = (inventory, out)  # the inventory held too, so its id cannot be reused
    return out


_GROUPS: dict[int, tuple[TensorInventory, list[tuple[str, Tensor, int]]]] = {}


def _tensor_groups(inventory: TensorInventory) -> list[tuple[str, Tensor, int]]:
    groups: dict[tuple, list[Tensor]] = {}
    for t in inventory.text:
        key = (t.role, t.kind, leaf_name(t), t.fmt, t.shape, t.logical_shape, t.axes)
        groups.setdefault(key, []).append(t)
    return [(f"{ts[0].kind}.{leaf_name(ts[0])}", ts[0], len(ts)) for ts in groups.values()]


def weight_groups(inventory: TensorInventory, stack, shares_of=None, shape_of=None, head_rows=1) -> list[WeightGroup]:
    """The groups with ONE tensor's bytes and params on the fullest device: its runtime bytes x
    num / den, ``shares_of(t)`` = (num, den) (1 / shards unless a split is uneven; ints at one
    Setup, arrays over plan's meshes: step.weights.mesh_weight_groups); None: unsharded (one device
    holding the model). ``shape_of(t)``: its shape on that device (a Setup's ``ShardingPlan.per_device_shape``;
    unsharded: the checkpoint's; else None). ``head_rows``: the LM head's ``WeightGroup.gathered`` (the DP size
    where the stack splits it over the whole TP group, ``Stack.lm_head_whole_tp``; else 1)."""
    from k3plan.step.weight_budget import absorbed_copy_bytes, absorbed_replaces, read_bytes

    out = []
    for name, t, n in tensor_groups(inventory):
        nbytes = read_bytes(t, stack)  # what the op streams (a load's unread leftover is held, not read)
        copy = absorbed_copy_bytes(t, stack) or None
        if copy is not None and absorbed_replaces(t, stack):
            nbytes = copy  # kv_b_proj deleted: every pass reads the copies
        if shares_of is None:
            out.append(
                WeightGroup(name=name, rep=t, count=n, bytes=nbytes, params=t.params, shape=t.shape, decode_bytes=copy)
            )
        else:
            num, den = shares_of(t)
            shape = None if shape_of is None else tuple(shape_of(t))
            out.append(
                WeightGroup(
                    name=name,
                    rep=t,
                    count=n,
                    bytes=nbytes * num / den,
                    params=t.params * num / den,
                    shape=shape,
                    decode_bytes=None if copy is None else copy * num / den,
                    gathered=head_rows if t.role == "lm_head" else 1,
                )
            )
    return out


def weight_groups_of_setup(setup) -> list[WeightGroup]:
    """The groups with one Setup's per-device shares (its resolved ShardingPlan), once a Setup
    (``Setup.weight_groups``)."""
    return setup.weight_groups


def weight_op_kind(t: Tensor) -> str:
    """matmul for 2-D projections; conv for the KDA short convolutions; norm / elementwise otherwise."""
    if t.role == "norm":
        return "norm"
    if "conv1d" in t.name:
        return "conv"
    return "matmul" if t.role in MATMUL_ROLES and len(t.shape) == 2 else "elementwise"


def whole_model_groups(inventory: TensorInventory, stack) -> list[WeightGroup]:
    """The groups unsharded (one device holding the model): the whole-model view of the step."""
    return weight_groups(inventory, stack)


def aggregate_groups(*, dense_bytes, expert_bytes, dense_params, expert_params) -> list[WeightGroup]:
    """Two pseudo-groups from whole-step sums, for callers that hold only the sums (plan's columns)."""
    dense = Tensor(name="dense", shape=(1,), logical_shape=(1,), axes=("x",), fmt="bf16", kind="global", role="attn")
    expert = replace(dense, name="experts", kind="moe", role="expert")
    return [
        WeightGroup(name="dense weights", rep=dense, count=1, bytes=dense_bytes, params=dense_params),
        WeightGroup(name="routed experts", rep=expert, count=1, bytes=expert_bytes, params=expert_params),
    ]


def decode_ops(
    spec: ModelSpec,
    *,
    weights: list[WeightGroup],
    kv_bytes_per_token,
    state_bytes_per_sequence,
    tp,
    seqs,
    ep_tokens,
    touched,
    context,
    live: LiveRules | None = None,
    state_slots=None,
    expert_rows=None,
    dsv4_sizes=None,
) -> list[Op]:
    """The compute ops of one decode step (collectives: ``collective_ops``); with ``live``, each op's
    buffers live at its peak (k3plan.step.live) for ``seqs`` sequences of one query over ``context``.
    ``state_slots``: (read, written) KDA state slots the step moves a KDA layer, a DP group's (a verify
    step's: ``Stack.verify_state_slots`` x its sequences, ``step.decode.decode_terms``); None: ``seqs`` each,
    a plain step updating each sequence's state in place. ``dsv4_sizes``: DeepSeek-V4's records as the stack's engine
    stores them (``step.dsv4_cache.stack_sizes``; ints, or columns over a plan's stacks); None: vLLM's."""
    ops = weight_ops(
        spec,
        weights=weights,
        rows=seqs,
        sequences=seqs,
        tp=tp,
        ep_tokens=ep_tokens,
        touched=touched,
        live=live,
        absorbed=True,
        expert_rows=expert_rows,
    )
    mla_split = heads_split(spec.mla.heads, tp)
    if spec.dsv4 is not None:  # DeepSeek-V4: indexer, sparse / compressed / window attention, mHC (step/dsv4_ops.py)
        from k3plan.step import dsv4_ops

        ops.extend(dsv4_ops.decode_ops(spec, seqs=seqs, context=context, tp=tp, live=live, sizes=dsv4_sizes))
    elif spec.n_mla:
        ops.append(
            Op(
                name="mla.absorbed_attention",
                kind="attention",
                layer_kind="mla",
                category="kv",
                count=spec.n_mla,
                bytes_read=seqs * context * (kv_bytes_per_token // spec.n_mla),
                flops=seqs * (2 * 2 * spec.mla.heads * spec.mla.kv_lora_rank * context) / mla_split,
                flops_category="attention",
                tokens=seqs,
                heads=spec.mla.heads // mla_split,
                live=None if live is None else live.mla(spec, seqs=seqs, queries=1, context=context, tp=tp),
            )
        )
    if spec.kda is not None and spec.n_kda:
        slot = state_bytes_per_sequence // spec.n_kda
        read, written = (seqs, seqs) if state_slots is None else state_slots
        held = None if live is None else live.kda(spec, seqs=seqs, queries=1, tp=tp, decode=True)
        ops.append(
            _kda_op(
                spec,
                tp=tp,
                tokens=seqs,
                state_bytes=read * slot,
                state_bytes_written=written * slot,
                name="kda.recurrence",
                kind="kda_decode",
                live=held,
            )
        )
    return ops


def weight_ops(
    spec: ModelSpec,
    *,
    weights: list[WeightGroup],
    rows,
    sequences,
    tp,
    ep_tokens,
    touched,
    live: LiveRules | None = None,
    absorbed: bool = False,
    expert_rows=None,
) -> list[Op]:
    """One op a weight group (not the embedding: a row gather, not a weight stream) applied to ``rows``
    rows (decode: the sequences; prefill: the chunk's tokens), of which ``sequences`` are sampled (the LM
    head's logits). With ``live``, the weight op a block's buffers peak at holds them
    (``LiveAt.weight``: the routed experts' and the dense MLP's down projections, the LM head). ``absorbed``
    (decode): kv_b_proj runs as the absorbed MLA's W_UK / W_UV (``Op.compute_role`` MLA_ABSORBED), reading the
    copies' bytes where the engine holds them apart from it (``WeightGroup.decode_bytes``). ``expert_rows``: the
    stack's grouped-matmul row tiling (``step.gmm.expert_rows_of``: (rows a touched expert, its tensor, the rows
    routed in all) -> the MXU rows its kernel computes), whose FLOPs the routed experts' ops count: the touched
    experts' share of the params x 2 x those rows; None: the rows as routed."""
    from k3plan.columns import maximum

    moe = spec.moe
    share = touched / moe.num_experts  # of an expert group's bytes: the experts its EP group's tokens touch
    expert_flops = 2 * (moe.top_k / moe.num_experts) * ep_tokens  # a routed-expert param
    expert_tokens = ep_tokens * moe.top_k / maximum(touched, 1e-9)  # rows a touched expert
    dense_flops = 2 * rows  # a dense param
    ops: list[Op] = []
    held: set[str] = set()  # a block's buffers on one op, even where its down projection is two groups
    for g in weights:
        t = g.rep
        if row_gather(t):  # row gathers: the embedding, DeepSeek-V4's tid2eid (dsv4_ops)
            continue
        # the rows this op runs: every DP group's where the engine gathers them first (an LM head over the whole TP
        # group: its logits [dp x rows, vocab / (tp x dp)] a device, WeightGroup.gathered); else the step's own
        g_rows, g_seqs, g_tp = rows * g.gathered, sequences * g.gathered, tp * g.gathered
        buffers = None
        if live is not None and t.role in live.WEIGHT_ROLES:
            buffers = live.weight(spec, t, rows=g_rows, sequences=g_seqs, tp=g_tp)
        if buffers is not None and buffers.name in held:
            buffers = None
        elif buffers is not None:
            held.add(buffers.name)
        if t.role == "expert":
            flops = expert_flops * g.params
            if expert_rows is not None:  # MXU work the kernel does: each touched expert's rows padded to its tiles
                flops = 2 * expert_rows(expert_tokens, t, ep_tokens * moe.top_k) * share * g.params
            ops.append(
                Op(
                    name=g.name,
                    kind="grouped_matmul",
                    layer_kind=t.kind,
                    category="experts",
                    count=g.count,
                    bytes_read=g.bytes * share,
                    flops=flops,
                    tensor=t,
                    shape=g.shape,
                    params=g.params,
                    tokens=expert_tokens,
                    live=buffers,
                )
            )
        else:
            role = MLA_ABSORBED if absorbed and leaf_name(t) == ABSORBED_LEAF else None
            ops.append(
                Op(
                    name=g.name,
                    kind=weight_op_kind(t),
                    layer_kind=t.kind,
                    category="weights",
                    count=g.count,
                    bytes_read=g.decode_bytes if role is not None and g.decode_bytes is not None else g.bytes,
                    flops=dense_flops * g.params * g.gathered,
                    tensor=t,
                    shape=g.shape,
                    params=g.params,
                    tokens=g_rows,
                    live=buffers,
                    compute_role=role,
                )
            )
    return ops


def _kda_op(
    spec: ModelSpec,
    *,
    tp,
    tokens,
    state_bytes,
    name: str,
    kind: str,
    live: LiveBuffers | None,
    state_bytes_written=None,
) -> Op:
    """KDA's recurrent state read (``state_bytes``) and written (``state_bytes_written``; None: as much as read)
    a layer, 3 [d, d] products a token a head (decode: the recurrence over the batch; prefill: the chunked scan
    over the chunk). Split when TP divides the KDA heads."""
    assert spec.kda is not None
    split = heads_split(spec.kda.heads, tp)
    return Op(
        name=name,
        kind=kind,
        layer_kind="kda",
        category="state",
        count=spec.n_kda,
        bytes_read=state_bytes,
        bytes_written=state_bytes if state_bytes_written is None else state_bytes_written,
        flops=tokens * (3 * 2 * spec.kda.heads * spec.kda.head_dim**2) / split,
        flops_category="attention",
        tokens=tokens,
        heads=spec.kda.heads // split,
        live=live,
    )


def prefill_ops(
    spec: ModelSpec,
    *,
    weights: list[WeightGroup],
    kv_bytes_per_token,
    state_bytes_per_sequence,
    tp,
    chunk,
    ep_tokens,
    touched,
    context,
    live: LiveRules | None = None,
    expert_rows=None,
    dsv4_sizes=None,
) -> list[Op]:
    """The compute ops of one prefill chunk of ``chunk`` tokens (a DP group's) ending at ``context``
    tokens: weights as in decode with ``chunk`` rows; MLA attention with K/V materialised, causal (query
    i of the chunk attends to context - chunk + i keys); the KDA chunked scan reads and writes the
    state once and applies 3 [d, d] products a token a head. One chunk covering the prompt gives
    ``roofline.work.attention_prefill_flops_per_token`` x the prompt (tests/step/test_ops.py). With
    ``live``, each op's buffers live at its peak (k3plan.step.live), the chunk being one prompt's. The list is
    ``prefill_chunk_ops``' weight ops, ``prefill_attention_ops`` (the only ops that move with ``context``), then
    ``prefill_chunk_ops``' state ops."""
    weight, state = prefill_chunk_ops(
        spec,
        weights=weights,
        state_bytes_per_sequence=state_bytes_per_sequence,
        tp=tp,
        chunk=chunk,
        ep_tokens=ep_tokens,
        touched=touched,
        live=live,
        expert_rows=expert_rows,
    )
    attention = prefill_attention_ops(
        spec, kv_bytes_per_token=kv_bytes_per_token, tp=tp, chunk=chunk, context=context, live=live, sizes=dsv4_sizes
    )
    return weight + attention + state


def prefill_chunk_ops(
    spec: ModelSpec,
    *,
    weights: list[WeightGroup],
    state_bytes_per_sequence,
    tp,
    chunk,
    ep_tokens,
    touched,
    live: LiveRules | None = None,
    expert_rows=None,
) -> tuple[list[Op], list[Op]]:
    """(the weight ops, the KDA chunked scan) of a prefill chunk of ``chunk`` tokens: ``prefill_ops``' ops that do
    not depend on where the chunk ends in its prompt (a prompt's chunks of one size share them)."""
    ops = weight_ops(
        spec,
        weights=weights,
        rows=chunk,
        sequences=1,
        tp=tp,
        ep_tokens=ep_tokens,
        touched=touched,
        live=live,
        expert_rows=expert_rows,
    )
    state: list[Op] = []
    if spec.kda is not None and spec.n_kda:
        per_layer = state_bytes_per_sequence // spec.n_kda
        held = None if live is None else live.kda(spec, seqs=1, queries=chunk, tp=tp, decode=False)
        state.append(
            _kda_op(
                spec, tp=tp, tokens=chunk, state_bytes=per_layer, name="kda.chunked_scan", kind="kda_chunked", live=held
            )
        )
    return ops, state


def prefill_attention_ops(
    spec: ModelSpec, *, kv_bytes_per_token, tp, chunk, context, live: LiveRules | None = None, sizes=None
) -> list[Op]:
    """The attention ops of a prefill chunk of ``chunk`` tokens ending at ``context`` (``prefill_ops``' ops that
    move with it): DeepSeek-V4's attention side (step/dsv4_ops.py, over the engine's records ``sizes``), else MLA's."""
    if spec.dsv4 is not None:  # DeepSeek-V4 (step/dsv4_ops.py)
        from k3plan.step import dsv4_ops

        return dsv4_ops.prefill_ops(spec, chunk=chunk, context=context, tp=tp, live=live, sizes=sizes)
    if not spec.n_mla:
        return []
    mla = spec.mla
    mla_split = heads_split(mla.heads, tp)
    keys = chunk * (context - chunk) + chunk * (chunk + 1) / 2  # query-key pairs of the chunk
    kv_layer = kv_bytes_per_token // spec.n_mla
    return [
        Op(
            name="mla.attention",
            kind="attention",
            layer_kind="mla",
            category="kv",
            count=spec.n_mla,
            bytes_read=(context - chunk) * kv_layer,
            bytes_written=chunk * kv_layer,
            flops=2 * mla.heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) * keys / mla_split,
            flops_category="attention",
            tokens=chunk,
            heads=mla.heads // mla_split,
            live=None if live is None else live.mla(spec, seqs=1, queries=chunk, context=context, tp=tp),
        )
    ]


def collective_ops(
    spec: ModelSpec,
    *,
    all_to_all,
    act,
    dispatch,
    tp,
    dp,
    ep,
    devices_per_chip,
    chips,
    tokens,
    logits_all_gather,
    sequences=None,
    ag_rs=False,
    domain_devices=None,
    latent_calls=1,
    logits_whole_tp=False,
) -> list[Op]:
    """The collectives of one step over ``tokens`` tokens (decode: the batch; prefill: the chunk) of
    ``sequences`` sequences (the rows sampled; default ``tokens``). Ops a stack does not issue have 0
    calls and 0 bytes (so the list has one shape for columns). ``logits_all_gather``: the stack's
    ``logits.gather`` is all_gather (else partitioned_argmax): see ``tp_edge_ops``. ``all_to_all`` /
    ``ag_rs``: the stack's expert pattern is all_to_all / allgather_reducescatter (neither: all_reduce);
    the MoE ops: ``moe_ops``. ``domain_devices``: the devices of one scale-up domain
    (``Topology.devices_per_slice``; None: the step runs inside one): each op's ``scale_out``, whether
    its group's span crosses one (``group_spans``, ``crosses``)."""
    from k3plan.columns import where
    from k3plan.step.collective import ring_bytes_per_chip
    from k3plan.step.memory import cdiv

    spans = group_spans(tp=tp, dp=dp, ep=ep)
    tp_msg = cdiv(tokens, dp) * spec.hidden_size * act
    ops = [
        Op(
            name="attention.all_reduce",
            kind="collective",
            layer_kind="attention",
            category="collectives",
            count=spec.num_layers,
            collective=Collective.ALL_REDUCE,
            group=tp,
            calls=where(tp > 1, 1, 0),
            message_bytes=tp_msg,
            wire_bytes=ring_bytes_per_chip(tp, tp_msg, devices_per_chip),
            scale_out=crosses(spans["tp"], domain_devices),
        )
    ]
    ops += tp_edge_ops(
        spec,
        domain_devices=domain_devices,
        act=act,
        tp=tp,
        dp=dp,
        devices_per_chip=devices_per_chip,
        tokens=tokens,
        sequences=tokens if sequences is None else sequences,
        logits_all_gather=logits_all_gather,
        logits_whole_tp=logits_whole_tp,
    )
    if spec.n_moe:
        ops += moe_ops(
            spec,
            all_to_all=all_to_all,
            ag_rs=ag_rs,
            act=act,
            dispatch=dispatch,
            tp=tp,
            dp=dp,
            ep=ep,
            devices_per_chip=devices_per_chip,
            chips=chips,
            tokens=tokens,
            domain_devices=domain_devices,
            latent_calls=latent_calls,
        )
    return ops


def group_spans(*, tp, dp, ep) -> dict[str, Col]:
    """Devices each kind of group stretches over in a stage's mesh, laid out TP innermost (``Mesh.axes``
    is dp x tp; vLLM and SGLang give a TP group consecutive ranks inside a node, DP and EP across:
    vLLM parallel_state.initialize_model_parallel, all_ranks.view(-1, dp, pp, tp)): a TP group ``tp``
    consecutive devices, an EP group ``ep``, a DP group (one rank of each TP group, strided by tp)
    ``tp x dp``."""
    return {"tp": tp, "ep": ep, "dp": tp * dp}


# the names ``collective_ops`` gives its ops (a MoE model: all, in this order); plan's ``scale_out_ops``
# column is a bit an op of this tuple (tests/step/test_links.py checks the list against it)
COLLECTIVE_NAMES = (
    "attention.all_reduce",
    "embed.all_reduce",
    "dense_mlp.all_reduce",
    "logits.gather",
    "moe.dispatch",
    "moe.combine",
    "moe.all_gather",
    "moe.reduce_scatter",
    "moe.all_reduce",
)


def crosses(span, domain_devices):
    """Whether a group of ``span`` devices crosses a scale-up domain of ``domain_devices`` (None: the
    topology is one domain): it does when it stretches over more devices than one domain holds, or when
    its span does not divide the domain, for then the group that holds a domain's last device holds the
    next one's first too (tp 16 over two 72-GPU NVL72 racks: GPUs 64-79), and a step waits for its
    slowest group. On a single-domain topology every span divides the topology's devices, so a
    per-configuration column may pass the topology's ``devices_per_slice`` throughout."""
    return False if domain_devices is None else (span > domain_devices) | (domain_devices % span != 0)


# vLLM's router output beside each dispatched token, all-gathered with it (AgRsAll2AllManager.dispatch
# gathers [hidden_states, topk_weights, topk_ids]): top-k weights in f32, top-k ids in int32 (vLLM
# fused_moe fused_topk_bias allocates them so, read in a public excerpt; the modular prepare/finalize path)
TOPK_BYTES_PER_EXPERT = 4 + 4


def moe_ops(
    spec: ModelSpec,
    *,
    all_to_all,
    ag_rs,
    act,
    dispatch,
    tp,
    dp,
    ep,
    devices_per_chip,
    chips,
    tokens,
    domain_devices=None,
    latent_calls=1,
) -> list[Op]:
    """The MoE layers' collectives, one op each, the same five for every pattern (0 calls where the
    pattern does not issue it):

    - all_to_all: ``moe.dispatch`` and ``moe.combine`` over the EP group, each the step's tokens to
      their k experts, ``expert_in`` wide in ``dispatch`` bytes, a chip sending its share;
    - all_reduce: ``moe.all_reduce`` over the EP group of the step's tokens, ``moe_reduced_width`` wide;
    - allgather_reducescatter (vLLM AgRsAll2AllManager, the default ``--all2all-backend``), with DP > 1:
      ``moe.all_gather`` over the DP group of each rank's cdiv(tokens, dp) rows, each the ``expert_in``-wide
      expert input in the activation dtype and its top-k weights and ids (``TOPK_BYTES_PER_EXPERT``;
      the naive DP/EP prepare quantizes the input only for an activation-quantized expert method, which
      the stack's bf16 activations are not), then ``moe.reduce_scatter`` over the DP group of the
      expert outputs (every DP rank's rows, ``expert_in`` wide) back to each rank's rows; ring: a device
      sends dp - 1 shards of its own rows in each. Then, TP > 1, ``moe.all_reduce`` over the attention-TP
      group of a DP group's rows (KimiMoE.forward's maybe_all_reduce_tensor_model_parallel: the routed
      output of this rank's experts and the row-parallel shared experts). DP 1: the TP all-reduce only
      (use_all2all_kernels needs DP > 1). Each op's ``scale_out``: whether its group's span
      (``group_spans``: the DP group's ranks are strided by tp, so it stretches over tp x dp devices)
      crosses a scale-up domain of ``domain_devices`` (``crosses``). ``latent_calls``: the calls that all-reduce
      takes (2: a LatentMoE's routed latent and its hidden-wide output reduced apart, the same bytes in all:
      ``roofline.comm.latent_reduce_calls``); its ``message_bytes`` is then a call's mean."""
    from k3plan.columns import where
    from k3plan.step.collective import ring_bytes_per_chip
    from k3plan.step.memory import cdiv

    spans = group_spans(tp=tp, dp=dp, ep=ep)
    out = {k: crosses(v, domain_devices) for k, v in spans.items()}
    moe = spec.moe
    moe_layer: dict[str, Any] = {
        "kind": "collective",
        "layer_kind": "moe",
        "category": "collectives",
        "count": spec.n_moe,
    }
    a2a_msg = tokens * moe.top_k * moe.expert_in * dispatch  # the step's tokens, each to its k experts
    ops: list[Op] = []
    for name in ("moe.dispatch", "moe.combine"):
        ops.append(
            Op(
                name=name,
                **moe_layer,
                collective=Collective.ALL_TO_ALL,
                group=ep,
                scale_out=out["ep"],
                calls=where(all_to_all, 1, 0),
                message_bytes=where(all_to_all, a2a_msg / (chips * devices_per_chip), 0),
                wire_bytes=where(all_to_all, a2a_msg / chips, 0),
            )
        )
    rows = cdiv(tokens, dp)  # a DP group's rows
    gathers = where(ag_rs, where(dp > 1, 1, 0), 0)
    for name, op, shard in (
        ("moe.all_gather", Collective.ALL_GATHER, rows * (moe.expert_in * act + moe.top_k * TOPK_BYTES_PER_EXPERT)),
        ("moe.reduce_scatter", Collective.REDUCE_SCATTER, rows * moe.expert_in * act),
    ):
        ops.append(
            Op(
                name=name,
                **moe_layer,
                collective=op,
                group=dp,
                scale_out=out["dp"],
                calls=gathers,
                message_bytes=where(gathers > 0, shard, 0),  # a device's rows: what it contributes / keeps
                wire_bytes=where(gathers > 0, devices_per_chip * (dp - 1) * shard, 0),
            )
        )
    # all_reduce: over the EP group, the step's tokens; ag_rs: over TP, a DP group's rows
    ar_group = where(ag_rs, tp, ep)
    ar_msg = where(ag_rs, rows, tokens) * moe_reduced_width(spec) * act
    ops.append(
        Op(
            name="moe.all_reduce",
            **moe_layer,
            collective=Collective.ALL_REDUCE,
            group=ar_group,
            scale_out=where(ag_rs, out["tp"], out["ep"]),
            calls=where(all_to_all, 0, where(ar_group > 1, latent_calls, 0)),
            message_bytes=where(all_to_all, 0, ar_msg / latent_calls),
            wire_bytes=where(all_to_all, 0, ring_bytes_per_chip(ar_group, ar_msg, devices_per_chip)),
        )
    )
    return ops


def moe_reduced_width(spec: ModelSpec) -> int:
    """Elements a token the MoE layer's one all-reduce carries: the hidden state (routed + shared summed,
    vLLM KimiMoE.forward), and for a LatentMoE also the routed experts' latent, reduced before its
    norm and the replicated up-projection: one flat [latent | shared] buffer, one call (SGLang
    kimi_k3.py KimiK3MoE's fused-front latent all-reduce; validate's compiled step: one all-reduce of
    a (hidden, latent) tuple, tests/probes/test_probe_step.py)."""
    moe = spec.moe
    return spec.hidden_size + (moe.expert_in if moe.latent else 0)


ARGMAX_PAIR_BYTES = 4  # partitioned argmax: a shard's max (f32) and its index (s32) a row, one call each


def tp_edge_ops(
    spec: ModelSpec,
    *,
    act,
    tp,
    dp,
    devices_per_chip,
    tokens,
    sequences,
    logits_all_gather,
    domain_devices=None,
    logits_whole_tp=False,
) -> list[Op]:
    """The TP collectives outside the attention and MoE blocks, a step (every bundled stack splits the
    vocabulary and the dense MLP over TP; their ``logits`` and ``sharding.cite`` name the engine code):

    - ``embed.all_reduce``: the vocabulary-split embedding's masked lookup, summed over TP
      (VocabParallelEmbedding.forward), [tokens, hidden] once a step;
    - ``dense_mlp.all_reduce``: the dense layers' row-parallel down_proj (KimiMLP reduce_results=True),
      [tokens, hidden] once a dense layer;
    - ``logits.gather``: all_gather: the LM head's [rows, vocab/TP] all-gathered once (vLLM / SGLang
      LogitsProcessor); partitioned_argmax: the logits stay split, XLA's argmax all-gathers each shard's
      max and its index (2 calls of a row's 4 bytes). Ring all-gather: a device sends (n-1) shards.
    All on a DP group's rows, 0 calls when TP is 1; over the TP group (span tp: ``crosses`` a scale-up
    domain of ``domain_devices`` only when TP is wider than one). ``logits_whole_tp``: the LM head is split over the
    whole TP group, tp x dp (``Stack.lm_head_whole_tp``): the logits gather runs over it, every DP group's rows
    gathered first, a device's [dp x rows, vocab / (tp x dp)]; the gathers of the hidden states before it and the
    scatter of the logits after it (SGLang's dp_gather_replicate / dp_scatter) are not counted."""
    from k3plan.columns import where
    from k3plan.step.collective import ring_bytes_per_chip
    from k3plan.step.memory import cdiv

    on = where(tp > 1, 1, 0)
    msg = cdiv(tokens, dp) * spec.hidden_size * act
    rows = cdiv(sequences, dp)
    head = where(logits_whole_tp, tp * dp, tp)  # the devices the LM head's vocabulary is split over
    head_rows = where(logits_whole_tp, rows * dp, rows)  # the rows its logits hold a device
    gather_msg = where(logits_all_gather, head_rows * cdiv(spec.vocab_size, head) * act, rows * ARGMAX_PAIR_BYTES)
    gather_calls = where(head > 1, 1, 0) * where(logits_all_gather, 1, 2)
    common: dict[str, Any] = {
        "kind": "collective",
        "category": "collectives",
        "group": tp,
        "scale_out": crosses(tp, domain_devices),
    }
    return [
        *(
            Op(
                name=name,
                layer_kind=layer_kind,
                count=count,
                collective=Collective.ALL_REDUCE,
                calls=on,
                message_bytes=msg,
                wire_bytes=ring_bytes_per_chip(tp, msg, devices_per_chip),
                **common,
            )
            for name, layer_kind, count in (
                ("embed.all_reduce", "global", 1),
                ("dense_mlp.all_reduce", "dense", spec.mlps.count("dense")),
            )
        ),
        Op(
            name="logits.gather",
            layer_kind="global",
            count=1,
            collective=Collective.ALL_GATHER,
            calls=gather_calls,
            message_bytes=gather_msg,
            wire_bytes=gather_calls * devices_per_chip * (head - 1) * gather_msg,
            **{**common, "group": head, "scale_out": crosses(head, domain_devices)},
        ),
    ]


def by_category(ops: list[Op], field: str, *, key: str = "category") -> dict:
    """Step totals of ``field`` (count x value, summed in list order) by ``key``."""
    out: dict = {}
    for op in ops:
        k = getattr(op, key)
        v = op.count * getattr(op, field)
        out[k] = out[k] + v if k in out else v
    return out


def step_sum(ops: list[Op], field: str):
    return sum(op.count * getattr(op, field) for op in ops)


def to_op_costs(
    ops: list[Op],
    dtype_of: Callable[[Tensor, str | None], OpDtype] | None = None,
    curve_of: Callable[[Tensor], str | None] | None = None,
    stage: str | None = None,
) -> list:
    """The list as speed.ops.OpCost (issue 17's expected-time input), at one point (scalars); a collective
    runs on its own link (``Op.scale_out``: where its group crosses a scale-up domain, and the pipeline send
    where ``roofline.comm.pipeline_link`` says). Collectives a stack does not issue
    (0 calls) are left out. ``speed.expected.expected_time`` of the collectives' OpCosts has the
    roofline's collective time as its ceiling (tests/step/test_ops.py). ``dtype_of``: the compute dtype of a
    weight matmul by its tensor and compute role (``step.compute.dtype_of_setup``: the stack's, by runtime format,
    role and platform); None: every op at OpCost's default (bf16). ``curve_of``: a routed-expert op's tensor -> the
    efficiency curve of the kernel the engine runs it with (``step.gmm.kernel_curve_of``); None: none named.
    ``stage`` ("decode" / "prefill"): DeepSeek-V4's attention-side ops (``step.dsv4_ops``) name the curve of their
    own probe records (``dsv4:<stage>:<op>``, probe dsv4-ops; read at the op's rows) where the curves hold it."""
    from k3plan.step.opcost import OpCost

    kinds = {
        "norm": "hbm",
        "conv": "hbm",
        "elementwise": "hbm",
        "kda_decode": "kda_decode",
        "kda_chunked": "kda_chunked",
        "attention": "attention",
        "grouped_matmul": "grouped_matmul",
        "matmul": "matmul",
        "collective": "collective",
    }
    out = []
    for op in ops:
        if hasattr(op.count, "shape") or hasattr(op.flops, "shape"):
            raise TypeError("to_op_costs takes one configuration (scalar columns)")
        common: dict[str, Any] = {
            "name": op.name,
            "kind": kinds[op.kind],
            "count": int(op.count),
            "flops": float(op.flops),
            "bytes": round(float(op.bytes)),
        }
        if op.kind in ("matmul", "grouped_matmul") and dtype_of is not None and op.tensor is not None:
            d = dtype_of(op.tensor, op.compute_role)
            common["dtype"] = d.dtype
            if d.note:
                common["dtype_note"] = d.note
        if op.kind == "collective":
            if not op.calls or op.collective is None:
                continue
            out.append(
                OpCost(
                    **common,
                    collective=op.collective.value,
                    message_bytes=max(1, int(op.message_bytes)),
                    wire_bytes=round(float(op.wire_bytes) / int(op.calls)),  # OpCost's is a call's
                    group=int(op.group),
                    calls=int(op.calls),
                    link="scale_out" if op.scale_out else "scale_up",
                )
            )
        elif op.kind == "matmul":
            n, k = matmul_nk(op)
            out.append(OpCost(**common, m=max(1, int(op.tokens)), n=n, k=k))
        elif op.kind == "grouped_matmul":
            curve = curve_of(op.tensor) if curve_of is not None and op.tensor is not None else None
            out.append(OpCost(**common, tokens_per_group=max(float(op.tokens), 1e-9), curve=curve))
        elif op.kind == "kda_decode":
            out.append(OpCost(**common, heads=max(1, int(op.heads))))
        elif op.kind == "kda_chunked":
            from k3plan.step.memory import KDA_CHUNK_TOKENS

            out.append(OpCost(**common, heads=max(1, int(op.heads)), chunk=KDA_CHUNK_TOKENS))
        elif stage is not None and op.name.startswith("dsv4.") and op.kind in ("attention", "elementwise"):
            out.append(OpCost(**common, m=max(1, int(op.tokens)), curve=f"dsv4:{stage}:{op.name}"))
        else:
            out.append(OpCost(**common))
    return out


def matmul_nk(op: Op) -> tuple[int, int]:
    """(N, K) of a weight matmul as the device runs it: its weight's shape on the device (HF ``[out, in]``:
    N the rows, K the columns), from the ShardSpec's split dims. A column-parallel projection (q/kv_b,
    gate/up, lm_head: ``[out/tp, in]``) splits N; a row-parallel one (o_proj, down_proj: ``[out, in/tp]``,
    its partial sums all-reduced) splits K (vLLM ColumnParallelLinear / RowParallelLinear). N x K is the
    device's params either way (the FLOPs); the shape is what a matmul probe keys its efficiency by."""
    if op.shape is None or len(op.shape) != 2:
        raise ValueError(f"op {op.name}: no per-device 2-D weight shape (weight groups of one Setup carry it)")
    n, k = op.shape
    return max(1, int(n)), max(1, int(k))
