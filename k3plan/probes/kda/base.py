"""The project's own JAX reference of KDA's gated delta rule (always available, fp32 state).

Per head, state S [Dk, Dv], per token (Kimi Linear eq. 1; FLA's naive_recurrent_kda):
    S_bar = diag(exp(g_t)) S_{t-1}                 g_t [Dk]: per-channel log decay (<= 0)
    u_t   = beta_t (v_t - S_bar^T k_t)             the delta-rule correction
    S_t   = S_bar + k_t u_t^T
    o_t   = scale * S_t^T q_t
Chunked form over a chunk of C tokens from state S0, with G_i = sum_{j<=i} g_j (cumulative in the
chunk), Qd_i = exp(G_i) q_i, Kd_i = exp(G_i) k_i, Ki_j = exp(-G_j) k_j:
    (I + A) U = diag(beta) (V - Kd S0),   A_ij = beta_i Kd_i . Ki_j   (j < i)
    O = scale (Qd S0 + tril(Qd Ki^T) U),  S_C = exp(G_C) * (S0 + Ki^T U)
Layout: [B, T, H, D]; beta [B, T, H].
"""

from __future__ import annotations

from typing import Any


def step(state: Any, q: Any, k: Any, v: Any, g: Any, beta: Any, *, scale: float) -> tuple[Any, Any]:
    """One token for all heads: state [..., H, Dk, Dv]; q, k, g [..., H, Dk]; v [..., H, Dv]; beta [..., H]."""
    import jax.numpy as jnp

    s = state * jnp.exp(g)[..., :, None]
    pred = jnp.einsum("...hk,...hkv->...hv", k, s)
    u = beta[..., None] * (v - pred)
    s = s + k[..., :, None] * u[..., None, :]
    return s, scale * jnp.einsum("...hk,...hkv->...hv", q, s)


def recurrent(q, k, v, g, beta, *, scale: float, initial_state=None):
    """lax.scan of `step` over T. Returns (o [B,T,H,Dv], final state [B,H,Dk,Dv])."""
    import jax
    import jax.numpy as jnp

    b, _, h, dk = q.shape
    s0 = jnp.zeros((b, h, dk, v.shape[-1]), jnp.float32) if initial_state is None else initial_state
    xs = [jnp.moveaxis(a.astype(jnp.float32), 1, 0) for a in (q, k, v, g, beta)]
    final, o = jax.lax.scan(lambda s, x: step(s, *x, scale=scale), s0, xs)
    return jnp.moveaxis(o, 0, 1), final


def chunked(q, k, v, g, beta, *, scale: float, chunk: int = 64, initial_state=None):
    """Chunk-parallel form (T a multiple of `chunk`); scan over chunks, matmuls inside."""
    import jax
    import jax.numpy as jnp

    b, t, h, dk = q.shape
    dv = v.shape[-1]
    n = t // chunk
    f32 = jnp.float32

    def split(a):  # [B, T, H, D] -> [N, B, H, C, D]
        a = a.astype(f32).reshape(b, n, chunk, h, *a.shape[3:])
        return jnp.moveaxis(jnp.moveaxis(a, 1, 0), 3, 2)

    qs, ks, vs, gs, bs = (split(a) for a in (q, k, v, g, beta))
    eye = jnp.eye(chunk, dtype=f32)
    strict = jnp.tril(jnp.ones((chunk, chunk), bool), -1)
    incl = jnp.tril(jnp.ones((chunk, chunk), bool))

    def one(s0, x):
        qc, kc, vc, gc, bc = x  # [B,H,C,Dk] ... bc [B,H,C]
        cum = jnp.cumsum(gc, axis=-2)
        qd, kd, ki = qc * jnp.exp(cum), kc * jnp.exp(cum), kc * jnp.exp(-cum)
        a = jnp.where(strict, bc[..., :, None] * jnp.einsum("bhik,bhjk->bhij", kd, ki), 0.0)
        rhs = bc[..., None] * (vc - jnp.einsum("bhck,bhkv->bhcv", kd, s0))
        u = jax.scipy.linalg.solve_triangular(eye + a, rhs, lower=True, unit_diagonal=True)
        att = jnp.where(incl, jnp.einsum("bhik,bhjk->bhij", qd, ki), 0.0)
        o = scale * (jnp.einsum("bhck,bhkv->bhcv", qd, s0) + att @ u)
        s1 = jnp.exp(cum[..., -1, :])[..., None] * (s0 + jnp.einsum("bhck,bhcv->bhkv", ki, u))
        return s1, o

    s0 = jnp.zeros((b, h, dk, dv), f32) if initial_state is None else initial_state
    final, o = jax.lax.scan(one, s0, (qs, ks, vs, gs, bs))  # o [N, B, H, C, Dv]
    return jnp.moveaxis(o, 2, 3).transpose(1, 0, 2, 3, 4).reshape(b, t, h, dv), final


def inputs(*, batch: int, seq_len: int, heads: int, head_dim: int, seed: int = 0, dtype: str = "float32"):
    """Representative inputs: unit-norm q, k; log decays in [-0.1, -0.001]; beta in (0, 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (batch, seq_len, heads, head_dim)

    def unit(a):
        return a / np.linalg.norm(a, axis=-1, keepdims=True)

    q, k = unit(rng.standard_normal(shape)), unit(rng.standard_normal(shape))
    v = rng.standard_normal(shape) * 0.5
    g = -np.exp(rng.uniform(np.log(1e-3), np.log(0.1), shape))
    beta = 1.0 / (1.0 + np.exp(-rng.standard_normal((batch, seq_len, heads))))
    return tuple(a.astype(dtype) for a in (q, k, v, g, beta))
