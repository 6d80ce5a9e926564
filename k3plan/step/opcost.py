"""OpCost: one op of a step as the speed model reads it (per device, per execution).

The step description's op list maps onto this one to one: `count` executions a step (layers, or
layers x micro-batches), each moving `bytes` of HBM and doing `flops`, or, for a collective,
`calls` calls of `message_bytes` a device (`wire_bytes` on the link) over a `group` of devices.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from k3plan.errors import K3PlanError

OpKind = Literal[
    "matmul",
    "grouped_matmul",
    "attention",
    "hbm",
    "kda_recurrent",
    "kda_chunked",
    "kda_decode",
    "collective",
    "overhead",
]
Category = Literal["attention", "kda", "experts", "dense", "collectives", "overhead"]
CATEGORIES: tuple[str, ...] = ("attention", "kda", "experts", "dense", "collectives", "overhead")
DEFAULT_CATEGORY: dict[str, str] = {
    "matmul": "dense",
    "hbm": "dense",
    "grouped_matmul": "experts",
    "attention": "attention",
    "kda_recurrent": "kda",
    "kda_chunked": "kda",
    "kda_decode": "kda",
    "collective": "collectives",
    "overhead": "overhead",
}


class OpCost(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: OpKind
    category: Category | None = Field(None, description="default by kind (DEFAULT_CATEGORY)")
    count: int = Field(1, ge=0, description="executions a step")
    flops: float = Field(0.0, ge=0, description="FLOPs an execution, a device")
    bytes: int = Field(0, ge=0, description="HBM bytes an execution, a device")
    dtype: str = Field("bf16", description="the dtype its FLOPs run in: the peak and the efficiency curve it reads")
    dtype_note: str | None = Field(
        None, description="the stack's compute dtype has no FLOP/s figure on this hardware: which peak is used instead"
    )
    m: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1)
    k: int | None = Field(None, ge=1)
    tokens_per_group: float | None = Field(None, gt=0, description="grouped matmul: rows an expert group")
    heads: int | None = Field(None, ge=1, description="KDA heads a device")
    chunk: int | None = Field(None, ge=1, description="KDA chunk (chunked path)")
    collective: str | None = Field(None, description="all-to-all, all-reduce, all-gather, reduce-scatter, send")
    message_bytes: int | None = Field(None, ge=1, description="a call, a device")
    wire_bytes: int | None = Field(None, ge=0, description="on the link a call, a device (default message_bytes)")
    group: int | None = Field(None, ge=1, description="devices in the collective's group")
    calls: int = Field(1, ge=0, description="collective calls an execution")
    link: Literal["scale_up", "scale_out"] = "scale_up"
    hbm_curve: Literal["hbm_copy"] | None = Field(
        None,
        description="hbm op: hbm_copy = a read and a write of the same bytes, priced on the hbm probe's copy "
        "records where the curves have them; None: every hbm record's envelope",
    )
    fixed_s: float | None = Field(None, ge=0, description="overhead: seconds an execution")
    source: str | None = Field(None, description="overhead: where fixed_s comes from (required)")

    @model_validator(mode="after")
    def _complete(self) -> OpCost:
        need = {
            "matmul": ("m", "n", "k"),
            "grouped_matmul": ("tokens_per_group",),
            "kda_recurrent": ("heads",),
            "kda_decode": ("heads",),
            "kda_chunked": ("heads", "chunk"),
            "collective": ("collective", "message_bytes", "group"),
            "overhead": ("fixed_s", "source"),
        }
        missing = [f for f in need.get(self.kind, ()) if getattr(self, f) is None]
        if missing:
            raise K3PlanError(f"op {self.name!r} ({self.kind}): missing {', '.join(missing)}")
        return self

    @property
    def cat(self) -> str:
        return self.category or DEFAULT_CATEGORY[self.kind]
