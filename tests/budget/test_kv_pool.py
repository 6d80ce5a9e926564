"""The cache pool as each engine sizes it (issue 18 B.5): SGLang's mem_fraction_static leaves
1 - fraction for the activations (profile_max_num_token: rest = free after load - total x (1 -
fraction)), so the temporaries sit inside that reserve; vLLM's gpu_memory_utilization x total -
weights - profiled peak puts them on top of it."""

from k3plan.budget.fit import Workload, fit
from k3plan.setup import make_setup

W = Workload(context_tokens=131072, batch=1)


def _terms(stack):
    r = fit(make_setup(hardware="nvidia-h200", topology="2x8", tp=16, stack=stack), W)
    pd, usable = r.per_device, r.hardware.usable_bytes_per_device
    # every byte of usable HBM is accounted once: weights + temps + reserve + KV + state + free
    assert pd.weights_bytes + pd.temp_bytes + pd.reserve_bytes + pd.kv_bytes + pd.state_bytes + pd.free_bytes == usable
    return pd, usable


def test_sglang_reserve_holds_the_temporaries():
    pd, usable = _terms("sglang")
    assert pd.temp_bytes > 0
    # 1 - mem_fraction_static 0.875 as SGLang derives it for an H200 at tp16, chunk 8192 (17.5 GiB: memory_hook.py,
    # tests/sharding/test_engine_stacks.py), net of temps
    assert pd.reserve_bytes == int(0.125 * usable) - pd.temp_bytes


def test_sglang_temporaries_beyond_the_reserve_take_it_all():
    # --mem-fraction-static 0.99 leaves 1% (1.4 GiB) for activations: the temps exceed it, nothing is left over
    pd, usable = _terms("sglang:mem_fraction_static=0.99")
    assert int(0.01 * usable) < pd.temp_bytes and pd.reserve_bytes == 0


def test_vllm_adds_the_profiled_peak_to_what_utilization_leaves():
    pd, usable = _terms("vllm")
    # 1 - gpu_memory_utilization 0.92 (vLLM's default from 0.20.0: engines/vllm/releases.py), temps on top
    assert pd.reserve_bytes == int(0.08 * usable)
