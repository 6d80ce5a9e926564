"""attnres probe: an engine's own Attention Residual kernel, loaded from a file at run time, timed at K3's
per-device shapes (issue 38).

The kernel is not part of k3plan: ``--kernel PATH`` names a Python file that defines ``attention_residual`` with
the call signature of kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/kimi_k3/attention_residual.py
(Apache-2.0; the Pallas kernel ``kimi_attnres_compact_m16``, grid T/16, f32 math), called as that engine's
``AttentionResidual.forward`` (models/vllm/kimi_k3/layers.py) calls it on a TPU when the rows are a multiple of 16:

    attention_residual(prefix [T, hidden] bf16, history [T, K, hidden] bf16, folded_weight [hidden] f32, eps=eps)
        out[t] = sum_j p[t, j] x v[t, j]   over the K + 1 vectors v[t] = (history[t, 0..K-1], prefix[t]), in f32,
        p[t] = softmax_j((v[t, j] . w) x rsqrt(mean(v[t, j]^2) + eps))

A file may define ``SOURCE`` (a dict: repo, path, commit), ``LOCAL_EDITS`` and ``DEPENDENCIES`` (as probe
kda-engine reads them): all go into the record, with the file's sha256.

How many blocks K each call of a K3 forward sees (``k3_call_blocks``) follows KimiDecoderLayer.forward and
KimiModel.forward (models/vllm/kimi_k3/model.py @589f3946): the history starts empty; layer i calls
``self_attention_res`` on the history it gets (skipped while it is empty), appends its input when i % block_size
== 0, then calls ``mlp_res`` on the history after the append; the model calls ``output_attn_res`` once on the
final history. K3 (93 layers, attn_res_block_size 12): 92 + 93 + 1 = 186 calls a forward, K = 1..8.

Each point is timed as N dependent calls in one program (probes/loop.py), the output the next call's prefix (as
the next layer's). Per point

    bytes   = prefix in + history in + out (bf16) + the folded weight (f32): what one call must move
    FLOPs   = 6 x T x (K + 1) x hidden: the kernel's f32 elementwise math (square, mean, x w, sum, x p, sum) --
              VPU work, not MXU, counted against the bf16 (MXU) peak as the ceiling's formula asks: a generous
              bound, which the byte side dominates anyway
    ceiling = max(bytes / HBM peak, FLOPs / bf16 peak)      (the spec's, hardware_specs/)

a point faster than its ceiling is refused (probes/peak.py); numerics are checked against a numpy float64 mix.
The record's params.per_step sums the measured points over a forward's calls (decode: T = 16 padded rows; a
prefill chunk: its T), when every K it needs was measured.
"""

from __future__ import annotations

from collections import Counter
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

# K3 (docs/k3-facts.md §1): hidden 7168, 93 layers, attn_res_block_size 12, rms_norm_eps 1e-5 (the kernel's default)
K3_HIDDEN, K3_LAYERS, K3_BLOCK_SIZE, K3_EPS = 7168, 93, 12, 1e-5
TILE = 16  # the kernel's row tile (it refuses T % 16 != 0)
DEFAULT_TOKENS = (16, 512)  # decode's 16 padded rows; the nightly's 512-token prefill chunk
DEFAULT_BLOCKS = tuple(range(1, 9))  # the K a K3 forward's calls see (k3_call_blocks)
VALUES_FLOPS = 6  # f32 ops an element of the K + 1 vectors: square, mean's sum, x w, sum, x p, sum over the blocks
TOLERANCE = 2e-2  # max abs error / max |reference|: a bf16 output of an f32 mix


def k3_call_blocks(layers: int = K3_LAYERS, block_size: int = K3_BLOCK_SIZE) -> list[int]:
    """The history's block count K at each Attention Residual call of one forward, in order
    (k3plan.step.attnres.attnres_call_blocks, which the speed model prices the same calls with)."""
    require(layers >= 1 and block_size >= 1, "layers and block size must be >= 1")
    from k3plan.step.attnres import attnres_call_blocks

    return attnres_call_blocks(layers, block_size)


@dataclass(frozen=True)
class AttnResParams:
    kernel: Optional[Path] = None  # defines attention_residual
    tokens: tuple[int, ...] = DEFAULT_TOKENS
    blocks: tuple[int, ...] = DEFAULT_BLOCKS
    hidden: int = K3_HIDDEN
    layers: int = K3_LAYERS
    block_size: int = K3_BLOCK_SIZE
    eps: float = K3_EPS
    seed: int = 0

    def check(self) -> None:
        require(self.kernel is not None, "give --kernel (a file defining attention_residual)")
        require(self.kernel is not None and self.kernel.is_file(), f"--kernel {self.kernel}: no such file")
        require(self.hidden >= 1, "--hidden must be >= 1")
        require(self.layers >= 1 and self.block_size >= 1, "--layers and --block-size must be >= 1")
        require(self.eps > 0, "--eps must be > 0")
        for t in self.tokens:
            require(t >= TILE and t % TILE == 0, f"--tokens {t}: the kernel takes a multiple of {TILE} rows")
        for k in self.blocks:
            require(k >= 1, f"--blocks {k}: the kernel is called with at least one block")


def attnres_cost(*, tokens: int, blocks: int, hidden: int) -> tuple[dict[str, int], float]:
    """(bytes one call must move, by stream; its f32 elementwise FLOPs)."""
    moved = {
        "prefix_bytes": tokens * hidden * 2,
        "history_bytes": tokens * blocks * hidden * 2,
        "out_bytes": tokens * hidden * 2,
        "weight_bytes": hidden * 4,
    }
    return moved, float(VALUES_FLOPS * tokens * (blocks + 1) * hidden)


def per_step(points: list[ProbePoint], calls: list[int]) -> dict[str, Any]:
    """For each T measured: the sum over a forward's calls (K each) of the point's seconds and ceiling."""
    need = Counter(calls)
    by: dict[int, dict[int, ProbePoint]] = {}
    for p in points:
        by.setdefault(int(p.params["tokens"]), {})[int(p.params["blocks"])] = p
    out: dict[str, Any] = {}
    for t, pts in sorted(by.items()):
        missing = sorted(k for k in need if k not in pts or pts[k].value is None)
        entry: dict[str, Any] = {"calls": len(calls), "missing_blocks": missing}
        if not missing:
            entry["measured_s"] = sum(n * float(pts[k].value or 0.0) for k, n in need.items())
            ceil = [pts[k].params.get("ceiling_s") for k in need]
            entry["ceiling_s"] = (
                sum(n * float(pts[k].params["ceiling_s"]) for k, n in need.items())
                if all(c is not None for c in ceil)
                else None
            )
        out[str(t)] = entry
    return out


def run(*, ctx: ProbeContext, params: AttnResParams) -> list[ProbeRecord]:
    params.check()
    assert params.kernel is not None
    hw = ctx.hardware.spec
    peaks = (hw.hbm_bw_bytes_per_s_per_device, hw.flops_per_s_per_device("bf16")) if hw is not None else None
    points = [(t, k) for t in params.tokens for k in params.blocks]
    ctx.plan(len(points))
    floor = stats(dispatch_floor_s())
    kernel, info = load_kernel(params.kernel, "attention_residual")
    return [
        _run_kernel(ctx=ctx, params=params, kernel=kernel, info=info, points=points, peaks=peaks, floor_s=floor.p50)
    ]


def _run_kernel(
    *,
    ctx: ProbeContext,
    params: AttnResParams,
    kernel: Callable[..., Any],
    info: dict[str, Any],
    points: list[tuple[int, int]],
    peaks: Optional[tuple[float, float]],
    floor_s: float,
) -> ProbeRecord:
    attempts: list[Attempt] = []
    out_points: list[ProbePoint] = []
    checks: list[Verification] = []
    for tokens, blocks in points:
        if ctx.deadline.expired():
            break
        where = f"T={tokens} K={blocks}"
        ctx.progress(f"attnres {where}")
        op, args, feed = _case(params, kernel, tokens, blocks)

        def verify(first: Any, args: tuple = args, where: str = where) -> Verification:
            return _verify(first, args, eps=params.eps, what=where)

        what = f"attention_residual {where}"
        lt = run_case(
            ctx, "attnres", what, op, args, feed=feed, carried=1, verify=verify, attempts=attempts, checks=checks
        )
        if lt is None:
            continue
        moved, flops = attnres_cost(tokens=tokens, blocks=blocks, hidden=params.hidden)
        shape = {"tokens": tokens, "blocks": blocks, "hidden": params.hidden}
        out_points.append(kernel_point("attnres", what, shape, moved, flops, peaks, lt))
    calls = k3_call_blocks(params.layers, params.block_size)
    record_params = {
        "kernel": info,
        "tokens": list(params.tokens),
        "blocks": list(params.blocks),
        "hidden": params.hidden,
        "eps": params.eps,
        "layers": params.layers,
        "block_size": params.block_size,
        "calls_by_blocks": {str(k): n for k, n in sorted(Counter(calls).items())},
        "per_step": per_step(out_points, calls),
        "flops_note": (
            f"{VALUES_FLOPS} f32 elementwise ops an element of the K + 1 mixed vectors (VPU work), counted "
            "against the bf16 MXU peak"
        ),
        "call": (
            "as AttentionResidual.forward on a TPU with T % 16 == 0: attention_residual(prefix [T, hidden] bf16, "
            "history [T, K, hidden] bf16, folded_weight [hidden] f32, eps=eps); the next call's prefix is this "
            "call's output"
        ),
    }
    return kernel_record(
        ctx,
        probe="attnres",
        op="attention_residual",
        params=record_params,
        attempts=attempts,
        points=out_points,
        info=info,
        checks=checks,
        floor_s=floor_s,
    )


def _case(params: AttnResParams, kernel: Callable[..., Any], tokens: int, blocks: int):
    import jax
    import jax.numpy as jnp

    key = jax.random.key(params.seed)
    k1, k2, k3 = (jax.random.fold_in(key, i) for i in range(3))
    h, bf = params.hidden, jnp.bfloat16
    prefix = jax.random.normal(k1, (tokens, h), jnp.float32).astype(bf)
    # the blocks at different scales, as a residual stream's are: the softmax is not flat
    scale = jnp.exp(jnp.linspace(-1.0, 1.0, blocks, dtype=jnp.float32))[None, :, None]
    history = (jax.random.normal(k2, (tokens, blocks, h), jnp.float32) * scale).astype(bf)
    weight = jax.random.normal(k3, (h,), jnp.float32) * h**-0.5
    eps = params.eps

    def op(pre, hist, w):
        return kernel(pre, hist, w, eps=eps)

    def feed(full, out):  # the next layer's prefix is this call's output
        return (out.astype(full[0].dtype).reshape(full[0].shape),)

    return op, (prefix, history, weight), feed


def _verify(out: Any, args: tuple, *, eps: float, what: str) -> Verification:
    """The output against a float64 numpy mix of the same K + 1 vectors."""
    import numpy as np

    prefix, history, weight = (np.asarray(np.asarray(a.astype("float32")), np.float64) for a in args)
    values = np.concatenate([history, prefix[:, None, :]], axis=1)  # [T, K+1, H]
    inv = 1.0 / np.sqrt(np.mean(values * values, axis=-1) + eps)
    scores = (values @ weight) * inv
    scores -= scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=1, keepdims=True)
    ref = np.einsum("tk,tkh->th", p, values)
    got = np.asarray(np.asarray(out.astype("float32")), np.float64)
    err = float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    return Verification(
        check="numerics",
        ok=err <= TOLERANCE,
        detail=(
            f"attention_residual {what}: output vs a float64 numpy mix: max abs error {err:.3g} of the reference's "
            f"largest value (tolerance {TOLERANCE:g}); softmax max weight {float(p.max()):.3f}"
        ),
    )
