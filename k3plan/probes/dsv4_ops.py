"""dsv4-ops probe: DeepSeek-V4's attention-side ops of one layer, as jnp references, timed at a DP group's
per-device shapes (issue 46: the torchtpu-vllm V4 nightlies ran 3-5x slower than the model, which had no TPU
record of these ops).

Each point is one op of k3plan's own V4 op list (``k3plan.step.dsv4_ops.decode_ops`` / ``prefill_ops`` at TP 1:
a DP group on one device, the nightlies' split), one layer, at ``rows`` query rows and ``context`` tokens:

    dsv4.indexer         the lightning indexer: q [rows, index heads, index dim] against every fp8 index key
                         (context / 4), ReLU, the per-head weights, summed over heads, then top-k (``index_topk``)
    dsv4.csa_attention   the top-k compressed entries gathered row by row (fp8 rows, one a key) and the window's
                         (bf16), then one shared K = V head of ``head_dim`` attended by every query head
    dsv4.hca_attention   context / 128 entries and the window, attended
    dsv4.window_attention  the window alone
    dsv4.mhc             mHC's pre / post / residual mixing of ``hc_mult`` streams and its Sinkhorn iterations

How the engine runs them (kowalski-4831/vllm-torchtpu, cited in ``ENGINE_SOURCE``): its own Pallas kernels
(streamindex_topk, sparse_ragged_paged_attention over a top-k gather, mla / mla_swa ragged paged attention). They
are not plain files this probe can load (their sibling modules and torch_tpu), so this probe times the jnp
computation they compute, XLA's gather and attention, the same work at the same shapes: a record of the TPU's
cost of that work, not of the engine's kernels, and the record says so.

Per point the ceiling is k3plan's own for that op (its bytes and FLOPs from the op list: max(bytes / HBM peak,
FLOPs / bf16 peak), the spec's), so the record's efficiency is the factor k3plan's ceiling misses for the op
(``speed.curves``: curve ``dsv4:<stage>:<op>``, x = rows). A point faster than its ceiling is refused
(probes/peak.py). Each point is timed as N dependent calls in one program (probes/loop.py), the output fed
back as the next call's query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from k3plan.errors import require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.kernel_point import kernel_point, kernel_record, run_case
from k3plan.probes.loop import dispatch_floor_s
from k3plan.probes.timing import stats

ENGINE_SOURCE = (
    "kowalski-4831/vllm-torchtpu src/vllm_torchtpu/layers/adapter/custom_ops/deepseek_v4/deepseek_v4_attention_op.py "
    "(_attention_csa: sparse_ragged_paged_attention over the top-k indices, gather_and_attention_chunk_size 64; "
    "_attention_hca: mla_ragged_paged_attention, 16 pages a block; _run_swa: mla_sliding_window_ragged_paged_attention) "
    "@080c3762, src/vllm_torchtpu/models/vllm/deepseek_v4/attention.py (VllmDeepseekV4MLAAttention: CSA's fp8 NoPE "
    "record, HCA and SWA raw bf16) @0095cdcb, src/vllm_torchtpu/kernels/deepseek_v4/streamindex_topk/ (the indexer's "
    "top-k, tests/kernels/test_dsv4_streamindex_topk.py: score = sum_h w_h ReLU(q_h . k) over every compressed "
    "position, top-k) @15e5264a"
)
OPS = (
    "dsv4.indexer",
    "dsv4.csa_attention",
    "dsv4.hca_attention",
    "dsv4.window_attention",
    "dsv4.mhc",
)
# not timed: the compressors' state update (a row of f32 a token) stays on chip between a loop's iterations, so a
# loop times it faster than its HBM bound, which the probe refuses (the TPU v5 lite run of 2026-12-04 did): their ops
# keep k3plan's ceiling
UNTIMED = ("dsv4.csa_compressor", "dsv4.hca_compressor")


@dataclass(frozen=True)
class Dsv4Params:
    model: str = "deepseek-v4-flash"
    decode_rows: tuple[int, ...] = (256,)  # the nightly's max_num_seqs a DP group
    prefill_rows: tuple[int, ...] = (1024,)  # its max_num_batched_tokens: one chunk
    context: int = 8192  # its ISL
    ops: tuple[str, ...] = OPS
    seed: int = 0

    def check(self) -> None:
        require(self.context >= 512, f"--context {self.context}: expected at least 512 tokens")
        for r in (*self.decode_rows, *self.prefill_rows):
            require(1 <= r <= 8192, f"rows {r}: expected 1..8192")
        bad = [o for o in self.ops if o not in OPS]
        require(not bad, f"--ops {bad}: expected some of {', '.join(OPS)}")


def k3plan_ops(spec, *, stage: str, rows: int, context: int) -> dict[str, Any]:
    """k3plan's V4 ops of one step at TP 1 (a DP group on one device), by name."""
    from k3plan.step import dsv4_ops

    if stage == "decode":
        ops = dsv4_ops.decode_ops(spec, seqs=rows, context=context, tp=1)
    else:
        ops = dsv4_ops.prefill_ops(spec, chunk=rows, context=context, tp=1)
    return {o.name: o for o in ops}


def run(*, ctx: ProbeContext, params: Dsv4Params) -> list[ProbeRecord]:
    from k3plan.models.loader import load_model

    params.check()
    spec = load_model(params.model).spec
    require(spec.dsv4 is not None and spec.dsv4.csa2 is None, f"{params.model}: not a DeepSeek-V4 (CSA/HCA) model")
    hw = ctx.hardware.spec
    peaks = (hw.hbm_bw_bytes_per_s_per_device, hw.flops_per_s_per_device("bf16")) if hw is not None else None
    cases = [("decode", r) for r in params.decode_rows] + [("prefill", r) for r in params.prefill_rows]
    ctx.plan(len(cases) * len(params.ops))
    floor = stats(dispatch_floor_s())
    attempts: list[Attempt] = []
    points: list[ProbePoint] = []
    checks: list[Verification] = []
    for stage, rows in cases:
        mine = k3plan_ops(spec, stage=stage, rows=rows, context=params.context)
        for name in params.ops:
            if ctx.deadline.expired():
                break
            op = mine.get(name)
            if op is None:
                continue
            what = f"{name} {stage} {rows} rows"
            ctx.progress(f"dsv4-ops {what}")
            fn, args, feed = _case(spec, name, stage=stage, rows=rows, context=params.context, seed=params.seed)
            lt = run_case(
                ctx, "dsv4-ops", what, fn, args, feed=feed, carried=1, verify=None, attempts=attempts, checks=checks
            )
            if lt is None:
                continue
            shape = {"op": name, "stage": stage, "rows": rows, "context": params.context, "model": params.model}
            moved = {"read_bytes": int(op.bytes_read), "written_bytes": int(op.bytes_written)}
            points.append(kernel_point("dsv4-ops", what, shape, moved, float(op.flops), peaks, lt))
    record_params = {
        "model": params.model,
        "decode_rows": list(params.decode_rows),
        "prefill_rows": list(params.prefill_rows),
        "context": params.context,
        "ops": list(params.ops),
        "tp": 1,
        "engine": ENGINE_SOURCE,
        "ceiling": "k3plan's own op (step/dsv4_ops.py) at these shapes: its bytes and FLOPs, one layer",
    }
    info = {"file": "k3plan/probes/dsv4_ops.py (jnp references)", "sha256": "-" * 12}
    return [
        kernel_record(
            ctx,
            probe="dsv4-ops",
            op="dsv4 attention-side ops (jnp)",
            params=record_params,
            attempts=attempts,
            points=points,
            info=info,
            checks=checks,
            floor_s=floor.p50,
            extra_label="jnp references of the engine's V4 kernels (XLA gather + attention), not the kernels",
        )
    ]


def _attend(q, k, scale):
    """Every query head of q [T, H, D] against its keys k [T, N, D] (one shared K = V head); bf16 out."""
    import jax
    import jax.numpy as jnp

    s = jnp.einsum("thd,tnd->thn", q, k, preferred_element_type=jnp.float32) * scale
    p = jax.nn.softmax(s, axis=-1).astype(jnp.bfloat16)
    return jnp.einsum("thn,tnd->thd", p, k, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def _case(spec, name: str, *, stage: str, rows: int, context: int, seed: int) -> tuple[Callable, tuple, Callable]:
    """(op, args, feed) for one layer of ``name``: args[0] is the carried query (or state), the output fed back."""
    import jax
    import jax.numpy as jnp

    d = spec.dsv4
    key = jax.random.key(seed)
    ks = [jax.random.fold_in(key, i) for i in range(8)]
    bf, f8 = jnp.bfloat16, jnp.float8_e4m3fn
    t, heads, hd, w = rows, spec.mla.heads, d.head_dim, min(d.sliding_window, context)
    scale = hd**-0.5
    decode = stage == "decode"
    n4 = context // 4

    def rnd(k, shape, dtype, s=1.0):
        return (jax.random.normal(k, shape, jnp.float32) * s).astype(dtype)

    def keep(full, out):  # the next call's query: this call's output, same shape and dtype
        return (out.astype(full[0].dtype).reshape(full[0].shape),)

    if name == "dsv4.indexer":
        q = rnd(ks[0], (t, d.index_n_heads, d.index_head_dim), bf)
        wts = rnd(ks[1], (t, d.index_n_heads), jnp.float32)
        keys = rnd(ks[2], (t, n4, d.index_head_dim) if decode else (n4, d.index_head_dim), f8, 0.5)
        topk = min(d.index_topk, n4)

        def indexer(q, wts, keys):
            kb = keys.astype(bf)
            s = (
                jnp.einsum("thd,tnd->thn", q, kb, preferred_element_type=jnp.float32)
                if decode
                else jnp.einsum("thd,nd->thn", q, kb, preferred_element_type=jnp.float32)
            )
            score = jnp.sum(jax.nn.relu(s) * wts[..., None], axis=1)
            if not decode:  # causal: query i of the chunk sees the entries before its position
                pos = context - t + jnp.arange(t)
                score = jnp.where(jnp.arange(n4)[None, :] * 4 <= pos[:, None], score, -jnp.inf)
            _, idx = jax.lax.top_k(score, topk)
            return idx

        def feed(full, out):  # the picks perturb the next query (a dependence, not a value)
            return (full[0] + (out[:, :1, None] % 2).astype(full[0].dtype),)

        return indexer, (q, wts, keys), feed

    if name in ("dsv4.csa_attention", "dsv4.hca_attention", "dsv4.window_attention"):
        q = rnd(ks[0], (t, heads, hd), bf)
        window = rnd(ks[1], (t, w, hd), bf, 0.5)
        if name == "dsv4.window_attention":

            def window_only(q, window):
                return _attend(q, window, scale)

            return window_only, (q, window), keep
        if name == "dsv4.hca_attention":
            n = context // 128
            ent = rnd(ks[2], (t, n, hd) if decode else (n, hd), bf, 0.5)

            def hca(q, window, ent):
                e = ent if decode else jnp.broadcast_to(ent, (t, n, hd))
                return _attend(q, jnp.concatenate([e, window], axis=1), scale)

            return hca, (q, window, ent), keep
        topk = min(d.index_topk, n4)
        entries = t * n4 if decode else n4  # a decode row's sequence has its own entries
        cache = rnd(ks[2], (entries, hd), f8, 0.5)
        base = (jnp.arange(t) * n4)[:, None] if decode else 0
        idx = jax.random.randint(ks[3], (t, topk), 0, n4, jnp.int32) + base

        def csa(q, window, cache, idx):
            # the rows picked depend on the carried query (as the indexer's picks do), so XLA cannot hoist the gather
            idx = idx + (q[:, :1, 0] > 1e30).astype(jnp.int32)
            picked = jnp.take(cache, idx, axis=0).astype(bf)  # [T, topk, D]: a row gather, one entry a key
            return _attend(q, jnp.concatenate([picked, window], axis=1), scale)

        return csa, (q, window, cache, idx), keep

    # dsv4.mhc: m streams of the hidden width; pre (m -> 1), post (1 -> m), the m x m residual mix, Sinkhorn
    m, h = d.hc_mult, spec.hidden_size
    x = rnd(ks[0], (t, m, h), bf)
    logits = rnd(ks[1], (t, m, m), jnp.float32)
    pre = rnd(ks[2], (t, m), jnp.float32)
    post = rnd(ks[3], (t, m), jnp.float32)
    iters = d.hc_sinkhorn_iters

    def mhc(x, logits, pre, post):
        mat = jnp.exp(logits + x[:, :, :m].astype(jnp.float32) * 1e-3)  # from the carried streams, as the hc_fn's are

        def norm(_, a):
            a = a / jnp.sum(a, axis=-1, keepdims=True)
            return a / jnp.sum(a, axis=-2, keepdims=True)

        mat = jax.lax.fori_loop(0, iters, norm, mat)
        xf = x.astype(jnp.float32)
        inner = jnp.einsum("tm,tmh->th", jax.nn.sigmoid(pre), xf)  # pre: the block's one input
        mixed = jnp.einsum("tij,tjh->tih", mat, xf)  # the residual streams' mix
        return (mixed + jax.nn.sigmoid(post)[..., None] * inner[:, None, :]).astype(bf)  # post: the block's output

    return mhc, (x, logits, pre, post), keep
