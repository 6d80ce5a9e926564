"""Where an engine puts the routed experts at DP > 1 (Stack.dp_experts). SGLang without DP attention
runs each DP group as an independent replica holding every expert over its own TP ranks; vLLM spreads
them over every TP x DP rank. fit, plan and launch must describe the split the engine runs: plan
ranked SGLang tp 8 dp 2 ep 16 on two MI300X boxes with 126.59 GiB of weights a device (84.19 GiB of
experts) while SGLang holds 168.39 GiB of experts a device there, and launch refused the row."""

from __future__ import annotations

import numpy as np
import pytest

from k3plan.engines.stack import load_stack
from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware
from k3plan.plan.space import build_space
from k3plan.setup import make_setup

EXPERT_BYTES = 17_547_264  # one MXFP4 expert with its E8M0 scales (k3-facts.md §2)
N_MOE, N_EXPERTS = 92, 896


def test_sglang_dp_groups_hold_the_experts_over_their_own_tp_ranks():
    s = make_setup(hardware="amd-mi300x", topology="2x8", tp=8, dp=2, stack="sglang")
    assert (s.parallel.tp, s.parallel.ep, s.parallel.dp) == (8, 8, 2)
    # 896 experts over one replica's 8 GPUs: 112 a GPU x 92 MoE layers, 168.39 GiB (it said 84.19, /16)
    assert s.weights.role_bytes("expert") == N_MOE * (N_EXPERTS // 8) * EXPERT_BYTES == 180_807_008_256
    assert any(n.startswith("ep 8: at dp 2 stack sglang") for n in s.notes)
    with pytest.raises(K3PlanError, match=r"--ep 16: .*expected --ep 8"):
        make_setup(hardware="amd-mi300x", topology="2x8", tp=8, dp=2, ep=16, stack="sglang")


def test_vllm_at_dp_above_one_spreads_the_experts_over_tp_x_dp():
    s = make_setup(hardware="nvidia-h200", topology="4x8", tp=8, dp=4, stack="vllm")
    assert s.parallel.ep == 32
    assert s.weights.role_bytes("expert") == N_MOE * (N_EXPERTS // 32) * EXPERT_BYTES
    with pytest.raises(K3PlanError, match=r"--ep 8: .*expected --ep 32"):
        make_setup(hardware="nvidia-h200", topology="4x8", tp=8, dp=4, ep=8, stack="vllm")


def test_plan_searches_only_the_expert_split_each_engine_runs():
    stacks = [load_stack("sglang"), load_stack("vllm"), load_stack("dp-attention")]
    space = build_space(
        hardware=[load_hardware("nvidia-h200")],
        stacks=stacks,
        kv_dtypes=[None],
        chunks=[8192],
        max_chips=32,
        stacks_given=True,
    )
    c = space.cols
    names = np.array([s.name for s in space.stacks])[c.stack]  # space.stacks: each bound to a kind
    multi = c.dp > 1
    assert multi.any()
    assert (c.ep[multi & (names == "sglang")] == c.tp[multi & (names == "sglang")]).all()
    assert (c.ep[multi & (names == "vllm")] == (c.tp * c.dp)[multi & (names == "vllm")]).all()
    # dp-attention on GPUs is SGLang --enable-dp-attention: its MoE spans every GPU of the server (--tp-size tp x dp;
    # DeepEP sets ep_size = tp_size, other backends split each expert over the rest): ep = tp x dp only
    dpa = multi & (names == "dp-attention")
    assert dpa.any() and c.ep_all[dpa].all()
    with pytest.raises(
        K3PlanError,
        match=r"--ep 8: at dp 4 stack dp-attention: the engine spreads the experts over every "
        r"TP x DP rank; expected --ep 32",
    ):
        make_setup(hardware="nvidia-h200", topology="4x8", tp=8, dp=4, ep=8, stack="dp-attention")


def test_a_stack_that_says_nothing_keeps_both_expert_splits():
    """dp-attention on TPU (tpu-inference's attention DP, no dp_experts rule): ep = tp and ep = tp x dp both searched."""
    space = build_space(
        hardware=[load_hardware("tpu-v7x")],
        stacks=[load_stack("dp-attention")],
        kv_dtypes=[None],
        chunks=[8192],
        max_chips=64,
        stacks_given=True,
    )
    c = space.cols
    multi = c.dp > 1
    assert {bool(x) for x in c.ep_all[multi]} == {True, False}
    s = make_setup(hardware="tpu-v7x", topology="2x2x4", tp=8, dp=4, ep=8, stack="dp-attention")
    assert (s.parallel.tp, s.parallel.ep, s.parallel.dp) == (8, 8, 4)
