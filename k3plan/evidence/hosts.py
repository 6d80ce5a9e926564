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
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from k3plan.errors import K3PlanError
from k3plan.specfile import describe, read_yaml_mapping

FOLDER = Path(__file__).parent / "hosts"


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class FusionChain(_In):
    n_ops: list[int]
    seconds: list[float]
    s_per_dependent_op: float = Field(gt=0)


class HostSync(_In):
    s_per_step_sync: float = Field(gt=0)
    s_per_step_queued: float = Field(gt=0)
    s_host_round_trip: float = Field(gt=0)


class LayerScan(_In):
    layers: list[int]
    seconds: list[float]
    bytes_per_layer: int = Field(gt=0)
    s_per_layer: float = Field(gt=0)
    hbm_bytes_per_s_measured: float = Field(gt=0)


class StepOverheads(_In):
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
    try:
        rec = StepOverheads.model_validate({**raw, "path": f"k3plan/evidence/hosts/{path.name}"})
    except ValidationError as e:
        raise K3PlanError(f"{label}: {describe(e)}") from None
    if rec.backend != "tpu":
        raise K3PlanError(f"{label}: backend {rec.backend!r}: only a record measured on a TPU is used")
    return rec


@lru_cache(maxsize=2)
def shipped_step_overheads(folder: Path = FOLDER) -> tuple[StepOverheads, ...]:
    return tuple(load_step_overheads(p) for p in sorted(folder.glob("*.yaml")))


class EngineStepOverhead(_In):
    """An engine's host time a synchronous step, as published (``k3plan/evidence/engine_step_overheads.yaml``)."""

    engine_family: str
    seconds: float = Field(gt=0, lt=1)
    scheduling: Literal["sync"]
    measured_on: str
    quote: str
    source: str = Field(pattern=r"^https://")


ENGINE_FILE = Path(__file__).parent / "engine_step_overheads.yaml"


@lru_cache(maxsize=2)
def engine_step_overheads(path: Path = ENGINE_FILE) -> tuple[EngineStepOverhead, ...]:
    from k3plan.safeparse import parse_yaml, read_text

    label = f"engine step overheads {path}"
    raw = parse_yaml(label, read_text(label, path))
    if not isinstance(raw, list):
        raise K3PlanError(f"{label}: expected a list of entries")
    try:
        return tuple(EngineStepOverhead.model_validate(x) for x in raw)
    except ValidationError as e:
        raise K3PlanError(f"{label}: {describe(e)}") from None
