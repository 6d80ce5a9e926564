"""What `k3plan census` answers, typed: a checkpoint's tensors and bytes by dtype and (with a model)
how its headers compare with the tensor inventory. Field order is the JSON key order.
(k3plan.models.census builds it; kept apart from the header scan.)"""

from __future__ import annotations

from typing import Any, Optional

from k3plan.structs import Frozen


class DtypeCount(Frozen):
    dtype: str  # safetensors dtype (BF16, F32, U8, ...)
    tensors: int
    bytes: int


def _dtype_map(entries: tuple[DtypeCount, ...]) -> dict[str, dict[str, int]]:
    return {e.dtype: {"tensors": e.tensors, "bytes": e.bytes} for e in entries}


class ShapeMismatch(Frozen):
    name: str
    expected: list[int]
    found: list[int]


class DtypeMismatch(Frozen):
    name: str
    expected: str
    found: str


class CensusComparison(Frozen):
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


class CensusResult(Frozen):
    __dump_with__ = {"by_dtype": _dtype_map}  # dumped as {dtype: {tensors, bytes}}

    path: str
    files: int
    tensors: int
    bytes: int
    by_dtype: tuple[DtypeCount, ...]
    comparison: Optional[CensusComparison] = None  # without a model: absent from the JSON

    def _dump_extra(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.comparison is None:
            out.pop("comparison", None)
        return out

    def dtype(self, name: str) -> DtypeCount:
        return next(e for e in self.by_dtype if e.dtype == name)
