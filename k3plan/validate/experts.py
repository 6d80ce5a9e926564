"""Routed experts on one device (inside ``shard_map``), in the formulations the stacks run.

All three start the same way (group_sort): the (token, expert) pairs whose expert lives on this
device are sorted by local expert, the others go last; ``sizes`` counts each local expert's rows;
``xs`` = the latent of each pair's token, [tokens x top_k, latent]. Then gate/up/down as three
``jax.lax.ragged_dot`` calls and a scatter-add combine back to [tokens, latent]. They differ in
where the MXFP4 experts are dequantized, which is what decides the temp:

- ``layer`` (k3plan's vllm-tpu graph until issue 15): an optimization barrier ties the packed
  experts to this layer's tokens, then all of the layer's local experts are dequantized to the
  activation dtype at once (K3, TP=32: 28 experts x 3 x 3584 x 3072 x 2 B = 1.85 GB in bf16).
- ``ragged`` (the porting study's jax-native graph, k3-facts §6 / issue 15): each ragged_dot takes
  its own dequantized weight as an operand, no barrier: the compiler may fuse the dequantization
  into the matmul and need not hold w1, w3 and w2 at once. The live buffers at the peak are the
  five [tokens x top_k, *] arrays (xs, gate, up, h, out).
- ``tiled`` (a fused MXFP4 MoE kernel, e.g. tpu-inference's fused_moe / vLLM's grouped GEMM):
  a scan over tiles of ``tile`` local experts dequantizes one tile at a time; each tile's
  ragged_dot gets an extra leading group of zeros for the rows of earlier tiles (rows after the
  tile are outside the groups, which ragged_dot leaves zero), and the tile's output is
  accumulated. The weights live at once are one tile, not the layer.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from k3plan.step.live import TILE_EXPERTS, form_for
from k3plan.validate.quant import dequant

FORMS = ("layer", "ragged", "tiled")
__all__ = ["FORMS", "TILE_EXPERTS", "form_for", "local_experts"]


def _rhs(wp: dict, act) -> jax.Array:
    return jnp.swapaxes(dequant(wp, act), 1, 2)  # [E, in, out]


def _group_sort(z, ids, e_loc: int, axes: tuple[str, ...]):
    e0 = jax.lax.axis_index(axes) * e_loc if axes else 0
    k = ids.shape[1]
    local = ids - e0
    valid = (local >= 0) & (local < e_loc)
    key = jnp.where(valid, local, e_loc).reshape(-1)
    order = jnp.argsort(key)
    sizes = jnp.bincount(key, length=e_loc + 1)[:e_loc].astype(jnp.int32)
    return order, order // k, valid, sizes


def _tiled(xs, sizes, w1p, w2p, w3p, *, act, tile: int):
    e_loc = sizes.shape[0]
    tile = math.gcd(e_loc, tile)
    starts = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(sizes)[:-1].astype(jnp.int32)])

    def body(acc, j):
        e = j * tile
        g = jnp.concatenate([starts[e][None], jax.lax.dynamic_slice_in_dim(sizes, e, tile)])

        def rhs(wp):
            w = _rhs({k: jax.lax.dynamic_slice_in_dim(v, e, tile, 0) for k, v in wp.items()}, act)
            return jnp.concatenate([jnp.zeros((1, *w.shape[1:]), w.dtype), w])

        h = jax.nn.silu(jax.lax.ragged_dot(xs, rhs(w1p), g)) * jax.lax.ragged_dot(xs, rhs(w3p), g)
        return acc + jax.lax.ragged_dot(h, rhs(w2p), g), None

    out_rows = (w2p["w"] if "w" in w2p else w2p["packed"]).shape[1]  # w2 is [E, latent, ...]; never the scale's
    acc0 = jnp.zeros((xs.shape[0], out_rows), act)
    acc, _ = jax.lax.scan(body, acc0, jnp.arange(e_loc // tile, dtype=jnp.int32))
    return acc


def local_experts(z, ids, wts, w1p, w2p, w3p, *, axes: tuple[str, ...], act, form: str, reduce: bool = True):
    """This device's experts over all tokens' (token, expert) pairs -> [tokens, latent], summed
    over the expert axes (``reduce=False``: this device's partial sum, for the caller to reduce)."""
    e_loc = next(iter(w1p.values())).shape[0]
    order, tok, valid, sizes = _group_sort(z, ids, e_loc, axes)
    y = expert_ffn(z[tok], sizes, w1p, w2p, w3p, act=act, form=form)
    y = y * (wts.reshape(-1)[order] * valid.reshape(-1)[order]).astype(y.dtype)[:, None]
    out = jnp.zeros_like(z).at[tok].add(y)
    return jax.lax.psum(out, axes) if axes and reduce else out


def expert_ffn(xs, sizes, w1p, w2p, w3p, *, act, form: str):
    """gate/up/down of this device's experts over rows ``xs`` sorted by local expert (``sizes`` rows
    each; rows past the groups come out zero), dequantized as ``form`` says."""
    if form == "layer":
        # tie the packed experts to this layer's tokens: dequantize here, not hoisted ahead of the layer
        xs, w1p, w2p, w3p = jax.lax.optimization_barrier((xs, w1p, w2p, w3p))
        w1, w3, w2 = _rhs(w1p, act), _rhs(w3p, act), _rhs(w2p, act)
        h = jax.nn.silu(jax.lax.ragged_dot(xs, w1, sizes)) * jax.lax.ragged_dot(xs, w3, sizes)
        y = jax.lax.ragged_dot(h, w2, sizes)
    elif form == "ragged":
        h = jax.nn.silu(jax.lax.ragged_dot(xs, _rhs(w1p, act), sizes)) * jax.lax.ragged_dot(xs, _rhs(w3p, act), sizes)
        y = jax.lax.ragged_dot(h, _rhs(w2p, act), sizes)
    elif form == "tiled":
        y = _tiled(xs, sizes, w1p, w2p, w3p, act=act, tile=TILE_EXPERTS)
    else:
        raise ValueError(f"expert formulation {form!r}: expected one of {FORMS}")
    return y
