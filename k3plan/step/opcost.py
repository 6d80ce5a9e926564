"""OpCost: one op of a step as the speed model reads it (per device, per execution).

The step description's op list maps onto this one to one: `count` executions a step (layers, or
layers x micro-batches), each moving `bytes` of HBM and doing `flops`, or, for a collective,
`calls` calls of `message_bytes` a device (`wire_bytes` on the link) over a `group` of devices.
"""

from __future__ import annotations

from typing import Literal

from k3plan.errors import K3PlanError
from k3plan.structs import Frozen

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


_AT_LEAST = (
    ("count", 0),
    ("flops", 0),
    ("bytes", 0),
    ("m", 1),
    ("n", 1),
    ("k", 1),
    ("heads", 1),
    ("chunk", 1),
    ("message_bytes", 1),
    ("wire_bytes", 0),
    ("group", 1),
    ("calls", 0),
    ("fixed_s", 0),
)
_NEEDS = {
    "matmul": ("m", "n", "k"),
    "grouped_matmul": ("tokens_per_group",),
    "kda_recurrent": ("heads",),
    "kda_decode": ("heads",),
    "kda_chunked": ("heads", "chunk"),
    "collective": ("collective", "message_bytes", "group"),
    "overhead": ("fixed_s", "source"),
}


class OpCost(Frozen):
    """One op of a step and what it costs (computed: a Struct; the bounds pydantic's Field held are checked in
    __post_init__, and an op missing what its kind needs is refused there)."""

    name: str
    kind: OpKind
    category: Category | None = None  # default by kind (DEFAULT_CATEGORY)
    count: int = 1  # executions a step (>= 0)
    flops: float = 0.0  # FLOPs an execution, a device (>= 0)
    bytes: int = 0  # HBM bytes an execution, a device (>= 0)
    dtype: str = "bf16"  # the dtype its FLOPs run in: the peak and the efficiency curve it reads
    # the stack's compute dtype has no FLOP/s figure on this hardware: which peak is used instead
    dtype_note: str | None = None
    m: int | None = None  # >= 1
    n: int | None = None  # >= 1
    k: int | None = None  # >= 1
    tokens_per_group: float | None = None  # grouped matmul: rows an expert group (> 0)
    # grouped matmul: the efficiency curve of the engine's own kernel (step.gmm.kernel_curve_of: 'gmm_v2:mxfp4:w13'),
    # read where the curves hold it; otherwise (and None) the dtype's grouped_matmul curve. A DeepSeek-V4 attention-
    # side op (attention, hbm): its own probe curve 'dsv4:<stage>:<op>' (probe dsv4-ops) at ``m`` rows, where held
    curve: str | None = None
    heads: int | None = None  # KDA heads a device (>= 1)
    chunk: int | None = None  # KDA chunk (chunked path) (>= 1)
    collective: str | None = None  # all-to-all, all-reduce, all-gather, reduce-scatter, send
    message_bytes: int | None = None  # a call, a device (>= 1)
    wire_bytes: int | None = None  # on the link a call, a device (default message_bytes) (>= 0)
    group: int | None = None  # devices in the collective's group (>= 1)
    calls: int = 1  # collective calls an execution (>= 0)
    link: Literal["scale_up", "scale_out"] = "scale_up"
    # hbm op: hbm_copy = a read and a write of the same bytes, priced on the hbm probe's copy records where the
    # curves have them; None: every hbm record's envelope
    hbm_curve: Literal["hbm_copy"] | None = None
    fixed_s: float | None = None  # overhead: seconds an execution (>= 0)
    source: str | None = None  # overhead: where fixed_s comes from (required)

    def __post_init__(self) -> None:
        super().__post_init__()
        for f, low in _AT_LEAST:
            v = getattr(self, f)
            if v is not None and v < low:
                raise ValueError(f"op {self.name!r}: {f} {v}: expected >= {low}")
        if self.tokens_per_group is not None and not self.tokens_per_group > 0:
            raise ValueError(f"op {self.name!r}: tokens_per_group {self.tokens_per_group}: expected > 0")
        missing = [f for f in _NEEDS.get(self.kind, ()) if getattr(self, f) is None]
        if missing:
            raise K3PlanError(f"op {self.name!r} ({self.kind}): missing {', '.join(missing)}")

    @property
    def cat(self) -> str:
        return self.category or DEFAULT_CATEGORY[self.kind]
