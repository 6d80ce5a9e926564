"""Runtime formats -> compute dtype, inside the forward (so the compiler sees the dequantization).

mxfp4 (OCP MX): uint8 ``packed`` holds two E2M1 codes a byte, low nibble first; uint8 ``scale`` is
E8M0 (2^(s-127)) for each block of 32 inputs. fp8_block: e4m3 values times an f32 scale per
[128, 128] block. fp8_ds_mla cache entries (vLLM): 512 fp8 latent values, 4 f32 scales (one per
128), 64 bf16 rope values = 656 bytes a token. int4_g32 (compressed-tensors pack-quantized, symmetric): int32
``packed`` holds eight 4-bit values a word, lowest nibble first, each stored offset by 8 (unsigned; the torch_tpu
plugin's W4A16 method XORs 0x88888888 to make them signed); bf16 ``scale`` for each group of 32 inputs.
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


def mxfp4_dequant(packed: jax.Array, scale: jax.Array, dtype) -> jax.Array:
    """uint8 ``packed`` [..., in/2] + E8M0 ``scale`` [..., in/32] -> [..., in] in ``dtype``; the value array
    is written by one fusion. Output lane j reads byte j // 2 and scale j // 32 (repeats of the uint8
    inputs) and takes the low nibble where j is even, the high one where odd (a shift by 4 x parity),
    so there is no [..., in/2, 2] value array to reshape. The barrier keeps the repeats in uint8: without
    it the compiler moves exp2 ahead of the scale's repeat and writes the multiplier out in f32, a
    weight-sized broadcast. Deviceless tpu7x, one K3 expert weight [28, 3072, 3584] in f32 before a
    ragged_dot (jax 0.10.2, libtpu 0.0.42.1): temp 5.96 GiB with the earlier stack + reshape (two f32
    [.., in/2, 2] outputs and f32 relayout copies) -> 2.18 GiB (the 1.15 GiB weight + uint8 repeats);
    a 4-expert bf16 tile 714 -> 168 MiB. Equal bit for bit (tests/validate/test_expert_forms.py)."""
    n = packed.shape[-1] * 2
    lane = jax.lax.broadcasted_iota(jnp.uint8, (*packed.shape[:-1], n), packed.ndim - 1)
    codes = (jnp.repeat(packed, 2, axis=-1) >> ((lane & 1) * 4)) & 0xF
    scales = jnp.repeat(scale, 32, axis=-1)
    codes, scales = jax.lax.optimization_barrier((codes, scales))
    if scales.dtype == jnp.float32:  # mxfp4_f32scale: the multiplier itself (torchtpu-vllm's e8m0_to_fp32 at load)
        return e2m1(codes, dtype) * scales.astype(dtype)
    return e2m1(codes, dtype) * jnp.exp2(scales.astype(jnp.float32) - 127.0).astype(dtype)


def int4_dequant(packed: jax.Array, scale: jax.Array, dtype) -> jax.Array:
    """int32 ``packed`` [..., in/8] + bf16 ``scale`` [..., in/32] -> [..., in] in ``dtype``: output lane j takes
    nibble j % 8 of word j // 8 (a shift by 4 x (j % 8)), minus the offset 8, times scale j // 32; one fusion, as
    ``mxfp4_dequant`` writes its values (the repeats of the packed words and scales kept in their own dtypes)."""
    n = packed.shape[-1] * 8
    lane = jax.lax.broadcasted_iota(jnp.int32, (*packed.shape[:-1], n), packed.ndim - 1)
    nibbles = (jnp.repeat(packed, 8, axis=-1) >> ((lane & 7) * 4)) & 0xF
    scales = jnp.repeat(scale, 32, axis=-1)
    nibbles, scales = jax.lax.optimization_barrier((nibbles, scales))
    return (nibbles - 8).astype(dtype) * scales.astype(dtype)


def dequant(parts: dict, dtype) -> jax.Array:
    if "packed" in parts and parts["packed"].dtype == jnp.int32:  # int4_g32
        return int4_dequant(parts["packed"], parts["scale"], dtype)
    if "packed" in parts:
        return mxfp4_dequant(parts["packed"], parts["scale"], dtype)
    w = parts["w"]
    if "scale" in parts:  # fp8_block
        return (w.astype(jnp.float32) * fp8_block_scales(parts["scale"], w.shape)).astype(dtype)
    return w.astype(dtype)


def fp8_block_scales(scale: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """f32 ``scale`` [..., ceil(out/128), ceil(in/128)] -> [..., out, in]: element (i, j) reads block
    (i // 128, j // 128), a gather of the (replicated) scale at the weight's own indices, so the array is
    the weight's shape and shards as it does. The repeat-then-slice this replaces built the padded
    [.., 128 x blocks, ..] array first; where a sharded dim is not a whole number of blocks (a toy
    DeepSeek-V3's 64-wide shared expert: [128, 256] sliced to [64, 256], 8 rows a device at tp 8) XLA
    sharded the padded array and resharded its slice: 2 collective-permutes a tensor, in no engine's step
    (vLLM's block-FP8 GEMM reads a tile's scale where it runs). Equal bit for bit (tests/validate)."""
    rows = jax.lax.broadcasted_iota(jnp.int32, shape[-2:], 0) // 128
    cols = jax.lax.broadcasted_iota(jnp.int32, shape[-2:], 1) // 128
    return scale[..., rows, cols]


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
