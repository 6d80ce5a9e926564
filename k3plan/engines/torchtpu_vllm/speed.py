"""torchtpu-vllm's speed rules (issue 51 item 2: an engine's speed rules in its folder), each cited to the engine's
code (repository, file, symbol, commit): the 0 s terms its code shows (MXFP4 read as packed, padded rows skipped,
empty expert groups never visited, one compiled program a bucket, the absorbed MLA prefill), its small kernels
and its MLA kernel at the blocks it runs, as probe records timed them on a TPU.

Pure data and functions over ints and measured points (``KernelTime``-like: ``tokens``, ``blocks``, ``seconds``,
``record_path``, ``device_kind``; mla-engine's also ``context``, ``block``, ``decode``, ``heads``, ``page``,
``efficiency``): each function returns (seconds, source, records) and ``k3plan.speed.terms`` registers it as a
term of the speed model, with its key (this engine's ``STACKS``, a TPU).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from k3plan.engines.flags import TORCHTPU_DEFAULT_BLOCK, TORCHTPU_DEFAULT_BLOCK_SOURCE

STACKS = ("torchtpu-vllm",)  # the stack whose engine code the rules below read (vllm-tpu loads it: STACK_ALIASES)
# benchmark engines whose unpublished scheduling is their harness's default (engines.flags.SCHEDULING_DEFAULT)
HARNESS_SCHEDULING_ENGINES = ("torchtpu-vllm", "vllm-tpu")

ENGINE_REPO = "kowalski-4831/vllm-torchtpu"
ENGINE_COMMIT = "0095cdcbda2a44e2b3cd5975d2954765e2e95629"
# the routed experts' resident formats its MXFP4 MoE method serves (the checkpoint's MXFP4; the plugin's fp32-scale
# form of it: engines/torchtpu_vllm/stack.yaml runtime_formats expert@mxfp4)
MXFP4_FORMATS = ("mxfp4", "mxfp4_f32scale")
MXFP4_SOURCE = (
    f"engine code: {ENGINE_REPO}@{ENGINE_COMMIT[:8]} src/vllm_torchtpu/layers/adapter/quantization/"
    "compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4an_mxfp4.py (unpacks MXFP4 to native fp4 "
    "once at load; the GMM kernel reads fp4 weights and scales): no HBM traffic beyond the packed weights; the "
    "kernel's dequantization to bf16 in VMEM (gmm_v2 inner_kernel, should_dequantize_before_matmul) is in the experts' "
    "expected time where a probe gmm record prices it (the gmm_v2 curves)"
)
PADDING_SOURCE = (
    f"engine code: {ENGINE_REPO}@{ENGINE_COMMIT[:8]} (same file: token_padding.zero_routing_weights_for_padding, "
    "skip_padded_tokens=True) and the nightly config's compile_sizes [16, 512] (decode pads to 16 rows): padded "
    "rows touch no expert; the dense matmuls read the same weights at 16 rows; the TP collectives' 16 rows are in "
    "their own column where the stack declares its compiled sizes (torchtpu-vllm's token_buckets: "
    "src/vllm_torchtpu/platforms/tpu_platform.py _get_token_paddings, min 16): 0 s more"
)
GMM_SOURCE = (
    f"engine code: {ENGINE_REPO} src/vllm_torchtpu/layers/common/fused_moe_gmm.py (moe_gmm -> gmm_wrapper -> gmm_v2, "
    "@0b0ff9bd) and src/vllm_torchtpu/kernels/megablox/gmm_v2.py (fill_metadata: should_process = group_size > 0; "
    "the pipeline's grid (num_n, num_gm, num_k) spans the touched groups' tiles only, @15e5264a): each touched "
    "expert's weights are read once, an empty group's never -- unlike XLA's ragged_dot, which on a TPU v5e read all "
    "28 local experts at 1 token (k3plan/evidence/probes/ragged-dot-tpu-v5-lite-20261204T035616Z-3c63bd.json, docs/device.md); "
    "that record does not transfer to this engine: 0 s beyond the touched experts' bytes"
)
GRAPH_SOURCE = (
    f"engine code: {ENGINE_REPO}@{ENGINE_COMMIT[:8]} src/vllm_torchtpu/platforms/tpu_platform.py "
    '(TpuPlatform.check_and_update_config: splitting_ops = [] -- "No graph splitting -- TPU handles the full '
    'graph"; compile_sizes the padding buckets): the forward is one compiled program a bucket, its ops fusions '
    "inside it (their fixed cost is the term above), not programs dispatched one by one: 0 s more"
)
MLA_SOURCE = (
    f"engine code: {ENGINE_REPO} src/vllm_torchtpu/layers/vllm/custom_ops/mla_attention_op.py (VllmTPUMLAAttention: "
    "upstream's MLA prefill backend replaced by TPUDummyMLAPrefillBackend; process_weights_after_loading keeps the "
    "absorbed W_UK_T and W_UV, kv_b_proj's weights dropped, @08c31383): a prefill chunk attends in the latent space as "
    "decode does, with no up-projection of the cached context a chunk -- the step description's absorbed MLA "
    "attention: 0 s more"
)
IMBALANCE_ENGINE = (
    f"; the engine says so: {ENGINE_REPO} src/vllm_torchtpu/envs.py TPU_MOE_HIERARCHICAL_EP (@589f3946): the MoE "
    '"is weight-bandwidth bound and the per-device expert load is badly imbalanced" at low concurrency'
)

KERNEL_TIME_SOURCE = (
    "a fixed cost a 16-row tile: the time does not grow with the bytes (k3plan.speed.curves.KERNEL_TIME_PROBES), so "
    "it applies to this TPU as measured on the one that ran it"
)
ATTNRES_SOURCE = (
    "kowalski-4831/vllm-torchtpu models/vllm/kimi_k3/model.py KimiDecoderLayer.forward @589f3946; the kernel "
    "kernels/kimi_k3/attention_residual.py kimi_attnres_compact_m16"
)
MOE_GLUE_SOURCE = (
    "fused_moe_gmm's routing, sort, one-hot permute and combine around its two gmm_v2 calls "
    "(layers/core/fused_moe_gmm.py @15e5264a; the one-hot branch below the SparseCore threshold)"
)

Timed = tuple[float, str, tuple[str, ...]]  # (seconds, source, the records whose measured time set it)


def per_call(points: Sequence[Any], *, tokens: int, blocks: int) -> tuple[float, str, Any]:
    """(seconds one call of ``tokens`` rows at ``blocks`` takes, what was used, the point): the measured point of the
    nearest row count (and the nearest K) scaled by the 16-row tiles (the kernels' grid)."""
    t = max(16, -(-tokens // 16) * 16)
    near_t = min({p.tokens for p in points}, key=lambda x: abs(math.log(x / t)))
    at_t = [p for p in points if p.tokens == near_t]
    p = min(at_t, key=lambda q: (abs(q.blocks - blocks), -q.blocks))
    return (
        p.seconds * t / near_t,
        f"{p.seconds * 1e6:.2f} us at {near_t} rows" + (f", K {p.blocks}" if blocks else ""),
        p,
    )


def attnres_kernel(points: Sequence[Any], *, calls: Mapping[int, int], rows: int) -> Timed:
    """The engine's Attention Residual kernel in a step of ``rows`` rows: ``calls`` (the history's blocks K ->
    calls a forward: ``step.attnres.attnres_call_blocks``, K3 186 a forward), each as probe attnres timed it."""
    used = {k: per_call(points, tokens=rows, blocks=k) for k in calls}
    seconds = sum(n * used[k][0] for k, n in calls.items())
    pt = used[max(calls)][2]
    records = tuple(sorted({u[2].record_path for u in used.values()}))
    return (
        seconds,
        (
            f"{sum(calls.values())} calls a forward at {rows} rows (K 1-{max(calls)}: the history's blocks, "
            f"{ATTNRES_SOURCE}), each as probe attnres "
            f"timed it on {pt.device_kind} ({', '.join(records)}; e.g. {used[max(calls)][1]}): {KERNEL_TIME_SOURCE}"
        ),
        records,
    )


def moe_glue(points: Sequence[Any], *, moe_layers: int, rows: int) -> Timed | None:
    """The engine's MoE routing and one-hot permute at decode, ``moe_layers`` layers of a step of ``rows`` rows, as
    probe moe-glue timed a copy of it at the smallest measured rows that hold them; None where none does."""
    if not points or not moe_layers:
        return None
    glue = [p for p in points if p.tokens >= rows]
    # past the largest measured rows the glue does no less work than there: that point is a lower bound, so a step
    # of more rows never loses the term (a TPOT that fell from 16 to 17 sequences, issue 46 item 7)
    p = min(glue, key=lambda q: q.tokens) if glue else max(points, key=lambda q: q.tokens)
    bound = "" if glue else f" (a lower bound: {rows} rows, the most measured {p.tokens})"
    return (
        moe_layers * p.seconds,
        (
            f"{moe_layers} MoE layers x {p.seconds * 1e6:.2f} us: {MOE_GLUE_SOURCE}, as probe moe-glue timed a copy of "
            f"it at {p.tokens} rows on {p.device_kind} ({p.record_path}){bound}: {KERNEL_TIME_SOURCE}"
        ),
        (p.record_path,),
    )


# The engine's MLA kernel (kowalski-4831/vllm-torchtpu kernels/mla/v2/kernel.py mla_ragged_paged_attention, one
# grid step a sequence, inside it each query block against the cache's pages, a block of pages a DMA) takes its
# block sizes from kernels/mla/v2/tuned_params.py get_tuned_params (@79bd30e0): a tuned entry where the workload's
# key matches one, else the defaults -- a mixed pass (a prefill chunk) 16 queries against 1 page a step, a decode
# pass 1 query against 3 pages. Its K3 entries at 3 heads a device (TP 32) are all for an fp8 cache (the tuned-MLA
# recipe's): a bf16 cache at TP 32 (the nightly's, KV_CACHE_DTYPE=auto) runs the defaults.
MLA_TUNED_SOURCE = (
    "kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/mla/v2/tuned_params.py get_tuned_params @79bd30e0"
)
MLA_DEFAULT_BLOCKS = {"mixed": (16, 1), "decode": (1, 3)}  # (queries, pages) a block with no tuned entry
MLA_DEFAULT_KV_DTYPES = (None, "bf16")  # the caches the defaults run for (None: the stack's default, bf16)
# The cache page the kernel walks: the plugin's KV block, 16 tokens by default (engines.flags)
MLA_DEFAULT_PAGE = TORCHTPU_DEFAULT_BLOCK
MLA_PAGE_SOURCE = TORCHTPU_DEFAULT_BLOCK_SOURCE
# A point far below its ceiling is bound by the kernel's steps (a page's DMA and a small matmul each), not by the
# bytes a call must move: like the small kernels above no HBM or MXU ratio carries it to another chip, and it
# applies to this TPU as measured on the TPU that ran it. Above this share of its ceiling a point streams the
# cache, which the step description's attention ops price with the model's HBM efficiency: no term.
MLA_STEP_BOUND = 0.2
MLA_KERNEL_TRANSFER = (
    f"every point used runs below {MLA_STEP_BOUND:.0%} of its ceiling, so its time follows the kernel's steps, "
    "linear in the context, not the bytes it must move (k3plan.speed.curves.KERNEL_TIME_PROBES): it applies to this "
    "TPU as measured on the one that ran it"
)


def engine_mla_blocks(*, stage: str, kv_dtype: str | None) -> tuple[int, int] | None:
    """(queries, pages) a block of torchtpu-vllm's MLA kernel for K3 at 3 heads a device, a decode step's or a
    prefill chunk's (the mixed pass): the defaults with a bf16 cache; None with any other, where a tuned entry may
    apply."""
    if kv_dtype not in MLA_DEFAULT_KV_DTYPES:
        return None
    return MLA_DEFAULT_BLOCKS["decode" if stage == "decode" else "mixed"]


def _at_context(points: Sequence[Any], context: int) -> float:
    """Seconds a call at ``context``: linear through the two measured contexts around it, or through the last two
    above the measured range (the time a step stays); at or below the first context, the first point's."""
    pts = sorted(points, key=lambda p: p.context)
    if context <= pts[0].context or len(pts) == 1:
        return pts[0].seconds if context <= pts[0].context else pts[-1].seconds
    hi = next((p for p in pts if p.context >= context), None)
    below = max((p for p in pts if p.context < context), key=lambda p: p.context)
    a, b = (pts[-2], pts[-1]) if hi is None else (below, hi)
    return a.seconds + (context - a.context) / (b.context - a.context) * (b.seconds - a.seconds)


def mla_kernel(
    points: Sequence[Any],
    *,
    stage: str,
    rows: int,
    context: int,
    heads: int,
    layers: int,
    kv_dtype: str | None,
    attention_s: float,
    sequences: int = 1,
) -> Timed | None:
    """The engine's MLA kernel in a step of ``rows`` rows (a decode step's padded rows; a prefill chunk's tokens)
    whose sequence ends at ``context``, at the blocks and page it runs (``engine_mla_blocks``, ``MLA_DEFAULT_PAGE``),
    from probe mla-engine's ``points`` of the same pass, rows, heads, blocks and page, linear in the context:
    ``layers`` calls, less what the step description's attention ops already hold (``attention_s``). None where no
    measured point matches, or one of them is not step-bound (``MLA_STEP_BOUND``). The decode points hold one real
    sequence: a step of ``sequences`` more takes at least that (each one's pages are steps of their own), and the
    source says it is a lower bound."""
    blocks = engine_mla_blocks(stage=stage, kv_dtype=kv_dtype)
    if not points or blocks is None or layers <= 0:
        return None
    decode = stage == "decode"
    like = [
        p
        for p in points
        if p.decode == decode and p.block == blocks and p.heads == heads and p.page == MLA_DEFAULT_PAGE
    ]
    # the step's rows where measured; past the most rows measured those points are a lower bound (a step of more
    # rows takes no fewer of the kernel's steps), so the term never vanishes as the batch grows (issue 46 item 7)
    fewer = [p.tokens for p in like if p.tokens < rows]
    at = rows if any(p.tokens == rows for p in like) else (max(fewer) if decode and fewer else None)
    same = [p for p in like if p.tokens == at]
    if not same or any(p.efficiency is None or p.efficiency >= MLA_STEP_BOUND for p in same):
        return None
    measured = ", ".join(f"{p.seconds * 1e6:,.1f} us at {p.context:,}" for p in sorted(same, key=lambda p: p.context))
    what = "the decode pass" if decode else "the mixed pass, each chunk"
    more = (
        f"; {sequences} sequences a device where one was measured: a lower bound (each sequence's pages are steps of "
        "their own)"
        if decode and sequences > 1
        else ""
    ) + (f"; {rows} rows, the most measured {at}: a lower bound" if at != rows else "")
    records = tuple(sorted({p.record_path for p in same}))
    return (
        max(0.0, layers * _at_context(same, context) - attention_s),
        (
            f"{layers} MLA layers x the kernel's time at the step's context ({what}: {rows} rows, {heads} heads a "
            f"device, {blocks[0]} queries x {blocks[1]} pages of {MLA_DEFAULT_PAGE} tokens a block -- the blocks the "
            f"defaults with a {kv_dtype or 'bf16'} cache, {MLA_TUNED_SOURCE}; the page {MLA_PAGE_SOURCE}; the kernel "
            f"kernels/mla/v2/kernel.py mla_ragged_paged_attention @15e5264a), as probe mla-engine timed it on "
            f"{same[0].device_kind} ({', '.join(records)}: {measured} tokens of "
            "context; linear between them, and "
            f"beyond the last), less the step description's MLA attention ops (their own time, in the attention "
            f"column): {MLA_KERNEL_TRANSFER}{more}"
        ),
        records,
    )
