"""What the engine-kernel probes (kda-engine, attnres, moe-glue) share once a kernel is loaded: the timed loop of
dependent calls, the one-line reason a step failed, and the point with its ceiling (issue 38)."""

from __future__ import annotations

import sys
from typing import Any

from k3plan.evidence.probe_record import Attempt, ProbePoint
from k3plan.probes.context import ProbeContext
from k3plan.probes.loop import CPU_TARGET_S, TARGET_S, chained, time_loop
from k3plan.probes.peak import refuse_below_bound
from k3plan.probes.timing import stats


def failure_line(err: BaseException) -> str:
    """A compiler's or runtime's refusal as the record says it: its first three non-empty lines, 600 chars at most."""
    return " | ".join([ln for ln in str(err).strip().splitlines() if ln.strip()][:3])[:600]


def time_chained(ctx: ProbeContext, op, args: tuple, *, feed, carried):
    """N dependent calls of ``op`` in one program (probes/loop.py), at the context's warm-up, repeats and deadline."""
    return time_loop(
        chained(op, feed=feed, carried=carried),
        args,
        warmup=ctx.warmup,
        repeats=ctx.repeats,
        deadline=ctx.deadline,
        target_s=CPU_TARGET_S if ctx.is_cpu else TARGET_S,
    )


def run_case(
    ctx: ProbeContext, probe: str, what: str, op, args: tuple, *, feed, carried: int, verify, attempts, checks
):
    """One point of an engine-kernel probe: compile and run ``op`` once (``verify(its output)`` appends a check to
    ``checks`` where given), then time N dependent calls (``time_chained``). A refusal at either step is an Attempt
    in ``attempts`` and a line on stderr, not a crash: None then, else the loop's timing."""
    import jax

    def refused(err: BaseException, step: str) -> None:
        line = failure_line(err)
        attempts.append(Attempt(implementation=f"{what}{step}", ok=False, reason=line))
        print(f"{probe} {what}:{step.replace(' (', ' ').rstrip(')')} failed: {line}", file=sys.stderr, flush=True)

    try:
        first = jax.block_until_ready(jax.jit(op)(*args))
    except Exception as err:  # the compiler's refusal is what the record says, not a crash
        refused(err, "")
        return None
    if verify is not None:
        checks.append(verify(first))
    try:
        return time_chained(ctx, op, args, feed=feed, carried=carried)
    except Exception as err:
        refused(err, " (timed loop)")
        return None


def kernel_point(
    probe: str, path: str, shape: dict[str, Any], moved: dict[str, int], flops: float, peaks, lt
) -> ProbePoint:
    """One timed shape: seconds a call (p50), the bytes it must move (``moved``, by stream) and its FLOPs, the
    ceiling max(bytes / HBM peak, FLOPs / bf16 peak) where ``peaks`` (HBM B/s, FLOP/s) are known, and the
    efficiency; printed as it is measured."""
    st = stats(lt.per_iter_s)
    total = sum(moved.values())
    stream_s = total / peaks[0] if peaks else None
    mxu_s = flops / peaks[1] if peaks else None
    bound = max(stream_s, mxu_s) if stream_s is not None and mxu_s is not None else None
    pp: dict[str, Any] = {
        "path": path,
        **shape,
        **moved,
        "touched_bytes": total,
        "flops": flops,
        "stream_s": stream_s,
        "mxu_s": mxu_s,
        "ceiling_s": bound,
        "efficiency": bound / st.p50 if bound else None,
        **lt.params(),
    }
    notes = [f"{st.p50 * 1e6:.4g} us a call (min {st.min * 1e6:.4g}, p90 {st.p90 * 1e6:.4g})"]
    if bound is not None and stream_s is not None and mxu_s is not None:
        side = "HBM" if stream_s >= mxu_s else "MXU"
        notes.append(f"ceiling {bound * 1e6:.4g} us ({side}-bound): efficiency {bound / st.p50:.3g}")
    print(f"{probe} {path}: {'; '.join(notes)}", file=sys.stderr, flush=True)
    return ProbePoint(
        params=pp,
        samples_s={"per_iter": lt.per_iter_s, **lt.samples()},
        stats=st,
        value=st.p50,
        unit="s",
        expected=bound,
        notes=notes,
    )


def source_line(info: dict[str, Any]) -> str:
    """Where a kernel loaded from a file came from: its SOURCE (repo, path, commit), sha256 and local edits."""
    src = info.get("source") or {}
    where = " ".join(str(src[k]) for k in ("repo", "path") if k in src) or info["file"]
    at = f" @{src['commit']}" if "commit" in src else ""
    edits = f"; local edits: {'; '.join(info['local_edits'])}" if info.get("local_edits") else ""
    return f"{where}{at} (file sha256 {info['sha256'][:12]}){edits}"


# what an engine-kernel record's points are measured against (probes/loop.py's loop)
KERNEL_BASELINE = (
    "none needed: N dependent kernel calls in one compiled program (probes/loop.py), the marginal cost between two "
    "N; the dispatch floor and the program's fixed cost are each point's params.floor_s, the host's empty-call "
    "floor the record's params.dispatch_floor_s"
)


def kernel_record(
    ctx: ProbeContext,
    *,
    probe: str,
    op: str,
    info: dict[str, Any],
    params: dict[str, Any],
    attempts: list,
    points: list[ProbePoint],
    checks: list,
    floor_s: float,
    what: str | None = None,
    baseline: str = KERNEL_BASELINE,
    extra_label: str | None = None,
):
    """The record of one engine kernel's points (``op``, the file ``info`` describes): the op's own Attempt first,
    ``params`` closed by the host's dispatch floor and the loop's warm-up and repeats; ok where every point ran
    verified and none was faster than its ceiling (probes/peak.py, named ``what``, the probe by default), else the
    first reason."""
    attempts.insert(0, Attempt(implementation=op, ok=bool(points)))
    refused = refuse_below_bound(points, what=what or probe)
    params = {**params, "dispatch_floor_s": floor_s, "warmup": ctx.warmup, "repeats": ctx.repeats}
    implementation = f"{op} ({info['file']})"
    ok = bool(points) and not refused and all(c.ok for c in checks)
    error = "; ".join(refused) if refused else None
    if not points:
        error = "; ".join(f"{a.implementation}: {a.reason}" for a in attempts if not a.ok) or "no point ran"
    elif not all(c.ok for c in checks):
        error = "; ".join(c.detail or c.check for c in checks if not c.ok)
    return ctx.record(
        probe=probe,
        op=op,
        params=params,
        implementation=implementation,
        attempts=attempts,
        points=points,
        baseline=baseline,
        ok=ok,
        error=error,
        verification=checks,
        verified=all(c.ok for c in checks) if checks else None,
        source=source_line(info),
        extra_label=extra_label,
    )
