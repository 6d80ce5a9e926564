"""The matmul and grouped-matmul shapes a planned step's ops have on one device (issue 17 item 4).

`probe matmul --from-plan` and `probe ragged-dot --from-plan` sweep these instead of fixed sizes, so
the efficiency curves (speed/curves.py) are measured where the step's ops sit. The shapes come from
the step's op list as the speed model reads it (speed.stage.decode_op_costs / prefill_op_costs):

- matmul: the OpCost's (M, N, K) -- M the rows (decode: a DP group's sequences; prefill: the chunk),
  N x K the weight's shape on the device (``step.ops.matmul_nk``: the ShardSpec's split dims divided, so
  a column-parallel projection splits N and a row-parallel one -- o_proj, down_proj, whose partial sums
  are all-reduced -- splits K); the curve's axis is (M N K)^(1/3), so the geometric mean of each shape is
  what it keys on. (Before, the op list carried only a tensor's share a device, not its ShardSpec, so N
  was that share over the checkpoint's K: the same product, but a row-parallel shape no device runs.)
- grouped matmul (routed experts): the experts a device holds, the rows a touched expert group (the
  OpCost's ``tokens_per_group``, the curve's axis), the groups a device touches at uniform routing
  (touched experts x local / E), and the expert's K (input) and N (output), all from the expert tensor's
  shape on the device ([experts, N, K]).

Decode at ``batch`` sequences of ``context`` tokens, prefill at one ``chunk``; shapes seen in both are
one entry naming every op (``decode:`` / ``prefill:`` prefixed) that has it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MATMUL_CPU_BUDGET = 256**3  # M N K of the largest CPU point: a 256^3 f32 matmul is ~ms there
GROUPED_CPU_BUDGET = 1 << 21  # expert weight elements a device on CPU (local experts x K x N)


@dataclass(frozen=True)
class MatmulShape:
    m: int
    n: int
    k: int
    ops: tuple[str, ...]

    @property
    def size(self) -> float:
        """The curve's axis: (M N K)^(1/3)."""
        return float(self.m * self.n * self.k) ** (1.0 / 3.0)


@dataclass(frozen=True)
class GroupedShape:
    tokens: int  # tokens the device's EP group routes (decode: its sequences; prefill: the chunk)
    local_experts: int  # experts a device holds
    groups: int  # expert groups a device touches (uniform routing)
    rows_per_group: float  # rows a touched group: the curve's axis
    k: int  # expert input width
    n: int  # expert output width
    ops: tuple[str, ...]

    @property
    def rows(self) -> int:
        """Rows a device: the touched groups' rows, rounded (>= one a group)."""
        return max(self.groups, round(self.groups * self.rows_per_group))


@dataclass(frozen=True)
class PlanShapes:
    source: str  # the configuration the shapes come from, in words
    matmuls: tuple[MatmulShape, ...]
    grouped: tuple[GroupedShape, ...]


def plan_shapes(setup, *, batch: int, context: int, chunk: int) -> PlanShapes:
    """The distinct matmul and grouped-matmul shapes of one decode step and one prefill chunk."""
    from k3plan.errors import require
    from k3plan.speed.stage import decode_op_costs, prefill_op_costs
    from k3plan.step.memory import cdiv
    from k3plan.step.ops import weight_groups_of_setup
    from k3plan.step.stages import microbatch

    require(batch >= 1 and context >= 1 and chunk >= 1, "--batch, --context and --chunk must be >= 1")
    require(chunk <= context, f"--chunk {chunk} exceeds --context {context}")
    spec, par = setup.model.spec, setup.parallel
    experts = {g.name: g for g in weight_groups_of_setup(setup) if g.rep.role == "expert"}
    # tokens one EP group routes (step/decode.py decode_terms, at a microbatch under --pp as decode_op_costs
    # steps it; a prefill chunk: the chunk)
    micro = microbatch(batch, par.pp)
    ep_tokens = {"decode": min(micro, cdiv(micro, par.dp) * max(1, par.ep // par.tp)), "prefill": chunk}
    mm: dict[tuple, list[str]] = {}
    gm: dict[tuple, list[str]] = {}
    phases = (
        ("decode", decode_op_costs(setup, batch=batch, context=context)),
        ("prefill", prefill_op_costs(setup, chunk=chunk, context=context)),
    )
    for phase, costs in phases:
        for op in costs:
            if op.kind == "matmul":
                mm.setdefault((op.m, op.n, op.k), []).append(f"{phase}:{op.name}")
            elif op.kind == "grouped_matmul" and op.name in experts:
                shape = experts[op.name].shape  # [experts, out, in] on the device (a Setup's groups carry it)
                if shape is None:
                    raise ValueError(f"{op.name}: no per-device shape (weight groups of one Setup carry it)")
                local, n, k = (int(d) for d in shape)
                e = spec.moe.num_experts
                rows_group = float(op.tokens_per_group or 1.0)
                touched_local = ep_tokens[phase] * spec.moe.top_k / rows_group * local / e
                groups = min(local, max(1, round(touched_local)))
                key = (ep_tokens[phase], local, groups, round(rows_group, 6), k, n)
                gm.setdefault(key, []).append(f"{phase}:{op.name}")
    p = setup.parallel
    source = (
        f"{setup.model.spec.name} on {setup.hardware.name} {setup.topology.text} tp {p.tp} ep {p.ep} dp {p.dp}"
        f" pp {p.pp} ({setup.stack.name}); decode batch {batch} at context {context}, prefill chunk {chunk}"
    )
    return PlanShapes(
        source=source,
        matmuls=tuple(MatmulShape(m=m, n=n, k=k, ops=tuple(ops)) for (m, n, k), ops in mm.items()),
        grouped=tuple(
            GroupedShape(tokens=t, local_experts=le, groups=g, rows_per_group=r, k=k, n=n, ops=tuple(ops))
            for (t, le, g, r, k, n), ops in gm.items()
        ),
    )


def cpu_factor(shapes: PlanShapes) -> int:
    """The power of two every width (matmul M, N, K; expert K, N) is divided by on CPU so the largest
    point fits the CPU budgets above (1: the shapes run as planned)."""
    f = 1
    while any(math.prod(_div((s.m, s.n, s.k), f)) > MATMUL_CPU_BUDGET for s in shapes.matmuls) or any(
        s.local_experts * math.prod(_div((s.k, s.n), f)) > GROUPED_CPU_BUDGET for s in shapes.grouped
    ):
        f *= 2
    return f


def scaled(shapes: PlanShapes, factor: int) -> PlanShapes:
    """Every width divided by ``factor`` (rounded up), and the experts and touched groups a device too
    (XLA's CPU ragged_dot costs experts x rows); rows a group kept (the grouped curve's axis), merging
    shapes that become equal."""
    if factor == 1:
        return shapes
    mm: dict[tuple, list[str]] = {}
    for s in shapes.matmuls:
        mm.setdefault(_div((s.m, s.n, s.k), factor), []).extend(s.ops)
    gm: dict[tuple, list[str]] = {}
    for g in shapes.grouped:
        key = (g.tokens, *_div((g.local_experts, g.groups), factor), g.rows_per_group, *_div((g.k, g.n), factor))
        gm.setdefault(key, []).extend(g.ops)
    return PlanShapes(
        source=shapes.source,
        matmuls=tuple(MatmulShape(m=m, n=n, k=k, ops=tuple(o)) for (m, n, k), o in mm.items()),
        grouped=tuple(
            GroupedShape(tokens=t, local_experts=le, groups=gr, rows_per_group=r, k=k, n=n, ops=tuple(o))
            for (t, le, gr, r, k, n), o in gm.items()
        ),
    )


def _div(dims: tuple[int, ...], factor: int) -> tuple[int, ...]:
    return tuple(max(1, -(-d // factor)) for d in dims)
