"""What `k3plan census` answers, typed: a checkpoint's tensors and bytes by dtype and (with a model)
how its headers compare with the tensor inventory. Field order is the JSON key order.
(k3plan.models.census builds it; kept apart so the header scan itself imports no pydantic.)"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, PlainSerializer, SerializerFunctionWrapHandler, model_serializer


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DtypeCount(_Frozen):
    dtype: str  # safetensors dtype (BF16, F32, U8, ...)
    tensors: int
    bytes: int


def _dtype_map(entries: tuple[DtypeCount, ...]) -> dict[str, dict[str, int]]:
    return {e.dtype: {"tensors": e.tensors, "bytes": e.bytes} for e in entries}


class ShapeMismatch(_Frozen):
    name: str
    expected: list[int]
    found: list[int]


class DtypeMismatch(_Frozen):
    name: str
    expected: str
    found: str


class CensusComparison(_Frozen):
    """Headers vs the inventory: counts in full, names listed up to ``max_listed``."""

    expected_tensors: int
    matched: int
    missing_count: int
    missing: list[str]
    extra_count: int
    extra: list[str]
    shape_mismatch_count: int
    shape_mismatch: list[ShapeMismatch]
    dtype_mismatch_count: int
    dtype_mismatch: list[DtypeMismatch]
    ok: bool


class CensusResult(_Frozen):
    path: str
    files: int
    tensors: int
    bytes: int
    # dumped as {dtype: {tensors, bytes}}
    by_dtype: Annotated[tuple[DtypeCount, ...], PlainSerializer(_dtype_map, return_type=dict)]
    comparison: Optional[CensusComparison] = None  # without a model: absent from the JSON

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if self.comparison is None:
            out.pop("comparison", None)
        return out

    def dtype(self, name: str) -> DtypeCount:
        return next(e for e in self.by_dtype if e.dtype == name)
