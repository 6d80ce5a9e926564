"""Pallas single-step KDA decode: one token, fp32 state [H, Dk, Dv] in and out (aliased), no
padding of the token to a chunk (the kernel the porting study found missing).

Grid over blocks of `heads_per_block` heads. Vectors are passed as rows [H, 1, D] for the
mat-vecs and as columns [H, Dk, 1] for the decay and the rank-1 update, so the kernel needs no
in-kernel transposes (block shapes keep their last two dims whole, as Mosaic requires).
"""

from __future__ import annotations

from typing import Any


def _kernel(s_ref, q_ref, k_ref, kcol_ref, v_ref, gcol_ref, b_ref, o_ref, s_out_ref, *, scale: float):
    import jax.numpy as jnp
    from jax.lax import Precision

    f32, hi = jnp.float32, Precision.HIGHEST  # fp32 state: the mat-vecs in full fp32 (not one bf16 pass)
    s = s_ref[...] * jnp.exp(gcol_ref[...])  # [hb, Dk, Dv] * [hb, Dk, 1]
    pred = jnp.einsum("hqk,hkv->hqv", k_ref[...], s, preferred_element_type=f32, precision=hi)  # [hb, 1, Dv]
    u = b_ref[...] * (v_ref[...] - pred)  # [hb, 1, 1] * [hb, 1, Dv]
    s = s + kcol_ref[...] * u  # rank-1 update
    s_out_ref[...] = s
    o_ref[...] = scale * jnp.einsum("hqk,hkv->hqv", q_ref[...], s, preferred_element_type=f32, precision=hi)


def decode_step(state, q, k, v, g, beta, *, scale: float, heads_per_block: int, interpret: bool):
    """state [H,Dk,Dv] fp32; q, k, g [H,Dk]; v [H,Dv]; beta [H] -> (new state, o [H,Dv])."""
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    h, dk, dv = state.shape
    f32 = jnp.float32
    row = lambda a: a.astype(f32)[:, None, :]  # noqa: E731
    col = lambda a: a.astype(f32)[:, :, None]  # noqa: E731
    hb = heads_per_block

    def spec(*tail):
        return pl.BlockSpec((hb, *tail), lambda i: (i,) + (0,) * len(tail))

    o, new_state = pl.pallas_call(
        functools.partial(_kernel, scale=scale),
        out_shape=(jax.ShapeDtypeStruct((h, 1, dv), f32), jax.ShapeDtypeStruct((h, dk, dv), f32)),
        grid=(h // hb,),
        in_specs=[spec(dk, dv), spec(1, dk), spec(1, dk), spec(dk, 1), spec(1, dv), spec(dk, 1), spec(1, 1)],
        out_specs=(spec(1, dv), spec(dk, dv)),
        input_output_aliases={0: 1},
        interpret=interpret,
    )(state, row(q), row(k), col(k), row(v), col(g), beta.astype(f32)[:, None, None])
    return new_state, o[:, 0, :]


def build(*, args: tuple, scale: float, heads_per_block: int, interpret: bool, backend: str) -> Any:
    """(compiled single step, the traced step for probes/loop.py's program)."""
    import jax

    if not interpret and backend not in ("tpu", "gpu"):
        raise NotImplementedError(f"native Pallas lowering needs a TPU or GPU; backend is {backend}")
    fn = lambda *a: decode_step(*a, scale=scale, heads_per_block=heads_per_block, interpret=interpret)  # noqa: E731
    return jax.jit(fn).lower(*args).compile(), fn
