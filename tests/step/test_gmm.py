"""The grouped-matmul row tiling (k3plan/step/gmm.py) pinned to the engine code it is read from:
kowalski-4831/vllm-torchtpu src/vllm_torchtpu/kernels/megablox/gmm_v2.py @15e5264a (calculate_tiling,
fill_metadata, inner_kernel's bucket_m), which fused_moe_gmm.gmm_wrapper @0b0ff9bd calls with no tile_info.
Not megablox gmm's tuned_block_sizes.get_default_gmm_block_sizes (tm = 512 at m = 8,192, g = 28): gmm_v2 does
not read that table, and its row tile for an fp4 rhs is 64 rows a bucket, at most 4 buckets."""

from __future__ import annotations

import numpy as np
import pytest

from k3plan.engines.stack import list_stacks, load_stack
from k3plan.step.gmm import Tiles, capped, gmm_v2_tiles, group_rows

V7X_LIMIT = int(64 * 2**20 * 0.9)  # TPU7x: 64 MiB of VMEM a core (tpu_info.py), gmm_v2's 0.9 of it


def _k3(fused: bool) -> Tiles:
    k, n = (3584, 2 * 3072) if fused else (3072, 3584)
    return gmm_v2_tiles(size_m=2**31, size_k=k, size_n=n, rhs_bits=4, quant_block=32, fused=fused, vmem_limit=V7X_LIMIT)


def test_k3_tiles_on_tpu7x():
    """K3's w13 (3,584 -> 2 x 3,072, SiLU fused) and w2 (3,072 -> 3,584) in MXFP4: the base row tile
    128 // min(cdiv(16, 4), 2) = 64, grown to 4 buckets (256 rows) within 0.9 x 64 MiB; K and N whole."""
    assert _k3(True) == Tiles(tile_m=256, tile_k=3584, tile_n=3072, base=64)
    assert _k3(False) == Tiles(tile_m=256, tile_k=3072, tile_n=3584, base=64)


def test_base_row_tile_by_rhs_width():
    """calculate_tiling: bf16 x bf16 128 rows, halved for a rhs of 8 bits or fewer; at most the rows."""

    def base(bits, size_m=2**31):
        return gmm_v2_tiles(
            size_m=size_m, size_k=1024, size_n=1024, rhs_bits=bits, quant_block=None, fused=False, vmem_limit=V7X_LIMIT
        ).base

    assert (base(16), base(8), base(4)) == (128, 64, 64)
    assert base(4, size_m=16) == 16


def test_rows_a_visit_are_the_bucket():
    """inner_kernel: bucket_m = 64 x (m_end_local // 64 + 1), capped at tile_m; m_end_local counts from the
    sublane-aligned start (16 bf16 rows), its offset averaged over the 16."""
    t = _k3(True)
    assert group_rows(0, t) == 0  # fill_metadata: an empty group is skipped
    assert group_rows(1, t) == 64  # decode: one row costs a 64-row bucket
    assert group_rows(9, t) == 64  # a 512-token chunk: 512 x 16 / 896 = 9.1 rows a touched expert
    assert group_rows(48, t) == 64  # 48 + 15 < 64
    assert group_rows(64, t) == 128  # m_end_local = 64 -> bucket index 1: two buckets
    assert group_rows(146, t) == 192  # an 8,192-token chunk: 146 rows a touched expert
    assert group_rows(256 + 36, t) == 320  # one full tile, then a 64-row bucket
    assert group_rows(49, t) == pytest.approx((15 * 64 + 128) / 16)  # offset 15 crosses into a second bucket
    got = group_rows(np.array([0.0, 1.0, 146.0]), capped(t, np.array([256, 16, 8192 * 16])))
    assert list(got) == [0.0, 16.0, 192.0]  # columns; 16 rows in all: the tile is 16 rows


def test_only_torchtpu_vllm_declares_the_rule():
    declared = {s for s in list_stacks() if load_stack(s).experts.gmm_tile is not None}
    assert declared == {"torchtpu-vllm"}
    rule = load_stack("torchtpu-vllm").experts.gmm_tile
    assert rule.rule == "gmm_v2"
    assert {s.file.rsplit("/", 1)[-1] for s in rule.sources} >= {"gmm_v2.py", "fused_moe_gmm.py"}


def test_main_job_padding_is_below_the_weight_stream():
    """The nightly's workload (2x2x4, TP 32, EP 32): a 512-token chunk's experts cost 64 MXU rows a touched
    expert (28 a device) instead of 9.1, still below the time to read their weights, so the chunk's ceiling is
    unchanged; an 8,192-token chunk's 192 rows of 146 move it (compute-bound there)."""
    from k3plan.setup import make_setup
    from k3plan.speed.peaks import Peaks
    from k3plan.speed.stage import prefill_op_costs

    s = make_setup(topology="2x2x4", tp=32, stack="torchtpu-vllm")
    peaks = Peaks.from_hardware(s.hardware)
    flops_peak = s.hardware.flops_per_s_per_device("bf16")
    bw = s.hardware.hbm_bw_bytes_per_s_per_device
    w1 = next(c for c in prefill_op_costs(s, chunk=512, context=512) if c.name.endswith("experts.w1"))
    assert w1.flops == pytest.approx(2 * 64 * 3584 * 3072 * 28, rel=1e-3)
    assert w1.flops / flops_peak < w1.bytes / bw
    big = next(c for c in prefill_op_costs(s, chunk=8192, context=8192) if c.name.endswith("experts.w1"))
    assert big.flops == pytest.approx(2 * 192 * 3584 * 3072 * 28, rel=1e-3)
    assert big.flops / flops_peak > big.bytes / bw
    assert peaks.device_kind == "TPU7x"
