"""Collectives in compiled HLO text: count, bytes, and whether they run inside a loop (jax-free).

An instruction line reads ``%name = <result shape> <op>(<operands>), attrs``; the result may be a
tuple ``(bf16[8,16]{1,0}, f32[4]{0})`` (combined or async collectives). Async pairs count once, at
``-start``; their bytes are the result of the matching ``-done``. A collective is "in a loop" when
its computation is reachable from the body of a ``while`` (a scan); the trip count is read from
``known_trip_count`` when XLA records it. Bytes are the result's size per device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

OPS = ("all-to-all", "ragged-all-to-all", "all-reduce", "all-gather", "reduce-scatter", "collective-permute")
_ITEM = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "f8e4m3": 1,
    "f8e8m0fnu": 1,
    "s4": 1,
    "u4": 1,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "u16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "c64": 8,
    "c128": 16,
}
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+((?:ragged-)?[a-z][\w\-]*)\((.*)$")
_ARRAY = re.compile(r"\b([a-z]+\d*[a-z0-9]*)\[([\d,]*)\]")
_REF = re.compile(
    r"\b(?:body|condition|to_apply|calls|branch_computations|called_computations)=(?:\{([^}]*)\}|%?([\w.\-]+))"
)
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


@dataclass
class OpStats:
    count: int = 0
    bytes: int = 0  # summed over instructions, one execution each
    in_loop: int = 0  # instructions inside a while body
    executed: int = 0  # instructions x known trip counts
    executed_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(
            count=self.count,
            bytes=self.bytes,
            in_loop=self.in_loop,
            executed=self.executed,
            executed_bytes=self.executed_bytes,
        )


@dataclass
class Census:
    ops: dict[str, OpStats] = field(default_factory=dict)
    loops: int = 0

    def count(self, op: str) -> int:
        return self.ops[op].count if op in self.ops else 0

    def to_dict(self) -> dict:
        return {"ops": {k: v.to_dict() for k, v in self.ops.items()}, "while_loops": self.loops}


def shape_bytes(text: str) -> int:
    total = 0
    for dtype, dims in _ARRAY.findall(text):
        if dtype not in _ITEM:
            continue
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _ITEM[dtype]
    return total


def _base(op: str) -> Optional[str]:
    for suffix in ("-start", ""):
        if op.endswith(suffix) and op[: len(op) - len(suffix)] in OPS:
            return op[: len(op) - len(suffix)]
    return None


def census(hlo_text: str) -> Census:
    comps: dict[str, list[str]] = {}
    current = None
    for line in hlo_text.splitlines():
        m = _COMP.match(line)
        if m:
            current = m.group(1)
            comps[current] = []
        elif current is not None:
            if line.strip() == "}":
                current = None
            else:
                comps[current].append(line)
    # call graph and loop bodies (with their trip counts)
    calls: dict[str, set[str]] = {c: set() for c in comps}
    loop_mult: dict[str, int] = {}
    n_loops = 0
    done_shape: dict[str, str] = {}
    for c, lines in comps.items():
        for line in lines:
            for braced, single in _REF.findall(line):
                calls[c].update(r.strip().lstrip("%") for r in (braced or single).split(",") if r.strip())
            im = _INSTR.match(line)
            if not im:
                continue
            if im.group(3) == "while":
                n_loops += 1
                body = re.search(r"body=%?([\w.\-]+)", line)
                trip = _TRIP.search(line)
                if body:
                    loop_mult[body.group(1)] = int(trip.group(1)) if trip else 1
            if im.group(3).endswith("-done"):
                operand = re.match(r"\s*%?([\w.\-]+)", im.group(4))
                if operand:
                    done_shape[operand.group(1)] = im.group(2)
    # multiplicity of each computation: product of trip counts of the loops it sits in
    mult: dict[str, int] = {}
    inloop: set[str] = set()

    def visit(c: str, m: int, looped: bool, depth: int = 0) -> None:
        if depth > 64 or (c in mult and mult[c] >= m and (c in inloop or not looped)):
            return
        mult[c] = max(mult.get(c, 0), m)
        if looped:
            inloop.add(c)
        for child in calls.get(c, ()):
            lm = loop_mult.get(child)
            visit(child, m * lm if lm else m, looped or lm is not None, depth + 1)

    roots = [c for c in comps if not any(c in v for v in calls.values())]
    for r in roots:
        visit(r, 1, False)
    out = Census(loops=n_loops)
    for c, lines in comps.items():
        for line in lines:
            im = _INSTR.match(line)
            if not im:
                continue
            op = _base(im.group(3))
            if op is None:
                continue
            shape = done_shape.get(im.group(1), im.group(2)) if im.group(3).endswith("-start") else im.group(2)
            nbytes = shape_bytes(shape)
            st = out.ops.setdefault(op, OpStats())
            st.count += 1
            st.bytes += nbytes
            k = mult.get(c, 1)
            st.executed += k
            st.executed_bytes += k * nbytes
            if c in inloop:
                st.in_loop += 1
    return out
