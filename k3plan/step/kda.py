"""KDA's arithmetic a token (the probe and the speed model count it alike)."""

from __future__ import annotations


def kda_flops_per_token(*, path: str, heads: int, dk: int, dv: int, chunk: int) -> float:
    if path == "recurrent":
        return heads * 8.0 * dk * dv  # decay, k^T S, rank-1 update, q^T S
    return heads * (4.0 * chunk * dk + 3.0 * chunk * dv + 6.0 * dk * dv)
