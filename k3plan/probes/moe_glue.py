"""moe-glue probe: the XLA glue around an engine's two routed-expert matmuls at decode (routing remap, sort,
one-hot permute, one-hot combine), loaded from a file at run time, timed at K3's per-device shapes (issue 38).

``--kernel PATH`` names a Python file that defines ``moe_glue`` -- for kowalski-4831/vllm-torchtpu (Apache-2.0) a
local copy of src/vllm_torchtpu/layers/core/fused_moe_gmm.py's ``fused_moe_func`` with the two ``gmm_wrapper``
(gmm_v2) calls taken out (those are timed by probe gmm): its EP remap, ``prepare_routed_gmm_inputs`` (the argsort,
its inverse, the group sizes, the packed (expert, token) sort and the one-hot permute ``one_hot(token_indices_sorted,
T) @ hidden``) and ``moe_gmm``'s one-hot combine (``one_hot(revert, T*topk)`` weighted, summed over top-k, ``@
gmm2_res``), the branch the engine takes when the routed rows T x topk are at most its one-hot threshold (auto: the
SparseCore geometry's block rows - 1, capped at 512, on a SparseCore TPU):

    moe_glue(hidden [T, H] bf16, gmm2_res [T*topk, H] bf16, topk_weights [T, topk] f32, topk_ids [T, topk] int32,
             experts_start int32, *, topk, local_num_experts, onehot_moe_permute_threshold)
        -> (out [T, H], x [T*topk, H] (the permuted rows gmm1 reads), group_sizes [local_num_experts])

Each point is timed as N dependent calls in one program (probes/loop.py): the output is the next call's hidden and
the expert ids move on by one (so the sort is not loop-invariant). Per point

    bytes   = hidden in, x out, gmm2_res in, out (bf16); ids and weights (4 B each a routed row)
    FLOPs   = the two one-hot matmuls, 2 x R x T x H each (R = T x topk), on the MXU
    ceiling = max(bytes / HBM peak, FLOPs / bf16 peak)      (the spec's, hardware_specs/)

a point faster than its ceiling is refused; numerics (x and out) are checked against numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from k3plan.errors import require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.kda_engine import load_kernel
from k3plan.probes.kernel_point import kernel_point, kernel_record, run_case
from k3plan.probes.loop import dispatch_floor_s
from k3plan.probes.timing import stats

# K3 at TP 32 / EP 32 (docs/k3-facts.md §1): 896 routed experts, top-16, 28 a device; the latent MoE width 3584
K3_EXPERTS, K3_TOPK, K3_EP, K3_LATENT = 896, 16, 32, 3584
DEFAULT_TOKENS = (16,)  # decode's padded rows
ONEHOT_THRESHOLD = 511  # resolve_onehot_permute_threshold's auto value capped at 512 - 1 (a SparseCore TPU)
TOLERANCE = 2e-2
BASELINE = (
    "none needed: N dependent calls in one compiled program (probes/loop.py), the marginal cost between two N; the "
    "dispatch floor and the program's fixed cost are each point's params.floor_s"
)


@dataclass(frozen=True)
class MoeGlueParams:
    kernel: Optional[Path] = None  # defines moe_glue
    tokens: tuple[int, ...] = DEFAULT_TOKENS
    experts: int = K3_EXPERTS
    topk: int = K3_TOPK
    ep: int = K3_EP
    hidden: int = K3_LATENT
    threshold: int = ONEHOT_THRESHOLD
    seed: int = 0

    @property
    def local_experts(self) -> int:
        return self.experts // self.ep

    def check(self) -> None:
        require(self.kernel is not None, "give --kernel (a file defining moe_glue)")
        require(self.kernel is not None and self.kernel.is_file(), f"--kernel {self.kernel}: no such file")
        require(self.hidden >= 1 and self.topk >= 1 and self.ep >= 1, "--hidden, --topk, --ep must be >= 1")
        require(self.experts % self.ep == 0, f"--experts {self.experts} must divide by --ep {self.ep}")
        require(self.topk <= self.experts, "--topk must be <= --experts")
        for t in self.tokens:
            require(
                t * self.topk <= self.threshold,
                f"--tokens {t}: {t} x top-{self.topk} routed rows exceed the one-hot threshold {self.threshold} "
                "(the engine then takes its SparseCore path, not this glue)",
            )


def glue_cost(*, tokens: int, topk: int, hidden: int) -> tuple[dict[str, int], float]:
    """(bytes one call must move, by stream; the one-hot matmuls' FLOPs)."""
    r = tokens * topk
    moved = {
        "hidden_bytes": tokens * hidden * 2,
        "permuted_bytes": r * hidden * 2,  # x, written for gmm1
        "gmm2_bytes": r * hidden * 2,  # gmm2's output, read by the combine
        "out_bytes": tokens * hidden * 2,
        "routing_bytes": r * 4 * 2,  # ids and weights
    }
    return moved, float(2 * (2 * r * tokens * hidden))


def run(*, ctx: ProbeContext, params: MoeGlueParams) -> list[ProbeRecord]:
    params.check()
    assert params.kernel is not None
    hw = ctx.hardware.spec
    peaks = (hw.hbm_bw_bytes_per_s_per_device, hw.flops_per_s_per_device("bf16")) if hw is not None else None
    ctx.plan(len(params.tokens))
    floor = stats(dispatch_floor_s())
    kernel, info = load_kernel(params.kernel, "moe_glue")

    attempts: list[Attempt] = []
    out_points: list[ProbePoint] = []
    checks: list[Verification] = []
    for tokens in params.tokens:
        if ctx.deadline.expired():
            break
        where = f"T={tokens} top-{params.topk} of {params.experts}, {params.local_experts} local"
        ctx.progress(f"moe-glue {where}")
        op, args, feed = _case(params, kernel, tokens)

        def verify(first: Any, args: tuple = args, where: str = where) -> Verification:
            return _verify(first, args, params=params, what=where)

        what = f"moe_glue {where}"
        lt = run_case(
            ctx, "moe-glue", what, op, args, feed=feed, carried=2, verify=verify, attempts=attempts, checks=checks
        )
        if lt is None:
            continue
        moved, flops = glue_cost(tokens=tokens, topk=params.topk, hidden=params.hidden)
        shape = {
            "tokens": tokens,
            "routed_rows": tokens * params.topk,
            "topk": params.topk,
            "experts": params.experts,
            "local_experts": params.local_experts,
            "hidden": params.hidden,
        }
        out_points.append(kernel_point("moe-glue", what, shape, moved, flops, peaks, lt))
    record_params = {
        "kernel": info,
        "tokens": list(params.tokens),
        "experts": params.experts,
        "topk": params.topk,
        "ep": params.ep,
        "local_experts": params.local_experts,
        "hidden": params.hidden,
        "onehot_moe_permute_threshold": params.threshold,
        "call": (
            "moe_glue(hidden, gmm2_res, topk_weights, topk_ids, experts_start=0, topk, local_num_experts, "
            "onehot_moe_permute_threshold): every row routed (skip_padded_tokens off, the default), distinct random "
            "experts a row; the next call's hidden is this call's output and its ids move on by one"
        ),
    }
    return [
        kernel_record(
            ctx,
            probe="moe-glue",
            op="moe_glue",
            params=record_params,
            attempts=attempts,
            points=out_points,
            baseline=BASELINE,
            info=info,
            checks=checks,
            floor_s=floor.p50,
            extra_label=(
                f"glue only, from {info['file']}: a standalone copy of the engine's MoE routing/permute/combine with "
                "its two grouped matmuls taken out (params.kernel.local_edits say what differs)"
            ),
        )
    ]


def _case(params: MoeGlueParams, kernel: Callable[..., Any], tokens: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(params.seed)
    e, k, h = params.experts, params.topk, params.hidden
    ids = np.stack([rng.choice(e, k, replace=False) for _ in range(tokens)]).astype(np.int32)
    # at least one local expert (ids 0..local-1 with experts_start 0) in the first row, so the combine has work
    ids[0, 0] = 0 if 0 not in ids[0] else ids[0, 0]
    weights = rng.random((tokens, k)).astype(np.float32)
    weights /= weights.sum(axis=1, keepdims=True)
    key = jax.random.key(params.seed)
    hidden = jax.random.normal(jax.random.fold_in(key, 0), (tokens, h), jnp.float32).astype(jnp.bfloat16)
    gmm2 = jax.random.normal(jax.random.fold_in(key, 1), (tokens * k, h), jnp.float32).astype(jnp.bfloat16)
    local, thr = params.local_experts, params.threshold

    def op(hid, top_ids, g2, w, start):
        return kernel(hid, g2, w, top_ids, start, topk=k, local_num_experts=local, onehot_moe_permute_threshold=thr)

    def feed(full, out):  # the next call's hidden is this output; its experts move on by one
        o = out[0]
        step = 1 + (o[0, 0] != o[0, 0]).astype(jnp.int32)  # 1, but not a constant XLA can fold
        return (o.astype(full[0].dtype).reshape(full[0].shape), (full[1] + step) % e)

    args = (hidden, jnp.asarray(ids), gmm2, jnp.asarray(weights), jnp.int32(0))
    return op, args, feed


def _verify(out: Any, args: tuple, *, params: MoeGlueParams, what: str) -> Verification:
    """x against hidden gathered in the stable expert order; out against the weighted sum of gmm2's rows."""
    import numpy as np

    def f64(a: Any) -> Any:
        return np.asarray(np.asarray(a.astype("float32")), np.float64)

    hidden, ids, gmm2, weights = f64(args[0]), np.asarray(args[1]), f64(args[2]), np.asarray(args[3])
    tokens, k = ids.shape
    local = params.local_experts
    import jax.numpy as jnp

    w_bf = f64(jnp.asarray(weights).astype(jnp.bfloat16))  # the engine casts the weights to the hidden dtype
    flat_ids = ids.reshape(-1)
    valid = (flat_ids >= 0) & (flat_ids < local)
    keys = np.where(valid, flat_ids, local)
    order = np.argsort(keys, kind="stable")
    pos = np.empty_like(order)
    pos[order] = np.arange(order.size)
    token_of = np.repeat(np.arange(tokens), k)
    x_ref = hidden[token_of[order]]
    count = int(valid.sum())
    rows = np.where(np.arange(gmm2.shape[0])[:, None] < count, gmm2, 0.0)
    out_ref = np.zeros_like(hidden)
    for i in range(tokens * k):
        if valid[i]:
            out_ref[token_of[i]] += w_bf.reshape(-1)[i] * rows[pos[i]]
    o, x, gs = out
    err_x = float(np.max(np.abs(f64(x) - x_ref)) / max(float(np.max(np.abs(x_ref))), 1e-30))
    err_o = float(np.max(np.abs(f64(o) - out_ref)) / max(float(np.max(np.abs(out_ref))), 1e-30))
    sizes_ok = bool(np.asarray(gs).sum() == count)
    return Verification(
        check="numerics",
        ok=max(err_x, err_o) <= TOLERANCE and sizes_ok and count > 0,
        detail=(
            f"moe_glue {what}: permuted rows and combined output vs numpy (stable expert order): max abs error "
            f"{err_x:.3g} and {err_o:.3g} of the reference's largest value (tolerance {TOLERANCE:g}); {count} of "
            f"{tokens * k} routed rows local, group sizes sum right: {sizes_ok}"
        ),
    )
