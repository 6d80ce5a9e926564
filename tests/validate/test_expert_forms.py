"""The expert formulations compute the same MoE: dequantizing per tile (``tiled``) or per matmul
(``ragged``) instead of the whole layer at once (``layer``) changes memory, not the result. Checked
on 4 fake CPU devices, 8 experts (2 a device), top-2, with a dense float reference."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from k3plan.validate.experts import FORMS, local_experts
from k3plan.validate.quant import dequant

E, K, T, L, I, DEV = 8, 2, 6, 64, 32, 4


def _packed(rng, shape):
    """Random MXFP4 arrays [E, out, in/2] + scales 2^-6..2^-3 (E8M0 127 = 1.0)."""
    out, inn = shape
    return {"packed": jnp.asarray(rng.integers(0, 256, (E, out, inn // 2), dtype=np.uint8)),
            "scale": jnp.asarray(rng.integers(121, 125, (E, out, inn // 32), dtype=np.uint8))}


def _reference(z, ids, wts, w1p, w2p, w3p):
    w1, w2, w3 = (np.asarray(dequant(w, jnp.float32)) for w in (w1p, w2p, w3p))
    out = np.zeros_like(z)
    for t in range(T):
        for j in range(K):
            e = ids[t, j]
            g = w1[e] @ z[t]
            h = g / (1 + np.exp(-g)) * (w3[e] @ z[t])
            out[t] += wts[t, j] * (w2[e] @ h)
    return out


@pytest.mark.parametrize("form", FORMS)
def test_forms_equal_the_dense_reference(form, monkeypatch):
    import k3plan.validate.experts as ex

    monkeypatch.setattr(ex, "TILE_EXPERTS", 1)  # 2 local experts: two tiles, so the tile offset is exercised
    assert len(jax.devices("cpu")) >= DEV
    mesh = jax.make_mesh((DEV,), ("ep",), axis_types=(AxisType.Auto,), devices=jax.devices("cpu")[:DEV])
    rng = np.random.default_rng(0)
    z = rng.standard_normal((T, L)).astype(np.float32)
    ids = np.stack([rng.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
    wts = rng.random((T, K)).astype(np.float32)
    w1p, w3p, w2p = _packed(rng, (I, L)), _packed(rng, (I, L)), _packed(rng, (L, I))
    espec = P("ep", None, None)
    fn = jax.shard_map(lambda z_, i_, w_, a, b, c: local_experts(z_, i_, w_, a, b, c, axes=("ep",), act=jnp.float32,
                                                                  form=form),
                       mesh=mesh, in_specs=(P(), P(), P(), *({k: espec for k in w} for w in (w1p, w2p, w3p))),
                       out_specs=P(), check_vma=False)
    got = np.asarray(jax.jit(fn)(z, ids, wts, w1p, w2p, w3p))
    want = _reference(z, ids, wts, w1p, w2p, w3p)
    assert np.abs(want).max() > 1e-2, "the reference is not trivially zero"
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3 * np.abs(want).max())


def test_jax_native_runs_the_ragged_form_and_compiles(tiny_config):
    """The stack the real slice measured builds the porting study's graph; the tiny K3 compiles
    with it on fake CPU devices and its fp32 weights still equal the budget to the byte."""
    from k3plan.setup import make_setup
    from k3plan.validate.experts import form_for
    from k3plan.validate.run import plan_jobs, prepare_target, validate
    from k3plan.validate.targets import parse_target

    assert form_for("jax-native") == "ragged" and form_for("vllm-tpu") == "tiled"
    setup = make_setup(model=tiny_config, hardware="tpu-v7x", topology="2x2x1", tp=8, stack="jax-native")
    target = parse_target("cpu")
    prepare_target(target, setup)
    res = validate(setup=setup, target=target, jobs=plan_jobs(setup=setup, stage="both", tokens=[128], batch=2,
                                                               context=256))
    assert res.fits and res.stack == "jax-native"
    for r in res.results:
        w = next(t for t in r.terms if t.name == "weights")
        assert w.compiled_bytes == r.budget.weights_bytes
