"""Ceiling and expected time of a stage's ops, by op kind (issue 17 items 1-2).

Per op (per execution; x `count`):
    ceiling   collective: calls x (link latency + wire bytes / link bw) (a pipeline send or a reduce-scatter,
              which no probe measures, always runs at it); overhead: fixed_s;
              otherwise max(flops / peak(dtype), bytes / HBM bw)
    expected  matmul, attention: max(compute / e_compute, memory / e_hbm(bytes))  (e_compute: the
              matmul curve at (M N K)^(1/3); attention has no probe, so its compute is the ceiling)
              hbm: max(compute, memory / e_hbm(bytes)); grouped_matmul, kda_*, collective: ceiling / e(op's curve)
              (a grouped matmul the engine runs with a kernel probe gmm measured: that kernel's curve, OpCost.curve)
Assumptions: the ops of a stage run one after another (no overlap of compute, memory and
collectives), so the stage's ceiling here is the sum of its ops' ceilings -- at least
`roofline`'s step-level max(total bytes time, total FLOP time) + collectives. Each op's label
names the record and point used, or says "ceiling: no measured efficiency for <op> on <kind>".
"""

from __future__ import annotations

from typing import TypeVar

from k3plan.evidence.probe_records import canonical_op
from k3plan.speed.curves import EfficiencyCurves, curve_key
from k3plan.speed.efficiency import Efficiency, efficiency
from k3plan.speed.peaks import Peaks
from k3plan.step.collective import Collective
from k3plan.step.opcost import CATEGORIES, OpCost
from k3plan.structs import Frozen, fields, replace

T = TypeVar("T")


_Frozen = Frozen


class OpTime(_Frozen):
    name: str
    kind: str
    category: str
    ceiling_s: float  # x count
    expected_s: float  # x count
    efficiency: Efficiency  # of the part that binds the expected time
    label: str
    # the engine's kernel as the target's compiler schedules it (curves.schedules: probe gmm-schedule), x count;
    # not the expected time (a static schedule has no DMA waits): the gap text's account of its compute
    scheduled_s: float | None = None

    __exclude__ = ("scheduled_s",)


class KindTime(_Frozen):
    ceiling_s: float
    expected_s: float


class KindTimes(_Frozen):
    """A stage's ceiling and expected seconds by op category (speed.ops.CATEGORIES, in its order)."""

    attention: KindTime
    kda: KindTime
    experts: KindTime
    dense: KindTime
    collectives: KindTime
    overhead: KindTime

    def items(self) -> list[tuple[str, KindTime]]:
        return [(c, getattr(self, c)) for c in fields(self)]


def kind_times(times: tuple[OpTime, ...] | list[OpTime]) -> KindTimes:
    """Each category's ceiling and expected seconds, summed over ``times`` in their order (one pass over them)."""
    ceiling: dict[str, list[float]] = {c: [] for c in CATEGORIES}
    expected: dict[str, list[float]] = {c: [] for c in CATEGORIES}
    for t in times:
        if t.category in ceiling:
            ceiling[t.category].append(t.ceiling_s)
            expected[t.category].append(t.expected_s)
    return KindTimes(**{c: KindTime(ceiling_s=sum(ceiling[c]), expected_s=sum(expected[c])) for c in CATEGORIES})


class StageTime(_Frozen):
    device_kind: str
    ceiling_s: float
    expected_s: float
    by_kind: KindTimes
    labels: tuple[str, ...]  # one per distinct source, ceiling labels first
    ops: tuple[OpTime, ...]
    assumptions: tuple[str, ...]


ASSUMPTIONS = (
    "ops run serially: no overlap of compute, HBM traffic and collectives within a stage",
    (
        "efficiency = ceiling time / measured time at the probed point; interpolated linearly in log size "
        "inside the measured range, clamped to the nearest measured point outside it"
    ),
    "an op with no record of this device kind runs at its ceiling (labelled)",
)


def _eff(curves: EfficiencyCurves | None, peaks: Peaks, key: str, x: float, op: str) -> Efficiency:
    if curves is None:
        from k3plan.speed.efficiency import ceiling_label

        return Efficiency(value=1.0, measured=False, label=ceiling_label(op, peaks.device_kind))
    return efficiency(curves, key=key, x=x, device_kind=peaks.device_kind, op=op)


def _v(value: T | None) -> T:
    """A field OpCost's validator has already required for this kind."""
    assert value is not None
    return value


UNPROBED = frozenset(c.value for c in Collective if c.probe_op is None)  # send, reduce-scatter


def op_time(op: OpCost, *, peaks: Peaks, curves: EfficiencyCurves | None) -> OpTime:
    if op.kind == "overhead":
        fixed = _v(op.fixed_s)
        e = Efficiency(value=1.0, measured=False, label=f"overhead {op.name}: {fixed:.3g} s ({op.source})")
        return _done(op, fixed, fixed, e)
    if op.kind == "collective":
        link = peaks.link(op.link)
        message = _v(op.message_bytes)
        wire = message if op.wire_bytes is None else op.wire_bytes
        ceiling = op.calls * (link.latency_s + wire / link.bw_bytes_per_s)
        if op.collective in UNPROBED:  # no probe measures a send or a reduce-scatter (Collective.probe_op): the ceiling
            e = _eff(None, peaks, "", 1.0, f"{op.collective} over {op.group} devices")
            return _done(op, ceiling, ceiling, e)
        name = canonical_op(_v(op.collective))
        key = curve_key("collective", collective=name, group=op.group)
        e = _eff(curves, peaks, key, float(message), f"{name} over {op.group} devices")
        return _done(op, ceiling, ceiling / e.value, e)
    compute = op.flops / peaks.flops_per_s(op.dtype)
    memory = op.bytes / peaks.hbm_bw_bytes_per_s
    ceiling = max(compute, memory)
    if op.kind in ("attention", "hbm") and op.curve is not None and curves is not None and op.curve in curves.curves:
        # a DeepSeek-V4 attention-side op timed whole at its shapes (probe dsv4-ops): its ceiling at the measured
        # efficiency of the same op, read at its rows (the record's ceiling is k3plan's own for that op)
        e = _eff(curves, peaks, op.curve, float(_v(op.m)), op.curve.split(":", 2)[2] + f" ({op.curve.split(':')[1]})")
        return _done(op, ceiling, ceiling / e.value, e)
    if op.kind in ("matmul", "attention", "hbm"):
        key = op.hbm_curve if curves is not None and op.hbm_curve in curves.curves else "hbm"
        e_mem = (
            _eff(curves, peaks, key, float(op.bytes), "HBM copy" if key == "hbm_copy" else "HBM traffic")
            if op.bytes
            else None
        )
        t_m = memory / e_mem.value if e_mem else 0.0
        if op.kind == "hbm":  # norms, convolutions: no compute curve, their FLOPs at the ceiling
            e_c, t_c = None, compute
        elif op.kind == "matmul":
            x = float(_v(op.m) * _v(op.n) * _v(op.k)) ** (1.0 / 3.0)
            e_c = _eff(curves, peaks, curve_key("matmul", dtype=op.dtype), x, _dtype_op(op, "matmul"))
            t_c = compute / e_c.value
        else:
            e_c = _eff(curves, peaks, "attention", 1.0, "attention compute")
            t_c = compute / e_c.value
        binding = e_c if (e_c is not None and (t_c >= t_m or e_mem is None)) else e_mem
        if binding is None:  # an hbm op of 0 bytes
            binding = Efficiency(value=1.0, measured=False, label=f"{op.name}: no HBM bytes; its FLOPs at the ceiling")
        return _done(op, ceiling, max(t_c, t_m), binding)
    if op.kind == "grouped_matmul" and op.curve is not None and curves is not None and op.curve in curves.curves:
        # the engine's own kernel, measured (probe gmm): its curve, not the dtype's XLA grouped matmul
        what = "its own curve" if op.curve.startswith("grouped_matmul") else "the engine's grouped-matmul kernel"
        e = _eff(curves, peaks, op.curve, _v(op.tokens_per_group), f"{op.curve} ({what})")
        if op.curve in curves.schedules:
            sched = _eff(
                replace(curves, curves=curves.schedules),
                peaks,
                op.curve,
                _v(op.tokens_per_group),
                f"{op.curve} (scheduled)",
            )
            return replace(_done(op, ceiling, ceiling / e.value, e), scheduled_s=op.count * ceiling / sched.value)
    elif op.kind == "grouped_matmul":
        e = _eff(
            curves,
            peaks,
            curve_key("grouped_matmul", dtype=op.dtype),
            _v(op.tokens_per_group),
            _dtype_op(op, "grouped matmul"),
        )
    elif op.kind == "kda_chunked":
        # op.curve: validate's own chunked form where its record exists (step/graph.py), else the chip's KDA curve
        own = op.curve if op.curve is not None and curves is not None and op.curve in curves.curves else None
        e = _eff(
            curves,
            peaks,
            own or curve_key("kda_chunked", chunk=op.chunk),
            float(_v(op.heads)),
            f"KDA chunked (chunk {op.chunk})",
        )
    else:
        e = _eff(curves, peaks, op.kind, float(_v(op.heads)), op.kind.replace("_", " ").replace("kda", "KDA"))
    return _done(op, ceiling, ceiling / e.value, e)


def _dtype_op(op: OpCost, what: str) -> str:
    """'fp8 grouped matmul', with the fallback said where the stack's dtype has no peak on the hardware."""
    return f"{op.dtype} {what}" + (f" ({op.dtype_note})" if op.dtype_note else "")


def _done(op: OpCost, ceiling: float, expected: float, e: Efficiency) -> OpTime:
    return OpTime(
        name=op.name,
        kind=op.kind,
        category=op.cat,
        ceiling_s=op.count * ceiling,
        expected_s=op.count * expected,
        efficiency=e,
        label=f"{op.name}: {e.label}",
    )


def expected_time(
    ops: list[OpCost], *, peaks: Peaks, curves: EfficiencyCurves | None, cache: dict | None = None
) -> StageTime:
    """Ceiling and expected seconds of one stage (a decode step or a prefill chunk). ``cache``: OpCost ->
    OpTime across calls with the same peaks and curves (a prompt's chunks repeat all but attention)."""
    if cache is None:
        times = tuple(op_time(op, peaks=peaks, curves=curves) for op in ops)
    else:
        timed = []
        for op in ops:
            t = cache.get(op)
            if t is None:
                t = cache[op] = op_time(op, peaks=peaks, curves=curves)
            timed.append(t)
        times = tuple(timed)
    by_kind = kind_times(times)
    labels = list(dict.fromkeys(t.efficiency.label for t in times if not t.efficiency.measured))
    labels += list(dict.fromkeys(t.efficiency.label for t in times if t.efficiency.measured))
    return StageTime(
        device_kind=peaks.device_kind,
        ceiling_s=sum(t.ceiling_s for t in times),
        expected_s=sum(t.expected_s for t in times),
        by_kind=by_kind,
        labels=tuple(labels),
        ops=times,
        assumptions=ASSUMPTIONS,
    )
