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
    return {
        "packed": jnp.asarray(rng.integers(0, 256, (E, out, inn // 2), dtype=np.uint8)),
        "scale": jnp.asarray(rng.integers(121, 125, (E, out, inn // 32), dtype=np.uint8)),
    }


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
    fn = jax.shard_map(
        lambda z_, i_, w_, a, b, c: local_experts(z_, i_, w_, a, b, c, axes=("ep",), act=jnp.float32, form=form),
        mesh=mesh,
        in_specs=(P(), P(), P(), *({k: espec for k in w} for w in (w1p, w2p, w3p))),
        out_specs=P(),
        check_vma=False,
    )
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

    assert form_for("jax-native") == "ragged" and form_for("vllm-tpu") == "tiled" and form_for("sglang") == "layer"
    setup = make_setup(model=tiny_config, hardware="tpu-v7x", topology="2x2x1", tp=8, stack="jax-native")
    target = parse_target("cpu")
    prepare_target(target, setup)
    res = validate(
        setup=setup, target=target, jobs=plan_jobs(setup=setup, stage="both", tokens=[128], batch=2, context=256)
    )
    assert res.fits and res.stack == "jax-native"
    for r in res.results:
        w = next(t for t in r.terms if t.name == "weights")
        assert w.compiled_bytes == r.budget.weights_bytes


def _dequant_stacked(packed, scale, dtype):
    """The MXFP4 dequantization k3plan compiled before issue 15's one-fusion form: nibbles stacked as
    a trailing axis, reshaped, then the E8M0 multiplier per block of 32 through a reshape."""
    from k3plan.validate.quant import e2m1

    codes = jnp.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
    vals = e2m1(codes, dtype)
    mult = jnp.exp2(scale.astype(jnp.float32) - 127.0).astype(dtype)
    return (vals.reshape(*scale.shape, 32) * mult[..., None]).reshape(vals.shape)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_one_fusion_dequant_equals_the_stacked_one_bit_for_bit(dtype):
    """Every byte value and every E8M0 scale (0 -> 2^-127, 255 -> inf, so 0 x inf NaNs too): the same
    bits in both dtypes, and low nibble first (byte 0x21 -> 0.5, 1.0 at scale 127)."""
    rng = np.random.default_rng(1)
    bits = {jnp.float32: jnp.uint32, jnp.bfloat16: jnp.uint16}[dtype]
    packed = rng.integers(0, 256, (3, 5, 128), dtype=np.uint8)
    packed[0, 0] = np.arange(128, dtype=np.uint8) * 2 + 1  # with the rest, every byte value occurs
    scale = rng.integers(0, 256, (3, 5, 8), dtype=np.uint8)
    scale[0, :] = np.arange(40, dtype=np.uint8).reshape(5, 8) + np.uint8(216)  # up to 255
    scale[1, :] = np.arange(40, dtype=np.uint8).reshape(5, 8)  # down to 0
    got = jax.jit(lambda p, s: dequant({"packed": p, "scale": s}, dtype))(packed, scale)
    want = jax.jit(lambda p, s: _dequant_stacked(p, s, dtype))(packed, scale)
    assert got.shape == (3, 5, 256) and got.dtype == dtype
    np.testing.assert_array_equal(
        np.asarray(jax.lax.bitcast_convert_type(got, bits)), np.asarray(jax.lax.bitcast_convert_type(want, bits))
    )
    one = dequant({"packed": jnp.full((1, 16), 0x21, jnp.uint8), "scale": jnp.full((1, 1), 127, jnp.uint8)}, dtype)
    assert np.asarray(one, np.float32)[0, :4].tolist() == [0.5, 1.0, 0.5, 1.0]


def test_int4_g32_dequant_matches_a_numpy_reference():
    """Kimi-K2.6's experts (compressed-tensors pack-quantized int4, group 32): word j // 8, nibble j % 8 lowest first,
    stored offset by 8, times the bf16 scale of its 32-group; every nibble value in every position."""
    rng = np.random.default_rng(2)
    packed = rng.integers(-(2**31), 2**31, (2, 3, 16), dtype=np.int64).astype(np.int32)  # 128 inputs a row
    packed[0, 0, :2] = np.array([0x76543210, 0xFEDCBA98 - 2**32], dtype=np.int64).astype(
        np.int32
    )  # nibbles 0..15 in order
    scale = rng.uniform(-2, 2, (2, 3, 4)).astype(np.float32)
    scale_bf16 = np.asarray(jnp.asarray(scale, jnp.bfloat16).astype(jnp.float32))
    nib = (packed.astype(np.int64)[..., :, None] >> (4 * np.arange(8))) & 0xF
    want = (nib.reshape(2, 3, 128) - 8) * np.repeat(scale_bf16, 32, axis=-1)
    got = jax.jit(lambda p, s: dequant({"packed": p, "scale": s}, jnp.float32))(
        packed, jnp.asarray(scale, jnp.bfloat16)
    )
    assert got.shape == (2, 3, 128) and got.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(got), want.astype(np.float32))
    assert np.asarray(got)[0, 0, :16].tolist() == ((np.arange(16) - 8) * scale_bf16[0, 0, 0]).tolist()
