"""vLLM's default --gpu-memory-utilization by release: 0.9 to 0.19.x, 0.92 from 0.20.0 (CacheConfig's Field default,
read in the wheels: engines/vllm/releases.py option_defaults). The stack's default is the newest release's; a command
read as an older release that sets none runs at 0.9, in the budget's reserve and the engine's start check alike."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.registry import engine_rules
from k3plan.engines.stack import load_stack
from k3plan.engines.vllm.releases import UTILIZATION_092_FROM, option_defaults

R1 = "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 --max-model-len 32768"


def test_the_default_moved_at_0_20_0():
    assert (
        option_defaults((0, 19, 1))["gpu_memory_utilization"][0]
        == "0.9"
        == option_defaults((0, 11, 1))["gpu_memory_utilization"][0]
    )
    assert option_defaults(UTILIZATION_092_FROM) == {} == option_defaults((0, 33, 0))
    assert load_stack("vllm").reserve.fraction_of_usable_hbm == pytest.approx(0.08)
    assert engine_rules("vllm").option_defaults is option_defaults


def test_an_older_release_runs_at_its_own_default_a_flag_given_wins():
    st = load_stack("vllm")
    assert st.with_engine_release((0, 11, 1)).reserve.fraction_of_usable_hbm == pytest.approx(0.1)
    assert st.with_engine_release((0, 20, 0)).reserve.fraction_of_usable_hbm == pytest.approx(0.08)
    given = load_stack("vllm:gpu_memory_utilization=0.95")
    assert given.with_engine_release((0, 11, 1)).reserve.fraction_of_usable_hbm == pytest.approx(0.05)


@pytest.mark.parametrize(("version", "util"), [("0.19.0", 0.9), ("0.20.0", 0.92), ("0.33.0", 0.92)])
def test_the_budget_and_the_engine_read_one_default(cli, version, util):
    out = cli("fit", "-H", "nvidia-h200", "-t", "8", "--serve", R1, "--engine-version", version, "--json")
    d = json.loads(out.stdout)
    same = cli(
        "fit",
        "-H",
        "nvidia-h200",
        "-t",
        "8",
        "--serve",
        f"{R1} --gpu-memory-utilization {util}",
        "--engine-version",
        version,
        "--json",
    )
    given = json.loads(same.stdout)
    assert given["engine"]["kv_pool_bytes"] == d["engine"]["kv_pool_bytes"]  # the engine's start check
    assert given["per_device"]["reserve_bytes"] == d["per_device"]["reserve_bytes"]  # and the budget's reserve
