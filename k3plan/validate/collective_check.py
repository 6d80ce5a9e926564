"""The op list's collectives against the compiled HLO's (issue 17 item 7), kind by kind (jax-free).

Expected: k3plan.step.ops.collective_ops for the stage at the job's tokens -- calls (count x calls an
execution) and a device's message bytes summed over them. Compiled: validate's census
(k3plan.validate.hlo_census), each instruction times the trip counts of the loops it sits in. A
difference in count is either covered by a named ``Exception`` below (each says what the graph
does, why the op list counts it otherwise, and the source) or it is a finding: ``ok`` is False and
the output names the kind. Bytes are shown beside the counts with their ratio; they are not
required to match (validate reduces in f32 where a stack's activations are bf16; the all-to-all
buffers are fixed-capacity, k3plan.validate.dispatch).
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from k3plan.validate.hlo_census import OPS, Census


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Exception_(_Frozen):
    """A named, explained count difference: ``calls`` more (or fewer, negative) of ``kind`` in the HLO."""

    name: str
    kind: str
    calls: int
    why: str
    source: str


class KindRow(_Frozen):
    kind: str
    op_list_calls: int
    hlo_calls: int
    explained_calls: int  # by the named exceptions
    op_list_bytes: int  # a device's messages, summed over the step's calls
    hlo_bytes: int  # the HLO results, a device, summed over the executed instructions
    exceptions: tuple[str, ...] = ()

    @property
    def unexplained_calls(self) -> int:
        return self.hlo_calls - self.op_list_calls - self.explained_calls

    @property
    def bytes_ratio(self) -> Optional[float]:
        return self.hlo_bytes / self.op_list_bytes if self.op_list_bytes else None


class CollectiveCheck(_Frozen):
    stack: str
    stage: str
    rows: tuple[KindRow, ...]
    exceptions: tuple[Exception_, ...]

    @property
    def ok(self) -> bool:
        return all(r.unexplained_calls == 0 for r in self.rows)

    @property
    def findings(self) -> tuple[str, ...]:
        return tuple(
            f"{r.kind}: op list {r.op_list_calls} call(s), HLO {r.hlo_calls}, {r.unexplained_calls:+d} unexplained"
            for r in self.rows
            if r.unexplained_calls
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "stage": self.stage,
            "ok": self.ok,
            "findings": list(self.findings),
            "rows": [
                {**r.model_dump(), "unexplained_calls": r.unexplained_calls, "bytes_ratio": r.bytes_ratio}
                for r in self.rows
            ],
            "exceptions": [e.model_dump() for e in self.exceptions],
        }


def op_list_collectives(ops: list) -> dict[str, tuple[int, int]]:
    """kind -> (calls, bytes) of the step's collective ops (k3plan.step.ops.Op, scalar columns)."""
    out: dict[str, tuple[int, int]] = {}
    for o in ops:
        if o.kind != "collective" or o.collective is None or not o.calls:
            continue
        calls = int(o.count * o.calls)
        c, b = out.get(o.collective.value, (0, 0))
        out[o.collective.value] = (c + calls, b + round(calls * float(o.message_bytes)))
    return out


def check(*, stack: str, stage: str, ops: list, hlo: Census, exceptions: list[Exception_]) -> CollectiveCheck:
    expected = op_list_collectives(ops)
    kinds = [k for k in OPS if k in expected or k in hlo.ops or any(e.kind == k for e in exceptions)]
    rows = []
    for k in kinds:
        calls, nbytes = expected.get(k, (0, 0))
        st = hlo.ops.get(k)
        mine = [e for e in exceptions if e.kind == k]
        rows.append(
            KindRow(
                kind=k,
                op_list_calls=calls,
                hlo_calls=st.executed if st else 0,
                explained_calls=sum(e.calls for e in mine),
                op_list_bytes=nbytes,
                hlo_bytes=st.executed_bytes if st else 0,
                exceptions=tuple(e.name for e in mine),
            )
        )
    return CollectiveCheck(stack=stack, stage=stage, rows=tuple(rows), exceptions=tuple(exceptions))
