"""AdviceInputs from a typed fit (k3plan.budget.fit.FitResult), and advice on K3 at 2x2x2 (fails) vs 2x2x4."""

from __future__ import annotations

import pytest

from k3plan.advice import advise
from k3plan.advice.inputs import (
    inputs_from_fit,
    kv_dtype_option_from_fit,
    topology_option_from_fit,
)
from k3plan.budget.fit import check_workload, fit
from k3plan.budget.result import Speed
from k3plan.setup import make_setup
from k3plan.structs import replace


def _fit(topology: str, tp: int, kv_dtype: str | None = None):
    # at 8K: 2x2x4 TP=32 vllm-tpu fits there with the compiled temp (at 128K it does not, issue 15)
    w = check_workload(context_tokens=8192, batch=1, prefill_chunk_tokens=None)
    return fit(make_setup(topology=topology, tp=tp, kv_dtype=kv_dtype), w)


@pytest.fixture(scope="module")
def small():
    return _fit("2x2x2", 16)


def test_each_input_is_read_from_its_own_field(small):
    x = inputs_from_fit(small)
    pd, hw = small.per_device, small.hardware
    assert (x.weights_bytes, x.kv_bytes, x.state_bytes, x.temp_bytes, x.reserve_bytes, x.free_bytes) == (
        pd.weights_bytes,
        pd.kv_bytes,
        pd.state_bytes,
        pd.temp_bytes,
        pd.reserve_bytes,
        pd.free_bytes,
    )
    assert (x.usable_bytes, x.topology, x.devices) == (hw.usable_bytes_per_device, "2x2x2", hw.devices)
    assert (x.batch, x.context_tokens, x.sequences) == (1, 8192, pd.sequences)
    assert (x.kv_dtype, x.kv_bytes_per_token) == (small.model_state.kv_dtype, pd.kv_bytes_per_token)
    assert x.state_bytes_per_sequence == pd.state_bytes_per_sequence
    assert x.block_tokens == small.cache_layout.block_tokens
    # no speed line on a library fit: no binding; the CLI's speed line, or an override, sets it
    assert (x.binding, x.tpot_s) == (None, None)
    sped = replace(
        small,
        speed=Speed(
            tpot_s=0.02, tokens_per_s=50.0, binding="memory", collective_latency_source="spec", probes=[], source="test"
        ),
    )
    assert (inputs_from_fit(sped).binding, inputs_from_fit(sped).tpot_s) == ("memory", 0.02)
    over = inputs_from_fit(sped, binding="compute", tpot_s=0.03)
    assert (over.binding, over.tpot_s) == ("compute", 0.03)


def test_a_refused_stage_is_named(small):
    t = replace(small.temp, decode_refused="OOM at 8,192 (compiled)")
    x = inputs_from_fit(replace(small, temp=t))
    assert x.refused == "decode OOM at 8,192 (compiled)"
    assert inputs_from_fit(small).refused is None


def test_k3_2x2x2_fails_and_2x2x4_is_the_fix(small):
    big, fp8 = _fit("2x2x4", 32), _fit("2x2x2", 16, "fp8_ds_mla")
    assert not small.fits
    x = inputs_from_fit(
        small, topology_options=(topology_option_from_fit(big),), kv_dtype_options=(kv_dtype_option_from_fit(fp8),)
    )
    assert x.free_bytes == small.per_device.free_bytes < 0
    a = advise(x)
    assert a.verdict == "fails"
    top = a.suggestions[0]
    assert top.action == "topology" and top.resolves and top.text.startswith("2x2x2 -> 2x2x4 (16 -> 32 devices)")
    # freed = every per-device term at 2x2x2 minus the same at 2x2x4 (same usable HBM: the free difference)
    terms = ("weights_bytes", "kv_bytes", "state_bytes", "temp_bytes", "reserve_bytes")
    assert top.freed_bytes_per_device == sum(getattr(small.per_device, k) - getattr(big.per_device, k) for k in terms)
    assert top.free_bytes_after == big.per_device.free_bytes
    # fp8_ds_mla: 24 MLA layers x 656 B = 15,744 B a token, whole latent on every TP rank
    kv = next(s for s in a.suggestions if s.action == "kv_dtype")
    # bf16 as vllm-tpu stores it: 24 x 640 x 2 B (tpu-inference pads the rope part to 128 lanes)
    assert "30,720 -> 15,744 B a token" in kv.text and not kv.resolves
