"""int4_g32_f32scale: tpu-inference's resident form of a compressed-tensors int4 group-32 expert it does not
requantize (process_moe_weights casts the group scales to float32: engines/tpu_inference/stack.yaml option
disable_weight_requantization): int4 codes, two a byte, and one fp32 scale a 32 inputs of a row; no packed words'
shape tensor (VllmCompressedTensorsW4A8MoEMethod deletes w13/w2_weight_shape)."""

from __future__ import annotations

import pytest

from k3plan.errors import K3PlanError
from k3plan.models.formats import get_format


def test_int4_with_fp32_group_scales_is_5_bits_a_parameter():
    fmt = get_format("int4_g32_f32scale")
    # one Kimi-K2.6 layer's w13: 384 experts x [4,096, 7,168]
    shape = (384, 4096, 7168)
    params = 384 * 4096 * 7168
    assert fmt.nbytes(shape) == params // 2 + 4 * params // 32 == params * 5 // 8
    # against the checkpoint's: a 2-B scale a 32 and an int32[2] shape a matrix
    assert fmt.nbytes(shape) - get_format("int4_g32").nbytes(shape) == 2 * params // 32 - 8 * 384
    with pytest.raises(K3PlanError):
        fmt.nbytes((4096, 7000))
