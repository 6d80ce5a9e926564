"""vLLM pads the intermediate of a TP-split expert shard by its model's rule (engines/vllm/memory.py MOE_SHARD_RULES):
Kimi-K3's model raises a shard to 256 (vllm-project/vllm#51124), DeepSeek-V4.1's MXFP4 experts are rounded up to the
MoE backend's 128 (oracle/mxfp4.py). With expert parallelism each rank holds whole experts: no padding. The
public V4.1 logs it meets: InferenceX#3310 (H200 TP 8, 49.6 GiB a rank) and #3321 (GB300 TP 4, 81.57 GiB), both
cases in tests/engines/cases."""

from __future__ import annotations

import pytest

from k3plan.engines.vllm.memory import MOE_SHARD_RULES, moe_shard_padding


def _factor(arch: str, intermediate: int, tp: int, ep: bool = False) -> float:
    floor, align, _, _ = MOE_SHARD_RULES[arch]
    return moe_shard_padding(intermediate=intermediate, tp=tp, expert_parallel=ep, floor=floor, align=align)


@pytest.mark.parametrize(("tp", "padded"), [(8, 384), (4, 640), (2, 1152), (16, 256)])
def test_v41_shards_round_up_to_128(tp, padded):
    assert _factor("deepseek_v41", 2304, tp) == pytest.approx(padded / (2304 / tp))


@pytest.mark.parametrize(("tp", "padded"), [(8, 384), (16, 256), (32, 256)])
def test_k3_s_floor_stays_its_model_s(tp, padded):
    assert _factor("kimi_k3", 3072, tp) == pytest.approx(padded / (3072 / tp))


def test_expert_parallelism_and_an_even_shard_pad_nothing():
    assert _factor("deepseek_v41", 2304, 8, ep=True) == 1.0
    assert _factor("deepseek_v41", 2304, 2) == 1.0  # 1,152 a shard, a multiple of 128
    assert "deepseek_v4" not in MOE_SHARD_RULES  # V4's own quantization path not read
