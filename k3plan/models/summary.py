"""What `k3plan models` and `models show` answer, typed: a model's parameters and checkpoint bytes,
and a breakdown by role, kind or storage format. Field order is the JSON key order."""

from __future__ import annotations

from typing import Literal

from k3plan.errors import K3PlanError
from k3plan.structs import Frozen, dump, fields

Breakdown = Literal["role", "kind", "format"]
BREAKDOWNS: dict[str, Breakdown] = {"role": "role", "kind": "kind", "format": "format"}
TENSOR_KEY: dict[Breakdown, str] = {"role": "role", "kind": "kind", "format": "fmt"}  # the Tensor attribute


def breakdown_by(by: str) -> Breakdown:
    """--by checked: role, kind or format; a one-line error for anything else."""
    if by not in BREAKDOWNS:
        raise K3PlanError(f"--by {by!r}: expected one of role, kind, format")
    return BREAKDOWNS[by]


class LayerCounts(Frozen):
    total: int
    kda: int
    mla: int
    moe: int


class FormatBytes(Frozen):
    fmt: str  # storage format (bf16, mxfp4, ...)
    bytes: int


class GroupTotals(Frozen):
    """Tensors sharing one role, kind or format: parameters, active parameters a token, bytes, count."""

    group: str
    params: int
    active_params: int  # rounded as the model's total is (experts: params x top-k / experts)
    bytes: int
    tensors: int


def _fmt_map(entries: tuple[FormatBytes, ...]) -> dict[str, int]:
    return {e.fmt: e.bytes for e in entries}


def _group_map(entries: tuple[GroupTotals, ...]) -> dict[str, dict[str, float]]:
    return {e.group: {k: v for k, v in dump(e).items() if k != "group"} for e in entries}


class ModelSummary(Frozen):
    __dump_with__ = {"checkpoint_bytes_by_format": _fmt_map}  # dumped as {format: bytes}

    name: str
    family: str
    architecture: str
    source: str
    layers: LayerCounts
    total_params: int  # text model
    active_params: int  # a token
    vision_params: int
    mtp_params: int
    checkpoint_bytes: int
    checkpoint_bytes_by_format: tuple[FormatBytes, ...]
    notes: list[str]


class ModelShow(ModelSummary):
    # breakdown dumped as {group: {params, active_params, bytes, tensors}}
    __dump_with__ = {**ModelSummary.__dump_with__, "breakdown": _group_map}

    breakdown_by: Breakdown
    breakdown: tuple[GroupTotals, ...]


def _groups(inventory, key: str, *, include_extra: bool) -> tuple[GroupTotals, ...]:
    return tuple(
        GroupTotals(
            group=g,
            params=int(v["params"]),
            active_params=round(v["active_params"]),
            bytes=int(v["bytes"]),
            tensors=int(v["tensors"]),
        )
        for g, v in inventory.breakdown(key, include_extra=include_extra).items()
    )


def model_summary(model) -> ModelSummary:
    """A loaded model's totals (k3plan.models.load_model)."""
    inv, spec = model.inventory, model.spec
    return ModelSummary(
        name=spec.name,
        family=spec.family,
        architecture=spec.architecture,
        source=spec.source,
        layers=LayerCounts(total=spec.num_layers, kda=spec.n_kda, mla=spec.n_mla, moe=spec.n_moe),
        total_params=inv.total_params,
        active_params=inv.active_params,
        vision_params=inv.vision_params,
        mtp_params=inv.mtp_params,
        checkpoint_bytes=inv.checkpoint_bytes,
        checkpoint_bytes_by_format=tuple(
            FormatBytes(fmt=g.group, bytes=g.bytes) for g in _groups(inv, "fmt", include_extra=False)
        ),
        notes=list(model.notes),
    )


def model_show(model, *, by: Breakdown) -> ModelShow:
    """The totals and a breakdown; vision and MTP get their own rows by role/kind, by format only the
    text model (= checkpoint bytes)."""
    key = TENSOR_KEY[by]
    totals = model_summary(model)
    return ModelShow(
        **{k: getattr(totals, k) for k in fields(ModelSummary)},
        breakdown_by=by,
        breakdown=_groups(model.inventory, key, include_extra=key != "fmt"),
    )
