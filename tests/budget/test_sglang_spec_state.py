"""SGLang's KDA state (mamba) pool with speculative decoding and without the radix cache
(sgl-project/sglang@001ccef0 python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py):
calculate_mamba_ratio is 1 with --disable-radix-cache, 3 with it on, 3 + 2 with extra_buffer and 3 + 1 with
extra_buffer under speculative decoding; handle_max_mamba_cache takes mamba_cache_per_req x running requests x
speculative_num_draft_tokens (--spec-tokens k + 1 at topk 1) more for the intermediate states the verify
keeps a draft token. Before: fit --spec-tokens priced 3 slots a sequence, as without it."""

from __future__ import annotations

import json
import shlex

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import load_stack
from k3plan.errors import K3PlanError
from k3plan.setup import make_setup

# K3 at tp16: 96 KDA heads / 16 = 6 a GPU; a KDA layer's slot = recurrent 6 x 128 x 128 f32
# + conv (kernel 4 - 1) x (q, k, v: 3 x 6 x 128) bf16; 69 KDA layers
SLOT16 = 69 * (6 * 128 * 128 * 4 + 3 * 3 * 6 * 128 * 2)  # 28,085,760 B a GPU
# tp32: 3 heads a GPU
SLOT32 = 69 * (3 * 128 * 128 * 4 + 3 * 3 * 3 * 128 * 2)  # 14,042,880 B a GPU


@pytest.mark.parametrize(
    "stack,spec,slots",
    [
        ("sglang", None, 3),  # radix cache on, no_buffer: 3
        ("sglang", 4, 3 + 4),  # --spec-tokens 3: 4 tokens verified, one intermediate slot each
        ("sglang:mamba_scheduler_strategy=extra_buffer", None, 5),  # 3 + 2 (overlap)
        ("sglang:mamba_scheduler_strategy=extra_buffer", 4, 4 + 4),  # 3 + 1 (no overlap) + 4
        ("sglang:disable_radix_cache=true", None, 1),  # calculate_mamba_ratio returns 1 first
        ("sglang:disable_radix_cache=true+mamba_scheduler_strategy=extra_buffer", None, 1),
        ("sglang:mamba_scheduler_strategy=extra_buffer+disable_radix_cache=true", 4, 1 + 4),
    ],
)
def test_state_slots_a_running_sequence(stack, spec, slots):
    setup = make_setup(hardware="nvidia-h200", topology="2x8", tp=16, ep=16, dp=1, stack=stack,
                       spec_verify_tokens=spec)  # fmt: skip
    assert setup.stack.state.slots_per_request == slots
    r = fit(setup, Workload(context_tokens=8192, batch=4))
    assert r.per_device.state_bytes_per_sequence == slots * SLOT16
    assert r.per_device.state_bytes == 4 * slots * SLOT16


def test_the_option_is_applied_once_whatever_the_order_and_lifted_again():
    st = load_stack("sglang")
    off_on = st.with_options(disable_radix_cache="true").with_options(disable_radix_cache="false")
    assert off_on.state.slots_per_request == 3
    assert load_stack("sglang:disable_radix_cache=false").state.slots_per_request == 3
    assert load_stack("jax-native").for_spec_decode(4) is load_stack("jax-native")  # prices no spec state
    with pytest.raises(K3PlanError, match=r"\(--disable-radix-cache\) 'yes': expected one of false, true"):
        load_stack("sglang:disable_radix_cache=yes")


def test_fit_spec_tokens_grows_the_sglang_state_pool(cli):
    args = ("fit", "-H", "nvidia-h200", "-t", "4x8", "--tp", "32", "--stack", "sglang", "--context", "32768",
            "--batch", "8", "--json")  # fmt: skip
    plain = json.loads(cli(*args).stdout)
    res = cli(*args, "--spec-tokens", "3", "--acceptance", "0.8", "--draft-bytes", "2GB")
    assert res.exit_code in (0, 3), res.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
    spec = json.loads(res.stdout)
    assert plain["per_device"]["state_bytes_per_sequence"] == 3 * SLOT32  # 42,128,640
    assert spec["per_device"]["state_bytes_per_sequence"] == 7 * SLOT32  # 98,300,160
    assert spec["per_device"]["state_bytes"] - plain["per_device"]["state_bytes"] == 8 * 4 * SLOT32  # 449,372,160


def test_the_launch_writes_disable_radix_cache_and_sizes_the_pool_at_one_slot(cli):
    def launch(stack: str) -> dict:
        res = cli("plan", "-H", "nvidia-h200", "--stacks", stack, "--max-chips", "16", "--context", "8192",
                  "--concurrency", "2", "--json")  # fmt: skip
        assert res.exit_code == 0, res.stderr
        return json.loads(res.stdout)

    out = launch("sglang:disable_radix_cache=true")
    text, pick = out["launch"]["text"], out["ranked"][0]
    cmd = shlex.split(next(line for line in text.splitlines() if line.startswith("python -m sglang")))
    at = cmd.index("--disable-radix-cache")  # a store_true flag: written alone, no value after it
    assert cmd[at + 1].startswith("--")
    seqs = out["launch"]["config"]["max_num_seqs"]
    assert f"--max-mamba-cache-size {-(-seqs // pick['dp']) * 1}" in text  # one slot a request, as priced
    assert "calculate_mamba_ratio (if self.server_args.disable_radix_cache: return 1)" in text  # its source
    default = launch("sglang")
    assert "--disable-radix-cache" not in default["launch"]["text"]  # SGLang's default: radix cache on
    d = default["ranked"][0]
    assert (d["tp"], d["pp"], d["dp"]) == (pick["tp"], pick["pp"], pick["dp"])
    assert d["per_device"]["state_bytes_per_sequence"] == 3 * pick["per_device"]["state_bytes_per_sequence"]
