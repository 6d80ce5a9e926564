"""DeepSeek-V4's attention ops in the step's op list (k3plan.step.ops calls these for ``spec.dsv4``).

Where an MLA layer reads its whole cache, a V4 layer (``ModelSpec.dsv4``; the cache's bytes from
``k3plan.step.dsv4_cache``) runs, a decode step, for a DP group's ``seqs`` sequences at ``context`` tokens:

- ``dsv4.indexer`` (CSA layers): the lightning indexer scores the query's ``index_n_heads`` heads of
  ``index_head_dim`` against every indexer key (one a 4 tokens): reads them all; 2 x heads x dim FLOPs a
  key; the top-k (``index_topk``) picks the entries to read (the engines replicate the indexer over TP);
- ``dsv4.csa_attention``: one shared K = V head of ``head_dim`` over the top-k compressed entries plus the
  ``sliding_window`` last entries (the sparse gather reads only those): 2 x 2 x heads x head_dim FLOPs a key;
- ``dsv4.hca_attention`` (ratio 128): every compressed entry (context / 128) plus the window;
- ``dsv4.window_attention`` (ratio 0): the window alone;
- ``dsv4.compressor`` (CSA and HCA layers, its indexer's on CSA): each token's projected kv and gate scores
  written into the block's tail (f32) and, a complete block, the tail read back and one entry written:
  one state row each way a token, amortized;
- ``dsv4.mhc``: mHC's mixing of ``hc_mult`` residual streams around each attention and MoE block (the
  ``hc_*_fn`` projections are weight ops from the inventory; this op counts the streams' pre / post / residual
  mixing and the Sinkhorn iterations on the m x m matrix: FLOPs only, no HBM traffic beyond the weights);
- ``dsv4.hash_route`` (the first ``num_hash_layers`` MoE layers): the experts come from ``tid2eid``, a row
  gather of top-k ids a token (i64), not a matmul over the table (k3plan.step.ops skips the table as a
  weight op, as the embedding).
Prefill of a chunk of ``chunk`` tokens ending at ``context``: the same ops, the keys a query attends summed
over the chunk's queries (causal), every existing compressed entry gathered once (vLLM's prefill gathers
the sequence's compressed entries into a bf16 workspace: ``dequantize_and_gather_k_cache``), and the
chunk's new entries written.
With ``live`` (the temp model's points) the attention ops hold the scores and cache copy of
``k3plan.step.live.mla_live`` over the keys a query attends (not the context) and prefill's gather workspace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3plan.columns import minimum
from k3plan.models.spec import ModelSpec
from k3plan.step import dsv4_cache
from k3plan.step.op import LiveBuffers, LiveRules, Op, heads_split

if TYPE_CHECKING:
    from k3plan.engines.dsv4_layout import EntrySizes

CSA = dsv4_cache.CSA
F32 = 4
BF16 = 2


def _ratios(spec: ModelSpec) -> tuple[int, int, int, int]:
    """(CSA layers, HCA layers, window-only layers, the HCA ratio) of the decoder layers."""
    d = spec.dsv4
    assert d is not None
    hca = {r for r in d.compress_ratios if r not in (0, CSA)}
    if len(hca) > 1:
        raise ValueError(f"{spec.name}: more than one HCA ratio {sorted(hca)}; one is modelled")
    return d.n_csa, d.n_hca, d.n_swa, (hca.pop() if hca else 128)


def _attn_live(live, spec, *, seqs, queries, keys, tp, workspace=0) -> LiveBuffers | None:
    if live is None:
        return None
    base = live.mla(spec, seqs=seqs, queries=queries, context=keys, tp=tp)
    buffers = dict(base.buffers)
    if workspace is not None and not (isinstance(workspace, int) and workspace == 0):
        buffers["gathered compressed entries, bf16 [keys, head_dim] (vLLM prefill workspace)"] = workspace
    return LiveBuffers(name="mla.attention", buffers=buffers)


def _mhc_flops(spec: ModelSpec, rows):
    """mHC a block (attention or MoE), ``rows`` tokens: pre (m streams -> 1), post (1 -> m) and the m x m
    residual mix over the hidden width, and the Sinkhorn normalisation of the m x m matrix."""
    d = spec.dsv4
    assert d is not None
    m, h = d.hc_mult, spec.hidden_size
    return rows * (2 * (m * h + m * h + m * m * h) + d.hc_sinkhorn_iters * 4 * m * m)


MHC_SOURCE = (
    "kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/deepseek_v4/mhc/fused_post_pre_kernel.py (a block's post "
    "fused with the next block's pre) @711ec9b1: the hc_mult residual streams live in HBM between blocks, each block "
    "reads them once and writes them once"
)


def _mhc_op(spec: ModelSpec, rows) -> Op:
    """mHC's residual mixing, twice a layer (V4 and V4.1 alike): its FLOPs and the m streams of the hidden width,
    bf16, read and written once a block (``MHC_SOURCE``)."""
    d = spec.dsv4
    assert d is not None
    streams = rows * d.hc_mult * spec.hidden_size * BF16
    return Op(
        name="dsv4.mhc",
        kind="elementwise",
        layer_kind="mla",
        category="state",
        count=2 * spec.num_layers,
        bytes_read=streams,
        bytes_written=streams,
        flops=_mhc_flops(spec, rows),
        tokens=rows,
    )


def _compressor_op(name: str, *, count, rows, row_bytes) -> Op:
    """A KV compressor's state update: ``row_bytes`` read and written a token, ``count`` layers."""
    return Op(
        name=name,
        kind="elementwise",
        layer_kind="mla",
        category="state",
        count=count,
        bytes_read=rows * row_bytes,
        bytes_written=rows * row_bytes,
        tokens=rows,
    )


def _common(spec: ModelSpec, *, rows) -> list[Op]:
    d = spec.dsv4
    assert d is not None
    n_csa, n_hca, _, _ = _ratios(spec)
    row_csa = 2 * 2 * d.head_dim * F32 + 2 * 2 * d.index_head_dim * F32  # kv + score rows, coff 2, with indexer
    row_hca = 2 * d.head_dim * F32
    ops = [_mhc_op(spec, rows)]
    if n_csa:
        ops.append(_compressor_op("dsv4.csa_compressor", count=n_csa, rows=rows, row_bytes=row_csa))
    if n_hca:
        ops.append(_compressor_op("dsv4.hca_compressor", count=n_hca, rows=rows, row_bytes=row_hca))
    if d.num_hash_layers:
        ops.append(
            Op(
                name="dsv4.hash_route",
                kind="elementwise",
                layer_kind="moe",
                category="weights",
                count=min(d.num_hash_layers, spec.num_layers),
                bytes_read=rows * spec.moe.top_k * 8,  # one i64 row of tid2eid a token
                tokens=rows,
            )
        )
    return ops


def _decode_attention(spec: ModelSpec, live, *, name: str, count, seqs, keys, bytes_read, tp) -> Op:
    """One query a sequence over ``keys`` cached entries of ``count`` layers, reading ``bytes_read`` (V4's CSA picks,
    HCA entries and window; V4.1's shared main KV and FP8 window): QK and PV over one shared K = V head."""
    d = spec.dsv4
    assert d is not None
    split = heads_split(spec.mla.heads, tp)
    per_key = 2 * 2 * spec.mla.heads * d.head_dim
    return Op(
        name=name,
        kind="attention",
        layer_kind="mla",
        category="kv",
        count=count,
        bytes_read=bytes_read,
        flops=seqs * per_key * keys / split,
        flops_category="attention",
        tokens=seqs,
        heads=spec.mla.heads // split,
        live=_attn_live(live, spec, seqs=seqs, queries=1, keys=keys, tp=tp),
    )


def _decode_indexer(spec: ModelSpec, *, name: str, count, seqs, keys, key_bytes) -> Op:
    """The lightning indexer of one decode step: every sequence's query scored against ``keys`` index keys."""
    d = spec.dsv4
    assert d is not None
    return Op(
        name=name,
        kind="attention",
        layer_kind="mla",
        category="kv",
        count=count,
        bytes_read=seqs * keys * key_bytes,
        flops=seqs * 2 * d.index_n_heads * d.index_head_dim * keys,
        flops_category="attention",
        tokens=seqs,
        heads=d.index_n_heads,
    )


def decode_ops(
    spec: ModelSpec, *, seqs, context, tp, live: LiveRules | None = None, sizes: EntrySizes | None = None
) -> list[Op]:
    """V4's attention-side ops of one decode step (``seqs`` sequences, one query each, at ``context``), reading
    the engine's records (``sizes``: ``Dsv4Layout.sizes`` of the stack's engine; None: vLLM's)."""
    d = spec.dsv4
    assert d is not None
    if d.csa2 is not None:  # DeepSeek-V4.1
        return csa2_decode_ops(spec, seqs=seqs, context=context, tp=tp, live=live)
    z = sizes or dsv4_cache.VLLM.sizes(d)
    n_csa, n_hca, n_swa, r_hca = _ratios(spec)
    w = minimum(d.sliding_window, context)

    def attend(name: str, count, entries, entry_bytes) -> Op:
        """``entries`` compressed entries of ``entry_bytes`` (CSA's picks, HCA's; none on window-only layers) and
        the ``w`` window entries."""
        read = entries * entry_bytes + w * z.window
        return _decode_attention(
            spec, live, name=name, count=count, seqs=seqs, keys=entries + w, bytes_read=seqs * read, tp=tp
        )

    ops: list[Op] = []
    if n_csa:
        keys4 = context // CSA
        ops.append(_decode_indexer(spec, name="dsv4.indexer", count=n_csa, seqs=seqs, keys=keys4, key_bytes=z.index))
        ops.append(attend("dsv4.csa_attention", n_csa, minimum(d.index_topk, keys4), z.csa))
    if n_hca:
        ops.append(attend("dsv4.hca_attention", n_hca, context // r_hca, z.hca))
    if n_swa:
        ops.append(attend("dsv4.window_attention", n_swa, 0, 0))
    return ops + _common(spec, rows=seqs)


def prefill_ops(
    spec: ModelSpec, *, chunk, context, tp, live: LiveRules | None = None, sizes: EntrySizes | None = None
) -> list[Op]:
    """V4's attention-side ops of one prefill chunk of ``chunk`` tokens ending at ``context`` (one prompt), over
    the engine's records (``sizes``, as ``decode_ops``)."""
    d = spec.dsv4
    assert d is not None
    if d.csa2 is not None:  # DeepSeek-V4.1
        return csa2_prefill_ops(spec, chunk=chunk, context=context, tp=tp, live=live)
    z = sizes or dsv4_cache.VLLM.sizes(d)
    n_csa, n_hca, n_swa, r_hca = _ratios(spec)
    split = heads_split(spec.mla.heads, tp)
    heads = spec.mla.heads // split
    per_key = 2 * 2 * spec.mla.heads * d.head_dim
    start = context - chunk
    w = minimum(d.sliding_window, context)
    # keys summed over the chunk's queries: query at position p sees p // ratio entries (causal), the window
    mean_pos = start + (chunk + 1) / 2
    window_pairs = chunk * w

    def attend(name: str, count, *, read, written, pairs, keys, workspace) -> Op:
        """The chunk's queries over ``pairs`` (query, key) pairs of ``count`` layers: ``read`` cached bytes in,
        ``written`` new ones out (CSA's or HCA's entries and the window's)."""
        return Op(
            name=name,
            kind="attention",
            layer_kind="mla",
            category="kv",
            count=count,
            bytes_read=read,
            bytes_written=written,
            flops=per_key * pairs / split,
            flops_category="attention",
            tokens=chunk,
            heads=heads,
            live=_attn_live(live, spec, seqs=1, queries=chunk, keys=keys, tp=tp, workspace=workspace),
        )

    ops: list[Op] = []
    if n_csa:
        keys4 = mean_pos / CSA
        pairs_idx = chunk * keys4
        pairs = chunk * minimum(d.index_topk, keys4) + window_pairs
        gathered = context // CSA + w + chunk
        ops.append(
            Op(
                name="dsv4.indexer",
                kind="attention",
                layer_kind="mla",
                category="kv",
                count=n_csa,
                bytes_read=(start // CSA) * z.index,
                bytes_written=(chunk // CSA) * z.index,
                flops=2 * d.index_n_heads * d.index_head_dim * pairs_idx,
                flops_category="attention",
                tokens=chunk,
                heads=d.index_n_heads,
            )
        )
        ops.append(
            attend(
                "dsv4.csa_attention",
                n_csa,
                read=(start // CSA) * z.csa + minimum(start, w) * z.window,
                written=(chunk // CSA) * z.csa + chunk * z.window,
                pairs=pairs,
                keys=minimum(d.index_topk, context // CSA) + w,
                workspace=gathered * d.head_dim * BF16,
            )
        )
    if n_hca:
        keys = context // r_hca + w
        ops.append(
            attend(
                "dsv4.hca_attention",
                n_hca,
                read=(start // r_hca) * z.hca + minimum(start, w) * z.window,
                written=(chunk // r_hca) * z.hca + chunk * z.window,
                pairs=chunk * (mean_pos / r_hca) + window_pairs,
                keys=keys,
                workspace=(keys + chunk) * d.head_dim * BF16,
            )
        )
    if n_swa:
        ops.append(
            attend(
                "dsv4.window_attention",
                n_swa,
                read=minimum(start, w) * z.window,
                written=chunk * z.window,
                pairs=window_pairs,
                keys=w,
                workspace=0,
            )
        )
    return ops + _common(spec, rows=chunk)


def prefill_gather_values(spec: ModelSpec, *, chunk, context):
    """Values a prefill holds gathered for one prompt's attention (step/temporaries' ``mla_kv_bytes`` for V4,
    in place of MLA's per-head K/V): vLLM's bf16 workspace of the compressed entries, the window and the
    chunk, [context / 4 + window + chunk, head_dim] (``_forward_prefill``: M = N + window_size +
    max_num_batched_tokens, N the densest ratio's entries; vllm-project/vllm
    vllm/model_executor/layers/deepseek_v4_attention.py @b92a330e); one prompt, not its 4-prompt chunking."""
    d = spec.dsv4
    assert d is not None
    densest = min((r for r in d.compress_ratios if r), default=0)
    n = context // densest if densest else 0
    return (n + minimum(d.sliding_window, context) + chunk) * d.head_dim


def decode_score_values(spec: ModelSpec, *, context, tp):
    """f32 scores a decode query holds (step/temporaries' ``mla_scores_bytes`` / 4 for V4): the local heads
    over the most keys a layer attends (HCA's context / 128 + window, or CSA's top-k + window) and the
    indexer's head-reduced logits over context / 4 keys."""
    d = spec.dsv4
    assert d is not None
    if d.csa2 is not None:  # DeepSeek-V4.1: top-k of the densest source + window; candidate-set indexer logits
        densest = min(r for _, r in dsv4_cache.csa2_sources(d))
        w = minimum(d.sliding_window, context)
        heads = spec.mla.heads // heads_split(spec.mla.heads, tp)
        return heads * (minimum(d.index_topk, context // densest) + w) + context // densest
    _, n_hca, _, r_hca = _ratios(spec)
    w = minimum(d.sliding_window, context)
    keys = minimum(d.index_topk, context // CSA) + w
    if n_hca:
        from k3plan.columns import maximum

        keys = maximum(keys, context // r_hca + w)
    heads = spec.mla.heads // heads_split(spec.mla.heads, tp)
    return heads * keys + (context // CSA if d.n_csa else 0)


def attention_flops_per_token(spec: ModelSpec, context) -> tuple[float, float]:
    """(constant, slope): one token's attention FLOPs at ``context`` tokens, whole model, no TP split, are
    constant + slope x context once context / 4 passes the top-k (roofline/work.py): the indexer over every
    key (2 x index heads x index dim a key, one key a 4 tokens), CSA's top-k + window, HCA's context / 128 +
    window and the window-only layers' window, 2 x 2 x heads x head_dim a key (one shared K = V head)."""
    d = spec.dsv4
    assert d is not None
    if d.csa2 is not None:  # DeepSeek-V4.1: linear in context through the first-round indexers only
        c0 = csa2_attention_flops_at(spec, float(max(d.sliding_window, 1) * 1_000_000))
        c1 = csa2_attention_flops_at(spec, float(max(d.sliding_window, 1) * 2_000_000))
        slope = (c1 - c0) / (d.sliding_window * 1_000_000)
        return float(c0 - slope * d.sliding_window * 1_000_000), float(slope)
    n_csa, n_hca, n_swa, r_hca = _ratios(spec)
    per_key = 2 * 2 * spec.mla.heads * d.head_dim
    w = d.sliding_window
    const = per_key * (n_csa * (d.index_topk + w) + n_hca * w + n_swa * w)
    slope = n_csa * 2 * d.index_n_heads * d.index_head_dim / CSA + n_hca * per_key / r_hca
    return float(const), float(slope)


def attention_flops_at(spec: ModelSpec, context: float) -> float:
    """One token's attention FLOPs at ``context`` (exact in the top-k and window below their sizes)."""
    d = spec.dsv4
    assert d is not None
    if d.csa2 is not None:
        return csa2_attention_flops_at(spec, context)
    n_csa, n_hca, n_swa, r_hca = _ratios(spec)
    per_key = 2 * 2 * spec.mla.heads * d.head_dim
    w = min(d.sliding_window, context)
    keys4 = context / CSA
    return (
        n_csa * (2 * d.index_n_heads * d.index_head_dim * keys4 + per_key * (min(d.index_topk, keys4) + w))
        + n_hca * per_key * (context / r_hca + w)
        + n_swa * per_key * w
    )


# --- DeepSeek-V4.1 (CSA2, ``spec.dsv4.csa2``) ------------------------------------------------------------------
#
# The cache lives on the KV sources (step/dsv4_cache: FP4 main entries of 288 B and indexer keys of 68 B, FP8
# window entries of 528 B on every layer). A decode step, for ``seqs`` sequences at ``context``:
# - ``dsv4.csa2_indexer``: each index source that is also a KV source scores every key of its source (context /
#   ratio); ``dsv4.csa2_indexer_candidates``: a later index source scores only the candidate set
#   (candidate_topk_blocks x candidate_block_size entries) picked on candidate_source_layer_id;
# - ``dsv4.csa2_attention``: every layer with a ratio attends the top-k (index_topk) entries of the source at or
#   before it plus its own window; ``dsv4.window_attention``: the layers before the first source, the window;
# - ``dsv4.csa2_compressor``: each source writes a token's projected kv and gate rows (f32, as V4's HCA
#   compressor; the V4.1 compressor's own state layout not read) and, a complete block, one entry;
# - ``dsv4.mhc``: as V4 (single-pass mHC: the same mixing FLOPs a block).


def _csa2_groups(spec: ModelSpec) -> tuple[dict[int, int], int]:
    """({source ratio: layers that attend a source of that ratio}, window-only layers)."""
    d = spec.dsv4
    assert d is not None and d.csa2 is not None
    by_ratio: dict[int, int] = {}
    window_only = 0
    for layer, r in enumerate(d.compress_ratios):
        src = dsv4_cache.csa2_source_of(d, layer)
        if r and src is not None:
            rr = d.compress_ratios[src]
            by_ratio[rr] = by_ratio.get(rr, 0) + 1
        else:
            window_only += 1
    return by_ratio, window_only


def _csa2_indexers(spec: ModelSpec) -> tuple[dict[int, int], int]:
    """({source ratio: first-round indexers on a source of that ratio}, candidate-set indexers)."""
    d = spec.dsv4
    assert d is not None and d.csa2 is not None
    first: dict[int, int] = {}
    later = 0
    cand = d.csa2.candidate_topk_blocks * d.csa2.candidate_block_size
    for i in d.csa2.index_source_layer_ids:
        src = dsv4_cache.csa2_source_of(d, i)
        if src is None:
            continue
        if i in d.csa2.kv_source_layer_ids or not cand:
            r = d.compress_ratios[src]
            first[r] = first.get(r, 0) + 1
        else:
            later += 1
    return first, later


def _csa2_common(spec: ModelSpec, *, rows) -> list[Op]:
    d = spec.dsv4
    assert d is not None
    n_src = len(dsv4_cache.csa2_sources(d))
    row = 2 * d.head_dim * F32
    return [_mhc_op(spec, rows), _compressor_op("dsv4.csa2_compressor", count=n_src, rows=rows, row_bytes=row)]


def csa2_decode_ops(spec: ModelSpec, *, seqs, context, tp, live: LiveRules | None = None) -> list[Op]:
    d = spec.dsv4
    assert d is not None and d.csa2 is not None
    main, ib, win = (
        dsv4_cache.v41_main_entry_bytes(d),
        dsv4_cache.v41_index_bytes(d),
        dsv4_cache.v41_window_entry_bytes(d),
    )
    w = minimum(d.sliding_window, context)
    cand = d.csa2.candidate_topk_blocks * d.csa2.candidate_block_size
    ops: list[Op] = []
    first, later = _csa2_indexers(spec)

    def indexer(name: str, count, keys) -> Op:
        return _decode_indexer(spec, name=name, count=count, seqs=seqs, keys=keys, key_bytes=ib)

    for r, count in sorted(first.items()):
        ops.append(indexer(f"dsv4.csa2_indexer_r{r}", count, context // r))
    if later:
        cand_src = d.csa2.candidate_source_layer_id
        r_c = d.compress_ratios[cand_src] if cand_src is not None else 1
        ops.append(indexer("dsv4.csa2_indexer_candidates", later, minimum(cand, context // max(r_c, 1))))
    by_ratio, window_only = _csa2_groups(spec)
    for r, count in sorted(by_ratio.items()):
        picked = minimum(d.index_topk, context // r)
        ops.append(
            _decode_attention(
                spec,
                live,
                name=f"dsv4.csa2_attention_r{r}",
                count=count,
                seqs=seqs,
                keys=picked + w,
                bytes_read=seqs * (picked * main + w * win),
                tp=tp,
            )
        )
    if window_only:
        ops.append(
            _decode_attention(
                spec,
                live,
                name="dsv4.window_attention",
                count=window_only,
                seqs=seqs,
                keys=w,
                bytes_read=seqs * w * win,
                tp=tp,
            )
        )
    return ops + _csa2_common(spec, rows=seqs)


def csa2_prefill_ops(spec: ModelSpec, *, chunk, context, tp, live: LiveRules | None = None) -> list[Op]:
    """A prefill chunk (every layer runs every token: the release's reference schedule, not CED's encoder /
    decoder split with bounded replay)."""
    d = spec.dsv4
    assert d is not None and d.csa2 is not None
    main, ib, win = (
        dsv4_cache.v41_main_entry_bytes(d),
        dsv4_cache.v41_index_bytes(d),
        dsv4_cache.v41_window_entry_bytes(d),
    )
    split = heads_split(spec.mla.heads, tp)
    heads = spec.mla.heads // split
    per_key = 2 * 2 * spec.mla.heads * d.head_dim
    start = context - chunk
    w = minimum(d.sliding_window, context)
    mean_pos = start + (chunk + 1) / 2
    cand = d.csa2.candidate_topk_blocks * d.csa2.candidate_block_size
    ops: list[Op] = []
    first, later = _csa2_indexers(spec)
    for r, count in sorted(first.items()):
        ops.append(
            Op(
                name=f"dsv4.csa2_indexer_r{r}",
                kind="attention",
                layer_kind="mla",
                category="kv",
                count=count,
                bytes_read=(start // r) * ib,
                bytes_written=(chunk // r) * ib,
                flops=2 * d.index_n_heads * d.index_head_dim * chunk * (mean_pos / r),
                flops_category="attention",
                tokens=chunk,
                heads=d.index_n_heads,
            )
        )
    if later:
        ops.append(
            Op(
                name="dsv4.csa2_indexer_candidates",
                kind="attention",
                layer_kind="mla",
                category="kv",
                count=later,
                bytes_read=minimum(cand, start) * ib,
                flops=2 * d.index_n_heads * d.index_head_dim * chunk * minimum(cand, mean_pos),
                flops_category="attention",
                tokens=chunk,
                heads=d.index_n_heads,
            )
        )
    by_ratio, window_only = _csa2_groups(spec)
    for r, count in sorted(by_ratio.items()):
        keys = minimum(d.index_topk, context // r) + w
        ops.append(
            Op(
                name=f"dsv4.csa2_attention_r{r}",
                kind="attention",
                layer_kind="mla",
                category="kv",
                count=count,
                bytes_read=(start // r) * main + minimum(start, w) * win,
                bytes_written=chunk * win,
                flops=per_key * (chunk * minimum(d.index_topk, mean_pos / r) + chunk * w) / split,
                flops_category="attention",
                tokens=chunk,
                heads=heads,
                live=_attn_live(
                    live,
                    spec,
                    seqs=1,
                    queries=chunk,
                    keys=keys,
                    tp=tp,
                    workspace=(context // r + w + chunk) * d.head_dim * BF16,
                ),
            )
        )
    if window_only:
        ops.append(
            Op(
                name="dsv4.window_attention",
                kind="attention",
                layer_kind="mla",
                category="kv",
                count=window_only,
                bytes_read=minimum(start, w) * win,
                bytes_written=chunk * win,
                flops=per_key * chunk * w / split,
                flops_category="attention",
                tokens=chunk,
                heads=heads,
                live=_attn_live(live, spec, seqs=1, queries=chunk, keys=w, tp=tp),
            )
        )
    # the sources' new entries
    for i, r in dsv4_cache.csa2_sources(d):
        ops.append(
            Op(
                name=f"dsv4.csa2_entries_l{i}",
                kind="elementwise",
                layer_kind="mla",
                category="kv",
                count=1,
                bytes_written=(chunk // r) * main,
                tokens=chunk,
            )
        )
    return ops + _csa2_common(spec, rows=chunk)


def csa2_attention_flops_at(spec: ModelSpec, context: float) -> float:
    d = spec.dsv4
    assert d is not None and d.csa2 is not None
    per_key = 2 * 2 * spec.mla.heads * d.head_dim
    w = min(d.sliding_window, context)
    cand = d.csa2.candidate_topk_blocks * d.csa2.candidate_block_size
    first, later = _csa2_indexers(spec)
    by_ratio, window_only = _csa2_groups(spec)
    idx = 2 * d.index_n_heads * d.index_head_dim
    out = sum(n * idx * context / r for r, n in first.items()) + later * idx * min(cand, context)
    out += sum(n * per_key * (min(d.index_topk, context / r) + w) for r, n in by_ratio.items())
    return out + window_only * per_key * w
