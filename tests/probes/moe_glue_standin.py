"""A CPU stand-in with moe_glue's call signature (k3plan probe moe-glue --kernel): the test's glue, not an
engine's. Stable sort by local expert id (non-local rows last), gather for the permute, a scatter-add for the
combine. Test data for tests/probes/test_probe_moe_glue.py only."""

import jax.numpy as jnp

SOURCE = {"repo": "k3plan", "path": "tests/probes/moe_glue_standin.py", "commit": "test"}
LOCAL_EDITS = ["a jnp stand-in for the CPU test: gather and scatter-add, no one-hot matmuls"]


def moe_glue(hidden, gmm2_res, topk_weights, topk_ids, experts_start, *, topk, local_num_experts, **_):
    tokens = hidden.shape[0]
    local = topk_ids.reshape(-1) - experts_start
    valid = (local >= 0) & (local < local_num_experts)
    keys = jnp.where(valid, local, local_num_experts)
    order = jnp.argsort(keys, stable=True)
    token_of = jnp.repeat(jnp.arange(tokens), topk)
    x = hidden[token_of[order]]
    count = valid.sum()
    pos = jnp.zeros_like(order).at[order].set(jnp.arange(order.size))
    rows = jnp.where((jnp.arange(gmm2_res.shape[0]) < count)[:, None], gmm2_res, 0).astype(jnp.float32)
    w = jnp.where(valid, topk_weights.reshape(-1).astype(hidden.dtype).astype(jnp.float32), 0.0)
    out = jnp.zeros((tokens, hidden.shape[1]), jnp.float32).at[token_of].add(w[:, None] * rows[pos])
    sizes = jnp.zeros((local_num_experts + 1,), jnp.int32).at[keys].add(1)[:local_num_experts]
    return out.astype(hidden.dtype), x, sizes
