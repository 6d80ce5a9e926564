"""vLLM's expert-parallel load balancing (engines/vllm/eplb.py): --enable-eplb adds each MoE model's EPLB state at
load (in the weights vLLM logs: one MoE layer's experts as the transfer buffer, the expert maps, the load window),
and num_redundant_experts R makes each rank hold (E + R) / EP experts; vLLM's own refusals (R without EPLB, EPLB
without expert parallelism, an uneven split) are one line, exit 2. Read in the 0.9.2 and 0.33.0 wheels."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.vllm.eplb import eplb_state_bytes, redundant_expert_pad
from k3plan.errors import K3PlanError
from k3plan.units import GiB

R1 = "vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --enable-expert-parallel"


def _engine(cmd: str, hw: str = "nvidia-h200", devices: int = 8) -> dict:
    res = CliRunner().invoke(app, ["fit", "-H", hw, "-t", str(devices), "--serve", cmd, "--json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)["engine"]


def _engine_at(cmd: str, version: str) -> dict:
    res = CliRunner().invoke(
        app, ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd, "--engine-version", version, "--json"]
    )
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)["engine"]


def _refused(cmd: str) -> str:
    res = CliRunner().invoke(app, ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", cmd])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return res.output


def test_redundant_experts_a_rank_holds_as_ints():
    # DeepSeek-R1's 256 experts + 32 over EP 8: 36 a rank over the 32 the plain split holds
    assert redundant_expert_pad(architecture="deepseek_v3", vendor="nvidia", experts=256, redundant=32, tp=8, dp=1)[
        :2
    ] == (
        36,
        32,
    )
    # EPLB on without copies: nothing added, the split still checked
    assert (
        redundant_expert_pad(architecture="deepseek_v3", vendor="nvidia", experts=256, redundant=0, tp=8, dp=1) is None
    )
    with pytest.raises(K3PlanError, match="even distribution"):
        redundant_expert_pad(architecture="deepseek_v3", vendor="nvidia", experts=256, redundant=30, tp=8, dp=1)
    with pytest.raises(K3PlanError, match="does not pass them"):  # V4's ROCm model passes none
        redundant_expert_pad(architecture="deepseek_v4", vendor="amd", experts=256, redundant=32, tp=8, dp=1)
    with pytest.raises(K3PlanError, match="does not pass them"):
        redundant_expert_pad(architecture="kimi_k3", vendor="nvidia", experts=896, redundant=128, tp=32, dp=1)


def test_the_state_s_bytes():
    # the maps: [58, 256, 1024] int64 + two [58, 256] int64 + [58, 288] int64; the loads: [58, 288] and the window
    # [1000, 58, 288] int32; plus one layer's experts
    got = eplb_state_bytes(layers=58, experts=256, redundant=32, window=1000, layer_expert_bytes=10)
    assert got == 10 + 58 * 256 * 1024 * 8 + 2 * 58 * 256 * 8 + 58 * 288 * 8 + 58 * 288 * 4 + 1000 * 58 * 288 * 4


def test_the_weights_grow_by_the_copies_and_the_state():
    plain = _engine(R1)
    on = _engine(R1 + " --enable-eplb")
    copies = _engine(R1 + " --enable-eplb --eplb-config '{\"num_redundant_experts\": 32}'")
    w0, w1, w2 = (e["weights_bytes"] for e in (plain, on, copies))
    # EPLB on: one MoE layer's experts (32 experts of ~44 MB) and the maps, ~1.5 GiB
    assert 1.3 * GiB < w1 - w0 < 1.7 * GiB
    # 4 more experts on each of 58 MoE layers (~9.5 GiB) and a larger transfer buffer
    assert 9.0 * GiB < w2 - w1 < 10.5 * GiB
    assert copies["kv_pool_bytes"] < on["kv_pool_bytes"] < plain["kv_pool_bytes"]
    # the older flag spells the same copies where the release has it (to 0.11.x); a larger window holds more
    res = CliRunner().invoke(
        app,
        ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", R1 + " --enable-eplb --num-redundant-experts 32"]
        + ["--engine-version", "0.11.2", "--json"],
    )
    old = json.loads(res.stdout)["engine"]
    plain_0112 = _engine_at(R1 + " --enable-eplb", "0.11.2")
    assert 9.0 * GiB < old["weights_bytes"] - plain_0112["weights_bytes"] < 10.5 * GiB
    assert "has no such flag" in _refused(R1 + " --enable-eplb --num-redundant-experts 32")
    wide = _engine(R1 + ' --enable-eplb --eplb-config \'{"num_redundant_experts": 32, "window_size": 4000}\'')
    assert wide["weights_bytes"] - w2 == 3000 * 58 * 288 * 4


def test_vllm_s_own_refusals_are_one_line():
    assert "Either enable EPLB" in _refused(R1 + " --eplb-config '{\"num_redundant_experts\": 32}'")
    assert "enable_expert_parallel must be True" in _refused(
        "vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --enable-eplb --eplb-config '{\"num_redundant_experts\": 32}'"
    )
    assert "even distribution" in _refused(R1 + " --enable-eplb --eplb-config '{\"num_redundant_experts\": 30}'")
    assert "expected a non-negative" in _refused(R1 + " --enable-eplb --eplb-config '{\"num_redundant_experts\": -8}'")


def test_megamoe_layers_take_no_eplb():
    """DeepSeek-V4's MegaMoE layers are not registered with EPLB (vllm#44038): the InferenceX / Dynamo lines that pass
    --enable-eplb with deep_gemm_mega_moe hold no EPLB state; redundant copies there are refused, not guessed."""
    v4 = (
        "vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 --enable-expert-parallel --moe-backend deep_gemm_mega_moe "
        "--kv-cache-dtype fp8 --block-size 256 --max-model-len 65536"
    )
    res = CliRunner().invoke(app, ["fit", "-H", "nvidia-b200", "-t", "8", "--serve", v4, "--json"])
    on = CliRunner().invoke(app, ["fit", "-H", "nvidia-b200", "-t", "8", "--serve", v4 + " --enable-eplb", "--json"])
    assert json.loads(res.stdout)["engine"]["weights_bytes"] == json.loads(on.stdout)["engine"]["weights_bytes"]
    bad = v4 + " --enable-eplb --eplb-config '{\"num_redundant_experts\": 32}'"
    res = CliRunner().invoke(app, ["fit", "-H", "nvidia-b200", "-t", "8", "--serve", bad])
    assert res.exit_code == 2 and "deep_gemm_mega_moe" in res.output


def test_kda_state_dtypes_read_as_vllm_resolves_them():
    linear = "vllm serve moonshotai/Kimi-Linear-48B-A3B-Instruct --max-model-len 131072 --trust-remote-code"
    base = _engine(linear, devices=1)
    kept = _engine(linear + " --mamba-ssm-cache-dtype float32 --mamba-cache-dtype auto", devices=1)
    assert kept["kv_pool_bytes"] == base["kv_pool_bytes"] and kept["weights_bytes"] == base["weights_bytes"]
    assert "--mamba-ssm-cache-dtype" in kept["serve"]["ignored"]
    res = CliRunner().invoke(
        app, ["fit", "-H", "nvidia-h200", "-t", "1", "--serve", linear + " --mamba-ssm-cache-dtype bfloat16"]
    )
    assert res.exit_code == 2 and "KDA state dtype" in res.output
    # no KDA layers: the flag changes nothing
    _engine("vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --mamba-ssm-cache-dtype bfloat16")
