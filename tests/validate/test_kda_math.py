"""The chunked gated delta rule (prefill) equals the one-step recurrence (decode)."""

from __future__ import annotations

import numpy as np


def test_chunked_equals_recurrent():
    import jax
    import jax.numpy as jnp

    from k3plan.validate.layers import gdr_chunked, gdr_step, l2norm

    rng = np.random.default_rng(0)
    b, n, h, d = 2, 32, 2, 8
    q = l2norm(jnp.asarray(rng.normal(size=(b, n, h, d)), jnp.float32))
    k = l2norm(jnp.asarray(rng.normal(size=(b, n, h, d)), jnp.float32))
    v = jnp.asarray(rng.normal(size=(b, n, h, d)), jnp.float32)
    g = -jnp.asarray(rng.uniform(0.0, 0.3, size=(b, n, h, d)), jnp.float32)
    beta = jnp.asarray(rng.uniform(0.1, 0.9, size=(b, n, h)), jnp.float32)
    S0 = jnp.asarray(rng.normal(size=(b, h, d, d)) * 0.1, jnp.float32)
    o_c, S_c = jax.jit(lambda *a: gdr_chunked(*a, chunk=8))(q, k, v, g, beta, S0)
    S, outs = S0, []
    for t in range(n):
        o, S = gdr_step(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], S)
        outs.append(o)
    np.testing.assert_allclose(np.asarray(o_c), np.stack([np.asarray(o) for o in outs], 1), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(np.asarray(S_c), np.asarray(S), rtol=2e-4, atol=2e-4)


def test_mxfp4_dequant_known_values():
    import jax.numpy as jnp

    from k3plan.validate.quant import dequant

    # codes 1 (0.5) low nibble and 15 (-6) high nibble; scale 128 -> x2
    packed = jnp.full((1, 16), 0xF1, jnp.uint8)
    scale = jnp.full((1, 1), 128, jnp.uint8)
    w = np.asarray(dequant({"packed": packed, "scale": scale}, jnp.float32))
    assert w.shape == (1, 32)
    np.testing.assert_array_equal(w[0, :4], [1.0, -12.0, 1.0, -12.0])


def test_e2m1_arithmetic_equals_the_table():
    import jax.numpy as jnp

    from k3plan.validate.quant import E2M1, e2m1

    got = np.asarray(e2m1(jnp.arange(16, dtype=jnp.uint8), jnp.float32))
    np.testing.assert_array_equal(got, np.asarray(E2M1, np.float32))
