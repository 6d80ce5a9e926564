"""SGLang 0.4.7-0.4.10 under DP attention split a DeepSeek-V3-class model's dense-layer MLP and its shared experts
over the whole TP group, attention TP x dp_size (engines/sglang/serve.py mlp_whole_tp, read in the 0.4.7-0.4.10
wheels' models/deepseek_v2.py): the budget holds 1 / (tp x dp) of each where the dp-attention stack holds them whole,
except the dense MLP under --moe-dense-tp-size 1 and the shared experts under DeepEP; from 0.5.0 (not read between)
the stack's own split stays."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3plan.cli.app import app

R1_DP = (
    "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --trust-remote-code --tp-size 8 "
    "--dp-size 8 --enable-dp-attention --max-total-tokens 131072"
)


def _roles(cmd: str, version: str | None = "0.4.9", hw: str = "amd-mi300x") -> dict:
    args = ["fit", "-H", hw, "-t", "8", "--serve", cmd, "--json"]
    if version is not None:
        args += ["--engine-version", version]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)["weights_by_role"]


def test_the_dense_mlp_and_the_shared_experts_over_every_gpu_of_the_stage():
    newest, split = _roles(R1_DP, None), _roles(R1_DP)
    for role in ("dense_mlp", "shared_expert"):
        assert split[role] * 8 == newest[role], role  # whole under the stack's attention-TP rule (TP 1 a group)
    assert split["attn"] == newest["attn"] and split["expert"] == newest["expert"]
    assert _roles(R1_DP, "0.4.7", "nvidia-h200")["dense_mlp"] == split["dense_mlp"]  # vendor-free


def test_where_it_stays_whole():
    whole = _roles(R1_DP, None)
    dense_tp1 = _roles(R1_DP + " --moe-dense-tp-size 1")
    assert dense_tp1["dense_mlp"] == whole["dense_mlp"] and dense_tp1["shared_expert"] * 8 == whole["shared_expert"]
    deepep = _roles(R1_DP + " --moe-a2a-backend deepep")  # DeepEP: the shared experts tp_size 1, the dense MLP split
    assert deepep["shared_expert"] == whole["shared_expert"] and deepep["dense_mlp"] * 8 == whole["dense_mlp"]
    for version in ("0.4.6", "0.5.0"):  # the 0.4.6 layouts (shared clones); 0.5.0-0.5.22 not read
        assert _roles(R1_DP, version)["dense_mlp"] == whole["dense_mlp"], version
