"""Routed experts dispatched by all-to-all (the stacks whose ``collectives.experts`` is all_to_all:
SGLang with DeepEP, dp-attention), one device's part inside ``shard_map`` over the expert axes.

The tokens are split over the EP group (a device holds ``T`` rows of the layer's tokens; dp-attention's
are already its DP group's, TP-replicated tokens are a free slice); each device

1. dispatch: writes each of its (token, expert) pairs into the send buffer of the expert's device,
   the local expert's id riding in the row (4 bytes in the payload dtype, so the dispatch stays ONE
   collective, as DeepEP's dispatch carries the top-k ids with the tokens), and exchanges the buffers
   with one ``jax.lax.all_to_all``;
2. runs its local experts over what it received (k3plan.validate.experts.expert_ffn: sorted by
   local expert, three ``ragged_dot``, dequantized as the stack's formulation says);
3. combine: sends each row's output back with a second ``all_to_all``, to the slot it came from,
   and sums each token's k outputs with its routing weights (applied where the weights live, at the
   source, so they need not travel).

Payload dtype: the stack's ``collectives.dispatch_dtype`` both ways, as the op list counts them
(k3plan.step.ops.collective_ops ``moe.dispatch`` / ``moe.combine``).

Two exchanges, by the backend compiled for:

- CPU (validate's census and tests): fixed-capacity ``jax.lax.all_to_all``. jax 0.10.2's
  ``ragged_all_to_all`` lowers, but XLA:CPU cannot compile it ("UNIMPLEMENTED: HLO opcode
  `ragged-all-to-all` is not supported by XLA:CPU ThunkEmitter"). The buffers are dropless: each
  destination's holds all ``T x k`` pairs of a device (every pair may route to one device), so a call
  moves ``ep`` times the op list's mean share; the counts -- one dispatch and one combine a MoE
  layer -- are the engine's.
- TPU targets (deviceless compile): ``jax.lax.ragged_all_to_all``, only the rows that exist, after a
  small all_to_all of the per-destination counts (``_ragged``); the collective check names that
  counts exchange (k3plan.validate.collective_check, ``dispatch-counts-exchange``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from k3plan.validate.experts import expert_ffn

ID_BYTES = 4  # the local expert id of a dispatched row, int32, bitcast into the payload dtype


def _encode_ids(ids, wire):
    """int32 [R] -> [R, 4 / itemsize] in ``wire`` (bit-exact)."""
    size = jnp.dtype(wire).itemsize
    b = jax.lax.bitcast_convert_type(ids.astype(jnp.int32), jnp.uint8)  # [R, 4]
    if size == 1:
        return jax.lax.bitcast_convert_type(b, wire)
    return jax.lax.bitcast_convert_type(b.reshape(ids.shape[0], ID_BYTES // size, size), wire)


def _decode_ids(cols):
    b = jax.lax.bitcast_convert_type(cols, jnp.uint8).reshape(cols.shape[0], ID_BYTES)
    return jax.lax.bitcast_convert_type(b, jnp.int32)


def a2a_experts(
    z, ids, wts, w1p, w2p, w3p, *, axes: tuple[str, ...], n: int, act, form: str, wire, ragged: bool = False
):
    """z [T, latent] this device's rows, ids / wts [T, k] (id -1: a padding row) -> [T, latent].
    ``ragged``: ``jax.lax.ragged_all_to_all`` (TPU targets) instead of the fixed-capacity all_to_all."""
    e_loc = next(iter(w1p.values())).shape[0]
    t, k = ids.shape
    cap = t * k  # dropless: a device's every pair fits one destination's buffer
    flat = ids.reshape(-1)
    valid = flat >= 0
    dest = jnp.where(valid, flat // e_loc, 0)
    onehot = (dest[:, None] == jnp.arange(n)[None, :]) & valid[:, None]
    pos = jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, dest[:, None], axis=1)[:, 0]
    slot = jnp.where(valid, dest * cap + pos, n * cap)  # past the end: dropped by the scatter
    tok = jnp.arange(t * k) // k
    rows = jnp.zeros((n * cap, z.shape[1]), wire).at[slot].set(z[tok].astype(wire), mode="drop")
    lid = jnp.full((n * cap,), e_loc, jnp.int32).at[slot].set(flat - dest * e_loc, mode="drop")
    send = jnp.concatenate([rows, _encode_ids(lid, wire)], axis=1)
    ffn = functools.partial(_local_ffn, latent=z.shape[1], e_loc=e_loc, w1p=w1p, w2p=w2p, w3p=w3p, act=act, form=form)
    if ragged:
        got = _ragged(send, slot, valid, dest, ffn=ffn, axes=axes, n=n, cap=cap, wire=wire, e_loc=e_loc)
    else:
        recv = jax.lax.all_to_all(send, axes, 0, 0, tiled=True)  # dispatch: [n sources x cap, latent + id]
        got = jax.lax.all_to_all(ffn(recv).astype(wire), axes, 0, 0, tiled=True)  # combine: back to each slot
    w = (wts.reshape(-1) * valid).astype(act)
    out = got[jnp.minimum(slot, n * cap - 1)].astype(act) * w[:, None]
    return out.reshape(t, k, -1).sum(axis=1)


def _local_ffn(recv, *, latent: int, e_loc: int, w1p, w2p, w3p, act, form: str):
    """The received rows through this device's experts, back in the received order."""
    key = jnp.clip(_decode_ids(recv[:, latent:]), 0, e_loc)  # e_loc: an empty slot, sorted last
    order = jnp.argsort(key)
    sizes = jnp.bincount(key, length=e_loc + 1)[:e_loc].astype(jnp.int32)
    y = expert_ffn(recv[order, :latent].astype(act), sizes, w1p, w2p, w3p, act=act, form=form)
    return jnp.zeros_like(y).at[order].set(y)


def _ragged(send, slot, valid, dest, *, ffn, axes, n: int, cap: int, wire, e_loc: int):
    """The same exchange with ``ragged_all_to_all``: each destination's pairs sent contiguously, only
    the rows that exist. Its receivers need the sizes first, so a small all_to_all of n int32 counts
    goes ahead of the dispatch, as DeepEP's notify_dispatch exchanges the token counts per rank before
    its dispatch. Each source's rows land in the region ``source x cap`` of the receiver (and the
    combine's in ``expert device x cap`` of the source, i.e. at each pair's slot), so no offsets need
    exchanging. Returns the combined rows by slot, as the fixed-capacity exchange does."""
    latent = send.shape[1] - ID_BYTES // jnp.dtype(wire).itemsize
    sizes = jnp.bincount(jnp.where(valid, dest, n), length=n + 1)[:n].astype(jnp.int32)
    offsets = (jnp.cumsum(sizes) - sizes).astype(jnp.int32)
    # the pairs by destination (slot = destination x cap + rank), contiguous: the valid slots sorted
    packed = send[jnp.minimum(jnp.sort(jnp.where(valid, slot, n * cap)), n * cap - 1)]
    recv_sizes = jax.lax.all_to_all(sizes, axes, 0, 0, tiled=True)  # the counts exchange
    me = jax.lax.axis_index(axes).astype(jnp.int32)
    region = jnp.full((n,), me * cap, jnp.int32)
    starts = jnp.arange(n, dtype=jnp.int32) * cap
    empty = jnp.concatenate(
        [jnp.zeros((n * cap, latent), wire), _encode_ids(jnp.full((n * cap,), e_loc, jnp.int32), wire)], axis=1
    )
    recv = jax.lax.ragged_all_to_all(packed, empty, offsets, sizes, region, recv_sizes, axis_name=axes)
    y = ffn(recv).astype(wire)
    return jax.lax.ragged_all_to_all(y, jnp.zeros_like(y), starts, recv_sizes, region, sizes, axis_name=axes)
