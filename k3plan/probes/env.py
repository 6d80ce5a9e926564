"""Preparing jax before it is imported: fake CPU devices, and multi-host initialisation.

XLA reads XLA_FLAGS once, when the backend starts, so ``--xla_force_host_platform_device_count``
must be set before the first ``import jax``. On a TPU/GPU host the flag only adds CPU devices; the
default backend stays the accelerator.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Iterator, Optional

from k3plan.errors import K3PlanError, require

DEFAULT_CPU_DEVICES = 8
_FLAG = "--xla_force_host_platform_device_count"


@dataclass(frozen=True)
class DistributedOptions:
    coordinator: str
    num_processes: int
    process_id: int


def ensure_cpu_devices(*, count: Optional[int]) -> list[str]:
    """Set the fake-CPU-device flag (count, or 8 when no flag is set yet). Returns notes."""
    require(count is None or count >= 1, f"--cpu-devices {count}: expected a whole number >= 1")
    if "jax" not in sys.modules:
        from k3plan.libtpu_env import quiet_libtpu

        quiet_libtpu()  # off a TPU VM, libtpu's environment warnings are noise
    flags = os.environ.get("XLA_FLAGS", "")
    notes = []
    has_flag = _FLAG in flags
    if count is not None:
        flags = re.sub(_FLAG + r"=\S*", "", flags).strip()
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={count}".strip()
    elif not has_flag:
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={DEFAULT_CPU_DEVICES}".strip()
    if "jax" in sys.modules and count is not None:
        notes.append("jax was imported before the probe set XLA_FLAGS; --cpu-devices may not apply")
    return notes


def resolve_distributed(
    *, enabled: bool, coordinator: Optional[str], num_processes: Optional[int], process_id: Optional[int]
) -> Optional[DistributedOptions]:
    """Flags first, then JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID."""
    if not enabled:
        return None
    coordinator = coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS")
    num_processes = num_processes if num_processes is not None else _env_int("JAX_NUM_PROCESSES")
    process_id = process_id if process_id is not None else _env_int("JAX_PROCESS_ID")
    if coordinator is None or num_processes is None or process_id is None:
        missing = [
            name
            for name, v in (
                ("--coordinator / JAX_COORDINATOR_ADDRESS", coordinator),
                ("--num-processes / JAX_NUM_PROCESSES", num_processes),
                ("--process-id / JAX_PROCESS_ID", process_id),
            )
            if v is None
        ]
        raise K3PlanError(f"--distributed needs {', '.join(missing)}")
    require(
        re.fullmatch(r"[\w.\-\[\]:]+:\d+", coordinator) is not None,
        f"--coordinator {coordinator!r}: expected HOST:PORT, e.g. 10.0.0.2:8476",
    )
    require(num_processes >= 1, f"--num-processes {num_processes}: expected >= 1")
    require(0 <= process_id < num_processes, f"--process-id {process_id}: expected 0..{num_processes - 1}")
    return DistributedOptions(coordinator=coordinator, num_processes=num_processes, process_id=process_id)


def _env_int(name: str) -> Optional[int]:
    text = os.environ.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise K3PlanError(f"environment variable {name}={text!r}: expected a whole number") from None


def init_distributed(opts: DistributedOptions, *, timeout_s: int = 60) -> None:
    """jax.distributed.initialize; on CPU the cross-process collectives go through gloo."""
    import jax

    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception:  # older/newer jax without the option: its default is used
        pass
    try:
        jax.distributed.initialize(
            coordinator_address=opts.coordinator,
            num_processes=opts.num_processes,
            process_id=opts.process_id,
            initialization_timeout=timeout_s,
        )
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0]
        raise K3PlanError(f"--distributed: jax.distributed.initialize failed ({first})") from None


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send file descriptor 1 to stderr while jax runs: native libraries (gloo, XLA) print there,
    which would corrupt --json output."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real fd 1 (e.g. captured by a test runner)
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
