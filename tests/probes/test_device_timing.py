"""Issue 35: the probes time the device (N dependent iterations in one program, the marginal cost), a rate
above the spec's peak is refused by the probe and never applied by a consumer, and the committed TPU
records hold no point above the physical peak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3plan.evidence.probe_record import ProbePoint, ProbeRecord
from k3plan.probes.peak import refuse_above_peak, refuse_below_bound
from k3plan.speed.curves import build_curves
from k3plan.speed.efficiency import efficiency
from k3plan.speed.peaks import LinkPeak, Peaks

REPO = Path(__file__).resolve().parents[2]

PEAKS = Peaks(
    device_kind="TPU v5 lite",
    hardware="hand-made",
    flops_per_s_by_dtype={"bf16": 197e12},
    hbm_bw_bytes_per_s=819e9,
    scale_up=LinkPeak(bw_bytes_per_s=1e11, latency_s=1e-5),
    scale_out=LinkPeak(bw_bytes_per_s=1e10, latency_s=5e-5),
)


def _pt(value, expected, **params):
    return ProbePoint(params=params, value=value, expected=expected, unit="bytes/s")


def test_a_rate_above_the_peak_is_refused_in_one_line():
    points = [_pt(652e9, 819e9, bytes=1 << 30), _pt(1.5e15, 819e9, bytes=1 << 26), _pt(819e9, 819e9, bytes=1)]
    reason = refuse_above_peak(points, what="hbm copy")
    assert reason is not None and "\n" not in reason and reason.startswith("refused: hbm copy bytes=67108864")
    assert [p.value for p in points] == [652e9, None, 819e9]  # at the peak is allowed, above is not
    assert points[1].params["refused_value"] == 1.5e15 and points[1].notes == [reason]
    assert refuse_above_peak([_pt(1e12, None)], what="x") is None  # no spec, no peak: nothing to refuse against


def test_a_time_below_the_hbm_bound_is_refused():
    fast = ProbePoint(params={"path": "reference"}, value=14.4e-6, expected=15.4e-6, unit="s")
    slow = ProbePoint(params={"path": "pallas"}, value=17.7e-6, expected=15.4e-6, unit="s")
    out = refuse_below_bound([fast, slow], what="kda-decode")
    assert len(out) == 1 and "reference" in out[0] and fast.value is None and slow.value == 17.7e-6


def _hbm_record(values: list[tuple[int, float]]) -> ProbeRecord:
    return ProbeRecord(
        probe="hbm",
        op="copy",
        backend="tpu",
        device_kind="TPU v5 lite",
        device_count=1,
        date="2026-12-04T00:00:00Z",
        points=[ProbePoint(params={"bytes": b}, value=v, unit="bytes/s") for b, v in values],
    )


def test_the_consumer_never_applies_an_efficiency_above_one(tmp_path):
    """A record written before the probe refused (or by hand) with a point above the peak: the curve skips
    that point and says so; interpolation can never return more than the ceiling."""
    rec = _hbm_record([(1 << 20, 500e9), (1 << 26, 5e12), (1 << 28, 1.01 * 819e9), (1 << 30, 652e9)])
    curves = build_curves([(rec, tmp_path / "r.json")], peaks=PEAKS)
    pts = curves.curves["hbm"].points
    assert [p.x for p in pts] == [1 << 20, 1 << 28, 1 << 30]  # 5 TB/s refused; 1% over (rounding) clamped to 1
    assert pts[1].efficiency == 1.0
    assert any("above 1: refused" in s for s in curves.skipped)
    for x in (1 << 18, 1 << 24, 1 << 32):
        e = efficiency(curves, key="hbm", x=float(x), device_kind="TPU v5 lite", op="HBM traffic")
        assert 0 < e.value <= 1.0


def test_committed_tpu_records_hold_nothing_above_the_peak():
    """The house rule on the shipped records (k3plan/evidence/probes): no hbm/matmul point's value above 1.02 x its expected (the peak)."""
    seen = 0
    for path in sorted((REPO / "k3plan" / "evidence" / "probes").glob("*-tpu-*.json")):
        rec = json.loads(path.read_text())
        for p in rec.get("points", []):
            if rec["probe"] in ("hbm", "matmul", "ragged-dot") and p.get("value") and p.get("expected"):
                seen += 1
                assert p["value"] <= 1.02 * p["expected"], f"{path.name}: {p['params']}"
    assert seen >= 10


def test_loop_program_times_each_iteration_and_keeps_the_dependency():
    import jax.numpy as jnp

    from k3plan.probes.loop import chained, time_loop

    program = chained(lambda x, y: jnp.dot(x, y))
    a, b = jnp.ones((64, 64), jnp.float32), jnp.full((64, 64), 0.5, jnp.float32)
    (x,) = program(jnp.int32(3), a, b)
    assert float(x[0, 0]) != 1.0 and float(x[1, 1]) == 1.0  # one element fed back a step, the rest untouched
    lt = time_loop(program, (a, b), warmup=1, repeats=3, target_s=0.002)
    assert lt.n_hi > lt.n_lo and len(lt.per_iter_s) == 3 and all(p > 0 for p in lt.per_iter_s)
    assert lt.floor_s >= 0 and set(lt.samples()) == {f"program_n{lt.n_lo}", f"program_n{lt.n_hi}"}


def test_hbm_rotates_past_on_chip_memory_and_the_reduce_is_not_hoisted():
    import jax.numpy as jnp

    from k3plan.probes.hbm.probe import ROTATE_BYTES, _stacked, rotating, rotation

    assert rotation(1 << 30) == 1 and rotation(1 << 20) * (1 << 20) >= ROTATE_BYTES
    xs = _stacked(jnp.ones((8, 128), jnp.float32), 1)
    _, acc = rotating("reduce", 1)(jnp.int32(3), xs)
    assert float(acc) == pytest.approx(3 * 8 * 128)
    ys, _ = rotating("copy", 2)(jnp.int32(3), _stacked(jnp.ones((8, 128), jnp.float32), 2))
    assert float(ys[0, 0, 0]) == pytest.approx(1.0001**2) and float(ys[1, 0, 0]) == pytest.approx(1.0001)


def test_kda_decode_tolerance_fits_fp32():
    from k3plan.probes.kda_decode.probe import tolerance

    assert tolerance(128) == pytest.approx(4 * 128 * 2.0**-23)
    assert 1e-5 < tolerance(128) < 1e-4  # the chip's 2.55e-4 (a default-precision reference) is outside it


def test_k3_width_keeps_k3s_widths():
    from k3plan.probes.step.scaled import k3_width_raw

    t = k3_width_raw(layers=4, experts=32)["text_config"]
    assert (t["hidden_size"], t["routed_expert_hidden_size"], t["moe_intermediate_size"]) == (7168, 3584, 3072)
    assert t["num_hidden_layers"] == 4 and t["num_experts"] == 32 and t["num_experts_per_token"] == 16
    assert t["linear_attn_config"]["kda_layers"] == [1, 2, 3] and t["linear_attn_config"]["full_attn_layers"] == [4]
    assert t["linear_attn_config"]["num_heads"] == 96 and t["linear_attn_config"]["head_dim"] == 128


def test_kda_decode_target_is_the_mosaic_check(cli):
    r = cli("probe", "kda-decode", "--target", "cpu")
    assert r.exit_code == 2 and "expected a TPU topology" in r.output
    from k3plan.validate.targets import libtpu_version

    if libtpu_version() is None:
        pytest.skip("libtpu not installed: the Mosaic compile needs it")
    # a fresh process: libtpu starts only where jax was not first started on the suite's fake CPU devices
    env = {**os.environ, "PYTHONPATH": str(REPO), "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    env.pop("XLA_FLAGS", None)
    args = ["-m", "k3plan", "probe", "kda-decode", "--target", "tpu7x:2x2x4", "--heads", "8"]
    done = subprocess.run([sys.executable, *args], check=False, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["target"] == "tpu7x:2x2x4" and out["kernels"][0]["kernel"] == "kda-decode" and out["kernels"][0]["ok"]


def test_step_width_is_sized_to_the_backend():
    from k3plan.errors import K3PlanError
    from k3plan.probes.step.probe import StepParams

    StepParams().check()  # auto: toy on CPU, k3 on an accelerator
    StepParams(width="k3", layers=2, experts=16).check()
    with pytest.raises(K3PlanError, match="--width k3 only"):
        StepParams(width="toy", layers=2).check()
    with pytest.raises(K3PlanError, match="expected auto, toy or k3"):
        StepParams(width="huge").check()


def test_k3_width_step_holds_its_experts_in_bf16():
    """torchtpu-vllm's "expert@mxfp4" key outranks "expert": the K3-width step must override it too, or it
    holds MXFP4 experts dequantized in XLA ops (the first v5e step run: 80.7 ms a decode step)."""
    from k3plan.probes.step.probe import StepParams, step_setup

    s = step_setup(StepParams(width="k3"), hardware="tpu-v5e")
    assert s.stack.runtime_format("expert", "mxfp4") == "bf16"
    assert not any(k.startswith("expert@") for k in s.stack.runtime_formats)
