"""Disaggregated prefill/decode: K3's handoff bytes from k3-facts.md §3 worked by hand, link times,
and pool sizing."""

from __future__ import annotations

import numpy as np
import pytest

from k3plan.deploy.disagg import (
    link_named,
    pool_loads,
    request_transfer,
    size_pools,
    transfer_bytes_per_request,
    transfer_time_s,
)
from k3plan.engines.stack import load_stack, updated
from k3plan.errors import K3PlanError
from k3plan.hardware.loader import load_hardware
from k3plan.models.loader import load_model

# k3-facts.md §3: 24 MLA layers x 576 values a token; 69 KDA layers, each [96,128,128] fp32 recurrent
# + 3 x 3 x 12288 bf16 conv values a sequence.
KV_BF16_PER_TOKEN = 24 * 576 * 2  # 27,648 B
KV_FP8_PER_TOKEN = 24 * 576 * 1  # 13,824 B
STATE_PER_SEQ = 69 * (96 * 128 * 128 * 4 + 3 * 3 * 12288 * 2)  # 69 x 6,512,640 = 449,372,160 B


def test_k3_handoff_bytes_by_hand():
    # bf16 KV, fp32 recurrent, bf16 conv; the 576 values a token as k3-facts.md counts them (MLA_TRANSPOSE_KV_CACHE=1)
    spec, stack = load_model().spec, load_stack("tpu-inference:mla_transpose_kv_cache=1")
    assert (
        transfer_bytes_per_request(spec=spec, stack=stack, isl_tokens=4000) == 4000 * KV_BF16_PER_TOKEN + STATE_PER_SEQ
    )
    assert 4000 * KV_BF16_PER_TOKEN + STATE_PER_SEQ == 559_964_160
    # the MLA v2 entry (torchtpu-vllm, as tpu-inference's default) pads the rope part to 128 lanes: 24 x 640 x 2 B
    padded = transfer_bytes_per_request(spec=spec, stack=load_stack("torchtpu-vllm"), isl_tokens=4000)
    assert padded == 4000 * 24 * 640 * 2 + STATE_PER_SEQ == 572_252_160
    fp8 = updated(stack, kv_cache=updated(stack.kv_cache, dtype="fp8"))
    col = transfer_bytes_per_request(spec=spec, stack=fp8, isl_tokens=np.array([0, 1000]), copies=2)
    assert col.tolist() == [2 * STATE_PER_SEQ, 2 * (1000 * KV_FP8_PER_TOKEN + STATE_PER_SEQ)]
    with pytest.raises(K3PlanError, match="copies"):
        transfer_bytes_per_request(spec=spec, stack=stack, isl_tokens=1, copies=0)


def test_links_by_key_and_by_name():
    hw = load_hardware("tpu-v7x")
    assert link_named(hw, "ICI") is hw.scale_up and link_named(hw, "scale_out") is hw.scale_out
    assert link_named(hw, "dcn") is hw.scale_out
    with pytest.raises(K3PlanError, match="expected scale_up \\(ICI\\) or scale_out \\(DCN\\)"):
        link_named(hw, "nvlink")


def test_transfer_time_over_dcn_and_ici_by_hand():
    hw = load_hardware("tpu-v7x")
    nbytes = 559_964_160
    # DCN: 100 Gb/s = 12.5e9 B/s one-way a chip, 50 us: 50e-6 + 0.0447971328 s
    assert float(transfer_time_s(transfer_bytes=nbytes, link=hw.scale_out)) == pytest.approx(50e-6 + nbytes / 12.5e9)
    # 16 chips sending their shares in parallel: 50e-6 + nbytes / (16 x 12.5e9)
    assert float(transfer_time_s(transfer_bytes=nbytes, link=hw.scale_out, sending_chips=16)) == pytest.approx(
        50e-6 + nbytes / 200e9
    )
    # ICI: 600 GB/s one-way a chip, 9.88 us
    t = request_transfer(
        spec=load_model().spec,
        stack=load_stack("tpu-inference:mla_transpose_kv_cache=1"),
        hw=hw,
        isl_tokens=4000,
        link="ICI",
        ttft_target_s=2.0,
    )
    assert t.bytes_per_request == nbytes and t.link == "ICI"
    assert t.transfer_s == pytest.approx(9.88e-6 + nbytes / 600e9)
    assert t.share_of_ttft == pytest.approx(t.transfer_s / 2.0)


def test_pool_sizing_by_hand():
    # 2 req/s x 4000 ISL = 8,000 prompt tok/s over 10,000 an instance -> 0.8 prefill instances;
    # 2 req/s x 500 OSL = 1,000 output tok/s over 300 an instance -> 3.333 decode instances.
    p = size_pools(
        request_rate_per_s=2,
        isl_tokens=4000,
        osl_tokens=500,
        prefill_tokens_per_s_per_instance=10_000,
        decode_tokens_per_s_per_instance=300,
    )
    assert (p.prefill_instances, p.decode_instances) == (1, 4)
    assert p.prefill_instances_exact == pytest.approx(0.8) and p.decode_instances_exact == pytest.approx(10 / 3)
    assert p.ratio_prefill_to_decode == pytest.approx(0.8 / (10 / 3))  # 0.24
    assert p.prefill_utilisation == pytest.approx(0.8) and p.decode_utilisation == pytest.approx(10 / 12)


def test_exact_whole_loads_are_not_rounded_up():
    # 3 req/s x 1000 / 1000 = exactly 3 prefill instances; 3 x 100 / 100 = exactly 3 decode
    p = size_pools(
        request_rate_per_s=3,
        isl_tokens=1000,
        osl_tokens=100,
        prefill_tokens_per_s_per_instance=1000,
        decode_tokens_per_s_per_instance=100,
    )
    assert (p.prefill_instances, p.decode_instances) == (3, 3)


def test_pool_loads_over_columns_and_bad_input():
    pre, dec = pool_loads(
        request_rate_per_s=np.array([1.0, 4.0]),
        isl_tokens=1000,
        osl_tokens=100,
        prefill_tokens_per_s_per_instance=500,
        decode_tokens_per_s_per_instance=np.array([50, 100]),
    )
    assert pre.tolist() == [2.0, 8.0] and dec.tolist() == [2.0, 4.0]
    with pytest.raises(K3PlanError, match="request rate"):
        size_pools(
            request_rate_per_s=0,
            isl_tokens=1,
            osl_tokens=1,
            prefill_tokens_per_s_per_instance=1,
            decode_tokens_per_s_per_instance=1,
        )
    with pytest.raises(K3PlanError, match="ISL 0"):
        size_pools(
            request_rate_per_s=1,
            isl_tokens=0,
            osl_tokens=1,
            prefill_tokens_per_s_per_instance=1,
            decode_tokens_per_s_per_instance=1,
        )
