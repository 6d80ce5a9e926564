"""SGLang's KDA state (mamba) pool holds 3 slots a running request with its radix cache on, 5 with
--mamba-scheduler-strategy extra_buffer (sgl-project/sglang@001ccef0 model_runner_kv_cache_mixin.py
calculate_mamba_ratio, init_memory): the budget counts every slot, a decode step reads one, and the launch
line passes --max-mamba-cache-size so the engine sizes its pool as priced."""

from __future__ import annotations

import json

import pytest
from fit_helpers import cached_setup

from k3plan.budget.fit import Workload, fit
from k3plan.roofline.bounds import Efficiency, decode_bound

# K3 at tp16: 96 KDA heads / 16 = 6 a GPU; a KDA layer's slot = recurrent 6 x 128 x 128 f32
# + conv (kernel 4 - 1) x (q, k, v: 3 x 6 x 128) bf16; 69 KDA layers
SLOT = 69 * (6 * 128 * 128 * 4 + 3 * 3 * 6 * 128 * 2)  # 28,085,760 B a GPU


def _fit(stack: str, batch: int = 4, context: int = 8192):
    setup = cached_setup(hardware="nvidia-h200", topology="2x8", tp=16, ep=16, dp=1, stack=stack)
    return setup, fit(setup, Workload(context_tokens=context, batch=batch))


@pytest.mark.parametrize("stack,slots", [("sglang", 3), ("sglang:mamba_scheduler_strategy=extra_buffer", 5)])
def test_state_pool_bytes_are_slots_times_one_slot(stack, slots):
    _, r = _fit(stack)
    assert SLOT == 28_085_760
    assert r.cache_layout.state_bytes_per_slot == SLOT
    assert r.per_device.state_bytes_per_sequence == slots * SLOT  # 84,257,280 / 140,428,800
    assert r.per_device.state_bytes == 4 * slots * SLOT
    assert r.model_state.state_bytes_per_sequence == 16 * SLOT  # whole model, one slot


def test_extra_buffer_changes_the_state_figure_and_the_capacity_not_the_step():
    s3, r3 = _fit("sglang")
    s5, r5 = _fit("sglang:mamba_scheduler_strategy=extra_buffer")
    assert r5.per_device.state_bytes - r3.per_device.state_bytes == 4 * 2 * SLOT
    assert r5.per_device.free_bytes == r3.per_device.free_bytes - 4 * 2 * SLOT
    assert r5.capacity.max_context_tokens < r3.capacity.max_context_tokens
    # a decode step reads and writes one slot a sequence whatever the pool holds
    d3 = decode_bound(s3, batch=4, context_tokens=8192, eff=Efficiency())
    d5 = decode_bound(s5, batch=4, context_tokens=8192, eff=Efficiency())
    assert d3.bytes_per_device == d5.bytes_per_device and d3.step_s == d5.step_s


def test_plan_row_is_fit_for_the_extra_buffer_stack(cli):
    # 2 sequences: at SGLang's derived reserve (17.5 GiB an H200 at tp16, memory_hook.py) 4 x 8,192 tokens
    # leave tp16 x pp1 on 16 H200s 0.58 GiB short (fit above: max_sequences 2), so plan ranks it only at 2
    stack = "sglang:mamba_scheduler_strategy=extra_buffer"
    res = cli("plan", "-H", "nvidia-h200", "--stacks", stack, "--max-chips", "16", "--context", "8192",
              "--concurrency", "2", "--top", "50", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    r = next(x for x in out["ranked"] if x["tp"] == 16 and x["pp"] == 1)
    f = cli("fit", "-H", "nvidia-h200", "-t", r["topology"], "--tp", r["tp"], "--ep", r["ep"], "--stack", stack,
            "--context", "8192", "--batch", "2", "--chunk", r["chunk_tokens"], "--json")  # fmt: skip
    assert f.exit_code in (0, 3), f.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
    d = json.loads(f.stdout)
    for k in ("state_bytes", "state_bytes_per_sequence", "kv_bytes", "free_bytes", "reserve_bytes"):
        assert r["per_device"][k] == d["per_device"][k], k
    assert r["per_device"]["state_bytes_per_sequence"] == 5 * SLOT
    # the launch sizes SGLang's state pool to the slots priced: ceil(sequences / dp) x 5 a scheduler
    launch = out["launch"]["text"]
    pick = out["ranked"][0]
    seqs = out["launch"]["config"]["max_num_seqs"]
    assert f"--max-mamba-cache-size {-(-seqs // pick['dp']) * 5}" in launch
    assert "--mamba-radix-cache-strategy extra_buffer" in launch


def test_the_sglang_launch_writes_the_derived_mem_fraction_static(cli):
    from k3plan.engines.stack import load_stack
    from k3plan.hardware import load_hardware

    out = json.loads(cli("plan", "-H", "nvidia-h200", "--stacks", "sglang", "--max-chips", "16", "--context", "8192",
                         "--concurrency", "4", "--json").stdout)  # fmt: skip
    pick, hw = out["ranked"][0], load_hardware("nvidia-h200")
    frac = 1 - load_stack("sglang").reserve_fraction(
        usable_bytes=hw.usable_bytes_per_device,
        tp=pick["tp"],
        pp=pick["pp"],
        chunk=pick["chunk_tokens"],
        vendor="nvidia",
    )
    assert f"--mem-fraction-static {frac:g}" in out["launch"]["text"]
    # H200 at tp x pp 16, chunk 8192 (tests/sharding/test_engine_stacks.py, by hand): 0.875
    assert pick["tp"] * pick["pp"] == 16 and pick["chunk_tokens"] == 8192 and frac == pytest.approx(0.875)
