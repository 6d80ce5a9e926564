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


def quiet_logs() -> list[str]:
    """Set the LOG_ENV variables not already set. -> names set. Call before jax is imported."""
    set_now = [k for k in LOG_ENV if k not in os.environ]
    for k in set_now:
        os.environ[k] = LOG_ENV[k]
    return set_now


def quiet_libtpu(*, pci_root: Path = Path("/sys/bus/pci/devices")) -> list[str]:
    """Set the QUIET_ENV variables not already set, unless TPU chips are present. -> names set.
    libtpu's log levels (LOG_ENV) are set in any case, unless the user set them."""
    quiet_logs()
    if has_tpu_chips(pci_root):
        return []
    set_now = [k for k in QUIET_ENV if k not in os.environ]
    for k in set_now:
        os.environ[k] = QUIET_ENV[k]
    return set_now
