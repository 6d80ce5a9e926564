"""kda-engine probe: an engine's own KDA (Kimi Delta Attention) kernels, loaded from files at run time, timed at
K3's per-device shapes (issue 38).

The kernels are not part of k3plan: ``--kernel PATH`` names a Python file that defines ``chunk_kda`` (the chunked
prefill kernel) and ``--decode-kernel PATH`` one that defines ``decode_kda`` (the fused one-token decode kernel),
with the call signatures of kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/kimi_k3/chunk_kda.py and
decode_kda.py (Apache-2.0), called as that engine's Kimi KDA op (kda_attention_op.py, ``chunk_core`` and
``dispatched_core``) calls them:

    chunk_kda(q, k, v, g, beta, A_log=a_log, dt_bias=dt_bias, lower_bound=lb, use_gate_in_kernel=True,
              use_qk_l2norm_in_kernel=True, segment_ids=seg[None], N_max=num_seqs,
              initial_state=h0[None], output_final_state=True)
        q, k, v, g [H, 1, T, D] bf16 (g the raw gate), beta [H, 1, T] bf16 (post-sigmoid), a_log [H] f32,
        dt_bias [H*D] f32, h0 [1, N, H, D, D] f32; returns (o [H, 1, T, D], final state [1, N, H, D, D])
    decode_kda(mixed_qkv, g, beta, conv_state, conv_weight, state, a_log, dt_bias, state_indices,
               has_initial_state, lower_bound=lb, state_transposed=False)
        mixed_qkv [S, 3*H*D] bf16 (pre-convolution), g [S, H, D] bf16, beta [S, H] bf16 (post-sigmoid),
        conv_state [slots, 3, 3, H, D] f32, conv_weight [4, 3, H, D], state [slots, H, D, D] f32 (slot 0 the
        null block), dt_bias [H, D]; S the request axis as the engine pads it, the rows past the real ones
        pointed at slot 0

A file may define ``SOURCE`` (a dict: repo, path, commit), ``LOCAL_EDITS`` (a list of strings) and
``DEPENDENCIES`` (name -> a SOURCE dict; a name ending in .py is a sibling file, hashed too): all go into the
record, with the file's sha256.

Each point is timed as N dependent calls in one program (probes/loop.py): a prefill call starts from the last
call's final state (the next chunk of the same sequence) with q poked by its output; a decode call carries the
state pools and the convolution state. Per point

    bytes   = what one call must move: its activations in and out, the recurrent and convolution state in and
              out (the real sequences'), the per-head parameters -- not the kernel's own intermediates
    FLOPs   = the chunked algorithm's matmuls: ceil(T / 64) x H x (2 C^2 (3K + 2V) + 6 C K V), C = 64;
              decode: 7 x H x K x V a real sequence (decay, k.S, the rank-1 update, q.S)
    ceiling = max(bytes / HBM peak, FLOPs / bf16 peak)      (the spec's, hardware_specs/)

a point faster than its ceiling is refused (probes/peak.py); numerics are checked against a numpy float64
recurrence of the same math (q, k l2-normalised, the gate lb x sigmoid(exp(A_log) x (g + dt_bias)), scale D^-0.5;
decode adds the depthwise conv over the 3 carried rows and SiLU).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from k3plan.errors import require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.kernel_point import kernel_point, kernel_record, run_case
from k3plan.probes.loop import dispatch_floor_s
from k3plan.probes.timing import stats

# K3 (docs/k3-facts.md §1): 96 KDA heads of 128 over TP 32 = 3 a device; short conv 4; gate_lower_bound -5.0
K3_HEADS_PER_DEVICE, K3_HEAD_DIM, K3_CONV, K3_LOWER_BOUND = 96 // 32, 128, 4, -5.0
CHUNK = 64  # the kernel's chunk (check_inputs_support: chunk_size must be 64)
# prefill (tokens, heads): the nightly's 512-token chunk, 2048 for a slope, 8192 in one call (the other recipe);
# 6 and 12 heads at 512 (fixed vs per-head cost). decode (request rows, heads): the engine's compiled 16, and 1.
DEFAULT_PREFILL = ((512, 3), (2048, 3), (8192, 3), (512, 6), (512, 12))
DEFAULT_DECODE = ((16, 3), (1, 3))
TOLERANCE = 5e-2  # max abs error / max |reference|: bf16 activations, f32 state
VERIFY_MAX_TOKENS = 2048  # the numpy reference walks the tokens one by one


@dataclass(frozen=True)
class KdaEngineParams:
    kernel: Optional[Path] = None  # defines chunk_kda
    decode_kernel: Optional[Path] = None  # defines decode_kda
    prefill: tuple[tuple[int, int], ...] = DEFAULT_PREFILL  # (tokens of one sequence, heads)
    decode: tuple[tuple[int, int], ...] = DEFAULT_DECODE  # (request rows, heads)
    decode_real: int = 1  # real sequences among a decode call's rows (the rest point at the null slot)
    head_dim: int = K3_HEAD_DIM
    conv: int = K3_CONV
    lower_bound: Optional[float] = K3_LOWER_BOUND
    seed: int = 0

    def check(self) -> None:
        require(self.kernel is not None or self.decode_kernel is not None, "give --kernel, --decode-kernel or both")
        for flag, path in (("--kernel", self.kernel), ("--decode-kernel", self.decode_kernel)):
            require(path is None or path.is_file(), f"{flag} {path}: no such file")
        require(self.head_dim >= 1 and self.conv >= 2, "--head-dim must be >= 1 and --conv >= 2")
        require(self.decode_real >= 1, "--decode-real must be >= 1")
        require(self.lower_bound is None or self.lower_bound < 0, "--lower-bound must be negative (or none)")
        for tokens, heads in self.prefill:
            require(tokens >= 1 and heads >= 1, f"--prefill {tokens}x{heads}: tokens and heads must be >= 1")
        for rows, heads in self.decode:
            require(rows >= 1 and heads >= 1, f"--decode {rows}x{heads}: rows and heads must be >= 1")


def load_kernel(path: Path, name: str) -> tuple[Any, dict[str, Any]]:
    """The file's function ``name`` and what the record says of it (SOURCE, LOCAL_EDITS, DEPENDENCIES, sha256s)."""
    from k3plan.probes.kernel_file import load_module

    module = load_module(path, f"k3plan_probe_kda_engine_{name}", label=str(path))
    fn = getattr(module, name, None)
    require(callable(fn), f"{path}: defines no {name}")
    deps = {}
    for dep, src in dict(getattr(module, "DEPENDENCIES", {}) or {}).items():
        entry: dict[str, Any] = {"source": dict(src or {})}
        sibling = path.with_name(dep)
        if dep.endswith(".py") and sibling.is_file():
            entry["sha256"] = hashlib.sha256(sibling.read_bytes()).hexdigest()
        deps[dep] = entry
    info = {
        "file": path.name,
        "function": name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "source": dict(getattr(module, "SOURCE", {}) or {}),
        "local_edits": list(getattr(module, "LOCAL_EDITS", []) or []),
        "dependencies": deps,
    }
    return fn, info


def prefill_cost(*, tokens: int, heads: int, d: int) -> tuple[dict[str, int], float]:
    """(bytes one call must move, by stream; the chunked algorithm's FLOPs) for one sequence of ``tokens``."""
    moved = {
        "qkvg_bytes": 4 * tokens * heads * d * 2,  # q, k, v and the raw gate in, bf16
        "beta_bytes": tokens * heads * 2,
        "out_bytes": tokens * heads * d * 2,
        "state_bytes": 2 * heads * d * d * 4,  # the f32 recurrent state in and out
        "param_bytes": heads * 4 + heads * d * 4,  # A_log, dt_bias
    }
    chunks = math.ceil(tokens / CHUNK)
    flops = chunks * heads * (2 * CHUNK**2 * (3 * d + 2 * d) + 6 * CHUNK * d * d)
    return moved, float(flops)


def decode_cost(*, real: int, heads: int, d: int, conv: int) -> tuple[dict[str, int], float]:
    """(bytes one decode call must move for its ``real`` sequences, by stream; FLOPs)."""
    moved = {
        "activation_bytes": real * (3 * heads * d + heads * d + heads) * 2,  # mixed qkv, raw gate, beta in (bf16)
        "out_bytes": real * heads * d * 2,
        "state_bytes": real * 2 * heads * d * d * 4,
        "conv_state_bytes": real * 2 * (conv - 1) * 3 * heads * d * 4,
        "param_bytes": conv * 3 * heads * d * 2 + heads * 4 + heads * d * 4,  # conv weight, A_log, dt_bias
    }
    flops = real * heads * 7 * d * d + real * 2 * conv * 3 * heads * d
    return moved, float(flops)


def run(*, ctx: ProbeContext, params: KdaEngineParams) -> list[ProbeRecord]:
    params.check()
    hw = ctx.hardware.spec
    peaks = (hw.hbm_bw_bytes_per_s_per_device, hw.flops_per_s_per_device("bf16")) if hw is not None else None
    jobs: list[tuple[str, Path, tuple[tuple[int, int], ...]]] = []
    if params.kernel is not None:
        jobs.append(("chunk_kda", params.kernel, params.prefill))
    if params.decode_kernel is not None:
        jobs.append(("decode_kda", params.decode_kernel, params.decode))
    ctx.plan(sum(len(p) for _, _, p in jobs))
    floor = stats(dispatch_floor_s())
    records = []
    for name, path, pts in jobs:
        kernel, info = load_kernel(path, name)
        records.append(
            _run_kernel(
                ctx=ctx, params=params, name=name, kernel=kernel, info=info, points=pts, peaks=peaks, floor_s=floor.p50
            )
        )
    return records


def _run_kernel(
    *,
    ctx: ProbeContext,
    params: KdaEngineParams,
    name: str,
    kernel: Callable[..., Any],
    info: dict[str, Any],
    points: tuple[tuple[int, int], ...],
    peaks: Optional[tuple[float, float]],
    floor_s: float,
) -> ProbeRecord:
    prefill = name == "chunk_kda"
    attempts: list[Attempt] = []
    out_points: list[ProbePoint] = []
    checks: list[Verification] = []
    for size, heads in points:
        if ctx.deadline.expired():
            break
        where = (
            f"{size} tokens x {heads} heads"
            if prefill
            else f"{size} rows ({min(params.decode_real, size)} real) x {heads} heads"
        )
        ctx.progress(f"kda-engine {name} {where}")
        build = _prefill_case if prefill else _decode_case
        op, args, carried, feed, verify, moved, flops, shape = build(params, kernel, size, heads)
        what = f"{name} {where}"
        lt = run_case(
            ctx,
            "kda-engine",
            what,
            op,
            args,
            feed=feed,
            carried=carried,
            verify=verify,
            attempts=attempts,
            checks=checks,
        )
        if lt is None:
            continue
        point_shape = {"kernel": name, **shape, "head_dim": params.head_dim}
        out_points.append(kernel_point("kda-engine", what, point_shape, moved, flops, peaks, lt))
    record_params = {
        "kernel": info,
        "points": [list(p) for p in points],
        "head_dim": params.head_dim,
        "conv": params.conv,
        "lower_bound": params.lower_bound,
        "chunk": CHUNK if prefill else None,
        "decode_real": None if prefill else params.decode_real,
        "call": (
            "as the engine's chunk_core: one sequence, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, "
            "N_max=1, initial_state given, output_final_state=True; the next call starts from its final state"
            if prefill
            else "as the engine's dispatched_core: state_transposed=False, rows past decode_real at the null slot 0, "
            "has_initial_state 1; the next call carries the state pool and the conv state"
        ),
    }
    return kernel_record(
        ctx,
        probe="kda-engine",
        op=name,
        params=record_params,
        attempts=attempts,
        points=out_points,
        info=info,
        checks=checks,
        floor_s=floor_s,
        what=f"kda-engine {name}",
    )


def _keys(seed: int, n: int) -> list[Any]:
    import jax

    key = jax.random.key(seed)
    return [jax.random.fold_in(key, i) for i in range(n)]


def _prefill_case(params: KdaEngineParams, kernel: Callable[..., Any], tokens: int, heads: int):
    import jax
    import jax.numpy as jnp

    d, lb = params.head_dim, params.lower_bound
    ks = _keys(params.seed, 8)
    bf = jnp.bfloat16
    q, k, v, g = (jax.random.normal(ks[i], (heads, 1, tokens, d), jnp.float32).astype(bf) for i in range(4))
    beta = jax.nn.sigmoid(jax.random.normal(ks[4], (heads, 1, tokens), jnp.float32)).astype(bf)
    a_log = jax.random.normal(ks[5], (heads,), jnp.float32) * 0.5
    dt_bias = jax.random.normal(ks[6], (heads * d,), jnp.float32) * 0.5
    h0 = jax.random.normal(ks[7], (1, 1, heads, d, d), jnp.float32) * 0.05
    seg = jnp.ones((1, tokens), jnp.int32)

    def op(state, qq, kk, vv, gg, bb, al, dtb, sg):
        return kernel(
            qq,
            kk,
            vv,
            gg,
            bb,
            A_log=al,
            dt_bias=dtb,
            lower_bound=lb,
            use_gate_in_kernel=True,
            use_qk_l2norm_in_kernel=True,
            segment_ids=sg,
            N_max=1,
            initial_state=state,
            output_final_state=True,
        )

    def feed(full, out):  # the next chunk of the same sequence starts from this one's final state
        o, ht = out
        qq = full[1]
        return (ht.astype(full[0].dtype).reshape(full[0].shape), qq.at[0, 0, 0, 0].set(o[0, 0, 0, 0].astype(qq.dtype)))

    args = (h0, q, k, v, g, beta, a_log, dt_bias, seg)
    verify = None
    if tokens <= VERIFY_MAX_TOKENS:
        verify = lambda out: _verify_prefill(out, args, lb=lb, what=f"{tokens} tokens x {heads} heads")  # noqa: E731
    moved, flops = prefill_cost(tokens=tokens, heads=heads, d=d)
    shape = {"tokens": tokens, "heads": heads, "sequences": 1}
    return op, args, 2, feed, verify, moved, flops, shape


def _decode_case(params: KdaEngineParams, kernel: Callable[..., Any], rows: int, heads: int):
    import jax
    import jax.numpy as jnp

    d, lb, c = params.head_dim, params.lower_bound, params.conv
    real = min(params.decode_real, rows)
    slots = real + 1  # slot 0: the null block
    ks = _keys(params.seed + 1, 9)
    bf = jnp.bfloat16
    mixed = jax.random.normal(ks[0], (rows, 3 * heads * d), jnp.float32).astype(bf)
    g = jax.random.normal(ks[1], (rows, heads, d), jnp.float32).astype(bf)
    beta = jax.nn.sigmoid(jax.random.normal(ks[2], (rows, heads), jnp.float32)).astype(bf)
    conv_state = jax.random.normal(ks[3], (slots, c - 1, 3, heads, d), jnp.float32) * 0.5
    conv_weight = (jax.random.normal(ks[4], (c, 3, heads, d), jnp.float32) * 0.5).astype(bf)
    state = jax.random.normal(ks[5], (slots, heads, d, d), jnp.float32) * 0.05
    a_log = jax.random.normal(ks[6], (heads,), jnp.float32) * 0.5
    dt_bias = jax.random.normal(ks[7], (heads, d), jnp.float32) * 0.5
    idx = jnp.asarray([s + 1 if s < real else 0 for s in range(rows)], jnp.int32)
    has = jnp.ones((rows,), jnp.int32)

    def op(st, cs, mx, gg, bb, cw, al, dtb, si, hi):
        return kernel(mx, gg, bb, cs, cw, st, al, dtb, si, hi, lower_bound=lb, state_transposed=False)

    def feed(full, out):
        o, cs, st = out
        mx = full[2]
        return (st, cs, mx.at[0, 0].set(o[0, 0, 0].astype(mx.dtype)))

    args = (state, conv_state, mixed, g, beta, conv_weight, a_log, dt_bias, idx, has)
    verify = lambda out: _verify_decode(out, args, real=real, lb=lb, what=f"{rows} rows x {heads} heads")  # noqa: E731
    moved, flops = decode_cost(real=real, heads=heads, d=d, conv=c)
    shape = {"rows": rows, "real_sequences": real, "heads": heads, "slots": slots}
    return op, args, 3, feed, verify, moved, flops, shape


def _np(x: Any) -> Any:
    import numpy as np

    return np.asarray(x.astype("float32") if hasattr(x, "astype") else x, np.float64)


def _gate(g: Any, a_log: Any, dt_bias: Any, lb: Optional[float]) -> Any:
    """KDA's activated log-decay [..., H, D]: lb x sigmoid(exp(A_log) (g + dt_bias)), or -exp(A_log) softplus(.)."""
    import numpy as np

    a = np.exp(a_log)[:, None]
    x = g + dt_bias
    return lb / (1 + np.exp(-a * x)) if lb is not None else -a * np.logaddexp(0, x)


def _unit(x: Any) -> Any:
    import numpy as np

    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def _rel_err(got: Any, ref: Any) -> float:
    import numpy as np

    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def _verify_prefill(out: Any, args: tuple, *, lb: Optional[float], what: str) -> Verification:
    """Output and final state against a float64 numpy recurrence over the tokens."""
    import numpy as np

    h0, q, k, v, g, beta, a_log, dt_bias, _ = (_np(a) for a in args)
    heads, _, tokens, d = q.shape
    qn, kn = _unit(q[:, 0]), _unit(k[:, 0])  # [H, T, D]
    decay = np.exp(_gate(g[:, 0].transpose(1, 0, 2), a_log, dt_bias.reshape(heads, d), lb))  # [T, H, D]
    s = h0[0, 0].copy()  # [H, D, D]
    ref = np.zeros((heads, tokens, d))
    for t in range(tokens):
        s = s * decay[t][:, :, None]
        pred = np.einsum("hk,hkv->hv", kn[:, t], s)
        u = beta[:, 0, t][:, None] * (v[:, 0, t] - pred)
        s = s + kn[:, t][:, :, None] * u[:, None, :]
        ref[:, t] = d**-0.5 * np.einsum("hk,hkv->hv", qn[:, t], s)
    o, ht = out
    err_o = _rel_err(_np(o)[:, 0], ref)
    err_s = _rel_err(_np(ht)[0, 0], s)
    worst = max(err_o, err_s)
    return Verification(
        check="numerics",
        ok=worst <= TOLERANCE,
        detail=(
            f"chunk_kda {what}: output and final state vs a float64 numpy recurrence: max abs error {err_o:.3g} "
            f"and {err_s:.3g} of the reference's largest value (tolerance {TOLERANCE:g})"
        ),
    )


def _verify_decode(out: Any, args: tuple, *, real: int, lb: Optional[float], what: str) -> Verification:
    """The real rows' outputs and their new state slots against numpy; the null-slot rows must come back zero."""
    import numpy as np

    state, conv_state, mixed, g, beta, conv_weight, a_log, dt_bias, idx, _ = (_np(a) for a in args)
    rows = mixed.shape[0]
    slots, heads, d, _ = state.shape
    c = conv_weight.shape[0]
    o, _, new_state = (_np(x) for x in out)
    worst_o = worst_s = 0.0
    for r in range(real):
        slot = int(idx[r])
        x = mixed[r].reshape(3, heads, d)
        conv = x * conv_weight[c - 1] + sum(conv_state[slot][t] * conv_weight[t] for t in range(c - 1))
        conv = conv / (1 + np.exp(-conv))
        qq, kk, vv = d**-0.5 * _unit(conv[0]), _unit(conv[1]), conv[2]
        decay = np.exp(_gate(g[r], a_log, dt_bias, lb))  # [H, D]
        s = state[slot] * decay[:, :, None]
        u = beta[r][:, None] * (vv - np.einsum("hk,hkv->hv", kk, s))
        s = s + kk[:, :, None] * u[:, None, :]
        ref = np.einsum("hk,hkv->hv", qq, s)
        worst_o = max(worst_o, _rel_err(o[r], ref))
        worst_s = max(worst_s, _rel_err(new_state[slot], s))
    pad_zero = bool(np.all(o[real:rows] == 0)) if rows > real else True
    worst = max(worst_o, worst_s)
    return Verification(
        check="numerics",
        ok=worst <= TOLERANCE and pad_zero,
        detail=(
            f"decode_kda {what}: {real} real rows' output and new state vs a float64 numpy step: max abs error "
            f"{worst_o:.3g} and {worst_s:.3g} of the reference's largest value (tolerance {TOLERANCE:g}); "
            f"null-slot rows zero: {pad_zero}"
        ),
    )
