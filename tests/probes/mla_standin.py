"""A CPU stand-in with mla_ragged_paged_attention's call signature (k3plan probe mla-engine --kernel): the test's
kernel, not an engine's.

A jnp attention of the same math over one sequence's pages (token j of a page at [page, j // packing,
j % packing], the latent row then the rope dims), the new tokens written at the context's end, causal; the block
sizes are accepted and ignored. No Pallas. Test data for tests/probes/test_probe_mla_engine.py only."""

import jax
import jax.numpy as jnp

SOURCE = {"repo": "k3plan", "path": "tests/probes/mla_standin.py", "commit": "test"}
LOCAL_EDITS = ["a jnp stand-in for the CPU test: no Pallas, one sequence"]


def mla_ragged_paged_attention(
    ql_nope,
    q_pe,
    new_kv_c,
    new_k_pe,
    cache_kv,
    kv_lens,
    page_indices,
    cu_q_lens,
    distribution,
    *,
    sm_scale=1.0,
    num_kv_pages_per_block=None,
    num_queries_per_block=None,
    vmem_limit_bytes=None,
    decode_batch_size=1,
):
    heads, rows, lkv = ql_nope.shape
    rope = q_pe.shape[-1]
    _, per_packing, packing, dim = cache_kv.shape
    flat = cache_kv[page_indices].reshape(-1, dim).astype(jnp.float32)  # the sequence's tokens in order
    context, real = kv_lens[0], cu_q_lens[1]
    start = context - real
    pos = jnp.arange(flat.shape[0])
    new = jnp.concatenate([new_kv_c, new_k_pe, jnp.zeros((rows, dim - lkv - rope), new_kv_c.dtype)], axis=-1).astype(
        jnp.float32
    )
    idx = pos - start
    mine = (idx >= 0) & (idx < real)
    keys = jnp.where(mine[:, None], new[jnp.clip(idx, 0, rows - 1)], flat)
    s = jnp.einsum("htd,kd->htk", ql_nope.astype(jnp.float32), keys[:, :lkv])
    s = s + jnp.einsum("thd,kd->htk", q_pe.astype(jnp.float32), keys[:, lkv : lkv + rope])
    qpos = start + jnp.arange(rows)
    ok = (pos[None, None, :] <= qpos[None, :, None]) & (pos[None, None, :] < context)
    p = jax.nn.softmax(jnp.where(ok, s * sm_scale, -jnp.inf), axis=-1)
    out = jnp.einsum("htk,kd->htd", p, keys[:, :lkv])
    out = jnp.where((jnp.arange(rows) < real)[None, :, None], out, 0.0).astype(ql_nope.dtype)
    written = keys.astype(cache_kv.dtype).reshape(-1, per_packing, packing, dim)
    return out, cache_kv.at[page_indices].set(written)
