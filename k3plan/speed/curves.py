"""Efficiency curves from probe records: for one device kind, per op kind, efficiency = the
ceiling time of the probed point / its measured time, against a size axis.

    matmul:<dtype>             x = (M N K)^(1/3) (the probe's size)             probe matmul [--from-plan]
    grouped_matmul:<dtype>     x = rows a touched expert group                  probe ragged-dot [--from-plan]
    gmm_v2:<format>:<call>     x = rows a touched expert group                  probe gmm (the engine's kernel)
    hbm                        x = bytes a transfer                              probe hbm
    kda_recurrent              x = heads (best over the record's lengths)        probe kda --path recurrent
    kda_chunked:<chunk>        x = heads                                         probe kda --path chunked
    kda_decode                 x = heads                                         probe kda-decode
    collective:<op>:<group>    x = message bytes a device                        probe a2a|allreduce|allgather

Rules (architecture.md): a record of another device kind is never used (one exception, issue 38: a TPU's
missing matmul and HBM curves transferred from another TPU's, labelled: ``transfer_curves``), a CPU record never for a
TPU/GPU; failed or unverified records and Pallas interpret-mode timings are skipped; at one point
the newest record of an implementation wins and across implementations the best (the envelope).
Chained collective records are preferred to unchained ones (a step's collectives depend on each
other).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Sequence

from k3plan.evidence.probe_records import Source, canonical_op, record_pairs
from k3plan.speed.peaks import Peaks
from k3plan.structs import Frozen, replace

if TYPE_CHECKING:  # only annotations here: a fit without --probes does not build the record schema
    from k3plan.evidence.probe_record import ProbeRecord

_Frozen = Frozen
# k3plan validate's chunked KDA (validate/layers.py gdr_chunked, `probe kda --impl validate`): priced only for the
# graph `probe step` times (step/graph.py), never an engine's KDA (issue 50)
VALIDATE_KDA = "kda_chunked_validate:{chunk}"
# XLA's ragged_dot on f32 operands, held against the bf16 peak (`probe ragged-dot --dtype float32`; issue 50)
F32_PASSES = "grouped_matmul_f32_passes"


class EfficiencyPoint(_Frozen):
    x: float
    efficiency: float  # ceiling time / measured time
    record_path: str
    record_label: str | None = None
    detail: str
    transferred_from: str | None = None  # another device kind's measurement, transferred (``transfer_curves``)
    source_hardware: str | None = None  # that device's hardware spec (its peaks), not in the JSON

    __exclude__ = ("source_hardware",)


class EfficiencyCurve(_Frozen):
    key: str
    axis: str
    points: tuple[EfficiencyPoint, ...]  # sorted by x, one per x


class KernelTime(_Frozen):
    """One measured call of an engine's small kernel whose time is a fixed cost (issue 38): seconds a call at its
    shape, from a TPU record, used on any TPU as measured (``kernel_times``)."""

    tokens: int  # the rows a call runs
    blocks: int  # attnres: the history's blocks (K); else 0
    seconds: float
    record_path: str
    device_kind: str
    # mla-engine: the kv_len a call attends to, its (queries, pages) a kernel block, its pass, heads a device, the
    # cache's page (tokens) and the point's efficiency against its ceiling
    context: int = 0
    block: tuple[int, int] = (0, 0)
    decode: bool = False
    heads: int = 0
    page: int = 0
    efficiency: float | None = None


class ScheduleCheck(_Frozen):
    """A kernel call both scheduled (probe gmm-schedule) and measured (probe gmm) on one TPU: how far the
    compiler's static schedule is from the chip's time."""

    device_kind: str
    call: str  # 'w13 int4 256x28'
    scheduled_s: float
    measured_s: float


class EfficiencyCurves(_Frozen):
    device_kind: str
    hardware: str
    curves: dict[str, EfficiencyCurve]
    skipped: tuple[str, ...] = ()  # records seen but not used, and why
    # probe attnres / moe-glue: the engine's small kernels, seconds a call (kernel_times)
    kernel_times: dict[str, tuple[KernelTime, ...]] = {}
    # probe gmm-schedule: the engine's gmm_v2 as this TPU's compiler schedules it (``schedule_curves``), as
    # efficiencies against the same ceilings as the gmm_v2 curves; never the expected time (a static schedule
    # counts issue slots, not a DMA's wait), the gap's account of the kernel's compute
    schedules: dict[str, EfficiencyCurve] = {}
    schedule_checks: tuple[ScheduleCheck, ...] = ()  # every TPU's scheduled and measured calls side by side

    __exclude__ = ("schedules", "schedule_checks")


# Issue 38: the engine's Attention Residual kernel and its MoE decode glue (probe attnres, probe moe-glue) cost a
# fixed time a 16-row tile: at 16 rows their time stays flat while the history's bytes grow with K, and every point
# sits well below its HBM ceiling (docs/device.md's tables, tested against the records), so no HBM or MXU ratio
# carries them to another chip; they apply to a TPU as measured on the TPU that ran them, labelled (as the ops'
# fixed cost a fusion does, k3plan/evidence/hosts/)
# The engine's MLA kernel at its default blocks (probe mla-engine) likewise: see overheads.MLA_KERNEL_TRANSFER
KERNEL_TIME_PROBES = ("attnres", "moe-glue", "mla-engine")


def kernel_times(
    records: Sequence[tuple[ProbeRecord, PurePath]], *, device_kind: str
) -> dict[str, tuple[KernelTime, ...]]:
    """The verified TPU records of each probe of ``KERNEL_TIME_PROBES`` -- this device kind's where it has any,
    else the device kind of the newest -- as KernelTime points by (tokens, blocks), the newest record's point where
    two measured the same shape."""
    if not device_kind.upper().startswith("TPU"):
        return {}
    out: dict[str, tuple[KernelTime, ...]] = {}
    for probe in KERNEL_TIME_PROBES:
        found = [
            (r, path)
            for r, path in records
            if r.probe == probe
            and r.ok
            and r.verified is not False
            and not r.is_cpu
            and r.device_kind.upper().startswith("TPU")
        ]
        if not found:
            continue
        found.sort(key=lambda rp: (rp[0].device_kind.lower() == device_kind.lower(), rp[0].date))
        kind = found[-1][0].device_kind
        pts: dict[tuple, KernelTime] = {}
        for record, path in (rp for rp in found if rp[0].device_kind == kind):  # oldest first: the newest wins
            for p in record.points:
                if p.value is None or p.value <= 0:
                    continue
                q = p.params
                kt = KernelTime(
                    tokens=int(q["rows"] if "rows" in q else q["tokens"]),
                    blocks=int(q.get("blocks", 0)),
                    seconds=float(p.value),
                    record_path=str(path),
                    device_kind=kind,
                    context=int(q.get("context", 0)),
                    block=(int(q.get("queries_a_block", 0)), int(q.get("pages_a_block", 0))),
                    decode=q.get("pass") == "decode",
                    heads=int(q.get("heads", 0)),
                    page=int(q.get("page_size", 0)),
                    efficiency=q.get("efficiency"),
                )
                pts[(kt.tokens, kt.blocks, kt.context, kt.block, kt.decode, kt.heads, kt.page)] = kt
        out[probe] = tuple(pts[k] for k in sorted(pts))
    return out


# A point above its ceiling is never applied: within 2% (the rounding of a ceiling built on the same
# measurement, e.g. a latency taken from the record itself) it is clamped to 1; beyond, refused.
MAX_EFFICIENCY = 1.02

# curves that are another curve's records seen apart (hbm_copy: the hbm curve's copy records), not counted as
# curves of their own where a line says how many curves a folder gave
VIEWS = frozenset({"hbm_copy"})

AXES = {
    "matmul": "(M N K)^(1/3)",
    "grouped_matmul": "rows a touched expert group",
    "gmm_v2": "rows a touched expert group",
    "hbm": "bytes a transfer",
    "hbm_copy": "bytes a copy (read + write)",
    "kda_recurrent": "heads",
    "kda_chunked": "heads",
    "kda_chunked_validate": "heads",
    "grouped_matmul_f32_passes": "rows a touched expert group",
    "kda_decode": "heads",
    "collective": "message bytes a device",
    "dsv4": "rows a step (a decode step's sequences, a prefill chunk's tokens)",
}


def curve_key(
    kind: str,
    *,
    dtype: str | None = None,
    chunk: int | None = None,
    collective: str | None = None,
    group: int | None = None,
) -> str:
    if kind in ("matmul", "grouped_matmul"):
        return f"{kind}:{_dtype(dtype or 'bf16')}"
    if kind == "kda_chunked":
        return f"kda_chunked:{chunk}"
    if kind == "collective":
        return f"collective:{canonical_op(collective or '')}:{group}"
    return kind


def _dtype(dtype: str) -> str:
    from k3plan.hardware.spec import DTYPE_ALIASES

    return DTYPE_ALIASES.get(dtype.lower(), dtype.lower())


def _point_values(record: ProbeRecord, peaks: Peaks) -> list[tuple[str, float, float, str]]:
    """(curve key, x, efficiency, detail) for each usable point of one record."""
    out = []
    pts = [(p, float(p.value)) for p in record.points if p.value is not None and p.value > 0]
    probe = record.probe
    if probe == "matmul":
        for p, v in pts:
            d, n = str(p.params["dtype"]), float(p.params["size"])
            if _dtype(d) not in peaks.flops_per_s_by_dtype:
                continue
            peak = peaks.flops_per_s(d)
            shape = f"{p.params['m']}x{p.params['n']}x{p.params['k']} ({p.params['ops'][0]})" if "m" in p.params else ""
            out.append(
                (
                    curve_key("matmul", dtype=d),
                    n,
                    v / peak,
                    f"{d} {shape or f'{n:g}^3'}: {v:.3g} FLOP/s measured / {peak:.3g} peak",
                )
            )
    elif probe == "ragged-dot":
        d = str(record.params.get("dtype", "bf16"))
        # f32 operands where the hardware has no f32 peak: a TPU runs f32 dots as bf16 passes (a stack's
        # compute_dtype says so), so the record is held against the bf16 peak: its efficiency is the passes' cost,
        # on its own curve (F32_PASSES), which only an op that names it reads (validate's f32 graph, step/graph.py)
        peak_dtype = "bf16" if _dtype(d) in ("f32", "fp32", "float32") and "bf16" in peaks.flops_per_s_by_dtype else d
        if _dtype(peak_dtype) in peaks.flops_per_s_by_dtype:
            local = int(record.params.get("local_experts") or 0)
            for p, v in pts:
                flops, wbytes = float(p.params["flops"]), float(p.params["weight_bytes_touched"])
                # the bytes XLA's ragged_dot read: every local group's weight where the record names the local
                # experts (its 1-token point, 2 rows in 2 of 28 groups, took 0.83 ms, as long as 22 of 28 groups
                # did: 616 MB of all 28 at 742 GB/s; the step's ragged_dots at 1 and 2 rows a group over all 16
                # touched ran 468-470 us alike, reports/probes/grid-profile-20261204/tt-bf16-2l16e-decode-*)
                touched = max(1, int(p.params["experts_touched"]))
                wbytes = max(wbytes, wbytes / touched * local)
                ceiling = max(flops / peaks.flops_per_s(peak_dtype), wbytes / peaks.hbm_bw_bytes_per_s)
                x = float(p.params["rows"]) / max(1, int(p.params["experts_touched"]))
                out.append(
                    (
                        F32_PASSES if peak_dtype != d else curve_key("grouped_matmul", dtype=d),
                        x,
                        ceiling / (flops / v),
                        (
                            f"{p.params['tokens']} tokens, {x:.3g} rows a group: {flops / v:.3g} s "
                            f"measured / {ceiling:.3g} s ceiling"
                        ),
                    )
                )
    elif probe == "gmm":
        out.extend(_gmm_points(record, peaks, pts))
    elif probe == "hbm":
        # every record on "hbm" (the envelope: norms, weight streams); the copies also on "hbm_copy", for ops that
        # read and write the same bytes (step.graph's relayout and slice copies: OpCost.hbm_curve)
        keys = ("hbm", "hbm_copy") if record.op == "copy" else ("hbm",)
        for p, v in pts:
            for key in keys:
                out.append(
                    (
                        key,
                        float(p.params["bytes"]),
                        v / peaks.hbm_bw_bytes_per_s,
                        (
                            f"{record.op} {p.params['bytes']} B: {v:.3g} B/s measured / "
                            f"{peaks.hbm_bw_bytes_per_s:.3g} peak"
                        ),
                    )
                )
    elif probe == "engine-profile" and record.op == "weight-read":
        # a weight read an engine's own profile timed (transcribed, issue 38): the HBM side of a matmul that streams
        # its weights, an efficiency against the peak at its bytes -- not the chip's stream bandwidth, so never the
        # roofline's measured bandwidth (roofline.latency.measured_hardware reads probe "hbm" records only)
        for p, v in pts:
            out.append(
                (
                    "hbm",
                    float(p.params["bytes"]),
                    v / peaks.hbm_bw_bytes_per_s,
                    (
                        f"weight read {p.params['bytes']} B (the engine's profile): {v:.3g} B/s / "
                        f"{peaks.hbm_bw_bytes_per_s:.3g} peak"
                    ),
                )
            )
    elif probe == "kda" and record.mode in ("recurrent", "chunked"):
        # here, not at the top: the KDA probe module pulls the probe context (importlib.metadata), which fit's
        # start must not pay now that fit computes the model for a serving benchmark's transfer (issue 38)
        from k3plan.step.kda import kda_flops_per_token

        rp = record.params
        fpt = kda_flops_per_token(
            path=record.mode,
            heads=int(rp["heads"]),
            dk=int(rp["head_dim"]),
            dv=int(rp["head_dim"]),
            chunk=int(rp["chunk"]),
        )
        ceiling = fpt / peaks.flops_per_s("bf16")
        best = min(pts, key=lambda pv: pv[1], default=None)  # the fastest length: the envelope
        if best is not None:
            bp, bv = best
            key = "kda_recurrent" if record.mode == "recurrent" else curve_key("kda_chunked", chunk=int(rp["chunk"]))
            if record.mode == "chunked" and rp.get("impl") == "validate":  # validate's own form: its own curve
                key = VALIDATE_KDA.format(chunk=int(rp["chunk"]))
            out.append(
                (
                    key,
                    float(rp["heads"]),
                    ceiling / bv,
                    (
                        f"{rp['heads']} heads x {rp['head_dim']}, {bp.params.get('seq_len')} tokens: "
                        f"{bv:.3g} s a token measured / {ceiling:.3g} ceiling"
                    ),
                )
            )
    elif probe == "kda-decode":
        native = [(p, v) for p, v in pts if "interpret" not in str(p.params.get("path", ""))]
        best = min(native, key=lambda pv: pv[1], default=None)
        if best is not None:
            bp, bv = best
            ceiling = float(bp.params["state_bytes_moved"]) / peaks.hbm_bw_bytes_per_s
            out.append(
                (
                    "kda_decode",
                    float(record.params["heads"]),
                    ceiling / bv,
                    (
                        f"{record.params['heads']} heads, {bp.params['path']}: {bv:.3g} s measured / "
                        f"{ceiling:.3g} s ceiling"
                    ),
                )
            )
    elif probe == "dsv4-ops":
        # DeepSeek-V4's attention-side ops (probes/dsv4_ops.py): each point one op of k3plan's own V4 op list at its
        # shapes, its ceiling that op's (the record's bytes and FLOPs, at this TPU's peaks)
        for p, v in pts:
            q = p.params
            moved = float(q["read_bytes"]) + float(q["written_bytes"])
            ceiling = max(moved / peaks.hbm_bw_bytes_per_s, float(q["flops"]) / peaks.flops_per_s("bf16"))
            out.append(
                (
                    f"dsv4:{q['stage']}:{q['op']}",
                    float(q["rows"]),
                    ceiling / v,
                    (
                        f"{q['op']} {q['stage']} {q['rows']} rows at {q['context']:,} ({q['model']}): {v:.3g} s a layer "
                        f"measured / {ceiling:.3g} s ceiling"
                    ),
                )
            )
    elif record.op is not None and probe in ("a2a", "allreduce", "allgather"):
        group = int(record.params.get("axis_size", record.device_count))
        for p, v in pts:
            wire = float(p.params.get("wire_bytes_per_device", p.params["bytes"]))
            ceiling = peaks.scale_up.latency_s + wire / peaks.scale_up.bw_bytes_per_s
            out.append(
                (
                    curve_key("collective", collective=record.op, group=group),
                    float(p.params["bytes"]),
                    ceiling / v,
                    (
                        f"{record.op} ({record.mode}) {p.params['bytes']} B over {group}: "
                        f"{v:.3g} s a call measured / {ceiling:.3g} s ceiling (scale-up latency + wire/bw)"
                    ),
                )
            )
    return out


def _gmm_points(record: ProbeRecord, peaks: Peaks, pts: list) -> list[tuple[str, float, float, str]]:
    """probe gmm (issue 38): the engine's grouped-matmul kernel, efficiency = its ceiling / the seconds a call,
    the ceiling as the model prices a routed-expert op: max(the touched bytes / HBM peak, the MXU rows the
    kernel computes (k3plan.step.gmm: calculate_tiling, fill_metadata's visits, bucket_m) x 2 K N / bf16 peak).
    Keyed by the weight format (MXFP4: float4_e2m1fn, or int4 with the same block-32 scales as its stand-in where
    the compiler refused fp4: the same dequantize-before-matmul path, labelled) and the call (w13, w2)."""
    from k3plan.step.gmm import RECORD_CURVES, VMEM_BYTES, VMEM_SHARE, gmm_curve_key, gmm_v2_tiles, visit_mxu_rows

    fmt = str(record.params.get("weight_dtype", ""))
    how = "scheduled (the compiler's static schedule)" if record.probe == SCHEDULE_PROBE else "measured"
    curve_fmts = RECORD_CURVES.get(fmt, ())
    vmem = VMEM_BYTES.get(record.device_kind)
    if not curve_fmts or vmem is None:
        return []
    curve_fmt = curve_fmts[0]  # the tiling: every curve of a record has its bits and scale block
    quant = record.params.get("quant_block")
    out = []
    for p, v in pts:
        q = p.params
        rows, groups, k, n = int(q["rows"]), int(q["groups"]), int(q["k"]), int(q["n"])
        fused = q.get("projection") == "w13"
        tiles = gmm_v2_tiles(
            size_m=rows,
            size_k=k,
            size_n=n,
            rhs_bits=16 if curve_fmt == "bf16" else 4,
            quant_block=None if curve_fmt == "bf16" else int(quant or 32),
            fused=fused,
            vmem_limit=int(vmem * VMEM_SHARE),
        )
        sizes = [rows // groups + (1 if g < rows % groups else 0) for g in range(groups)]
        mxu_flops = 2.0 * visit_mxu_rows(sizes, tiles) * k * n
        ceiling = max(float(q["touched_bytes"]) / peaks.hbm_bw_bytes_per_s, mxu_flops / peaks.flops_per_s("bf16"))
        x = rows / groups
        for cf in curve_fmts:
            stand_in = (
                f" (int4 stand-in for MXFP4: {record.label or 'the same block-32 scales, dequantized before the matmul'})"
                if fmt == "int4" and cf == "mxfp4"
                else ""
            )
            out.append(
                (
                    gmm_curve_key(cf, fused=fused),
                    x,
                    ceiling / v,
                    (
                        f"gmm_v2 {q['projection']} {fmt}{stand_in}, {rows} rows over {groups} experts "
                        f"({x:.3g} a group): {v:.3g} s a call {how} / {ceiling:.3g} s ceiling"
                    ),
                )
            )
    return out


def _skip_reason(record: ProbeRecord, device_kind: str) -> str | None:
    kind = device_kind.lower()
    if not record.ok or record.verified is False:
        return "failed or unverified"
    if record.is_cpu and kind != "cpu":
        return "CPU backend record: never applied to an accelerator"
    if record.device_kind.lower() != kind:
        return f"device kind {record.device_kind}, not {device_kind}"
    if "interpret" in str(record.implementation or "") and record.probe != "kda-decode":  # its points say their path
        return "Pallas interpret mode: timing meaningless"
    return None


def build_curves(records: Sequence[tuple[ProbeRecord, PurePath]], *, peaks: Peaks) -> EfficiencyCurves:
    """Records (oldest first, with their paths) -> the curves for `peaks.device_kind`."""
    skipped, newest = [], {}
    chained = {
        (r.op, r.params.get("axis_size"))
        for r, _ in records
        if r.mode == "chained" and _skip_reason(r, peaks.device_kind) is None
    }
    for record, path in records:
        why = _skip_reason(record, peaks.device_kind)
        if why is None and record.mode == "unchained" and (record.op, record.params.get("axis_size")) in chained:
            why = "unchained collective: a chained record of the same op and group exists"
        if why:
            skipped.append(f"{path}: {why}")
            continue
        for key, x, eff, detail in _point_values(record, peaks):
            if eff > MAX_EFFICIENCY:  # faster than the peak: the timing was wrong; never applied (issue 35)
                skipped.append(f"{path}: {key} at {x:.4g}: efficiency {eff:.0%} of the peak, above 1: refused")
                continue
            point = EfficiencyPoint(
                x=x, efficiency=min(eff, 1.0), record_path=str(path), record_label=record.label, detail=detail
            )
            newest[(key, x, record.probe, record.op, record.mode, record.implementation)] = point  # newest wins
    best: dict[tuple[str, float], EfficiencyPoint] = {}
    for (key, x, *_), point in newest.items():
        if (key, x) not in best or point.efficiency > best[(key, x)].efficiency:
            best[(key, x)] = point  # the envelope across implementations
    curves: dict[str, list[EfficiencyPoint]] = {}
    for (key, _), point in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        curves.setdefault(key, []).append(point)
    return EfficiencyCurves(
        device_kind=peaks.device_kind,
        hardware=peaks.hardware,
        skipped=tuple(skipped),
        curves={k: EfficiencyCurve(key=k, axis=AXES[k.split(":")[0]], points=tuple(v)) for k, v in curves.items()},
    )


def load_curves(src: Source, *, peaks: Peaks) -> EfficiencyCurves:
    """Every record under the folder ``src`` (k3plan.evidence.probe_records' loader), or the (record, name) pairs
    ``src`` (an Evidence value's records) -> curves for `peaks.device_kind`, with the curves no record of that kind
    holds transferred from another TPU's (``transfer_curves``)."""
    records: list = record_pairs(src)
    curves = transfer_curves(build_curves(records, peaks=peaks), records, peaks=peaks)
    times = kernel_times(records, device_kind=peaks.device_kind)
    if any(r.probe == SCHEDULE_PROBE for r, _ in records):
        curves = replace(
            curves, schedules=schedule_curves(records, peaks=peaks), schedule_checks=schedule_checks(records)
        )
    return replace(curves, kernel_times=times) if times else curves


# Issue 38: the engine's gmm_v2 compiled for a TPU without one, its time a call read from the compiler's static
# schedule (k3plan/probes/gmm_schedule.py): what the target issues, for the chip no probe here runs
SCHEDULE_PROBE = "gmm-schedule"


def schedule_curves(records: Sequence[tuple[ProbeRecord, PurePath]], *, peaks: Peaks) -> dict[str, EfficiencyCurve]:
    """The gmm-schedule records of ``peaks.device_kind`` as gmm_v2 curves (the newest point at each x)."""
    pts: dict[tuple[str, float], EfficiencyPoint] = {}
    for record, path in records:
        if record.probe != SCHEDULE_PROBE or _skip_reason(record, peaks.device_kind) is not None:
            continue
        for key, x, eff, detail in _gmm_points(record, peaks, [(p, float(p.value)) for p in record.points if p.value]):
            pts[(key, x)] = EfficiencyPoint(
                x=x, efficiency=eff, record_path=str(path), record_label=record.label, detail=detail
            )
    out: dict[str, list[EfficiencyPoint]] = {}
    for (key, _), point in sorted(pts.items(), key=lambda kv: kv[0]):
        out.setdefault(key, []).append(point)
    return {k: EfficiencyCurve(key=k, axis=AXES["gmm_v2"], points=tuple(v)) for k, v in out.items()}


def schedule_checks(records: Sequence[tuple[ProbeRecord, PurePath]]) -> tuple[ScheduleCheck, ...]:
    """Each call a gmm-schedule record and a verified probe gmm record of the same TPU both hold (projection,
    weight format, rows, groups), the newest of each."""

    def calls(probe: str) -> dict[tuple[str, str], float]:
        out = {}
        for r, _ in records:
            if r.probe != probe or not r.ok or r.verified is False or r.is_cpu:
                continue
            for p in r.points:
                if p.value:
                    q = p.params
                    call = f"{q['projection']} {q['weight_dtype']} {q['rows']}x{q['groups']}"
                    out[(r.device_kind, call)] = float(p.value)
        return out

    measured = calls("gmm")
    return tuple(
        ScheduleCheck(device_kind=kind, call=call, scheduled_s=s, measured_s=measured[(kind, call)])
        for (kind, call), s in sorted(calls(SCHEDULE_PROBE).items())
        if (kind, call) in measured
    )


# Issue 38: an efficiency measured on one TPU may stand for another TPU's, labelled "transferred", never above 1.
# Only the op kinds the engine runs as the probe ran them transfer: XLA matmuls and HBM streams, and the engine's
# own grouped-matmul kernel where ``probe gmm`` timed it (gmm_v2, loaded from the engine's source: the same
# kernel, the same call as the engine's gmm_wrapper); and DeepSeek-V4's attention-side ops (probe dsv4-ops, issue
# 46): jnp references of the work the engine's kernels do, their efficiency against k3plan's own ceiling for the op
# carried to the target's ceiling (the ratio of the limiting resource), labelled transferred -- a jnp reference on
# a v5e, not the engine's kernel on the target, which the label says. Not transferred:
TRANSFERRED = ("matmul", "hbm", "gmm_v2", "dsv4")
NOT_TRANSFERRED = {
    "grouped_matmul": (
        "the records time XLA's ragged_dot, which reads every local expert's weights even for an empty group; the "
        "engine's grouped matmul is gmm_v2 (kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/megablox/gmm_v2.py "
        "fill_metadata @15e5264a: should_process = group_size > 0), which visits only the touched groups; that "
        "kernel's own records (probe gmm) are the gmm_v2 curves, which do transfer"
    ),
    "kda_decode": "a different kernel on each chip (the v5e record's jnp point was refused, its Pallas point is slower)",
    "kda_chunked": "no engine kernel of the record's form",
    "kda_chunked_validate": "k3plan validate's own graph, timed on one chip",
    "grouped_matmul_f32_passes": "XLA's ragged_dot on f32 operands, k3plan validate's f32 graph only",
    "kda_recurrent": "no engine kernel of the record's form",
    "collective": "a collective's record is of its group and link, not of a chip",
}


def transfer_source_kinds(peaks: Peaks, kinds: set[str] | None = None) -> list[Peaks]:
    """The peaks of every bundled TPU hardware spec other than ``peaks``' device kind (empty for a non-TPU), in
    list_hardware's order. ``kinds`` (lower-case device kinds the records hold): only the specs of those kinds,
    and the specs are read until each is found -- the tpu-* files first, so a fit reads one or two of the
    fourteen bundled specs, not all (each is a YAML parse and a validation)."""
    if not peaks.device_kind.upper().startswith("TPU"):
        return []
    from k3plan.hardware.loader import list_hardware, load_hardware

    names = list_hardware()
    target = peaks.device_kind.lower()
    wanted = None if kinds is None else {k for k in kinds if k != target}
    found: dict[int, Peaks] = {}
    for i in sorted(range(len(names)), key=lambda i: not names[i].startswith("tpu")):  # stable: tpu-* first
        if wanted is not None and wanted <= {p.device_kind.lower() for p in found.values()}:
            break
        hw = load_hardware(names[i])
        kind = hw.device_kind.lower()
        if hw.device_kind.upper().startswith("TPU") and kind != target and (wanted is None or kind in wanted):
            found[i] = Peaks.from_hardware(hw)
    return [found[i] for i in sorted(found)]


def transfer_curves(
    curves: EfficiencyCurves, records: Sequence[tuple[ProbeRecord, PurePath]], *, peaks: Peaks
) -> EfficiencyCurves:
    """``curves`` plus, for each matmul, HBM and gmm_v2 curve (``TRANSFERRED``) no record of ``peaks.device_kind``
    holds, another TPU's
    (measured against that TPU's own peaks, so the efficiency is its own), each point labelled transferred.
    Several source TPUs: the first bundled spec's wins (one source a curve, never a max over them)."""
    kinds = {r.device_kind.lower() for r, _ in records if not r.is_cpu}
    added: dict[str, EfficiencyCurve] = {}
    for src in transfer_source_kinds(peaks, kinds):
        if src.device_kind.lower() not in kinds:
            continue
        theirs = _step_bound_as_measured(build_curves(records, peaks=src), records, src=src, peaks=peaks)
        for key, curve in theirs.curves.items():
            if key.split(":")[0] not in TRANSFERRED or key in curves.curves or key in added:
                continue
            if key.startswith("matmul:") and key.split(":")[1] not in peaks.flops_per_s_by_dtype:
                continue
            added[key] = replace(
                curve,
                points=tuple(
                    replace(
                        p,
                        transferred_from=f"{src.device_kind} ({src.hardware})",
                        source_hardware=src.hardware,
                        efficiency=min(p.efficiency, 1.0),
                    )
                    for p in curve.points
                ),
            )
    if not added:
        return curves
    return replace(curves, curves={**curves.curves, **added})


# A dsv4-ops point far below its ceiling is bound by its steps (CSA's row gather: one DMA a key), not by the bytes or
# FLOPs its ceiling counts: no HBM or MXU ratio carries it, and it applies to another TPU as the seconds measured --
# the rule ``k3plan.engines.torchtpu_vllm.speed.MLA_STEP_BOUND`` holds for the engine's MLA kernel (tests hold the two equal)
STEP_BOUND = 0.2


def _step_bound_as_measured(
    theirs: EfficiencyCurves, records: Sequence[tuple[ProbeRecord, PurePath]], *, src: Peaks, peaks: Peaks
) -> EfficiencyCurves:
    """``theirs`` (another TPU's curves, against its own peaks) with each dsv4 point below ``STEP_BOUND`` re-expressed
    against ``peaks``: the target's ceiling of the same op over the seconds measured (the time carried as measured);
    a point at or above it keeps its efficiency (the ratio of the limiting resource carries it)."""
    seconds: dict[tuple[str, float], tuple[float, float]] = {}
    for record, _ in records:
        if record.probe != "dsv4-ops" or record.device_kind.lower() != src.device_kind.lower():
            continue
        for p in record.points:
            if p.value:
                q = p.params
                moved = float(q["read_bytes"]) + float(q["written_bytes"])
                mine = max(moved / peaks.hbm_bw_bytes_per_s, float(q["flops"]) / peaks.flops_per_s("bf16"))
                seconds[(f"dsv4:{q['stage']}:{q['op']}", float(q["rows"]))] = (mine, float(p.value))
    curves = dict(theirs.curves)
    for key, curve in theirs.curves.items():
        if not key.startswith("dsv4:"):
            continue
        pts = []
        for pt in curve.points:
            at = seconds.get((key, pt.x))
            if pt.efficiency < STEP_BOUND and at is not None:
                eff = min(at[0] / at[1], 1.0)
                pt = replace(
                    pt, efficiency=eff, detail=f"{pt.detail}; step-bound (below {STEP_BOUND:.0%}): the seconds carried"
                )
            pts.append(pt)
        curves[key] = replace(curve, points=tuple(pts))
    return replace(theirs, curves=curves)
