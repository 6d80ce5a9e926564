"""Issue 48 item 5, the probes: an absurd size is refused before anything is allocated, a kernel file is imported
guarded, and a sweep that measured nothing is never an ok record."""

from __future__ import annotations

import pytest
from k3_testing import one_error_line

from k3plan.evidence.probe_record import ProbePoint


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--batch", "1000000000"], "--batch 1000000000: absurdly large; expected at most 1,048,576"),
        (["--context", str(1 << 40)], "--context 1099511627776: absurdly large"),
        (["--prefill-tokens", str(1 << 40)], "--prefill-tokens 1099511627776: absurdly large"),
    ],
)
def test_probe_step_absurd_sizes_are_refused_before_jax(cli, args, needle):
    """Was: `probe step --batch 1000000000` ran until the host ran out of memory."""
    assert needle in one_error_line(cli("probe", "step", "--no-write", *args))


def test_probe_step_cache_larger_than_the_host_is_refused_before_allocating(cli):
    line = one_error_line(
        cli("probe", "step", "--no-write", "--no-sub-probes", "--batch", "100000", "--context", "100000")
    )
    assert "probe step --batch 100000 --context 100000: needs" in line and "expected a smaller size" in line


@pytest.mark.parametrize("value", ["0", "-1", "100000"])
def test_cpu_devices_is_bounded(cli, value):
    assert f"--cpu-devices {value}: expected 1 to 512" in one_error_line(
        cli("probe", "hbm", "--no-write", "--cpu-devices", value)
    )


@pytest.mark.parametrize(
    "body, needle",
    [
        ("import sys\nsys.exit(0)\n", "it called sys.exit(0) as it was imported"),
        ("def gmm_v2(:\n", "syntax error in"),
        ("raise RuntimeError('no TPU here')\n", "RuntimeError: no TPU here"),
    ],
)
def test_a_kernel_file_is_imported_guarded(cli, tmp_path, body, needle):
    """Was: a kernel file calling sys.exit(0) at import ended the probe with exit 0 and nothing measured."""
    kernel = tmp_path / "kernel.py"
    kernel.write_text(body)
    line = one_error_line(cli("probe", "gmm", "--no-write", "--kernel", kernel))
    assert needle in line and "kernel.py" in line


def test_a_sweep_that_measured_nothing_is_not_ok(run_probe_cli):
    """Was: `probe hbm` on CPU whose deadline passed before its first point wrote an ok record of 0 points."""
    result, records, _ = run_probe_cli("hbm", "--size", "1MiB", "--timeout", "0.0001", "--op", "copy")
    assert result.exit_code == 1, result.output
    assert records and not any(r["ok"] for r in records)
    assert all("measured nothing" in r["error"] for r in records)


def test_a_point_no_measurement_can_give_loses_its_value():
    """A marginal time at or below 0 (CPU noise) made a negative rate: dropped with a note, as a reader refuses."""
    from k3plan.probes.context import _measured_or_not_ok

    good = ProbePoint(params={"bytes": 1}, value=5.0e9, unit="bytes/s")
    bad = ProbePoint(params={"bytes": 2}, value=-3.0e9, unit="bytes/s")
    fields = {"points": [good, bad]}
    _measured_or_not_ok(fields, cut_reason=None)
    assert good.value == 5.0e9 and bad.value is None and "dropped" in bad.notes[0]
    assert fields.get("ok", True)
    fields = {"points": [ProbePoint(params={}, value=0.0)]}
    _measured_or_not_ok(fields, cut_reason=None)
    assert fields["ok"] is False and fields["error"] == "measured nothing: no point has a value"
