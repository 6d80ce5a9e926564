"""Quiet libtpu on a machine with no TPU chips (deviceless compiles, CPU runs with libtpu installed).

When jax starts its TPU plugin, libtpu looks up the accelerator type and worker hostnames in the
GCE metadata server; off a TPU VM the lookup returns a warning text, which libtpu then prints as
"Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator
type ...", "Logging before InitGoogle()" and an E0000 "unexpected worker hostname" line with a
source trace -- errors in form, harmless for a compile-only topology (the slice is given by name to
``get_topology_desc``, whatever these variables say). Setting the variables libtpu reads first
(only those not already set, and only when this machine has no TPU chip) keeps stderr for real
problems. Call before jax is imported.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU chips show as PCI devices of Google's vendor id (jax hardware_utils)
QUIET_ENV = {
    "TPU_SKIP_MDS_QUERY": "1",  # no metadata-server lookups (jax sets this itself when it sees no chip)
    "TPU_ACCELERATOR_TYPE": "v6e-1",  # any valid name stops the lookup; the compiled slice is named elsewhere
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_WORKER_ID": "0",
}


def has_tpu_chips(pci_root: Path = Path("/sys/bus/pci/devices")) -> bool:
    try:
        return any((d / "vendor").read_text().strip() == GOOGLE_PCI_VENDOR for d in pci_root.iterdir())
    except OSError:
        return False


# libtpu's and XLA's own log levels, on a TPU VM too: their INFO and WARNING lines at start-up (W0000 ... with a
# source path) printed before k3plan's first line; their errors still print. Set only where the user set none.
LOG_ENV = {
    "TPU_STDERR_LOG_LEVEL": "2",  # libtpu: ERROR and above to stderr
    "TPU_MIN_LOG_LEVEL": "2",  # libtpu: ERROR and above at all
    "TF_CPP_MIN_LOG_LEVEL": "1",  # XLA's C++ logging: no INFO
}


# jax's TPU start-up (jax/_src/cloud_tpu_init.py cloud_tpu_init, jax 0.10.2) warns on a v5e or newer whose VM image
# leaves transparent hugepages off: a Python UserWarning with no environment knob, printed before k3plan's first
# line of a probe on the lent v5e (issue 48). It is about the runtime's start-up time, never about an answer; a user
# who passes -W or PYTHONWARNINGS sees it as they asked.
HUGEPAGES_WARNING = r"Transparent hugepages are not enabled"


def quiet_logs() -> list[str]:
    """Set the LOG_ENV variables not already set, and ignore jax's hugepages start-up warning unless the user set
    Python's warning options. -> names set. Call before jax is imported."""
    set_now = [k for k in LOG_ENV if k not in os.environ]
    for k in set_now:
        os.environ[k] = LOG_ENV[k]
    if not sys.warnoptions:
        warnings.filterwarnings("ignore", message=HUGEPAGES_WARNING, category=UserWarning)
    return set_now


# Off a TPU VM libtpu still starts with jax's TPU plugin and, a run in two to all (load decides), logs an ERROR with
# a 5-line source trace -- "E... tpu_util.cc:19] Failed to get TPU topology: NOT_FOUND: ... jellyfish_chip_configs"
# -- in a CPU probe or a `validate --target cpu` (issue 48: the README run's transcript). With no chip its errors
# are about a TPU that is not there; a deviceless compile's own failure comes back as a Python exception, which
# k3plan prints in one line. FATAL only, where the user set no level (8 runs of `probe matmul`: 8 with the line at 2,
# none at 3).
NO_CHIP_LOG_ENV = {"TPU_STDERR_LOG_LEVEL": "3", "TPU_MIN_LOG_LEVEL": "3"}


def quiet_libtpu(*, pci_root: Path = Path("/sys/bus/pci/devices")) -> list[str]:
    """Set the QUIET_ENV variables not already set, unless TPU chips are present. -> names set.
    libtpu's log levels are set in any case, unless the user set them: LOG_ENV on a TPU VM, NO_CHIP_LOG_ENV off one."""
    if has_tpu_chips(pci_root):
        quiet_logs()
        return []
    for k, v in NO_CHIP_LOG_ENV.items():
        os.environ.setdefault(k, v)
    quiet_logs()
    set_now = [k for k in QUIET_ENV if k not in os.environ]
    for k in set_now:
        os.environ[k] = QUIET_ENV[k]
    return set_now
