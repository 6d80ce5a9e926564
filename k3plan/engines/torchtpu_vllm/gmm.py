"""The MXU rows the torch_tpu plugin's grouped-matmul kernel computes for one expert group: the rows the router
sends it, padded to the kernel's row tiling (a stack's ``experts.gmm_tile`` rule, ``engines.stack.GmmTile``;
k3plan.step.gmm applies it to a stack's expert tensors).

``gmm_v2`` (torchtpu-vllm's routed-expert kernel: fused_moe_gmm.moe_gmm -> gmm_wrapper -> gmm_v2, no
``tile_info`` passed, so gmm_v2's default ``calculate_tiling``; kowalski-4831/vllm-torchtpu
src/vllm_torchtpu/kernels/megablox/gmm_v2.py @15e5264a, read for this rule):

- tiling (``calculate_tiling``): the base row tile is 128 for a bf16 x bf16 matmul, halved for a rhs of
  8 bits or fewer (``128 // min(cdiv(16, rhs bits), 2)``: 64 for MXFP4), doubled where the kernel quantizes
  the lhs (not for fp4 weights: gmm_wrapper passes ``maybe_quantize_lhs=False``), and at most the rows;
  tile_n then tile_k shrink (in lane multiples) until the kernel's VMEM estimate fits
  ``vmem_limit_bytes`` (0.9 x the core's VMEM), and the row tile grows by the base ("buckets") to at most 4
  of them while it stays within the rows and the estimate fits. ``get_default_gmm_block_sizes`` /
  ``TUNED_BLOCK_SIZES`` (tuned_block_sizes.py) are megablox ``gmm``'s tables: gmm_v2 does not read them.
- visits (``fill_metadata``): a group with no rows is skipped; a group's rows, from their start's offset in a
  sublane block (16 bf16 rows: TPU7x's 8 sublanes x bf16 packing 2), are cut into tiles of tile_m rows; each
  (group, row tile) is one visit over every k and n tile.
- rows a visit (``inner_kernel``): the matmul runs ``bucket_m = base x (m_end_local // base + 1)`` rows,
  capped at tile_m (``lax.switch`` clamps the branch index), m_end_local the visit's last row past the
  sublane-aligned start: a group of 1 to 48 rows costs 64 rows of MXU work, masked out after.
- the MXFP4 tile is dequantized to bf16 in VMEM before the matmul (its 32-value quant block is below the
  MXU's 256 columns: ``should_dequantize_before_matmul``), so the MXU runs bf16 (the stack's compute dtype).

Expected rows: a touched expert holds the mean rows of one (``ops.weight_ops``' ``expert_tokens``) and its
start's sublane offset is taken uniform over the 16 (the groups before it hold arbitrary counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GMM_V2_SOURCE = (
    "kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/megablox/gmm_v2.py @15e5264a (calculate_tiling, "
    "fill_metadata, inner_kernel's bucket_m), called without tile_info by src/vllm_torchtpu/layers/common/"
    "fused_moe_gmm.py gmm_wrapper @0b0ff9bd"
)

BF16_TILE_M = 128  # calculate_tiling: bf16_bf16_tile_m
MAX_BUCKETS = 4  # calculate_tiling: max_num_buckets
VMEM_SHARE = 0.9  # gmm_v2: vmem_limit_bytes = int(vmem_capacity_bytes x 0.9) when not given
LANES = 128  # TpuInfo.num_lanes on every TPU generation the tables below name
# TpuInfo a TensorCore, jax/_src/pallas/mosaic/tpu_info.py (get_tpu_info): VMEM capacity and the sublane
# tiling of a bf16 lhs (num_sublanes 8 x 2 bf16 values a 32-bit sublane)
VMEM_BYTES = {"TPU7x": 64 * 2**20, "TPU v6 lite": 128 * 2**20, "TPU v5 lite": 128 * 2**20}
BF16_SUBLANE_ROWS = 16


@dataclass(frozen=True)
class Tiles:
    tile_m: int  # rows a visit at most
    tile_k: int
    tile_n: int  # a rhs's (gate's or up's when fused)
    base: int  # the bucket: a visit's rows are a multiple of it


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _align(x: int, a: int) -> int:
    return _cdiv(x, a) * a


def _vmem(tm: int, tk: int, tn: int, *, rhs_bits: int, quant_block: int | None, fused: bool) -> int:
    """calculate_tiling's estimate (bf16 lhs, not quantized; fp32 scales; no bias): lhs double-buffered, rhs
    triple-buffered (scales double), a [tm, tn] fp32 accumulator (twice as wide fused) and the bf16 output
    double-buffered."""
    f = 2 if fused else 1
    scales = 0 if quant_block is None else _cdiv(tk, quant_block) * tn * 4
    rhs = f * (3 * tk * tn * rhs_bits // 8 + 2 * scales)
    return 2 * tm * tk * 2 + rhs + tm * f * tn * 4 + 2 * tm * tn * 2


def gmm_v2_tiles(
    *, size_m: int, size_k: int, size_n: int, rhs_bits: int, quant_block: int | None, fused: bool, vmem_limit: int
) -> Tiles:
    """gmm_v2's ``calculate_tiling`` for a bf16 lhs (not quantized) of ``size_m`` rows against a rhs of
    [size_k, size_n] (``size_n`` both halves when ``fused``: gate and up), ``rhs_bits`` a weight,
    ``quant_block`` values a scale (None: no scale)."""
    tile_m = min(BF16_TILE_M // min(_cdiv(16, rhs_bits), 2), size_m)
    per_rhs = size_n // 2 if fused else size_n
    n_limit = min(2 * 256, size_n) // (2 if fused else 1)  # 2 x mxu_column_size (256), halved when fused
    nn = nk = 1
    tile_k, tile_n = _align(size_k, LANES), _align(per_rhs, LANES)

    def fits(tm: int, tk: int, tn: int) -> bool:
        return _vmem(tm, tk, tn, rhs_bits=rhs_bits, quant_block=quant_block, fused=fused) <= vmem_limit

    while not fits(tile_m, tile_k, tile_n) and tile_n > n_limit:
        nn += 1
        tile_n = _align(per_rhs, nn * LANES) // nn
    if tile_n < n_limit:
        nn -= 1
        tile_n = _align(per_rhs, nn * LANES) // nn
        while (
            not fits(tile_m, tile_k, tile_n)
            or (quant_block is not None and tile_k % quant_block and quant_block % tile_k)
        ) and tile_k > LANES:
            nk += 1
            tile_k = _align(size_k, nk * LANES) // nk
    base = tile_m
    for _ in range(1, MAX_BUCKETS):
        if tile_m + base > size_m or not fits(tile_m + base, tile_k, tile_n):
            break
        tile_m += base
    return Tiles(tile_m=tile_m, tile_k=tile_k, tile_n=tile_n, base=base)


def _visit_rows(end, tiles: Tiles):
    """The rows one visit computes whose last row is ``end`` past its aligned start (inner_kernel's bucket_m)."""
    from k3plan.columns import minimum

    return minimum(tiles.tile_m, tiles.base * (end // tiles.base + 1))


def group_rows(rows, tiles: Tiles, *, sublane: int = BF16_SUBLANE_ROWS):
    """MXU rows a group of ``rows`` rows costs (``int | float | numpy array``, as the tiles' fields; 0 rows:
    none), its start's offset in a sublane block uniform over ``sublane``: the full row tiles its rows and
    offset fill, then the last visit's bucket."""
    from k3plan.columns import where

    total: Any = 0.0
    for offset in range(sublane):
        span = rows + offset  # the rows from the aligned start to the group's last
        full = -(-span // tiles.tile_m) - 1  # visits before the last, each tile_m rows
        total = total + full * tiles.tile_m + _visit_rows(span - full * tiles.tile_m, tiles)
    return where(rows > 0, total / sublane, 0.0)


def capped(tiles: Tiles, size_m) -> Tiles:
    """``tiles`` (worked out for rows enough to take every bucket that fits) at ``size_m`` rows in all
    (``int | numpy array``): the base is at most the rows, and the buckets grow only while within them."""
    from k3plan.columns import maximum, minimum, where

    base = minimum(tiles.base, size_m)
    tile_m = where(base < tiles.base, base, base * minimum(tiles.tile_m // tiles.base, maximum(1, size_m // base)))
    return Tiles(tile_m=tile_m, tile_k=tiles.tile_k, tile_n=tiles.tile_n, base=base)


def fused_rhs(leaf: str) -> bool:
    """The gate / up projections run as gmm_v2's fused first call (fuse_act: w13), the down projection alone."""
    return not (leaf.endswith("w2") or leaf.endswith("down_proj"))


# runtime weight formats gmm_v2's tiling is read for here: (bits a weight as the kernel takes it, values a scale).
# int4_g32: Kimi-K2.5/K2.6's INT4 experts, which VllmCompressedTensorsW4A16MoEMethod hands gmm_v2 as int4 with their
# group-32 scales (rhs_quant_dtype=jnp.int4: compressed_tensors_moe_w4a16.py @5b4031a3); their scales are bf16, the
# VMEM rule above counts 4 B a scale (the MXFP4 path's fp32): a tile that fits with fp32 scales fits with bf16
FORMATS = {"mxfp4_f32scale": (4, 32), "mxfp4": (4, 32), "int4_g32": (4, 32)}


# Issue 38: the efficiency curve of the engine's own grouped-matmul kernel (``probe gmm``'s records), by the
# runtime weight format it dequantizes and the call (w13: gate and up fused with the activation; w2 alone)
GMM_CURVE = "gmm_v2"
CURVE_FORMATS = {"mxfp4_f32scale": "mxfp4", "mxfp4": "mxfp4", "int4_g32": "int4"}
# a probe gmm record's weight_dtype -> the curves it is a point of: an int4 record is int4's own curve and MXFP4's
# stand-in (the compiler refused fp4 there; the same block-32 dequantize-before-matmul path, labelled as such)
RECORD_CURVES = {"float4_e2m1fn": ("mxfp4",), "int4": ("mxfp4", "int4"), "bfloat16": ("bf16",)}


def gmm_curve_key(fmt: str, *, fused: bool) -> str:
    """'gmm_v2:mxfp4:w13': the curve of gmm_v2 with ``fmt`` weights, the fused first call or the second."""
    return f"{GMM_CURVE}:{fmt}:{'w13' if fused else 'w2'}"


def visit_ends(sizes: list[int], tile_m: int, *, sublane: int = BF16_SUBLANE_ROWS) -> list[int]:
    """``fill_metadata``'s visits for these group sizes (in order, laid out one after another: a touched group's
    rows from its start's sublane-aligned offset, cut into tiles of at most tile_m rows), each as its
    ``m_end_local`` (inner_kernel: the visit's end past its aligned start), which picks its bucket."""
    out, start = [], 0
    for size in sizes:
        end, cur = start + size, start
        while size > 0 and cur < end:
            local = cur % sublane
            step = min(tile_m - local, end - cur)
            out.append(local + step)
            cur += step
        start = end
    return out


def visit_mxu_rows(sizes: list[int], tiles: Tiles, *, sublane: int = BF16_SUBLANE_ROWS) -> int:
    """The MXU rows one gmm_v2 call computes for these group sizes: each of ``visit_ends``' visits at its
    ``bucket_m`` (inner_kernel) -- exact, where ``group_rows`` takes the mean over the offsets."""
    return sum(int(_visit_rows(end, tiles)) for end in visit_ends(sizes, tiles.tile_m, sublane=sublane))
