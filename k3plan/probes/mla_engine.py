"""mla-engine probe: an engine's own MLA ragged paged attention kernel, loaded from a file at run time, timed at
K3's per-device shapes and the engine's block sizes (issue 38).

The kernel is not part of k3plan: ``--kernel PATH`` names a Python file that defines
``mla_ragged_paged_attention`` with the call signature of kowalski-4831/vllm-torchtpu
src/vllm_torchtpu/kernels/mla/v2/kernel.py (Apache-2.0): the absorbed MLA attention over a paged latent cache,

    mla_ragged_paged_attention(ql_nope [H, T, lkv], q_pe [T, H, r], new_kv_c [T, lkv], new_k_pe [T, r],
        cache_kv [pages, page / packing, packing, align(lkv + r, 128)], kv_lens [S], page_indices [S x pages a
        sequence], cu_q_lens [S + 1], distribution [3], *, sm_scale, num_kv_pages_per_block, num_queries_per_block,
        vmem_limit_bytes, decode_batch_size) -> (out [H, T, lkv], the cache with the new tokens written)

A sequence's query rows attend, causally, to its kv_len tokens: the cached ones, then the T new ones the kernel
writes into the cache. ``distribution`` splits the sequences into the decode, prefill and mixed passes; a prefill
chunk of one request is the mixed pass (distribution [0, 0, 1]), a decode step the decode pass ([1, 1, 1]). The
block sizes are the engine's choice (kernels/mla/v2/tuned_params.py ``get_tuned_params`` @79bd30e0): a tuned
entry where one matches the workload, else the defaults -- mixed 16 queries against 1 page a step, decode 1 query
against 3 pages, 4 sequences a batch. A file may define ``SOURCE``, ``LOCAL_EDITS`` and ``DEPENDENCIES`` (sibling
files the kernel imports; the kernel's folder is put on ``sys.path`` while it loads): all go into the record.

Each point is one sequence: T query rows (``real`` of them real, the rest padding as the engine pads a decode
batch), kv_len = context. It is timed as N dependent calls in one program (probes/loop.py), the output the next
call's query and the written cache the next call's cache. Per point

    bytes   = q (nope and rope) in, the new kv in, the output out, and the context's cached tokens read once
              (the cache's stored row, align(lkv + r, 128) values) -- what a call must move, not the kernel's own
              re-reads (``kernel_kv_bytes``: once a query block, what its blocking makes it read)
    FLOPs   = 2 x H x (lkv + r) x keys + 2 x H x lkv x keys, keys = the causal (query, key) pairs of the real rows
    ceiling = max(bytes / HBM peak, FLOPs / bf16 peak)      (the spec's, hardware_specs/)

a point faster than its ceiling is refused (probes/peak.py). Numerics: the cached tokens hold one latent row
(so the check does not depend on how the cache packs tokens) and the new ones are random; the real rows' output
is checked against a float64 numpy attention over the same keys.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from k3plan.engines.flags import TORCHTPU_DEFAULT_BLOCK
from k3plan.errors import require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.kda_engine import load_kernel
from k3plan.probes.kernel_point import kernel_point, kernel_record, run_case
from k3plan.probes.loop import dispatch_floor_s
from k3plan.probes.timing import stats

# K3 at TP 32 (docs/k3-facts.md): 96 MLA heads / 32 = 3 a device, kv_lora 512, 64 unrotated rope dims cached,
# q head 128 + 64 (sm_scale 192^-0.5)
K3_HEADS, K3_LKV, K3_ROPE, K3_QK_HEAD = 3, 512, 64, 192
# the page the kernel walks: the plugin's 16-token default KV block (engines.flags.TORCHTPU_DEFAULT_BLOCK, cited
# there); the record keeps the figure
DEFAULT_PAGE = TORCHTPU_DEFAULT_BLOCK
DEFAULT_MAX_LEN = 9216  # the nightly's max_model_len: pages a sequence's table holds
VMEM_LIMIT = 62914560  # tuned_params.get_tuned_params' defaults (and every K3 entry but one)
# tuned_params.get_tuned_params' defaults for a workload with no tuned entry: (queries, pages) a block
MIXED_DEFAULT = (16, 1)
DECODE_DEFAULT = (1, 3)
DECODE_BATCH_DEFAULT = 4
TOLERANCE = 2e-2  # max abs error / max |reference|: a bf16 output of a bf16 softmax


@dataclass(frozen=True)
class MlaPoint:
    """One timed call: ``rows`` query rows of which ``real`` are real, ``context`` tokens of kv (the real rows
    the last ones), ``queries`` x ``pages`` a kernel block, the decode or the mixed pass."""

    rows: int
    real: int
    context: int
    queries: int
    pages: int
    decode: bool

    @property
    def label(self) -> str:
        what = "decode" if self.decode else "mixed"
        return f"{what} T={self.rows} real={self.real} ctx={self.context} bq={self.queries} bkv={self.pages}"


@dataclass(frozen=True)
class MlaParams:
    kernel: Optional[Path] = None  # defines mla_ragged_paged_attention
    tokens: int = 512  # a prefill chunk's rows (the nightly's max_num_batched_tokens)
    contexts: tuple[int, ...] = (512, 2048, 4608, 8192)  # kv_len at a chunk: its end in the prompt
    blocks: tuple[tuple[int, int], ...] = (MIXED_DEFAULT,)  # (queries, pages) a mixed-pass block
    decode_rows: int = 16  # decode's padded rows (the nightly's smallest compiled size)
    decode_contexts: tuple[int, ...] = (8192,)
    decode_blocks: tuple[int, int] = DECODE_DEFAULT
    decode_batch: int = DECODE_BATCH_DEFAULT
    heads: int = K3_HEADS
    lkv: int = K3_LKV
    rope: int = K3_ROPE
    qk_head: int = K3_QK_HEAD
    page: int = DEFAULT_PAGE
    max_len: int = DEFAULT_MAX_LEN
    vmem_limit: int = VMEM_LIMIT
    seed: int = 0

    def check(self) -> None:
        require(self.kernel is not None, "give --kernel (a file defining mla_ragged_paged_attention)")
        require(self.kernel is not None and self.kernel.is_file(), f"--kernel {self.kernel}: no such file")
        for name, v in (("--heads", self.heads), ("--lkv", self.lkv), ("--rope", self.rope), ("--page", self.page)):
            require(v >= 1, f"{name} must be >= 1")
        require(self.lkv % 128 == 0, f"--lkv {self.lkv}: the kernel takes a multiple of 128")
        require(self.tokens >= 1 and self.decode_rows >= 1, "--tokens and --decode-rows must be >= 1")
        for c in (*self.contexts, *self.decode_contexts):
            require(c <= self.max_len, f"context {c}: above --max-len {self.max_len} (the page table's reach)")
        for c in self.contexts:
            require(c >= self.tokens, f"--contexts {c}: a chunk's context holds its own {self.tokens} tokens")
        for q, p in (*self.blocks, self.decode_blocks):
            require(q >= 1 and p >= 1, f"block {q}x{p}: queries and pages a block must be >= 1")

    def all_points(self) -> list[MlaPoint]:
        out = [MlaPoint(self.tokens, self.tokens, c, q, p, decode=False) for q, p in self.blocks for c in self.contexts]
        q, p = self.decode_blocks
        out += [MlaPoint(self.decode_rows, 1, c, q, p, decode=True) for c in self.decode_contexts]
        return out


def causal_keys(real: int, context: int) -> int:
    """(query, key) pairs of ``real`` query rows that are the last of ``context`` tokens, causally."""
    return real * (context - real) + real * (real + 1) // 2


def mla_cost(pt: MlaPoint, *, heads: int, lkv: int, rope: int, page: int) -> tuple[dict[str, int], float, int]:
    """(bytes one call must move, by stream; its FLOPs; the bytes of cache rows its blocking reads)."""
    row = -(-(lkv + rope) // 128) * 128 * 2  # a cached token's stored row, bf16
    moved = {
        "q_bytes": pt.real * heads * (lkv + rope) * 2,
        "new_kv_bytes": pt.real * (lkv + rope) * 2,
        "out_bytes": pt.real * heads * lkv * 2,
        "cached_kv_bytes": (pt.context - pt.real) * row,
    }
    keys = causal_keys(pt.real, pt.context)
    flops = float(2 * heads * keys * (lkv + rope) + 2 * heads * keys * lkv)
    block = pt.pages * page
    kernel_kv = 0
    for start in range(0, pt.real, pt.queries):  # each query block reads the blocks up to its last key
        last = pt.context - pt.real + min(start + pt.queries, pt.real)
        kernel_kv += -(-last // block) * block * row
    return moved, flops, kernel_kv


def run(*, ctx: ProbeContext, params: MlaParams) -> list[ProbeRecord]:
    params.check()
    assert params.kernel is not None
    hw = ctx.hardware.spec
    peaks = (hw.hbm_bw_bytes_per_s_per_device, hw.flops_per_s_per_device("bf16")) if hw is not None else None
    points = params.all_points()
    ctx.plan(len(points))
    floor = stats(dispatch_floor_s())
    folder = str(params.kernel.resolve().parent)
    sys.path.insert(0, folder)  # the kernel's sibling imports (DEPENDENCIES)
    try:
        kernel, info = load_kernel(params.kernel, "mla_ragged_paged_attention")
    finally:
        sys.path.remove(folder)
    return [
        _run_kernel(ctx=ctx, params=params, kernel=kernel, info=info, points=points, peaks=peaks, floor_s=floor.p50)
    ]


def _run_kernel(
    *,
    ctx: ProbeContext,
    params: MlaParams,
    kernel: Callable[..., Any],
    info: dict[str, Any],
    points: list[MlaPoint],
    peaks: Optional[tuple[float, float]],
    floor_s: float,
) -> ProbeRecord:
    attempts: list[Attempt] = []
    out_points: list[ProbePoint] = []
    checks: list[Verification] = []
    for pt in points:
        if ctx.deadline.expired():
            break
        ctx.progress(f"mla-engine {pt.label}")
        op, args, feed = _case(params, kernel, pt)

        def verify(first: Any, args: tuple = args, pt: MlaPoint = pt) -> Verification:
            return _verify(first[0], args, params=params, pt=pt)

        what = f"mla {pt.label}"
        lt = run_case(
            ctx, "mla-engine", what, op, args, feed=feed, carried=2, verify=verify, attempts=attempts, checks=checks
        )
        if lt is None:
            continue
        moved, flops, kernel_kv = mla_cost(pt, heads=params.heads, lkv=params.lkv, rope=params.rope, page=params.page)
        shape = {
            "pass": "decode" if pt.decode else "mixed",
            "rows": pt.rows,
            "real_rows": pt.real,
            "context": pt.context,
            "queries_a_block": pt.queries,
            "pages_a_block": pt.pages,
            "page_size": params.page,
            "heads": params.heads,
            "kernel_kv_bytes": kernel_kv,
        }
        out_points.append(kernel_point("mla-engine", what, shape, moved, flops, peaks, lt))
    record_params = {
        "kernel": info,
        "tokens": params.tokens,
        "contexts": list(params.contexts),
        "blocks": [list(b) for b in params.blocks],
        "decode_rows": params.decode_rows,
        "decode_contexts": list(params.decode_contexts),
        "decode_blocks": list(params.decode_blocks),
        "decode_batch": params.decode_batch,
        "heads": params.heads,
        "lkv": params.lkv,
        "rope": params.rope,
        "page_size": params.page,
        "max_len": params.max_len,
        "vmem_limit_bytes": params.vmem_limit,
        "call": (
            "one sequence: mla_ragged_paged_attention(ql_nope [H, T, lkv], q_pe [T, H, r], new_kv_c [T, lkv], "
            "new_k_pe [T, r], cache_kv (bf16 pages), kv_lens [context], page_indices (the sequence's pages), "
            "cu_q_lens [0, real], distribution ([0, 0, 1] a prefill chunk, the mixed pass; [1, 1, 1] a decode "
            "step), sm_scale = qk_head^-0.5, the block sizes, vmem_limit_bytes, decode_batch_size); the next call's "
            "query is this call's output, its cache the written one"
        ),
    }
    return kernel_record(
        ctx,
        probe="mla-engine",
        op="mla_ragged_paged_attention",
        params=record_params,
        attempts=attempts,
        points=out_points,
        info=info,
        checks=checks,
        floor_s=floor_s,
    )


def _shapes(params: MlaParams) -> dict[str, Any]:
    packing = 2  # bf16: two tokens a 32-bit row
    pages = -(-params.max_len // params.page)
    return {
        "pages": pages,
        "cache": (pages + 1, -(-params.page // packing), packing, -(-(params.lkv + params.rope) // 128) * 128),
    }


def _case(params: MlaParams, kernel: Callable[..., Any], pt: MlaPoint):
    import jax
    import jax.numpy as jnp

    key = jax.random.key(params.seed)
    k1, k2, k3, k4, k5 = (jax.random.fold_in(key, i) for i in range(5))
    h, lkv, r, t, bf = params.heads, params.lkv, params.rope, pt.rows, jnp.bfloat16
    sh = _shapes(params)
    # every cached token holds one latent row: the check below needs no knowledge of how the cache packs tokens
    row = jax.random.normal(k1, (sh["cache"][-1],), jnp.float32) * 0.5
    cache = jnp.broadcast_to(row, sh["cache"]).astype(bf)
    ql = jax.random.normal(k2, (h, t, lkv), jnp.float32).astype(bf)
    qpe = jax.random.normal(k3, (t, h, r), jnp.float32).astype(bf)
    kvc = (jax.random.normal(k4, (t, lkv), jnp.float32) * 0.5).astype(bf)
    kpe = (jax.random.normal(k5, (t, r), jnp.float32) * 0.5).astype(bf)
    kv_lens = jnp.array([pt.context], jnp.int32)
    page_indices = jnp.arange(1, sh["pages"] + 1, dtype=jnp.int32)  # page 0 unused, as the engine's null page
    cu = jnp.array([0, pt.real], jnp.int32)
    distribution = jnp.array([1, 1, 1] if pt.decode else [0, 0, 1], jnp.int32)
    scale = params.qk_head**-0.5
    batch = params.decode_batch if pt.decode else 1

    def op(ql, cache, qpe, kvc, kpe, kv_lens, page_indices, cu, distribution):
        return kernel(
            ql,
            qpe,
            kvc,
            kpe,
            cache,
            kv_lens,
            page_indices,
            cu,
            distribution,
            sm_scale=scale,
            num_kv_pages_per_block=pt.pages,
            num_queries_per_block=pt.queries,
            vmem_limit_bytes=params.vmem_limit,
            decode_batch_size=batch,
        )

    def feed(full, out):  # the next call's query is this call's output; its cache the one this call wrote
        return (out[0].astype(full[0].dtype).reshape(full[0].shape), out[1])

    return op, (ql, cache, qpe, kvc, kpe, kv_lens, page_indices, cu, distribution), feed


def _verify(out: Any, args: tuple, *, params: MlaParams, pt: MlaPoint) -> Verification:
    """The real rows' output against a float64 numpy attention over the same keys: the cached tokens' one row,
    then the new ones, causally."""
    import numpy as np

    def f64(a: Any) -> Any:
        return np.asarray(np.asarray(a.astype("float32")), np.float64)

    ql, cache, qpe, kvc, kpe = (f64(a) for a in args[:5])
    lkv, n, real = params.lkv, pt.real, pt.context - pt.real
    row = cache.reshape(-1, cache.shape[-1])[0]
    keys_c = np.concatenate([np.broadcast_to(row[:lkv], (real, lkv)), kvc[: pt.real]])  # [context, lkv]
    keys_r = np.concatenate([np.broadcast_to(row[lkv : lkv + params.rope], (real, params.rope)), kpe[: pt.real]])
    scale = params.qk_head**-0.5
    s = (np.einsum("htd,kd->htk", ql[:, :n], keys_c) + np.einsum("thd,kd->htk", qpe[:n], keys_r)) * scale
    pos = real + np.arange(n)
    s = np.where(np.arange(pt.context)[None, None, :] <= pos[None, :, None], s, -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    ref = np.einsum("htk,kd->htd", p, keys_c)
    got = f64(out)[:, :n]
    err = float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    return Verification(
        check="numerics",
        ok=err <= TOLERANCE,
        detail=(
            f"mla {pt.label}: the {n} real rows' output vs a float64 numpy attention over the same {pt.context} "
            f"keys: max abs error {err:.3g} of the reference's largest value (tolerance {TOLERANCE:g})"
        ),
    )
