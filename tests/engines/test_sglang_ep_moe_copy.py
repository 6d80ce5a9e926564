"""SGLang 0.4.8.post1-0.4.9.post4 hold the routed experts twice under --enable-ep-moe with SGLANG_USE_AITER on an AMD
GPU (engines/sglang/ep_moe_copy.py: EPMoE.__init__'s w13_weight_fp8 / w2_weight_fp8 keep the loaded FP8 tensors
beside aiter's shuffled ones, read in the 0.4.7-0.4.10 wheels): the budget's weights hold the copy for a block-FP8
checkpoint, the step reads one, and nothing else moves."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.sglang.ep_moe_copy import ep_moe_copies

AITER = {"SGLANG_USE_AITER": "1"}
# sgl-project/sglang#7847's split (tests/engines/cases/sglang-7847-r1-mi300x-tp16-dp16-ep.yaml): it starts with the copy
R1_EP = (
    "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --trust-remote-code --tp-size 16 "
    "--enable-ep-moe --dp-size 16 --enable-dp-attention --max-total-tokens 131072"
)


def _copies(**kw):
    args = dict(release=(0, 4, 9), post=0, amd=True, env=AITER, ep_moe=True)
    got = ep_moe_copies(**{**args, **kw})
    return None if got is None else got[0]


def test_the_window_is_0_4_8_post1_to_0_4_9_post4():
    assert _copies() == 2
    assert _copies(release=(0, 4, 8)) is None  # 0.4.8: the tuple, but no aiter shuffle in EPMoE
    assert _copies(release=(0, 4, 8), post=1) == 2
    assert _copies(post=4) == 2  # 0.4.9.post3 / post4: Fp8EPMoEMethod moved to quantization/fp8.py, the same body
    assert _copies(post=5) is None  # 0.4.9.post5: EPMoE(FusedMoE), the tuple built at forward only
    assert _copies(release=(0, 4, 10)) is None and _copies(release=(0, 4, 7)) is None
    assert _copies(release=None) is None  # no release named: the newest read, outside it


def test_only_hip_with_aiter_under_ep_moe():
    assert _copies(amd=False) is None  # CUDA: neither the e4m3fnuz step nor the shuffle runs
    assert _copies(env={}) is None  # SGLang's default: SGLANG_USE_AITER off
    assert _copies(env={"SGLANG_USE_AITER": "0"}) is None
    assert _copies(env={"SGLANG_USE_AITER": "yes"}) is None  # get_bool_env_var: 'true' / '1' only
    assert _copies(env={"SGLANG_USE_AITER": "True"}) == 2
    assert _copies(ep_moe=False) is None  # FusedMoE: no such tuple


def _fit(cmd: str, version: str, hw: str = "amd-mi300x") -> dict:
    res = CliRunner().invoke(app, ["fit", "-H", hw, "-t", "16", "--serve", cmd, "--engine-version", version, "--json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("version", ["0.4.8.post1", "0.4.9"])
def test_the_budget_holds_the_copy_and_the_step_reads_one(version):
    once, twice = _fit(R1_EP, version), _fit("SGLANG_USE_AITER=1 " + R1_EP, version)
    extra = twice["weights_by_role"]["expert"] - once["weights_by_role"]["expert"]
    assert extra == once["weights_by_role"]["expert"]  # the rank's 16 experts a second time
    assert twice["engine"]["weights_bytes"] - once["engine"]["weights_bytes"] == extra
    assert any("w13_weight_fp8" in c for c in twice["engine"]["serve"]["caveats"])
    assert "SGLANG_USE_AITER=1" not in twice["engine"]["serve"]["ignored"]  # read, not ignored
    # both start at the 131,072-token cap, and the decode step streams one copy
    assert once["engine"]["starts"] and twice["engine"]["starts"]
    assert twice["engine"]["kv_pool_bytes"] == once["engine"]["kv_pool_bytes"]
    assert twice["speed"] == once["speed"]


def test_0_4_8_and_nvidia_hold_one():
    for version, hw in (("0.4.8", "amd-mi300x"), ("0.4.9.post5", "amd-mi300x"), ("0.4.9", "nvidia-h200")):
        with_aiter, without = _fit("SGLANG_USE_AITER=1 " + R1_EP, version, hw), _fit(R1_EP, version, hw)
        assert with_aiter["weights_by_role"] == without["weights_by_role"], (version, hw)
        assert "SGLANG_USE_AITER=1" in with_aiter["engine"]["serve"]["ignored"]
