"""vLLM's sequence-parallel MoE (ParallelConfig.use_sequence_parallel_moe: an all2all backend of its list,
--enable-expert-parallel, TP > 1, DP > 1) makes DeepseekV2MoE build its shared experts with disable_tp: whole on
every GPU (vllm-project/vllm vllm/model_executor/models/deepseek_v2.py DeepseekV2MoE / DeepseekV2MLP).
kimi_linear.py KimiMoE (K3 assumed alike) keeps them TP-split. k3plan split them over TP everywhere."""

from __future__ import annotations

import numpy as np

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import load_stack
from k3plan.models import load_model
from k3plan.setup import make_setup
from k3plan.step.weights import mesh_weights, stage_classes

# DeepSeek-V3: 58 MoE layers, one shared expert of gate, up [2048, 7168] and down [7168, 2048] in fp8_block
# (1 B a weight + one f32 scale a 128 x 128 block: 16 x 56 x 4 = 3,584 B)
SHARED_WHOLE = 58 * 3 * (2048 * 7168 + 16 * 56 * 4)  # 2,554,954,752 B


def _shared(r) -> int:
    return next(x.bytes for x in r.weights_by_role if x.role == "shared_expert")


def test_deepseek_v3_tp8_dp2_holds_the_shared_experts_whole():
    s = make_setup(model="deepseek-v3", hardware="nvidia-h200", topology="2x8", tp=8, dp=2, stack="vllm")
    r = fit(s, Workload(context_tokens=8192, batch=4))
    assert (s.parallel.tp, s.parallel.dp, s.parallel.ep) == (8, 2, 16)
    assert _shared(r) == SHARED_WHOLE == 2_554_954_752  # was / 8 = 319,369,344: +2,235,585,408 B a GPU
    assert any("sequence-parallel MoE" in n for n in r.notes)
    # plan's columns hold the same bytes at that mesh (step.weights.mesh_weights with the model's family)
    m = load_model("deepseek-v3")
    one = np.array([8]), np.array([2]), np.array([True])
    mw = mesh_weights(classes=stage_classes(m.inventory), stack=load_stack("vllm"), tp=one[0], dp=one[1],
                      ep_all=one[2], family=m.spec.family)  # fmt: skip
    assert int(mw.weights_bytes[0]) == r.per_device.weights_bytes


def test_off_at_dp1_and_for_kimi_k3():
    s = make_setup(model="deepseek-v3", hardware="nvidia-h200", topology="2x8", tp=16, dp=1, stack="vllm")
    assert _shared(fit(s, Workload(context_tokens=8192, batch=4))) == SHARED_WHOLE // 16
    k = make_setup(model="kimi-k3", hardware="nvidia-h200", topology="2x8", tp=8, dp=2, stack="vllm")
    k1 = make_setup(model="kimi-k3", hardware="nvidia-h200", topology="2x8", tp=16, dp=1, stack="vllm")
    w = Workload(context_tokens=8192, batch=4)
    assert _shared(fit(k, w)) == 2 * _shared(fit(k1, w))  # TP-split at tp 8 as at tp 16: KimiMoE


def test_plan_row_is_fit(cli):
    import json

    res = cli("plan", "-m", "deepseek-v3", "-H", "nvidia-h200", "--stacks", "vllm", "--max-chips", "16",
              "--context", "8192", "--concurrency", "4", "--top", "50", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    r = next(x for x in json.loads(res.stdout)["ranked"] if (x["tp"], x["dp"], x["pp"]) == (8, 2, 1))
    f = cli("fit", "-m", "deepseek-v3", "-H", "nvidia-h200", "-t", r["topology"], "--tp", "8", "--dp", "2",
            "--stack", "vllm", "--json")  # fmt: skip
    assert f.exit_code in (0, 3), f.stderr  # 3: fits on the analytic temp's lower bound (issue 50)
    assert r["per_device"]["weights_bytes"] == json.loads(f.stdout)["per_device"]["weights_bytes"]
