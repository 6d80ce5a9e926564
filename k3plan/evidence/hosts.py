"""Step overheads measured on a real device: the costs of a serving step that no roofline sees (issue 38).

One file a device in ``k3plan/evidence/hosts/`` (package data), written from the JSON that
``benchmarks/step_overheads_tpu.py`` prints on the device: the fixed cost of one dependent fusion
inside a program, the host's round trip of a synchronous step (dispatch, the sampled token back to
the host), and a K3-shaped layer folded in one program (its time against its bytes). Validated here;
``k3plan.speed.overheads`` turns them into the step-time model's fixed terms.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from k3plan.errors import K3PlanError
from k3plan.specfile import Spec, convert, read_yaml_entries, read_yaml_mapping

FOLDER = Path(__file__).parent / "hosts"

# input schemas (msgspec Structs, k3plan.specfile.Spec), read not strictly (as pydantic's lax mode did)
Positive = Annotated[float, msgspec.Meta(gt=0)]


class FusionChain(Spec):
    n_ops: list[int]
    seconds: list[float]
    s_per_dependent_op: Positive


class HostSync(Spec):
    s_per_step_sync: Positive
    s_per_step_queued: Positive
    s_host_round_trip: Positive


class LayerScan(Spec):
    layers: list[int]
    seconds: list[float]
    bytes_per_layer: Annotated[int, msgspec.Meta(gt=0)]
    s_per_layer: Positive
    hbm_bytes_per_s_measured: Positive


class StepOverheads(Spec):
    device_kind: str
    backend: str
    jax_version: str
    date: str
    script: str
    fusion_chain: FusionChain
    host_sync: HostSync
    layer_scan: LayerScan
    notes: list[str] = []
    path: str = ""

    @property
    def label(self) -> str:
        return f"measured on {self.device_kind} ({self.backend}, jax {self.jax_version}, {self.date[:10]}): {self.path}"


def load_step_overheads(path: Path) -> StepOverheads:
    label = f"step-overhead record {path}"
    raw = read_yaml_mapping(label, path)
    rec = convert(StepOverheads, {**raw, "path": f"k3plan/evidence/hosts/{path.name}"}, label, strict=False)
    if rec.backend != "tpu":
        raise K3PlanError(f"{label}: backend {rec.backend!r}: only a record measured on a TPU is used")
    return rec


@lru_cache(maxsize=2)
def shipped_step_overheads(folder: Path = FOLDER) -> tuple[StepOverheads, ...]:
    return tuple(load_step_overheads(p) for p in sorted(folder.glob("*.yaml")))


class EngineStepOverhead(Spec):
    """An engine's host time a synchronous step, as published (``k3plan/evidence/engine_step_overheads.yaml``)."""

    engine_family: str
    seconds: Annotated[float, msgspec.Meta(gt=0, lt=1)]
    scheduling: Literal["sync"]
    measured_on: str
    quote: str
    source: Annotated[str, msgspec.Meta(pattern=r"^https://")]


ENGINE_FILE = Path(__file__).parent / "engine_step_overheads.yaml"


@lru_cache(maxsize=2)
def engine_step_overheads(path: Path = ENGINE_FILE) -> tuple[EngineStepOverhead, ...]:
    return read_yaml_entries(f"engine step overheads {path}", path, EngineStepOverhead)


class GpuKernelFloor(Spec):
    """A GPU kernel's fixed duration, as a public decode trace of the GPU shows it (``k3plan/evidence/
    gpu_kernel_floor.yaml``): the shortest kernel, whose work is a small fraction of its time."""

    hardware: str  # the bundled hardware name it was measured on
    vendor: Literal["nvidia", "amd"]  # the GPUs it is transferred to (speed.overheads.kernel_floor_terms)
    device_kind: str
    seconds: Annotated[float, msgspec.Meta(gt=0, lt=1e-3)]
    kernel: str
    calls: Annotated[int, msgspec.Meta(gt=0)]
    total_ms: Positive
    work: str
    measured_on: str
    quote: str
    source: Annotated[str, msgspec.Meta(pattern=r"^https://")]
    note: str = ""
    # vendor -> what that vendor's public decode traces show where none publishes a kernel this small: why this
    # floor is the one transferred to its GPUs (speed.overheads.kernel_floor_terms says it in the label)
    other_vendors: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.kernel}, {self.seconds * 1e6:.1f} us a call on {self.device_kind} ({self.measured_on}; {self.source})"


KERNEL_FLOOR_FILE = Path(__file__).parent / "gpu_kernel_floor.yaml"
KERNEL_FLOOR_RECORD = "evidence/gpu_kernel_floor.yaml"  # package-relative, as the JSON names records


@lru_cache(maxsize=2)
def gpu_kernel_floors(path: Path = KERNEL_FLOOR_FILE) -> tuple[GpuKernelFloor, ...]:
    label = f"GPU kernel floors {path}"
    floors = read_yaml_entries(label, path, GpuKernelFloor)
    for f in floors:  # the quoted row holds the figure: its calls, total and average as transcribed
        if abs(f.total_ms * 1e-3 / f.calls - f.seconds) > 0.05 * f.seconds:
            raise K3PlanError(f"{label}: {f.kernel}: {f.total_ms} ms over {f.calls} calls is not {f.seconds} s a call")
    return floors
