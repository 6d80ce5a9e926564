"""A CPU stand-in with chunk_kda's and decode_kda's call signatures (k3plan probe kda-engine --kernel /
--decode-kernel): the test's kernels, not an engine's.

jnp recurrences of the same math (q, k l2-normalised in the kernel, the raw gate activated as
lower_bound x sigmoid(exp(A_log) (g + dt_bias)), one token at a time with lax.scan; decode adds the depthwise
conv over the carried rows and SiLU, and leaves the null slot 0 alone). Test data for
tests/probes/test_probe_kda_engine.py only."""

import jax
import jax.numpy as jnp

SOURCE = {"repo": "k3plan", "path": "tests/probes/kda_engine_standin.py", "commit": "test"}
LOCAL_EDITS = ["a jnp stand-in for the CPU test: lax.scan over tokens, no Pallas"]
# a sibling file named as a dependency, so the test sees the probe hash it (any sibling would do)
DEPENDENCIES = {"gmm_standin.py": {"repo": "k3plan", "path": "tests/probes/gmm_standin.py", "commit": "test"}}


def _gate(g, a_log, dt_bias, lower_bound):
    a = jnp.exp(a_log.astype(jnp.float32))[:, None]
    x = g.astype(jnp.float32) + dt_bias
    return lower_bound * jax.nn.sigmoid(a * x) if lower_bound is not None else -a * jax.nn.softplus(x)


def _unit(x):
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def _step(s, q, k, v, decay, beta):  # s [H, K, V]; q, k, decay [H, K]; v [H, V]; beta [H]
    s = s * decay[:, :, None]
    u = beta[:, None] * (v - jnp.einsum("hk,hkv->hv", k, s))
    s = s + k[:, :, None] * u[:, None, :]
    return s, jnp.einsum("hk,hkv->hv", q, s)


def chunk_kda(
    q,
    k,
    v,
    g,
    beta,
    *,
    A_log=None,
    dt_bias=None,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_gate_in_kernel=False,
    segment_ids=None,
    safe_gate=True,
    lower_bound=None,
    chunk_size=64,
    use_qk_l2norm_in_kernel=False,
    N_max=None,
):
    heads, _, tokens, d = q.shape
    scale = d**-0.5 if scale is None else scale
    qn, kn = (_unit(x[:, 0]) if use_qk_l2norm_in_kernel else x[:, 0].astype(jnp.float32) for x in (q, k))
    gate = _gate(g[:, 0].transpose(1, 0, 2), A_log, dt_bias.reshape(heads, d), lower_bound)  # [T, H, D]
    xs = (qn.transpose(1, 0, 2), kn.transpose(1, 0, 2), v[:, 0].astype(jnp.float32).transpose(1, 0, 2))
    xs = (*xs, jnp.exp(gate), beta[:, 0].astype(jnp.float32).transpose(1, 0))
    s0 = initial_state[0, 0].astype(jnp.float32)
    final, o = jax.lax.scan(lambda s, x: _step(s, *x), s0, xs)  # o [T, H, V]
    out = (scale * o).transpose(1, 0, 2)[:, None].astype(q.dtype)
    return out, (final[None, None] if output_final_state else None)


def decode_kda(
    mixed_qkv,
    g,
    beta,
    conv_state,
    conv_weight,
    state,
    a_log,
    dt_bias,
    state_indices,
    has_initial_state,
    *,
    lower_bound=None,
    compute_dtype=jnp.float32,
    scale=None,
    conv_state_dim_first=False,
    state_transposed=False,
):
    rows, heads, d = g.shape
    c = conv_weight.shape[0]
    scale = d**-0.5 if scale is None else scale
    x = mixed_qkv.reshape(rows, 3, heads, d).astype(jnp.float32)
    valid = state_indices > 0
    carried = (valid & (has_initial_state != 0))[:, None, None, None, None]
    prev = jnp.where(carried, conv_state[state_indices], 0.0)  # [rows, c-1, 3, H, D]
    w = conv_weight.astype(jnp.float32)
    conv = x * w[c - 1] + sum(prev[:, t] * w[t] for t in range(c - 1))
    conv = jax.nn.silu(conv)
    q, k, v = scale * _unit(conv[:, 0]), _unit(conv[:, 1]), conv[:, 2]
    decay = jnp.exp(_gate(g, a_log, dt_bias, lower_bound))  # [rows, H, D]
    s0 = jnp.where(carried[:, 0], state[state_indices], 0.0)
    s1, o = jax.vmap(_step)(s0, q, k, v, decay, beta.astype(jnp.float32))
    o = jnp.where(valid[:, None, None], o, 0.0).astype(mixed_qkv.dtype)
    new_conv = jnp.concatenate([prev[:, 1:], x[:, None]], axis=1)
    keep = valid[:, None, None, None, None]
    conv_state = conv_state.at[state_indices].set(jnp.where(keep, new_conv, conv_state[state_indices]))
    state = state.at[state_indices].set(jnp.where(keep[:, 0], s1, state[state_indices]))
    return o, conv_state, state
