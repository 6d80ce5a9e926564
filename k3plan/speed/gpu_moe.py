"""A decode step's routed-MoE calls at the latency a GPU's table gives for the engine's kernel
(``evidence.gpu_moe``), for the registered term gpu-moe: the table of the engine's kernel on this GPU at the model's
shape (hidden, an expert's intermediate, experts, top-k, the MoE group's TP size), its latency interpolated
linearly in the call's tokens between the measured rows, clamped to the first and last."""

from __future__ import annotations

from k3plan.evidence.gpu_moe import MoeTable, gpu_moe_tables


def moe_table(hardware: str, engine: str, shape: tuple[int, int, int, int, int]):
    """The table measured on ``hardware`` for ``engine``'s kernel at ``shape`` (hidden, an expert's intermediate,
    experts, top-k, the MoE group's TP size), else None."""
    for t in gpu_moe_tables():
        if (
            t.hardware == hardware
            and engine in t.engines
            and (t.hidden, t.intermediate, t.experts, t.top_k, t.moe_tp) == shape
        ):
            return t
    return None


def call_seconds(table: MoeTable, tokens: int) -> float:
    """One call's latency at ``tokens`` tokens: linear between the measured rows, clamped outside them."""
    rows = table.rows
    if tokens <= rows[0][0]:
        return rows[0][1] * 1e-3
    for (n0, ms0), (n1, ms1) in zip(rows, rows[1:], strict=False):
        if tokens <= n1:
            return (ms0 + (ms1 - ms0) * (tokens - n0) / (n1 - n0)) * 1e-3
    return rows[-1][1] * 1e-3
