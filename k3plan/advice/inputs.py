"""What the advice rules read: one typed struct of per-device numbers plus alternatives the caller
computed (other topologies, KV dtypes, batches), and builders from today's ``fit --json`` shape.

Per device throughout; bytes are ints. The rules never evaluate a model themselves: an alternative
they may suggest is passed in with its numbers, so the effect they print is k3plan's own figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt

from k3plan.errors import K3PlanError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TopologyOption(_Frozen):
    """Another topology (or split) for the same model: its per-device weights, and KV/state/temp
    when they change (None: the same as now)."""

    topology: str
    devices: PositiveInt
    weights_bytes: NonNegativeInt
    kv_bytes: NonNegativeInt | None = None
    state_bytes: NonNegativeInt | None = None
    temp_bytes: NonNegativeInt | None = None
    reserve_bytes: NonNegativeInt | None = None
    usable_bytes: NonNegativeInt | None = None  # another machine: its per-device usable HBM


class KvDtypeOption(_Frozen):
    kv_dtype: str
    kv_bytes_per_token: PositiveInt  # per device, all MLA layers
    block_tokens: PositiveInt = 1  # KV allocation granularity under that dtype
    state_bytes_per_sequence: NonNegativeInt | None = None  # per device, if paging pads it differently


class BatchOption(_Frozen):
    """The roofline at another decode batch: TPOT and the binding roof there."""

    batch: PositiveInt
    tpot_s: float = Field(gt=0)
    binding: str


class SpecDecodeOption(_Frozen):
    draft_tokens: PositiveInt
    tokens_per_step: float = Field(gt=0)  # expected tokens a verify step emits (k3plan.workload.specdecode)
    step_s: float = Field(gt=0)  # verify + draft, at the current batch
    draft_weights_bytes: NonNegativeInt = 0  # per device


class AdviceInputs(_Frozen):
    usable_bytes: PositiveInt
    weights_bytes: NonNegativeInt
    kv_bytes: NonNegativeInt
    state_bytes: NonNegativeInt
    temp_bytes: NonNegativeInt
    reserve_bytes: NonNegativeInt
    free_bytes: int
    topology: str
    devices: PositiveInt
    batch: PositiveInt
    sequences: PositiveInt  # sequences a device holds (batch / dp under DP attention)
    context_tokens: PositiveInt
    kv_dtype: str
    kv_bytes_per_token: PositiveInt  # per device, all MLA layers
    block_tokens: PositiveInt = 1
    state_bytes_per_sequence: NonNegativeInt = 0  # per device
    binding: str | None = None  # the decode step's binding roof: memory, compute, collective ...
    tpot_s: float | None = None
    topology_options: tuple[TopologyOption, ...] = ()
    kv_dtype_options: tuple[KvDtypeOption, ...] = ()
    batch_options: tuple[BatchOption, ...] = ()
    spec_decode: SpecDecodeOption | None = None
    time_by_part_s: dict[str, float] = Field(default_factory=dict)  # compute-bound: where a step's time goes
    # DP groups the batch is split over (a device holds ceil(batch / groups) sequences; 1: every device
    # holds the whole batch), as k3plan.step.memory.budget_terms splits it; None: scale sequences / batch
    sequence_groups: PositiveInt | None = None
    # a stage's graph the calibration refuses (a measured compile at or above this size ran out of
    # memory): the fit fails whatever HBM is left free
    refused: str | None = None

    @property
    def fixed_bytes(self) -> int:
        """What does not scale with sequences: weights + temp + reserve."""
        return self.weights_bytes + self.temp_bytes + self.reserve_bytes


def _get(d: Mapping[str, Any], *path: str) -> Any:
    cur: Any = d
    for k in path:
        if not isinstance(cur, Mapping) or k not in cur:
            raise K3PlanError(f"fit JSON: missing {'.'.join(path)}; expected the output of `k3plan fit --json`")
        cur = cur[k]
    return cur


def _refused(temp: Mapping[str, Any]) -> str | None:
    found = [
        f"{stage} {temp[k]}"
        for stage, k in (("prefill", "prefill_refused"), ("decode", "decode_refused"))
        if temp.get(k)
    ]
    return "; ".join(found) or None


def inputs_from_fit(fit: Mapping[str, Any], **alternatives: Any) -> AdviceInputs:
    """AdviceInputs from a ``fit --json`` object (keys per_device, hardware, workload, model_state,
    cache_layout, speed); ``alternatives``: topology_options, kv_dtype_options, batch_options,
    spec_decode, time_by_part_s."""
    pd = _get(fit, "per_device")
    speed = fit.get("speed") or {}
    layout = fit.get("cache_layout") or {}
    return AdviceInputs(
        usable_bytes=_get(fit, "hardware", "usable_bytes_per_device"),
        weights_bytes=pd["weights_bytes"],
        kv_bytes=pd["kv_bytes"],
        state_bytes=pd["state_bytes"],
        temp_bytes=pd["temp_bytes"],
        reserve_bytes=pd["reserve_bytes"],
        free_bytes=pd["free_bytes"],
        topology=_get(fit, "hardware", "topology"),
        devices=_get(fit, "hardware", "devices"),
        batch=_get(fit, "workload", "batch"),
        sequences=pd["sequences"],
        context_tokens=_get(fit, "workload", "context_tokens"),
        kv_dtype=_get(fit, "model_state", "kv_dtype"),
        kv_bytes_per_token=pd["kv_bytes_per_token"],
        block_tokens=layout.get("block_tokens", 1),
        state_bytes_per_sequence=pd["state_bytes_per_sequence"],
        binding=speed.get("binding"),
        tpot_s=speed.get("tpot_s"),
        refused=_refused(fit.get("temp") or {}),
        **alternatives,
    )


def topology_option_from_fit(fit: Mapping[str, Any]) -> TopologyOption:
    """The same model fitted at another topology (another ``fit --json``) as an option."""
    pd = _get(fit, "per_device")
    return TopologyOption(
        topology=_get(fit, "hardware", "topology"),
        devices=_get(fit, "hardware", "devices"),
        weights_bytes=pd["weights_bytes"],
        kv_bytes=pd["kv_bytes"],
        state_bytes=pd["state_bytes"],
        temp_bytes=pd["temp_bytes"],
        reserve_bytes=pd["reserve_bytes"],
        usable_bytes=_get(fit, "hardware", "usable_bytes_per_device"),
    )


def kv_dtype_option_from_fit(fit: Mapping[str, Any]) -> KvDtypeOption:
    """The same setup fitted with another --kv-dtype as an option."""
    pd = _get(fit, "per_device")
    return KvDtypeOption(
        kv_dtype=_get(fit, "model_state", "kv_dtype"),
        kv_bytes_per_token=pd["kv_bytes_per_token"],
        block_tokens=(fit.get("cache_layout") or {}).get("block_tokens", 1),
        state_bytes_per_sequence=pd["state_bytes_per_sequence"],
    )
