"""Runtime formats -> compute dtype, inside the forward (so the compiler sees the dequantization).

mxfp4 (OCP MX): uint8 ``packed`` holds two E2M1 codes a byte, low nibble first; uint8 ``scale`` is
E8M0 (2^(s-127)) for each block of 32 inputs. fp8_block: e4m3 values times an f32 scale per
[128, 128] block. fp8_ds_mla cache entries (vLLM): 512 fp8 latent values, 4 f32 scales (one per
128), 64 bf16 rope values = 656 bytes a token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def e2m1(codes: jax.Array, dtype) -> jax.Array:
    """E2M1 code (sign, 2 exponent bits, 1 mantissa bit) -> value, elementwise (fuses; no gather):
    exponent 0: 0.5 m; else 2^(e-1) (1 + 0.5 m). Equals the table E2M1[code]."""
    e = ((codes >> 1) & 3).astype(jnp.float32)
    m = (codes & 1).astype(jnp.float32)
    mag = jnp.where(e == 0, 0.5 * m, jnp.exp2(e - 1.0) * (1.0 + 0.5 * m))
    return jnp.where((codes & 8) != 0, -mag, mag).astype(dtype)


def dequant(parts: dict, dtype) -> jax.Array:
    if "packed" in parts:
        packed, scale = parts["packed"], parts["scale"]
        codes = jnp.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
        vals = e2m1(codes, dtype)
        mult = jnp.exp2(scale.astype(jnp.float32) - 127.0).astype(dtype)
        blocks = vals.reshape(*scale.shape, 32) * mult[..., None]
        return blocks.reshape(vals.shape)
    w = parts["w"]
    if "scale" in parts:  # fp8_block
        s = parts["scale"]
        full = jnp.repeat(jnp.repeat(s, 128, axis=-2), 128, axis=-1)[..., : w.shape[-2], : w.shape[-1]]
        return (w.astype(jnp.float32) * full).astype(dtype)
    return w.astype(dtype)


def ds_mla_encode(entry: jax.Array, latent: int) -> jax.Array:
    """[..., latent + rope] -> uint8 [..., 656]."""
    c, r = entry[..., :latent].astype(jnp.float32), entry[..., latent:]
    groups = c.reshape(*c.shape[:-1], latent // 128, 128)
    scale = jnp.maximum(jnp.max(jnp.abs(groups), axis=-1), 1e-12) / 448.0
    q = (groups / scale[..., None]).astype(jnp.float8_e4m3fn).reshape(c.shape)
    parts = [
        jax.lax.bitcast_convert_type(q, jnp.uint8),
        jax.lax.bitcast_convert_type(scale, jnp.uint8).reshape(*c.shape[:-1], -1),
        jax.lax.bitcast_convert_type(r.astype(jnp.bfloat16), jnp.uint8).reshape(*c.shape[:-1], -1),
    ]
    return jnp.concatenate(parts, axis=-1)


def ds_mla_decode(raw: jax.Array, latent: int, rope: int, dtype) -> jax.Array:
    """uint8 [..., 656] -> [..., latent + rope] in ``dtype``."""
    lead = raw.shape[:-1]
    ns = latent // 128
    q = jax.lax.bitcast_convert_type(raw[..., :latent], jnp.float8_e4m3fn).astype(jnp.float32)
    s = jax.lax.bitcast_convert_type(raw[..., latent : latent + 4 * ns].reshape(*lead, ns, 4), jnp.float32)
    r = jax.lax.bitcast_convert_type(raw[..., latent + 4 * ns :].reshape(*lead, rope, 2), jnp.bfloat16)
    c = (q.reshape(*lead, ns, 128) * s[..., None]).reshape(*lead, latent)
    return jnp.concatenate([c.astype(dtype), r.astype(dtype)], axis=-1)
