"""gmm probe: an engine's routed-expert grouped-matmul kernel (gmm_v2's call signature), loaded from a file at
run time, timed at K3's expert shapes on one device (issue 38).

The kernel is not part of k3plan: ``--kernel PATH`` names a Python file that defines ``gmm_v2`` with the call
signature of kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/megablox/gmm_v2.py (Apache-2.0), called as
that engine's ``gmm_wrapper`` (src/vllm_torchtpu/layers/common/fused_moe_gmm.py @0b0ff9bd) calls it:

    gmm_v2(lhs=x, rhs=w, rhs_scale=s, rhs_bias=None, group_sizes=g, group_offset=off[0],
           zero_initialize=False, fuse_act=..., preferred_element_type=None,
           maybe_quantize_lhs=not <rhs is a 4-bit float>)

with the weights as the engine loads them: ``float4_e2m1fn`` [experts, K, N] (K-major, unpacked once at load:
``unpack_fp4_to_e2m1``) and fp32 scales [experts, K / 32, 1, N]; w13 is gate and up side by side along N
(``fuse_act="silu"``: the kernel splits N in halves), w2 alone. A file may also define ``SOURCE`` (a dict:
repo, path, commit) and ``LOCAL_EDITS`` (a list of strings): both go into the record, with the file's sha256.

Each point: ``rows`` routed rows spread evenly over the first ``groups`` of the device's local experts (K3 at
EP 32: 896 / 32 = 28), the kernel timed as N dependent calls in one program (probes/loop.py), and

    touched bytes = groups x (K x N x bits / 8 + scale bytes) + lhs + out        (what one call must move)
    FLOPs         = 2 x rows x K x N                                              (N: both halves for w13)
    ceiling       = max(touched bytes / HBM peak, FLOPs / bf16 peak)              (the spec's, hardware_specs/)

a point faster than its ceiling is refused (probes/peak.py). The bf16 weights (no scale) in the same run are
the control: the same rows and groups with the conversion gone, so the conversion's cost is the difference
once the streams are accounted for. A weight format the compiler refuses (Mosaic and fp4 on an older TPU) is
retried as ``--stand-in`` (int4 with the same block-32 scales: the same dequantize-before-matmul path), every
point and the record labelled as a stand-in.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from k3plan.errors import require
from k3plan.evidence.probe_record import Attempt, ProbePoint, ProbeRecord, Verification
from k3plan.probes.context import ProbeContext
from k3plan.probes.kernel_point import source_line
from k3plan.probes.loop import CPU_TARGET_S, TARGET_S, chained, dispatch_floor_s, time_loop
from k3plan.probes.peak import refuse_below_bound
from k3plan.probes.timing import stats

# K3 (k3-facts §1): expert input width (the MoE latent) and intermediate; 896 experts over EP 32
K3_D_IN, K3_INTERMEDIATE, K3_LOCAL_EXPERTS = 3584, 3072, 896 // 32
QUANT_BLOCK = 32  # MXFP4: 32 values a scale (the engine's kernel scale [E, K / 32, 1, N])
WEIGHTS = ("float4_e2m1fn", "int4", "bfloat16")
BITS = {"float4_e2m1fn": 4, "int4": 4, "bfloat16": 16}
PROJECTIONS = ("w13", "w2")
# decode (the engine pads a step to 16 rows; 2 experts a device at top-16 / 32 devices), a 512-token chunk's
# rows a device (512 x 16 / 32 = 256 over all 28), and either side of it
DEFAULT_POINTS = ((256, 28), (16, 2), (64, 28), (1024, 28))
TOLERANCE = 5e-2  # max abs error / max |reference|: the kernel dequantizes to bf16 and writes bf16
BASELINE = (
    "none needed: N dependent kernel calls in one compiled program (probes/loop.py), the marginal cost between two "
    "N; the dispatch floor and the program's fixed cost are each point's params.floor_s, the host's empty-call "
    "floor the record's params.dispatch_floor_s"
)


@dataclass(frozen=True)
class GmmParams:
    kernel: Path
    points: tuple[tuple[int, int], ...] = DEFAULT_POINTS  # (rows, groups touched)
    weights: tuple[str, ...] = ("float4_e2m1fn", "bfloat16")
    projections: tuple[str, ...] = PROJECTIONS
    stand_in: Optional[str] = "int4"  # tried where a 4-bit float weight does not compile
    experts: int = K3_LOCAL_EXPERTS
    d_in: int = K3_D_IN
    intermediate: int = K3_INTERMEDIATE
    seed: int = 0

    def check(self) -> None:
        require(self.kernel.is_file(), f"--kernel {self.kernel}: no such file")
        require(all(w in WEIGHTS for w in self.weights), f"--weights: expected some of {', '.join(WEIGHTS)}")
        require(self.stand_in in (None, "int4"), "--stand-in: expected int4 or none")
        require(all(p in PROJECTIONS for p in self.projections), f"--proj: expected some of {', '.join(PROJECTIONS)}")
        require(min(self.experts, self.d_in, self.intermediate) >= 1, "sizes must be >= 1")
        require(self.d_in % QUANT_BLOCK == 0, f"--d-in {self.d_in}: expected a multiple of {QUANT_BLOCK}")
        require(self.intermediate % QUANT_BLOCK == 0, f"--intermediate: expected a multiple of {QUANT_BLOCK}")
        for rows, groups in self.points:
            require(1 <= groups <= self.experts, f"--points {rows}x{groups}: groups must be 1..{self.experts}")
            require(rows >= groups, f"--points {rows}x{groups}: expected at least a row a group")

    def shape(self, proj: str) -> tuple[int, int, bool]:
        """(K, N, fused) of one projection: w13 is gate and up side by side (N = 2 x intermediate)."""
        return (self.d_in, 2 * self.intermediate, True) if proj == "w13" else (self.intermediate, self.d_in, False)


def load_kernel(path: Path) -> tuple[Any, dict[str, Any]]:
    """The file's ``gmm_v2`` and what the record says of it (its SOURCE, LOCAL_EDITS, sha256)."""
    from k3plan.probes.kernel_file import load_module

    module = load_module(path, "k3plan_probe_gmm_kernel", label=f"--kernel {path}")
    fn = getattr(module, "gmm_v2", None)
    require(callable(fn), f"--kernel {path}: defines no gmm_v2")
    info = {
        "file": path.name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "source": dict(getattr(module, "SOURCE", {}) or {}),
        "local_edits": list(getattr(module, "LOCAL_EDITS", []) or []),
    }
    return fn, info


def even_sizes(*, experts: int, rows: int, groups: int) -> list[int]:
    """``rows`` spread as evenly as can be over the first ``groups`` of ``experts`` groups."""
    sizes = [0] * experts
    for g in range(groups):
        sizes[g] = rows // groups + (1 if g < rows % groups else 0)
    return sizes


def touched_bytes(*, weight: str, k: int, n: int, groups: int, rows: int, fused: bool) -> dict[str, int]:
    """What one call must move: the touched groups' weights and scales, the lhs read, the output written (bf16)."""
    w = groups * k * n * BITS[weight] // 8
    s = groups * (k // QUANT_BLOCK) * n * 4 if weight != "bfloat16" else 0
    return {
        "weight_bytes": w,
        "scale_bytes": s,
        "lhs_bytes": rows * k * 2,
        "out_bytes": rows * (n // 2 if fused else n) * 2,
    }


def engine_call(kernel, *, fmt: str, fused: bool):
    """``op(lhs, w, group_sizes, scale)``: ``kernel`` called as the engine's gmm_wrapper calls gmm_v2."""
    import jax.numpy as jnp

    def op(lhs, w, gs, s):
        return kernel(
            lhs=lhs,
            rhs=w,
            rhs_scale=s,
            rhs_bias=None,
            group_sizes=gs,
            group_offset=jnp.zeros((1,), jnp.int32)[0],
            zero_initialize=False,
            fuse_act="silu" if fused else None,
            preferred_element_type=None,
            maybe_quantize_lhs=fmt != "float4_e2m1fn",
        )

    return op


def run(*, ctx: ProbeContext, params: GmmParams) -> list[ProbeRecord]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    params.check()
    kernel, info = load_kernel(params.kernel)
    hw = ctx.hardware.spec
    hbm = flops_peak = None
    if hw is not None:
        hbm, flops_peak = hw.hbm_bw_bytes_per_s_per_device, hw.flops_per_s_per_device("bf16")
    ctx.plan(len(params.points) * len(params.weights) * len(params.projections))
    floor = stats(dispatch_floor_s())
    dev = jax.local_devices()[0]
    key = jax.random.key(params.seed)
    held: dict[tuple[str, str], tuple[Any, Any]] = {}

    def weights(fmt: str, proj: str):
        if (fmt, proj) not in held:
            k, n, _ = params.shape(proj)
            e = params.experts
            with jax.default_device(dev):
                if fmt == "bfloat16":
                    w = jax.jit(lambda kk: (jax.random.normal(kk, (e, k, n), jnp.float32) * k**-0.5).astype(fmt))(key)
                    s = None
                else:  # values within the format's range (fp4 e2m1: +-6; int4: -8..7), then a block-32 scale
                    lo, hi = (-6.0, 6.0) if fmt == "float4_e2m1fn" else (-8.0, 8.0)
                    w = jax.jit(
                        lambda kk: jnp.floor(jax.random.uniform(kk, (e, k, n), jnp.float32, lo, hi)).astype(fmt)
                    )(key)
                    s = jax.jit(
                        lambda kk: (
                            jax.random.uniform(kk, (e, k // QUANT_BLOCK, 1, n), jnp.float32, 0.5, 1.5) * (k**-0.5 / 4)
                        )
                    )(jax.random.fold_in(key, 1))
            held[(fmt, proj)] = (w, s)
        return held[(fmt, proj)]

    def call(fmt: str, fused: bool):
        return engine_call(kernel, fmt=fmt, fused=fused)

    rng = np.random.default_rng(params.seed)
    used: dict[str, str] = {}  # weight asked -> format run (itself, or the stand-in)
    attempts: dict[str, list[Attempt]] = {w: [] for w in params.weights}
    points: dict[str, list[ProbePoint]] = {w: [] for w in params.weights}
    checks: dict[str, list[Verification]] = {w: [] for w in params.weights}
    for rows, groups in params.points:
        for asked in params.weights:
            for proj in params.projections:
                if ctx.deadline.expired():
                    break
                k, n, fused = params.shape(proj)
                ctx.progress(f"gmm {asked} {proj} {rows} rows x {groups} groups")
                sizes = even_sizes(experts=params.experts, rows=rows, groups=groups)
                lhs = jax.device_put(rng.standard_normal((rows, k), dtype=np.float32).astype(jnp.bfloat16), dev)
                gs = jax.device_put(np.asarray(sizes, np.int32), dev)
                order = [used.get(asked, asked)]
                if asked == "float4_e2m1fn" and asked not in used and params.stand_in:
                    order.append(params.stand_in)
                fmt, out, failed = None, None, []
                for candidate in order:
                    w, s = weights(candidate, proj)
                    if asked in used and checks[asked]:  # format settled and checked: the timed program compiles it
                        fmt = candidate
                        break
                    try:
                        out = jax.block_until_ready(jax.jit(call(candidate, fused))(lhs, w, gs, s))
                    except Exception as err:  # the compiler's refusal is what the record says, not a crash
                        lines = [ln for ln in str(err).strip().splitlines() if ln.strip()][:3]
                        failed.append(
                            Attempt(implementation=f"gmm_v2 {candidate}", ok=False, reason=" | ".join(lines)[:600])
                        )
                        held.pop((candidate, proj), None)
                        continue
                    fmt = candidate
                    break
                for a in failed:
                    print(
                        f"gmm {proj} {rows}x{groups}: {a.implementation} failed: {a.reason}",
                        file=sys.stderr,
                        flush=True,
                    )
                if fmt is None:
                    attempts[asked].extend(failed)
                    continue
                if asked not in used:
                    attempts[asked].extend([*failed, Attempt(implementation=f"gmm_v2 {fmt}", ok=True)])
                used[asked] = fmt
                w, s = weights(fmt, proj)
                if not checks[asked] and out is not None:
                    checks[asked].append(_verify(out, lhs, w, s, sizes, fused=fused, what=f"{proj} {fmt}"))
                try:
                    lt = time_loop(
                        chained(call(fmt, fused)),
                        (lhs, w, gs, s),
                        warmup=ctx.warmup,
                        repeats=ctx.repeats,
                        deadline=ctx.deadline,
                        target_s=CPU_TARGET_S if ctx.is_cpu else TARGET_S,
                    )
                except Exception as err:  # a shape the compiler refuses: said, the other points kept
                    line = " | ".join([ln for ln in str(err).strip().splitlines() if ln.strip()][:3])[:600]
                    attempts[asked].append(
                        Attempt(implementation=f"gmm_v2 {fmt} {proj} {rows}x{groups}", ok=False, reason=line)
                    )
                    print(f"gmm {proj} {rows}x{groups}: {fmt} failed: {line}", file=sys.stderr, flush=True)
                    continue
                st = stats(lt.per_iter_s)
                moved = touched_bytes(weight=fmt, k=k, n=n, groups=groups, rows=rows, fused=fused)
                total = sum(moved.values())
                flops = 2.0 * rows * k * n
                stream_s = total / hbm if hbm else None
                mxu_s = flops / flops_peak if flops_peak else None
                bound = max(stream_s, mxu_s) if stream_s is not None and mxu_s is not None else None
                stand = fmt != asked
                pp: dict[str, Any] = {
                    "path": f"{proj} {fmt} {rows}x{groups}",
                    "projection": proj,
                    "weight_dtype": fmt,
                    "stand_in_for": asked if stand else None,
                    "fuse_act": "silu" if fused else None,
                    "rows": rows,
                    "groups": groups,
                    "rows_per_group": rows / groups,
                    "experts": params.experts,
                    "k": k,
                    "n": n,
                    **moved,
                    "touched_bytes": total,
                    "flops": flops,
                    "stream_s": stream_s,
                    "mxu_s": mxu_s,
                    "ceiling_s": bound,
                    **lt.params(),
                }
                notes = []
                if bound is not None and hbm and flops_peak:
                    pp["hbm_fraction"] = total / st.p50 / hbm
                    pp["mxu_fraction"] = flops / st.p50 / flops_peak
                    notes.append(
                        f"{st.p50 * 1e6:.4g} us a call: {total / st.p50 / 1e9:.4g} GB/s "
                        f"({pp['hbm_fraction']:.0%} of HBM peak), {flops / st.p50 / 1e12:.4g} TFLOP/s "
                        f"({pp['mxu_fraction']:.0%} of bf16 peak); ceiling {bound * 1e6:.4g} us"
                    )
                if stand:
                    notes.append(f"STAND-IN: {fmt} weights timed for {asked} (the compiler refused {asked} here)")
                print(
                    f"gmm {pp['path']}: {'; '.join(notes) or f'{st.p50 * 1e6:.4g} us a call'}",
                    file=sys.stderr,
                    flush=True,
                )
                points[asked].append(
                    ProbePoint(
                        params=pp,
                        samples_s={"per_iter": lt.per_iter_s, **lt.samples()},
                        stats=st,
                        value=st.p50,
                        unit="s",
                        expected=bound,
                        notes=notes,
                    )
                )
    records = []
    for asked in params.weights:
        fmt = used.get(asked, asked)
        refused = refuse_below_bound(points[asked], what=f"gmm {fmt}")
        stand = fmt != asked
        label = f"STAND-IN: {fmt} weights timed for {asked}" if stand else None
        if fmt == "int4" and not stand:
            label = (
                "int4 weights with block-32 fp32 scales: gmm_v2's dequantize-before-matmul path, MXFP4's; a stand-in "
                "for float4_e2m1fn where Mosaic refuses it"
            )
        record_params = {
            "kernel": info,
            "weights_asked": asked,
            "weight_dtype": fmt,
            "stand_in": stand,
            "quant_block": QUANT_BLOCK if fmt != "bfloat16" else None,
            "experts": params.experts,
            "d_in": params.d_in,
            "intermediate": params.intermediate,
            "points": [list(p) for p in params.points],
            "projections": list(params.projections),
            "call": "as gmm_wrapper: zero_initialize=False, fuse_act='silu' for w13, maybe_quantize_lhs=not fp4",
            "group_sizes": "rows spread evenly over the first `groups` local experts",
            "dispatch_floor_s": floor.p50,
            "warmup": ctx.warmup,
            "repeats": ctx.repeats,
        }
        ok = bool(points[asked]) and not refused
        error = "; ".join(refused) if refused else None
        if not points[asked]:
            error = "; ".join(f"{a.implementation}: {a.reason}" for a in attempts[asked] if not a.ok) or "no point ran"
        records.append(
            ctx.record(
                probe="gmm",
                op=fmt,
                params=record_params,
                implementation=f"gmm_v2 {fmt}" + (f" (stand-in for {asked})" if stand else ""),
                attempts=attempts[asked],
                fallback=stand,
                fallback_reasons=[f"{a.implementation}: {a.reason}" for a in attempts[asked] if not a.ok],
                label=label,
                points=points[asked],
                baseline=BASELINE,
                ok=ok,
                error=error,
                verification=checks[asked],
                verified=all(c.ok for c in checks[asked]) if checks[asked] else None,
                source=source_line(info),
            )
        )
    return records


def _verify(out, lhs, w, s, sizes: list[int], *, fused: bool, what: str) -> Verification:
    """The first and last touched groups against the dequantized weights' f32 matmul in numpy (silu(gate) x up
    for the fused call), the error relative to the reference's largest value."""
    import numpy as np

    a = np.asarray(lhs, np.float32)
    got = np.asarray(out, np.float32)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    touched = [g for g, r in enumerate(sizes) if r]
    worst = 0.0
    for g in sorted({touched[0], touched[-1]}):
        wg = np.asarray(w[g].astype("float32"), np.float32)
        if s is not None:
            wg = wg * np.repeat(np.asarray(s[g], np.float32)[:, 0, :], QUANT_BLOCK, axis=0)
        ref = a[starts[g] : starts[g + 1]] @ wg
        if fused:
            half = ref.shape[1] // 2
            gate, up = ref[:, :half], ref[:, half:]
            ref = gate / (1 + np.exp(-gate)) * up
        err = float(np.max(np.abs(got[starts[g] : starts[g + 1], : ref.shape[1]] - ref)))
        worst = max(worst, err / max(float(np.max(np.abs(ref))), 1e-30))
    return Verification(
        check="numerics",
        ok=worst <= TOLERANCE,
        detail=(
            f"{what}: groups {sorted({touched[0], touched[-1]})} vs numpy on the dequantized weights: max abs error "
            f"{worst:.3g} of the reference's largest value (tolerance {TOLERANCE:g})"
        ),
    )
