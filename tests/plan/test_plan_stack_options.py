"""A stack with an option (vllm:all2all_backend=deepep_low_latency) is a different engine configuration
from the bundled default: plan's rows, fit and their "check it" command name it with its option, so
two rows that differ only in the option are told apart and each reproduces under fit; a stack listed
twice is refused, as a hardware listed twice is."""

from __future__ import annotations

import json

import pytest

DEEPEP = "vllm:all2all_backend=deepep_low_latency"


def test_plan_rows_name_the_stack_option_and_fit_reproduces_each(cli):
    res = cli("plan", "-H", "nvidia-gb200-nvl72", "--stacks", f"vllm,{DEEPEP}", "--max-chips", "16", "--top", "20",
              "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)["ranked"]
    assert {r["stack"] for r in rows} == {"vllm", DEEPEP}
    for stack in ("vllm", DEEPEP):
        r = next(x for x in rows if x["stack"] == stack and x["dp"] == 2)  # DeepEP runs with DP > 1 only
        f = cli("fit", "-H", "nvidia-gb200-nvl72", "-t", r["topology"], "--tp", r["tp"], "--ep", r["ep"],
                "--stack", r["stack"], "--json")  # fmt: skip
        assert f.exit_code in (0, 3), f.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
        d = json.loads(f.stdout)
        assert d["stack"] == stack
        assert d["speed"]["tpot_s"] * 1e3 == pytest.approx(r["estimate_tpot_ms"], rel=1e-12)
    # the two engines' decode steps differ at DP 2 (all-to-all vs the default's collectives): the rows are not
    # twins (at DP 1 they are: vLLM falls back to its default there, tests/step/test_deepep_dp1.py)
    tpot = {r["stack"]: r["tpot_ms"] for r in rows if r["dp"] == 2 and r["topology"] == "16"}
    assert tpot["vllm"] != tpot[DEEPEP]


def test_a_stack_listed_twice_is_refused(cli):
    res = cli("plan", "-H", "nvidia-h200", "--stacks", "sglang,sglang", "--max-chips", "16")
    assert res.exit_code == 2
    assert "--stacks" in res.stderr and "sglang" in res.stderr and "twice" in res.stderr


def test_the_launch_of_a_pick_with_an_option_passes_the_option_flag(cli):
    # the plan priced DeepEP's all-to-all; a launch without --all2all-backend runs vLLM's default
    # (allgather_reducescatter, vllm/config/parallel.py ParallelConfig.all2all_backend), not what was planned
    res = cli("plan", "-H", "nvidia-gb200-nvl72", "--stacks", DEEPEP, "--max-chips", "16", "--json")
    assert res.exit_code == 0, res.stderr
    launch = json.loads(res.stdout)["launch"]
    assert launch["config"]["stack"] == DEEPEP
    text = launch["text"]
    assert "--all2all-backend deepep_low_latency" in text
    assert "vllm-project/vllm: vllm/config/parallel.py (ParallelConfig.all2all_backend" in text  # its source listed
    plain = json.loads(
        cli("plan", "-H", "nvidia-gb200-nvl72", "--stacks", "vllm", "--max-chips", "16", "--json").stdout
    )
    # the stack's default is written too, as priced (a stack's default need not be its engine's: sglang's DeepEP,
    # vllm-tpu's MODEL_IMPL_TYPE=vllm, tests/deploy/test_launch.py)
    assert "--all2all-backend allgather_reducescatter" in plain["launch"]["text"]
