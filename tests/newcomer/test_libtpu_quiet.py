"""Issue 48: on the lent v5e, jax's TPU start-up printed "UserWarning: Transparent hugepages are not enabled ..."
(jax/_src/cloud_tpu_init.py, no environment knob) before a probe's first line. quiet_logs, which probe and validate
call before jax is imported, ignores it, unless the user asked for warnings (-W / PYTHONWARNINGS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WARN = (
    "import warnings; warnings.warn('Transparent hugepages are not enabled. TPU runtime startup and shutdown time "
    "should be significantly improved on TPU v5e and newer.')"
)


def _stderr(*flags: str) -> str:
    code = f"from k3plan.libtpu_env import quiet_logs; quiet_logs(); {WARN}; print('k3plan first')"
    r = subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert r.stdout == "k3plan first\n"
    return r.stderr


def test_jax_hugepages_warning_is_not_printed():
    assert _stderr() == ""


def test_a_user_who_asks_for_warnings_still_sees_it():
    assert "Transparent hugepages are not enabled" in _stderr("-W", "default")


def test_off_a_tpu_vm_libtpu_logs_only_fatal_unless_the_user_set_a_level(tmp_path, monkeypatch):
    """Issue 48: with libtpu installed and no chip, a CPU probe or `validate --target cpu` printed libtpu's
    "E... tpu_util.cc:19] Failed to get TPU topology" and a 5-line source trace (most runs, under load)."""
    import os

    from k3plan.libtpu_env import NO_CHIP_LOG_ENV, QUIET_ENV, quiet_libtpu

    for k in (*NO_CHIP_LOG_ENV, *QUIET_ENV):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TPU_STDERR_LOG_LEVEL", "0")  # the user's own: kept
    pci = tmp_path / "0000:00:01.0"
    pci.mkdir()
    (pci / "vendor").write_text("0x8086\n")  # an Intel device, no Google one: no TPU chip
    quiet_libtpu(pci_root=tmp_path)
    assert os.environ["TPU_MIN_LOG_LEVEL"] == "3" and os.environ["TPU_STDERR_LOG_LEVEL"] == "0"
