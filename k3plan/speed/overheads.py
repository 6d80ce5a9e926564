"""The step-time model's terms beyond the ops' ceilings: what a serving engine's step costs that no
roofline sees (issue 38 item 2). Each is a fixed time an engine step (a decode step, or one prefill
chunk: every chunk is a step of its own and reads the weights again), named and sourced:

    host time         the engine loop's host time a synchronous step (scheduler, input preparation,
                      dispatch, the sampled token back, output processing; the nightly's
                      ASYNC_SCHEDULING=false): the engine's published figure where one is shipped
                      (k3plan/evidence/engine_step_overheads.yaml), else the host round trip measured on
                      a TPU (k3plan/evidence/hosts/); transferred as measured (a host cost)
    op fixed cost     every op of the step description is at least one dependent fusion; the fixed
                      cost of one, measured on a TPU, x the ops' executions a step
    MXFP4 dequant     0 s of HBM: the engine unpacks MXFP4 to native fp4 once at load and its grouped
                      matmul kernel reads fp4 weights with their scales (engine code, cited)
    padding bucket    0 s: decode pads 1 row to the compiled 16, padded rows get zero routing weights
                      and are skipped by the MoE kernel; the dense matmuls read the same weights; the
                      collectives' padded rows are priced in their ops (Stack.token_buckets)
    MoE gather/combine, sampling and logits: already ops of the step (collectives, LM head): 0 s more
    empty expert groups  0 s (torchtpu-vllm): its gmm_v2 kernel visits the touched groups only (engine code,
                      cited), unlike XLA's ragged_dot that the v5e record timed (all 28 local experts at 1 token)
    device programs   0 s (torchtpu-vllm): splitting_ops = [], the forward is one compiled program a bucket
    MLA prefill form  0 s (torchtpu-vllm): a chunk attends absorbed (W_UK_T, W_UV), as the op list prices it

The terms join a StageTime as ops of category "overhead" with a ceiling of 0 (no roofline holds
them) and their time as expected, each labelled with its source. Only records measured on a TPU
backend are used; none shipped: the terms that need one are left out and the output says so.
"""

from __future__ import annotations

from k3plan.engines.flags import TORCHTPU_DEFAULT_BLOCK, TORCHTPU_DEFAULT_BLOCK_SOURCE
from k3plan.speed.efficiency import Efficiency
from k3plan.speed.expected import OpTime, StageTime, kind_times
from k3plan.step.opcost import OpCost
from k3plan.structs import Frozen, replace

ENGINE_REPO = "kowalski-4831/vllm-torchtpu"
ENGINE_COMMIT = "0095cdcbda2a44e2b3cd5975d2954765e2e95629"
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
HOST_TERM_NAME = "host and scheduler time a synchronous step"  # the engine loop's host term (speed.serving.HOST_TERM)
IN_STEP_SOURCE = "already ops of the step description (k3plan/step/ops.py): their time is in their own columns"


class EngineTerm(Frozen):
    name: str
    seconds: float  # an engine step (a decode step or one prefill chunk)
    source: str
    records: tuple[str, ...] = ()  # the probe records whose measured time set it (issue 46: the JSON names them)


def _record():
    from k3plan.evidence.hosts import shipped_step_overheads

    recs = shipped_step_overheads()
    return recs[0] if recs else None


def _op_executions(ops: list[OpCost]) -> int:
    """Executions a step of the step description's ops (a collective with no calls issues nothing)."""
    return sum(op.count for op in ops if op.kind != "overhead" and not (op.kind == "collective" and op.calls == 0))


# stacks that run vLLM's engine loop (scheduler, input preparation, output processing a step); torchtpu-vllm
# is vllm-tpu's successor (engines.stack.STACK_ALIASES)
ENGINE_FAMILY = {"vllm": "vllm", "vllm-tpu": "vllm", "torchtpu-vllm": "vllm", "tpu-inference": "vllm"}


def _engine_host(stack: str | None):
    from k3plan.evidence.hosts import engine_step_overheads

    family = ENGINE_FAMILY.get((stack or "").split(":")[0])
    return next((e for e in engine_step_overheads() if e.engine_family == family), None)


def engine_terms(
    ops: list[OpCost], *, stage: str, stack: str | None = None, device_kind: str | None = None
) -> tuple[EngineTerm, ...]:
    """The fixed terms of one engine step whose ops are ``ops``; ``stage`` "decode" or "prefill"; ``stack``
    the stack's name (its engine's published host time a step, where one is shipped); ``device_kind`` the
    target's: the TPU record's device-side terms apply to a TPU only (never a GPU's kernel launches)."""
    rec = _record()
    if rec is not None and not (device_kind or "").upper().startswith("TPU"):
        rec = None
    eng = _engine_host(stack)
    terms: list[EngineTerm] = []
    if eng is not None:  # the engine's whole host time a step: it holds the dispatch and read-back measured below
        floor = (
            f"; one host's dispatch and read-back alone: {rec.host_sync.s_host_round_trip * 1e3:.3f} ms, {rec.label}"
            if rec
            else ""
        )
        terms.append(
            EngineTerm(
                name=HOST_TERM_NAME,
                seconds=eng.seconds,
                source=(
                    f"{eng.seconds * 1e3:.2f} ms a step (each prefill chunk is one): {eng.engine_family}'s engine loop, "
                    f'"{eng.quote}" ({eng.measured_on}; {eng.source}), transferred as measured (a host-side cost of '
                    f"the same engine loop; the nightly schedules synchronously, ASYNC_SCHEDULING=false){floor}"
                ),
            )
        )
    elif rec is not None:
        terms.append(
            EngineTerm(
                name="host round trip (synchronous step)",
                seconds=rec.host_sync.s_host_round_trip,
                source=(
                    f"{rec.host_sync.s_host_round_trip * 1e3:.3f} ms a step (each prefill chunk is one), one host, "
                    f"{rec.label}; transferred as measured (a host-side cost); no engine figure for stack {stack}"
                ),
            )
        )
    if rec is not None:
        n = _op_executions(ops)
        per = rec.fusion_chain.s_per_dependent_op
        terms.append(
            EngineTerm(
                name="fixed cost of the step's ops",
                seconds=n * per,
                source=(
                    f"{n:,} op executions a step (each prefill chunk is one) of the step description x "
                    f"{per * 1e6:.2f} us a dependent fusion, {rec.label}"
                ),
            )
        )
    if any(op.kind == "grouped_matmul" for op in ops):
        if (stack or "").split(":")[0] in ("torchtpu-vllm",):  # MXFP4_SOURCE is that engine's code, no other's
            terms.append(EngineTerm(name="MXFP4 expert dequantisation", seconds=0.0, source=MXFP4_SOURCE))
        terms.append(EngineTerm(name="MoE gather and combine", seconds=0.0, source=IN_STEP_SOURCE))
        if (stack or "").split(":")[0] in ("torchtpu-vllm",):
            terms.append(EngineTerm(name="grouped matmul over empty expert groups", seconds=0.0, source=GMM_SOURCE))
    if (stack or "").split(":")[0] in ("torchtpu-vllm",):
        terms.append(EngineTerm(name="device programs a step", seconds=0.0, source=GRAPH_SOURCE))
        if stage == "prefill" and any(op.name.startswith("mla.") and op.kind == "attention" for op in ops):
            terms.append(EngineTerm(name="MLA prefill form", seconds=0.0, source=MLA_SOURCE))
    if stage == "decode":
        terms.append(EngineTerm(name="decode padding to the compiled bucket", seconds=0.0, source=PADDING_SOURCE))
        terms.append(EngineTerm(name="sampling and logits", seconds=0.0, source=IN_STEP_SOURCE))
    return tuple(terms)


ASYNC_SOURCE = (
    "asynchronous scheduling overlaps the engine loop's host work for the next step with the device's current one "
    "(vLLM --async-scheduling: vllm/v1/engine/core.py step_with_batch_queue; SGLang's overlap scheduler), so a step "
    "takes its device time where that is the longer: the synchronous step's host time is hidden"
)


def async_host_term(stage: StageTime, *, async_scheduling: bool | None, why: str = "") -> EngineTerm | None:
    """The host time a step that asynchronous scheduling hides (issue 46 item 4), as a term of minus the
    synchronous host term ``engine_terms`` priced in ``stage``; None where the run is synchronous or unknown, or
    the stage holds no host term (an engine without a published host time: nothing to hide). Key: the engine
    family's host term x the run's scheduling (its flag, else the cited default: ``engines.flags.run_scheduling``)."""
    host = sum(t.expected_s for t in stage.ops if t.kind == "overhead" and t.name == HOST_TERM_NAME)
    if not async_scheduling or host <= 0:
        return None
    return EngineTerm(
        name="host time hidden by asynchronous scheduling",
        seconds=-host,
        source=f"-{host * 1e3:.2f} ms a step: {ASYNC_SOURCE}" + (f"; the run's scheduling: {why}" if why else ""),
    )


IMBALANCE_SOURCE = (
    "a MoE layer ends in a collective every rank of the EP group waits on (its combine: the all-reduce, or the "
    "all-to-all), so the layer takes as long as the rank with the most touched experts; expected from the routing "
    "(step.work.busiest_rank_experts: top-k of E, uniform or the router histogram, vLLM's linear expert placement)"
)
IMBALANCE_ENGINE = (
    f"; the engine says so: {ENGINE_REPO} src/vllm_torchtpu/envs.py TPU_MOE_HIERARCHICAL_EP (@589f3946): the MoE "
    '"is weight-bandwidth bound and the per-device expert load is badly imbalanced" at low concurrency'
)


def expert_imbalance_term(stage: StageTime, *, busiest: float, mean: float, stack: str | None) -> EngineTerm | None:
    """The routed experts' extra time on the busiest EP rank (``step.work.busiest_rank_experts``): the routed-expert
    ops' expected time is the mean rank's (its touched experts), each visit costing alike, so the busiest rank's
    takes busiest / mean times as long. None where every rank touches as many (a wide batch, or no EP)."""
    routed = sum(t.expected_s for t in stage.ops if t.kind == "grouped_matmul")
    if routed <= 0 or mean <= 0 or busiest <= mean * (1 + 1e-9):
        return None
    engine = IMBALANCE_ENGINE if (stack or "").split(":")[0] == "torchtpu-vllm" else ""
    return EngineTerm(
        name="routed experts of the busiest EP rank",
        seconds=routed * (busiest / mean - 1),
        source=(
            f"{busiest:.2f} experts touched on the busiest rank against {mean:.2f} on the mean one a MoE layer: the "
            f"routed experts' {routed * 1e3:.3f} ms x {busiest / mean - 1:.2f} more; {IMBALANCE_SOURCE}{engine}"
        ),
    )


KERNEL_TIME_SOURCE = (
    "a fixed cost a 16-row tile: the time does not grow with the bytes (k3plan.speed.curves.KERNEL_TIME_PROBES), so "
    "it applies to this TPU as measured on the one that ran it"
)


def _per_call(points, *, tokens: int, blocks: int):
    """(seconds one call of ``tokens`` rows at ``blocks`` takes, what was used, the point): the measured point of the
    nearest row count (and the nearest K) scaled by the 16-row tiles (the kernels' grid)."""
    import math

    t = max(16, -(-tokens // 16) * 16)
    near_t = min({p.tokens for p in points}, key=lambda x: abs(math.log(x / t)))
    at_t = [p for p in points if p.tokens == near_t]
    p = min(at_t, key=lambda q: (abs(q.blocks - blocks), -q.blocks))
    return (
        p.seconds * t / near_t,
        f"{p.seconds * 1e6:.2f} us at {near_t} rows" + (f", K {p.blocks}" if blocks else ""),
        p,
    )


def kernel_time_terms(curves, spec, *, stage: str, rows: int, stack: str | None) -> tuple[EngineTerm, ...]:
    """torchtpu-vllm's small kernels measured on a TPU (``curves.kernel_times``: probe attnres, probe moe-glue), a
    step of ``rows`` rows (a decode step's padded rows; a prefill chunk's tokens): the Attention Residual kernel at
    each call of the forward (``step.attnres.attnres_call_blocks``: K3 186 a forward), and at decode the MoE's
    routing, sort and one-hot permute and combine (the glue around gmm_v2, measured at 16 rows: priced there only)."""
    times = getattr(curves, "kernel_times", None) or {}
    if (stack or "").split(":")[0] != "torchtpu-vllm" or not times:
        return ()
    from k3plan.step.attnres import attnres_call_blocks

    out: list[EngineTerm] = []
    if spec.attn_res_block_size and "attnres" in times:
        from collections import Counter

        calls = Counter(attnres_call_blocks(spec.num_layers, spec.attn_res_block_size))
        used = {k: _per_call(times["attnres"], tokens=rows, blocks=k) for k in calls}
        seconds = sum(n * used[k][0] for k, n in calls.items())
        pt = used[max(calls)][2]
        records = ", ".join(sorted({u[2].record_path for u in used.values()}))
        out.append(
            EngineTerm(
                name="the engine's Attention Residual kernel",
                seconds=seconds,
                source=(
                    f"{sum(calls.values())} calls a forward at {rows} rows (K 1-{max(calls)}: the history's blocks, "
                    f"kowalski-4831/vllm-torchtpu models/vllm/kimi_k3/model.py KimiDecoderLayer.forward @589f3946; the "
                    f"kernel kernels/kimi_k3/attention_residual.py kimi_attnres_compact_m16), each as probe attnres "
                    f"timed it on {pt.device_kind} ({records}; e.g. {used[max(calls)][1]}): {KERNEL_TIME_SOURCE}"
                ),
                records=tuple(sorted({u[2].record_path for u in used.values()})),
            )
        )
    glue = [p for p in times.get("moe-glue", ()) if p.tokens >= rows]
    if stage == "decode" and spec.moe is not None and spec.n_moe and glue:
        p = min(glue, key=lambda q: q.tokens)
        out.append(
            EngineTerm(
                name="the engine's MoE routing and one-hot permute at decode",
                seconds=spec.n_moe * p.seconds,
                source=(
                    f"{spec.n_moe} MoE layers x {p.seconds * 1e6:.2f} us: fused_moe_gmm's routing, sort, one-hot permute "
                    f"and combine around its two gmm_v2 calls (layers/core/fused_moe_gmm.py @15e5264a; the one-hot "
                    f"branch below the SparseCore threshold), as probe moe-glue timed a copy of it at {p.tokens} rows on "
                    f"{p.device_kind} ({p.record_path}): {KERNEL_TIME_SOURCE}"
                ),
                records=(p.record_path,),
            )
        )
    return tuple(out)


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
    if kv_dtype not in (None, "bf16"):
        return None
    return MLA_DEFAULT_BLOCKS["decode" if stage == "decode" else "mixed"]


def _at_context(points, context: int) -> float:
    """Seconds a call at ``context``: linear through the two measured contexts around it, or through the last two
    above the measured range (the time a step stays); at or below the first context, the first point's."""
    pts = sorted(points, key=lambda p: p.context)
    if context <= pts[0].context or len(pts) == 1:
        return pts[0].seconds if context <= pts[0].context else pts[-1].seconds
    hi = next((p for p in pts if p.context >= context), None)
    below = max((p for p in pts if p.context < context), key=lambda p: p.context)
    a, b = (pts[-2], pts[-1]) if hi is None else (below, hi)
    return a.seconds + (context - a.context) / (b.context - a.context) * (b.seconds - a.seconds)


def mla_kernel_term(
    curves,
    *,
    stage: str,
    rows: int,
    context: int,
    heads: int,
    layers: int,
    kv_dtype: str | None,
    stack: str | None,
    attention_s: float,
    sequences: int = 1,
) -> EngineTerm | None:
    """torchtpu-vllm's MLA kernel in a step of ``rows`` rows (a decode step's padded rows; a prefill chunk's tokens)
    whose sequence ends at ``context``, at the blocks and page it runs (``engine_mla_blocks``,
    ``MLA_DEFAULT_PAGE``), from probe mla-engine's points of the same pass, rows, heads, blocks and page, linear in
    the context: ``layers`` calls, less what the step description's attention ops already hold (``attention_s``).
    None where no measured point matches, or one of them is not step-bound (``MLA_STEP_BOUND``). The decode points
    hold one real sequence: a step of ``sequences`` more takes at least that (each one's pages are steps of their
    own), and the label says it is a lower bound."""
    times = (getattr(curves, "kernel_times", None) or {}).get("mla-engine", ())
    blocks = engine_mla_blocks(stage=stage, kv_dtype=kv_dtype)
    if (stack or "").split(":")[0] != "torchtpu-vllm" or not times or blocks is None or layers <= 0:
        return None
    decode = stage == "decode"
    same = [
        p
        for p in times
        if p.decode == decode
        and p.tokens == rows
        and p.block == blocks
        and p.heads == heads
        and p.page == MLA_DEFAULT_PAGE
    ]
    if not same or any(p.efficiency is None or p.efficiency >= MLA_STEP_BOUND for p in same):
        return None
    measured = ", ".join(f"{p.seconds * 1e6:,.1f} us at {p.context:,}" for p in sorted(same, key=lambda p: p.context))
    what = "the decode pass" if decode else "the mixed pass, each chunk"
    more = (
        f"; {sequences} sequences a device where one was measured: a lower bound (each sequence's pages are steps of "
        "their own)"
        if decode and sequences > 1
        else ""
    )
    return EngineTerm(
        name="the engine's MLA kernel at its blocks",
        seconds=max(0.0, layers * _at_context(same, context) - attention_s),
        source=(
            f"{layers} MLA layers x the kernel's time at the step's context ({what}: {rows} rows, {heads} heads a "
            f"device, {blocks[0]} queries x {blocks[1]} pages of {MLA_DEFAULT_PAGE} tokens a block -- the blocks the "
            f"defaults with a {kv_dtype or 'bf16'} cache, {MLA_TUNED_SOURCE}; the page {MLA_PAGE_SOURCE}; the kernel "
            f"kernels/mla/v2/kernel.py mla_ragged_paged_attention @15e5264a), as probe mla-engine timed it on "
            f"{same[0].device_kind} ({', '.join(sorted({p.record_path for p in same}))}: {measured} tokens of "
            "context; linear between them, and "
            f"beyond the last), less the step description's MLA attention ops (their own time, in the attention "
            f"column): {MLA_KERNEL_TRANSFER}{more}"
        ),
        records=tuple(sorted({p.record_path for p in same})),
    )


def missing_record_note() -> str | None:
    return None if _record() is not None else "no step-overhead record shipped: host and op fixed costs left out"


def add_terms(stage: StageTime, terms: tuple[EngineTerm, ...]) -> StageTime:
    """``stage`` with each term as an op of category "overhead": ceiling 0, expected its seconds."""
    extra = tuple(
        OpTime(
            name=t.name,
            kind="overhead",
            category="overhead",
            ceiling_s=0.0,
            expected_s=t.seconds,
            efficiency=Efficiency(
                value=1.0,
                measured=False,
                record_path=", ".join(t.records) or None,  # the records whose measured time set the term
                label=f"engine term {t.name}: {t.source}",
            ),
            label=f"{t.name}: {t.source}",
        )
        for t in terms
    )
    times = stage.ops + extra
    return replace(
        stage, expected_s=stage.expected_s + sum(t.seconds for t in terms), by_kind=kind_times(times), ops=times
    )
