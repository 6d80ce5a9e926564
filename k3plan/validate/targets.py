"""Compile targets: fake CPU devices, or a deviceless TPU topology through libtpu.

``cpu``: XLA reads ``--xla_force_host_platform_device_count`` once, when its CPU backend starts,
so the flag is set here before jax is imported; if jax was already imported with fewer devices the
run stops with a message saying how to set the flag. ``<gen>:<grid>`` (``tpu7x:2x2x4``, ``v6e:4x4``,
``v5p:2x2x2``): ``jax.experimental.topologies.get_topology_desc(platform="tpu",
topology_name=...)`` returns compile-only devices of that slice; the real TPU compiler (libtpu,
from the ``tpu`` extra) then lays out, pads and OOM-checks the program.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

from k3plan.errors import K3PlanError
from k3plan.extras import install_command

_FLAG = "--xla_force_host_platform_device_count"
# TPU generation as the compiler spells it -> k3plan hardware spec name
TPU_GENERATIONS: dict[str, str] = {"tpu7x": "tpu-v7x", "v6e": "tpu-v6e", "v5p": "tpu-v5p", "v5e": "tpu-v5e"}
INSTALL_HINT = f"{install_command('tpu')} (libtpu, from jax[tpu]==0.10.2)"  # this install's pip/pipx (issue 36)


@dataclass(frozen=True)
class Target:
    name: str  # "cpu" or "tpu7x:2x2x4"
    platform: str  # "cpu" or "tpu"
    hardware: Optional[str] = None  # hardware spec the TPU target implies
    topology: Optional[str] = None  # chip grid the TPU target implies

    @property
    def label(self) -> str:
        if self.local:
            return f"the attached {self.hardware or self.platform} devices (compiled, and run when it fits)"
        return "CPU backend (fake devices)" if self.platform == "cpu" else f"deviceless TPU compile for {self.name}"

    @property
    def local(self) -> bool:
        return self.name == "local"


def parse_target(text: str) -> Target:
    norm = str(text).strip().lower()
    if norm == "cpu":
        return Target(name="cpu", platform="cpu")
    if norm == "local":  # the attached accelerator: platform and hardware read from jax (local_target)
        return Target(name="local", platform="local")
    m = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+)+)", norm)
    if not m:
        raise K3PlanError(f"--target {text!r}: expected cpu or a TPU topology such as tpu7x:2x2x4, v6e:4x4, v5p:2x2x2")
    gen, grid = m.groups()
    if gen not in TPU_GENERATIONS:
        raise K3PlanError(f"--target {text!r}: unknown TPU generation {gen!r}; known: {', '.join(TPU_GENERATIONS)}")
    return Target(name=norm, platform="tpu", hardware=TPU_GENERATIONS[gen], topology=grid)


@dataclass(frozen=True)
class HardwareRef:
    """The spec the probe compares against (None) and why there is none."""

    spec: Any = None
    name: Optional[str] = None
    missing: Optional[str] = None


def find_hardware(*, name: Optional[str], device_kind: str) -> HardwareRef:
    """--hardware NAME, else the spec whose device_kind equals the backend's, else none."""
    try:
        import k3plan.hardware as hw

        load = hw.load_hardware
    except (ImportError, AttributeError):
        return HardwareRef(missing="k3plan.hardware.load_hardware is not available in this build")
    if name:
        return HardwareRef(spec=load(name), name=name)  # a bad name is the user's K3PlanError
    names = _bundled_names(hw)
    if names is None:
        return HardwareRef(missing="no hardware listing in k3plan.hardware; pass --hardware NAME")
    for candidate in names:
        try:
            spec = load(candidate)
        except K3PlanError:
            continue
        kind = getattr(getattr(spec, "device_kind", None), "value", getattr(spec, "device_kind", None))
        if str(kind).lower() == device_kind.lower():
            return HardwareRef(spec=spec, name=candidate)
    return HardwareRef(missing=f"no hardware spec has device_kind {device_kind!r}; pass --hardware NAME")


def _bundled_names(hw) -> Optional[list[str]]:
    for attr in ("bundled_hardware", "list_hardware", "hardware_names", "available_hardware"):
        fn = getattr(hw, attr, None)
        if callable(fn):
            try:
                return [getattr(x, "name", x) for x in fn()]
            except Exception:
                return None
    return None


def local_target(topology: Optional[str]) -> Target:
    """--target local resolved (imports jax): the attached backend, the hardware spec whose device_kind
    is the devices', and the grid (--topology, else one chip)."""
    import jax

    backend = jax.default_backend()
    if backend == "cpu":
        raise K3PlanError("--target local: no accelerator is attached (jax's backend is cpu); use --target cpu")
    kind = jax.devices()[0].device_kind
    ref = find_hardware(name=None, device_kind=kind)
    if ref.name is None:
        raise K3PlanError(f"--target local: no hardware spec has device_kind {kind!r}")
    return Target(name="local", platform=backend, hardware=ref.name, topology=topology)


def libtpu_version() -> Optional[str]:
    if importlib.util.find_spec("libtpu") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("libtpu", "libtpu-nightly"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def prepare(target: Target, *, devices: int) -> None:
    """Everything that must happen before ``import jax``: libtpu quiet off a TPU VM (its environment
    warnings are not errors for a deviceless compile), fake CPU devices for the cpu target."""
    if "jax" not in sys.modules:
        from k3plan.libtpu_env import quiet_libtpu

        quiet_libtpu()
    if target.local:
        return
    if target.platform == "tpu":
        if libtpu_version() is None:
            raise K3PlanError(
                f"--target {target.name} compiles with the TPU compiler, which needs libtpu: {INSTALL_HINT}"
            )
        return
    flags = os.environ.get("XLA_FLAGS", "")
    m = re.search(_FLAG + r"=(\d+)", flags)
    if "jax" in sys.modules:
        return  # checked in devices_for(), which knows how many the running backend has
    if m is None or int(m.group(1)) < devices:
        flags = re.sub(_FLAG + r"=\S*", "", flags).strip()
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={devices}".strip()


def devices_for(target: Target, *, count: int) -> list[Any]:
    """``count`` devices of the target (imports jax)."""
    import jax

    if target.local:
        devs = jax.devices()
        if len(devs) < count:
            raise K3PlanError(f"--target local: the plan has {count} devices, {len(devs)} are attached")
        return list(devs[:count])
    if target.platform == "cpu":
        devs = jax.devices("cpu")
        if len(devs) < count:
            raise K3PlanError(
                f"--target cpu needs {count} fake CPU devices but jax was started with {len(devs)}; "
                f"set XLA_FLAGS={_FLAG}={count} before jax is imported (a fresh process)"
            )
        return list(devs[:count])
    from jax.experimental import topologies

    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=target.name)
    except Exception as err:  # the compiler's own verdict on the name
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if "lockfile" in first:
            raise K3PlanError(
                f"--target {target.name}: another process is using libtpu ({first}); wait for it, or set "
                "ALLOW_MULTIPLE_LIBTPU_LOAD=1 for a compile-only run"
            ) from None
        raise K3PlanError(f"--target {target.name}: the TPU compiler does not know this topology ({first})") from None
    devs = list(topo.devices)
    if len(devs) != count:
        raise K3PlanError(
            f"--target {target.name} has {len(devs)} devices but the plan has {count}; "
            f"pass a matching --topology/--tp/--dp"
        )
    return devs


def describe_devices(devices: list[Any]) -> dict[str, Any]:
    d = devices[0]
    return {
        "count": len(devices),
        "platform": getattr(d, "platform", "?"),
        "device_kind": getattr(d, "device_kind", "?"),
    }
