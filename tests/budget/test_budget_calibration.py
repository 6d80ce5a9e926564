"""Calibration files: measured temporaries combined as an upper envelope, never a fitted slope;
the jax-native stack's weights against the measured jit arguments."""

from __future__ import annotations

import pytest
import yaml
from fit_helpers import CALIBRATION, GiB, cached_setup, run_fit

from k3plan.errors import K3PlanError
from k3plan.evidence.calibration import envelope, load_calibration

# the measured prefill points of the v7x file, repeated so the unit tests read no file
PREFILL = [
    (64, 10.44, True),
    (4096, 8.55, True),
    (16384, 18.10, True),
    (32768, 35.30, True),
    (49152, 36.54, True),
    (53248, 39.51, True),
    (57344, 44.55, False),
]
# the envelope works in bytes a device: the file's GiB converted as the reader does, int(gib * 2^30)
PREFILL_BYTES = [(t, int(g * 2**30), f) for t, g, f in PREFILL]


@pytest.mark.parametrize(
    "x, want",
    [
        (1, 10.44),
        (64, 10.44),
        (4096, 10.44),  # upper envelope: max(10.44 at 64, 8.55 at 4096), the low-end floor
        (4097, 18.10),
        (16384, 18.10),
        (20000, 35.30),
        (40000, 36.54),  # a fitted line between 32768 and 49152 would say ~35.9: the envelope takes 36.54
        (53248, 39.51),
    ],
)
def test_envelope_takes_the_largest_measured_value_up_to_the_next_point(x, want):
    env = envelope(PREFILL_BYTES, x, what="chunk")
    assert env.status == "measured"
    assert env.temp_bytes == int(want * 2**30)


@pytest.mark.parametrize("x", [53249, 57344, 60000, 1 << 20])
def test_envelope_refuses_at_and_above_an_out_of_memory_point(x):
    env = envelope(PREFILL_BYTES, x, what="chunk")
    assert env.status == "refused" and env.temp_bytes is None
    assert "57,344" in env.detail and "out of memory" in env.detail


def test_envelope_outside_the_measured_range_is_not_extrapolated():
    pts = [p for p in PREFILL_BYTES if p[2]]
    env = envelope(pts, 100_000, what="chunk")
    assert env.status == "outside" and env.temp_bytes is None


def test_envelope_order_of_points_does_not_matter():
    assert envelope(PREFILL_BYTES[::-1], 20000, what="chunk") == envelope(PREFILL_BYTES, 20000, what="chunk")


def test_calibration_file_loads():
    cal = load_calibration(str(CALIBRATION))
    assert (cal.model, cal.hardware, cal.topology, cal.tp, cal.stack) == (
        "kimi-k3",
        "tpu-v7x",
        "2x2x4",
        32,
        "jax-native",
    )
    assert [(p.tokens, p.temp_gib, p.fits) for p in cal.prefill] == PREFILL
    assert [(p.tokens, p.temp_bytes, p.fits) for p in cal.prefill] == PREFILL_BYTES


def test_jax_native_weights_match_the_measured_arguments():
    """jax-native at 2x2x4 tp=32 (non-expert weights upcast to fp32, experts MXFP4 packed): the
    planner's per-device weights are within 0.02 GiB of the measured jit arguments (50.27 GiB).
    Why not exact: the file rounds to 2 decimals (+-0.005 GiB) and the TPU compiler adds ~0.75 MB
    of tiling padding to the analytic sum (k3-facts.md §6). The planner says 50.258 GiB, 0.012 GiB
    (13 MB) under the measured figure; rounding and padding explain about 6 MB of that, the rest is
    small jit arguments or layout outside the weight inventory, well inside the tolerance. A
    replicated router gate would add 2.1 GiB and fail this test."""
    cal = load_calibration(str(CALIBRATION))
    r = run_fit(cached_setup(topology="2x2x4", tp=32, stack="jax-native"))
    assert r.per_device.weights_bytes / GiB == pytest.approx(cal.argument_gib, abs=0.02)
    assert r.replicated == []


@pytest.mark.parametrize("chunk, want_gib", [(64, 10.44), (4096, 10.44), (5000, 18.10), (40000, 36.54), (53248, 39.51)])
def test_fit_uses_the_measured_envelope(chunk, want_gib):
    cal = load_calibration(str(CALIBRATION))
    r = run_fit(cached_setup(topology="2x2x4", tp=32, stack="jax-native"), context=32768, chunk=chunk, calibration=cal)
    assert r.temp.prefill_bytes == int(want_gib * GiB)
    assert "calibration" in r.provenance.temp_prefill
    # decode at 32,768 is measured: envelope of 29.8 and 29.83
    assert r.temp.decode_bytes == int(29.83 * GiB)
    assert r.per_device.temp_bytes == max(int(want_gib * GiB), int(29.83 * GiB))


@pytest.mark.parametrize("chunk", [53249, 57344])
def test_fit_refuses_a_chunk_the_measured_compile_could_not_fit(chunk):
    cal = load_calibration(str(CALIBRATION))
    r = run_fit(cached_setup(topology="2x2x4", tp=32, stack="jax-native"), context=65536, chunk=chunk, calibration=cal)
    assert not r.fits
    assert r.capacity.max_context_tokens == 0 and r.capacity.max_sequences == 0
    assert any("refused" in w and "57,344" in w and "out of memory" in w for w in r.warnings)


def test_fit_outside_the_measured_contexts_takes_the_largest_measured_not_a_slope():
    cal = load_calibration(str(CALIBRATION))
    r = run_fit(cached_setup(topology="2x2x4", tp=32, stack="jax-native"), context=131072, chunk=4096, calibration=cal)
    assert r.temp.decode_bytes >= int(29.83 * GiB)
    assert any("not extrapolated" in w for w in r.warnings)


def test_calibration_for_another_configuration_warns(tmp_path):
    p = tmp_path / "cal.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "model": "kimi-k3",
                "hardware": "tpu-v7x",
                "topology": "2x2x4",
                "tp": 32,
                "stack": "jax-native",
                "backend": "cpu",
                "prefill": [{"tokens": 8192, "temp_gib": 5.0}],
            }
        )
    )
    cal = load_calibration(str(p))
    r = run_fit(cached_setup(topology="2x2x2", tp=16), context=8192, chunk=8192, calibration=cal)
    assert r.temp.prefill_bytes == 5 * GiB
    assert any("different configuration" in w and "2x2x4" in w for w in r.warnings)
    assert any("CPU backend" in w for w in r.warnings)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("prefill: [ {tokens: ", "invalid YAML at line"),
        ("- 1\n- 2\n", "expected a mapping"),
        (
            "model: kimi-k3\nhardware: tpu-v7x\ntopology: 2x2x4\ntp: 32\nstack: s\nbackend: tpu\nbogus: 1\n"
            "prefill: [{tokens: 64, temp_gib: 1}]\n",
            "bogus",
        ),
        # a calibration needs a point of one stage at least (decode-only since the v5e calibration, issue 35)
        (
            "model: kimi-k3\nhardware: tpu-v7x\ntopology: 2x2x4\ntp: 32\nstack: s\nbackend: tpu\n",
            "no prefill and no decode point",
        ),
        (
            "model: kimi-k3\nhardware: tpu-v7x\ntopology: 2x2x4\ntp: 32\nstack: s\nbackend: tpu\n"
            "prefill: [{tokens: -1, temp_gib: 1}]\n",
            "prefill.0.tokens",
        ),
    ],
)
def test_malformed_calibration_is_one_error(tmp_path, text, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(K3PlanError, match=needle):
        load_calibration(str(p))
