"""probe dsv4-ops (issue 46): DeepSeek-V4's attention-side ops as jnp references, each point one op of k3plan's own
V4 op list with that op's bytes and FLOPs; its records become the ``dsv4:<stage>:<op>`` curves the step's V4 ops
read at their rows, carried to another TPU by the efficiency against the target's ceiling. CPU only, small shapes."""

from __future__ import annotations

import json
from pathlib import Path

from k3plan.evidence.probe_record import CPU_LABEL, ProbePoint, ProbeRecord, Stats
from k3plan.models.loader import load_model
from k3plan.probes.dsv4_ops import k3plan_ops
from k3plan.specfile import convert

OPS = "dsv4.indexer,dsv4.window_attention"


def _records(out: Path) -> list[ProbeRecord]:
    return [convert(ProbeRecord, json.loads(p.read_text()), p.name) for p in sorted(out.glob("*.json"))]


def test_each_point_carries_k3plans_own_op_bytes_and_flops(run_probe_cli):
    args = ("--decode-rows", "4", "--prefill-rows", "8", "--context", "1024", "--ops", OPS)
    result, _, out = run_probe_cli("dsv4-ops", *args)
    assert result.exit_code == 0, result.stderr
    (rec,) = _records(out)
    assert rec.probe == "dsv4-ops" and rec.backend == "cpu" and rec.label.startswith(CPU_LABEL)
    assert "not the kernels" in rec.label
    assert [(p.params["op"], p.params["stage"], p.params["rows"]) for p in rec.points] == [
        ("dsv4.indexer", "decode", 4),
        ("dsv4.window_attention", "decode", 4),
        ("dsv4.indexer", "prefill", 8),
        ("dsv4.window_attention", "prefill", 8),
    ]
    spec = load_model("deepseek-v4-flash").spec
    for p in rec.points:
        q = p.params
        op = k3plan_ops(spec, stage=q["stage"], rows=q["rows"], context=1024)[q["op"]]
        assert (q["read_bytes"], q["written_bytes"], q["flops"]) == (op.bytes_read, op.bytes_written, op.flops)
        assert p.value == p.stats.p50 > 0


def _record(kind: str, eff: float, *, stage: str = "decode", rows: int = 256) -> ProbeRecord:
    """A dsv4-ops record of ``kind`` whose one csa point runs at ``eff`` of its ceiling on that TPU's spec."""
    from k3plan.hardware.loader import load_hardware
    from k3plan.speed.peaks import Peaks

    name = {"TPU v5 lite": "tpu-v5e", "TPU7x": "tpu-v7x"}[kind]
    peaks = Peaks.from_hardware(load_hardware(name))
    spec = load_model("deepseek-v4-flash").spec
    op = k3plan_ops(spec, stage=stage, rows=rows, context=8192)["dsv4.csa_attention"]
    ceiling = max(op.bytes / peaks.hbm_bw_bytes_per_s, op.flops / peaks.flops_per_s("bf16"))
    t = ceiling / eff
    q = {
        "op": "dsv4.csa_attention",
        "stage": stage,
        "rows": rows,
        "context": 8192,
        "model": "deepseek-v4-flash",
        "read_bytes": int(op.bytes_read),
        "written_bytes": int(op.bytes_written),
        "touched_bytes": int(op.bytes),
        "flops": float(op.flops),
    }
    st = Stats(n=3, min=t, p50=t, p90=t)
    return ProbeRecord(
        probe="dsv4-ops",
        backend="tpu",
        device_kind=kind,
        device_count=1,
        date="2026-12-04T19:35:38Z",
        points=[ProbePoint(params=q, stats=st, value=t, unit="s")],
    )


def test_the_record_prices_the_v4_op_on_its_tpu_and_transfers_to_another():
    """At or above the step bound the efficiency carries (0.5 here; below it, the seconds: the test after)."""
    from k3plan.hardware.loader import load_hardware
    from k3plan.speed.curves import load_curves
    from k3plan.speed.expected import op_time
    from k3plan.speed.peaks import Peaks
    from k3plan.step.opcost import OpCost

    rec = _record("TPU v5 lite", 0.5)
    for name, transferred in (("tpu-v5e", False), ("tpu-v7x", True)):
        peaks = Peaks.from_hardware(load_hardware(name))
        curves = load_curves([(rec, "dsv4.json")], peaks=peaks)
        point = curves.curves["dsv4:decode:dsv4.csa_attention"].points[0]
        assert abs(point.efficiency - 0.5) < 1e-9 and (point.transferred_from is not None) == transferred
        spec = load_model("deepseek-v4-flash").spec
        op = k3plan_ops(spec, stage="decode", rows=256, context=8192)["dsv4.csa_attention"]
        cost = OpCost(
            name=op.name,
            kind="attention",
            count=21,
            flops=float(op.flops),
            bytes=int(op.bytes),
            m=256,
            curve="dsv4:decode:dsv4.csa_attention",
        )
        t = op_time(cost, peaks=peaks, curves=curves)
        assert abs(t.expected_s - t.ceiling_s / 0.5) < 1e-12 * max(1.0, t.expected_s)
        # the same op with no record of its own runs at the attention ceiling
        bare = op_time(cost, peaks=peaks, curves=load_curves([], peaks=peaks))
        assert bare.expected_s < t.expected_s


def test_a_step_bound_point_carries_its_seconds_to_another_tpu():
    """Below the step bound (the MLA kernel's rule, engines.torchtpu_vllm.speed.MLA_STEP_BOUND) a point's measured seconds carry to
    another TPU, not its efficiency; at or above it the efficiency does."""
    from k3plan.hardware.loader import load_hardware
    from k3plan.speed.curves import STEP_BOUND, load_curves
    from k3plan.engines.torchtpu_vllm.speed import MLA_STEP_BOUND
    from k3plan.speed.peaks import Peaks

    assert STEP_BOUND == MLA_STEP_BOUND
    v5e, v7x = (Peaks.from_hardware(load_hardware(n)) for n in ("tpu-v5e", "tpu-v7x"))
    spec = load_model("deepseek-v4-flash").spec
    op = k3plan_ops(spec, stage="decode", rows=256, context=8192)["dsv4.csa_attention"]

    def ceiling(peaks):
        return max(op.bytes / peaks.hbm_bw_bytes_per_s, op.flops / peaks.flops_per_s("bf16"))

    for eff in (0.05, 0.5):
        rec = _record("TPU v5 lite", eff)
        point = load_curves([(rec, "dsv4.json")], peaks=v7x).curves["dsv4:decode:dsv4.csa_attention"].points[0]
        seconds = ceiling(v5e) / eff
        want = ceiling(v7x) / seconds if eff < STEP_BOUND else eff
        assert abs(point.efficiency - want) < 1e-9 and point.transferred_from is not None
