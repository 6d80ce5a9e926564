"""One operation of a step (``Op``) and the buffers live at its peak: what every op list of step/ is made of
(``step.ops`` for the model's layers, a family's own module such as ``step.dsv4_ops`` for its attention)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from k3plan.columns import maximum, where
from k3plan.models.inventory import Tensor
from k3plan.step.collective import Collective

if TYPE_CHECKING:
    from k3plan.models.spec import ModelSpec

Col = Any  # int | float | numpy array


@dataclass(frozen=True)
class LiveBuffers:
    """One op's buffers live at its peak, by name (k3plan.step.live): bytes a device."""

    name: str  # what the buffers are of: moe.experts | mla.attention | kda.recurrence | kda.chunked_scan | ...
    buffers: dict[str, Col]

    @property
    def bytes(self):
        return sum(self.buffers.values())


class LiveRules(Protocol):
    """What the op builders (``step.ops`` / ``step.dsv4_ops`` ``decode_ops`` / ``prefill_ops``, ``live=``) ask
    of the stack's live-buffer rules: ``k3plan.step.live.LiveAt`` is the one implementation. Named here, below
    both, so the builders do not import the module that builds their lists (``live.stage_live``)."""

    WEIGHT_ROLES: ClassVar[frozenset[str]]

    def weight(self, spec: ModelSpec, t: Tensor, *, rows, sequences, tp) -> LiveBuffers | None: ...

    def mla(self, spec: ModelSpec, *, seqs, queries, context, tp) -> LiveBuffers: ...

    def kda(self, spec: ModelSpec, *, seqs, queries, tp, decode: bool) -> LiveBuffers: ...


@dataclass(slots=True)
class Op:
    """One operation of a step; values are a device, an execution (``count`` executions a step). Built once
    and never changed, but not ``frozen``: a frozen dataclass's __init__ sets each of these 19 fields through
    object.__setattr__ (~25k instructions an op, 3.5 times a plain one, by callgrind), and one fit builds
    ~280 ops (its speed's lists and the temp model's at four points)."""

    name: str
    kind: str  # matmul | norm | grouped_matmul | attention | kda_decode | kda_chunked | collective
    layer_kind: str  # mla | kda | moe | dense | global
    category: str  # the step term it adds to: weights | experts | kv | state | collectives
    count: Col = 1
    bytes_read: Col = 0
    bytes_written: Col = 0
    flops: Col = 0
    flops_category: str = "linear"  # linear | attention
    live: LiveBuffers | None = None  # the buffers live at the op's peak (built with ``live=``; else not asked)
    collective: Collective | None = None
    group: Col = 1
    calls: Col = 0  # collective calls an execution
    message_bytes: Col = 0  # a call, a device (all-reduce: the tensor reduced; all-to-all: a device's share)
    wire_bytes: Col = 0  # on the link an execution, a chip (what the link's per-chip bandwidth carries)
    tokens: Col = 0  # rows the op applies to (matmuls: sequences or tokens; experts: routed rows an expert)
    params: Col = 0  # weight ops: one tensor's params a device
    heads: Col = 0  # attention / KDA: heads a device
    tensor: Tensor | None = None  # weight ops: one member of the group
    shape: tuple[int, ...] | None = None  # weight ops: its shape on the device (``WeightGroup.shape``)
    # collectives: on the scale-out link (its group's span, ``group_spans``, crosses a scale-up domain:
    # ``crosses``; the pipeline send: ``roofline.comm.pipeline_link``), else on the scale-up link
    scale_out: Col = False
    # weight ops the engine runs on weights it re-made at load (Stack.compute_dtype.roles decides their dtype):
    # decode's kv_b_proj, run by vLLM and SGLang as the absorbed W_UK / W_UV batched matmuls (MLA_ABSORBED)
    compute_role: str | None = None

    @property
    def bytes(self):
        return self.bytes_read + self.bytes_written

    @property
    def live_bytes(self):
        return 0 if self.live is None else self.live.bytes


def heads_split(heads: int, tp):
    """The TP ranks a head-parallel op splits over: tp when it divides the heads, else 1 (replicated)."""
    return maximum(1, where(heads % tp == 0, tp, 1))
