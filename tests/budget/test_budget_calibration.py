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


# jax-native's scores are chunk x context: a 4,096 chunk into 32,768 tokens (134M) is covered by the 16,384 chunk
# (16,384^2), not the 4,096 one (issue 50: the range judged on chunk and chunk x context)
@pytest.mark.parametrize("chunk, want_gib", [(64, 10.44), (4096, 18.10), (5000, 18.10), (40000, 36.54), (53248, 39.51)])
def test_fit_uses_the_measured_envelope(chunk, want_gib):
    cal = load_calibration(str(CALIBRATION))
    r = run_fit(cached_setup(topology="2x2x4", tp=32, stack="jax-native"), context=32768, chunk=chunk, calibration=cal)
    # inside the range: max(analytic, the envelope) (issue 50; the analytic is larger at 53,248)
    assert r.temp.prefill_bytes == max(int(want_gib * GiB), sum(t.bytes for t in r.temp.prefill_terms))
    assert "calibration" in r.provenance.temp_prefill
    # decode at 32,768 is measured: envelope of 29.8 and 29.83
    assert r.temp.decode_bytes == int(29.83 * GiB)
    assert r.per_device.temp_bytes == max(r.temp.prefill_bytes, int(29.83 * GiB))


@pytest.mark.parametrize("chunk", [57344, 60000])
def test_fit_refuses_a_chunk_the_measured_compile_could_not_fit(chunk):
    # context 57,344: chunk and chunk x context at or past the refused 57,344 point's (jax-native's scores are
    # chunk x context); a chunk under it is outside, not refused (issue 50)
    cal = load_calibration(str(CALIBRATION))
    r = run_fit(cached_setup(topology="2x2x4", tp=32, stack="jax-native"), context=57344, chunk=chunk, calibration=cal)
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


# --- issue 50 item 2: the measured range judged on what the temporaries grow with (k3plan.budget.measured_range)


def _decode_cal(points):
    """A calibration of decode points (batch, context, GiB, fits) for the dominance tests."""
    from k3plan.evidence.calibration import Calibration
    from k3plan.specfile import convert

    return convert(Calibration, dict(model="kimi-k3", hardware="tpu-v7x", topology="2x2x4", tp=32,
                                     stack="torchtpu-vllm", backend="tpu",
                                     decode=[{"batch": b, "context": c, "temp_bytes": int(g * GiB), "fits": f}
                                             for b, c, g, f in points]), "test")  # fmt: skip


# tpu7x:2x2x4 torchtpu-vllm TP 32, compiled 2026-12-04 (the shipped file's decode points, typed here so the test
# reads no file): batch 1 at 8K / 32K / 128K, batch 4 at 32K; batch 32 at 8K ran out of HBM
DECODE = [
    (1, 8192, 19.57, True),
    (1, 32768, 21.25, True),
    (4, 32768, 22.93, True),
    (2, 65536, 22.90, True),
    (1, 131072, 28.11, True),
    (32, 8192, 95.02, False),
]


@pytest.mark.parametrize("prefill_x", [1, 64, 4096, 4097, 20000, 53248, 53249, 60000, 100_000])
def test_one_quantity_is_the_envelope_exactly(prefill_x):
    """The prefill of an engine's kernels grows with the chunk alone: the range is evidence.envelope's, unchanged."""
    from k3plan.budget.measured_range import stage_range
    from k3plan.evidence.calibration import Calibration
    from k3plan.specfile import convert

    cal = convert(Calibration, dict(model="m", hardware="h", topology="1", tp=1, stack="s", backend="tpu",
                                    prefill=[{"tokens": t, "temp_bytes": b, "fits": f} for t, b, f in PREFILL_BYTES]),
                  "test")  # fmt: skip
    got, env = stage_range(cal, stage="prefill", x=prefill_x), envelope(PREFILL_BYTES, prefill_x, what="chunk")
    assert (got.status, got.temp_bytes, got.detail) == (env.status, env.temp_bytes, env.detail)


def test_a_larger_batch_at_a_shorter_context_does_not_stand_for_a_longer_context():
    """The compiles: batch 4 x 32K holds the same 131,072 cache tokens as batch 1 x 128K but 5.18 GiB less temp
    (28.11 against 22.93): judged on cache tokens and batch alone, batch 4 x 32K would 'cover' 128K and under-count
    it; with the context a quantity too it does not."""
    from k3plan.budget.measured_range import stage_range

    without_128k = _decode_cal([p for p in DECODE if p[1] != 131072])
    got = stage_range(without_128k, stage="decode", x=131072, batch=1)
    assert got.status == "outside" and "batch 1 x context 131,072" in got.detail
    at_128k = stage_range(_decode_cal(DECODE), stage="decode", x=131072, batch=1)
    assert at_128k.status == "measured" and at_128k.temp_bytes == int(28.11 * GiB)


@pytest.mark.parametrize(
    "batch, context, want",
    [
        (1, 4096, 19.57),  # covered by batch 1 x 8K
        (1, 16384, 21.25),  # batch 1 x 32K, the envelope of the points under it (19.57, 21.25)
        (2, 16384, 22.90),  # batch 2 x 64K covers it: its envelope (22.90) under batch 4 x 32K's (22.93)
        (3, 32768, 22.93),
        (1, 65536, 28.11),  # batch 2 x 64K does not stand for batch 1: only batch 1 x 128K covers it
    ],
)
def test_a_covered_decode_point_takes_the_envelope_of_the_points_that_cover_it(batch, context, want):
    from k3plan.budget.measured_range import stage_range

    got = stage_range(_decode_cal(DECODE), stage="decode", x=context, batch=batch)
    assert got.status == "measured" and got.temp_bytes == int(want * GiB)


@pytest.mark.parametrize(
    "batch, context, status",
    [
        (32, 8192, "refused"),
        (64, 8192, "refused"),
        (32, 16384, "refused"),  # at or past the refused compile
        (5, 32768, "outside"),
        (2, 131072, "outside"),
        (1, 262144, "outside"),
    ],
)
def test_a_decode_point_past_the_range_is_refused_or_outside(batch, context, status):
    from k3plan.budget.measured_range import stage_range

    got = stage_range(_decode_cal(DECODE), stage="decode", x=context, batch=batch)
    assert got.status == status and got.temp_bytes is None


def test_a_batch_of_two_does_not_stand_for_a_batch_of_one():
    """The compiles: batch 2 x 131,072 holds 25.42 GiB, batch 1 x 131,072 28.11: a larger batch at the same
    context would under-count batch 1 by 2.69 GiB."""
    from k3plan.budget.measured_range import stage_range

    cal = _decode_cal([(1, 8192, 19.57, True), (2, 131072, 25.42, True)])
    assert stage_range(cal, stage="decode", x=131072, batch=1).status == "outside"
    assert stage_range(cal, stage="decode", x=131072, batch=2).temp_bytes == int(25.42 * GiB)


def test_an_xla_graphs_prefill_is_judged_on_chunk_x_context_too():
    """jax-native materializes the scores over chunk x context: the real slice's chunk 8,192 into a 131,072-token
    context is covered by its 32,768-token chunk (32,768 x 32,768 = 8,192 x 131,072), not by 16,384."""
    from k3plan.budget.measured_range import stage_range

    cal = load_calibration(str(CALIBRATION))
    got = stage_range(cal, stage="prefill", x=8192, context=131072, xla_graph=True)
    assert got.status == "measured" and got.temp_bytes == int(35.30 * GiB)
    assert stage_range(cal, stage="prefill", x=8192, context=16384, xla_graph=True).temp_bytes == int(18.10 * GiB)
    # an engine's kernels: chunk and context, a point without a context read its chunk: 131,072 is past them all
    assert stage_range(cal, stage="prefill", x=8192, context=131072).status == "outside"


def test_fit_beyond_the_calibrations_range_is_fits_if_not_a_plain_fits(cli):
    """A stage outside the measured range (max(analytic, largest measured), not extrapolated) is no evidence at
    this point: FITS IF (exit 3, reason_code fits_if_temp_unverified), the fit --compile that settles it named."""
    import json

    from k3plan.budget.fit import Workload, fit

    cal = load_calibration(str(CALIBRATION))
    setup = cached_setup(topology="2x2x4", tp=32, stack="jax-native")
    r = fit(setup, Workload(context_tokens=131072, batch=1, prefill_chunk_tokens=4096), calibration=cal)
    assert r.temp.decode_outside and r.fits
    assert r.unverified is not None and r.unverified.stages == ["decode"]
    assert "outside the calibration's measured range" in r.unverified.why[0]
    inside = fit(setup, Workload(context_tokens=32768, batch=1, prefill_chunk_tokens=4096), calibration=cal)
    assert inside.unverified is None and not inside.temp.decode_outside
    out = cli("fit", "-t", "2x2x4", "--tp", "32", "--stack", "jax-native", "--calibration", CALIBRATION,
              "--chunk", 4096, "--json")  # fmt: skip
    assert out.exit_code == 3, out.output[-400:]
    d = json.loads(out.stdout)
    assert d["reason_code"] == "fits_if_temp_unverified"
    assert d["unverified"]["settle"] == ("k3plan fit --compile -H tpu-v7x -t 2x2x4 --tp 32 --stack jax-native "
                                         "--batch 1 --context 131072 --chunk 4096")  # fmt: skip
