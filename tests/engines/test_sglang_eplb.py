"""SGLang's --ep-num-redundant-experts (engines/sglang/eplb.py): each MoE layer holds E + R physical experts over its
ep_size, (E + R) / ep_size a rank, read in the sglang 0.5.22 wheel; SGLang's own assertion (an uneven split) and a
model whose SGLang MoE adds none are one line, exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.sglang.eplb import redundant_expert_pad
from k3plan.errors import K3PlanError
from k3plan.units import GiB

R1 = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8 --ep-size 8 --moe-a2a-backend deepep"


def _weights(cmd: str) -> int:
    res = CliRunner().invoke(app, ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)["engine"]["weights_bytes"]


def test_the_rule_as_ints():
    pad = redundant_expert_pad(architecture="deepseek_v3", vendor="nvidia", experts=256, redundant=32, tp=8, dp=1, ep=8)
    assert pad is not None and pad[:2] == (36, 32)
    # no --ep-size: ep_size 1, every rank holds the 288 experts' TP shards
    pad = redundant_expert_pad(
        architecture="deepseek_v3", vendor="nvidia", experts=256, redundant=32, tp=8, dp=1, ep=None
    )
    assert pad is not None and pad[:2] == (288, 256)
    with pytest.raises(K3PlanError, match="ep_size == 0"):
        redundant_expert_pad(architecture="deepseek_v3", vendor="nvidia", experts=256, redundant=30, tp=8, dp=1, ep=8)
    with pytest.raises(K3PlanError, match="does not add them"):
        redundant_expert_pad(architecture="kimi_k3", vendor="nvidia", experts=896, redundant=32, tp=8, dp=1, ep=8)


@pytest.mark.parametrize("dp", ["", " --enable-dp-attention --dp 8"])
def test_a_rank_holds_four_more_experts_a_layer(dp):
    # 58 MoE layers x 4 experts of ~44 MB (FP8 R1): ~9.5 GiB a rank, with or without DP attention
    grown = _weights(R1 + dp + " --ep-num-redundant-experts 32") - _weights(R1 + dp)
    assert 9.0 * GiB < grown < 10.0 * GiB
    res = CliRunner().invoke(
        app, ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", R1 + dp + " --ep-num-redundant-experts 30"]
    )
    assert res.exit_code == 2 and "Traceback" not in res.output
