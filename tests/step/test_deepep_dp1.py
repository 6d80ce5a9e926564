"""vLLM runs a DeepEP all2all backend only with DP > 1 (all2all_utils.py maybe_make_prepare_and_finalize; else it
falls back to allgather_reducescatter, which at DP 1 is the TP all-reduce alone): a DP-1 split of
``vllm:all2all_backend=deepep_*`` is costed as vLLM's default, by fit and by plan alike, and says so."""

from __future__ import annotations

import json

import pytest

from k3plan.roofline.comm import collective_args
from k3plan.setup import make_setup

DEEPEP = "vllm:all2all_backend=deepep_low_latency"


@pytest.mark.parametrize("dp,a2a", [(1, False), (2, True)])
def test_deepep_runs_only_with_dp_above_1(dp, a2a):
    s = make_setup(hardware="nvidia-gb200-nvl72", topology="16", tp=16 // dp, dp=dp, ep=16, stack=DEEPEP)
    args = collective_args(s)
    assert (args["all_to_all"], args["ag_rs"]) == (a2a, not a2a)
    assert any(n.startswith("dp 1: ") for n in s.notes) == (dp == 1)


def test_plan_and_fit_cost_a_dp1_deepep_row_as_the_default(cli):
    fit = {}
    for st in ("vllm", DEEPEP):
        r = cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "16", "--tp", "16", "--stack", st, "--json")
        assert r.exit_code in (0, 3), r.output  # 3: fits on the analytic temp's lower bound (issue 50)
        fit[st] = json.loads(r.stdout)["speed"]["tpot_s"]
    assert fit["vllm"] == fit[DEEPEP]
    r = cli(
        "plan", "-H", "nvidia-gb200-nvl72", "--stacks", f"vllm,{DEEPEP}", "--max-chips", "16", "--top", "60", "--json"
    )
    assert r.exit_code == 0, r.output
    rows = {
        (x["stack"], x["tp"], x["dp"]): x["estimate_tpot_ms"] for x in json.loads(r.stdout)["ranked"] if x["topology"] == "16"
    }
    assert rows[(DEEPEP, 16, 1)] == pytest.approx(fit[DEEPEP] * 1e3, rel=1e-12)
    assert rows[(DEEPEP, 16, 1)] == rows[("vllm", 16, 1)]
